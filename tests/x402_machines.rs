//! VM08–VM10 end to end: the official client pays our server over the real x402 rail
//! (devstack), our server probes a seller once, unpaid, over HTTPS on loopback (test CA and
//! connect-to seam), and reads balances and allowances on the dev stack's anvil.

mod common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use common::devstack::{Buyer, DevStack, shared_stack};
use common::https::{Handler, Leaf, Reply, Seen, Site, TestCa};
use common::onchain::{lagging_once, rpc_proxy};
use common::{TestServer, assert_sealed_by, closed_port};
use factomat::support::canonical::canonical_sha256;
use serde_json::{Value, json};

/// USDC each buyer starts with: far more than any test spends.
const BUYER_USDC: &str = "100000000";
const HOST: &str = "seller.example.com";
const USDC: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
const MERCHANT: &str = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";
const OTHER_MERCHANT: &str = "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65";
const EMPTY_PAYER: &str = "0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc";
const PERMIT2: &str = "0x000000000022D473030F116dDEE9F6B43aC78BA3";
const VM08: &str = "/v1/x402-service-change-snapshot";
const VM09: &str = "/v1/x402-presign-handoff";
const VM10: &str = "/v1/payment-authority-snapshot";

/// What the seller's /quote answers; tests change it between calls.
#[derive(Clone)]
struct Terms {
    amount: String,
    pay_to: String,
    mode: &'static str,
    /// A second requirement (network, amount) after the first, when set.
    second: Option<(&'static str, &'static str)>,
    /// When the seller last answered.
    answered_at: Option<chrono::DateTime<chrono::Utc>>,
}

fn url(path: &str) -> String {
    format!("https://{HOST}{path}")
}

fn v2_challenge(path: &str, resource: &str, terms: &Terms, method: Option<&str>) -> Reply {
    challenge_of(v2_required(resource, path, terms, method))
}

/// A v2 challenge whose `PAYMENT-REQUIRED` header is `bytes` long: a Bazaar declaration
/// with a long output example, as real sellers with several accepts send.
fn wide_challenge(path: &str, terms: &Terms, bytes: usize) -> Reply {
    let mut required = v2_required(&url(path), path, terms, None);
    let base = encoded(&required).len();
    // Base64 spends 4 characters on 3 bytes; the padding is plain ASCII.
    let filler = "x".repeat(bytes.saturating_sub(base + 64) / 4 * 3);
    required["extensions"] =
        json!({"bazaar": {"info": {"output": {"type": "json", "example": {"note": filler}}}}});
    let reply = challenge_of(required.clone());
    let length = encoded(&required).len();
    assert!(
        length.abs_diff(bytes) < 128,
        "{length} bytes, wanted {bytes}"
    );
    reply
}

fn encoded(required: &Value) -> String {
    base64::engine::general_purpose::STANDARD.encode(required.to_string())
}

fn challenge_of(required: Value) -> Reply {
    Reply::new(402)
        .header("content-type", "application/json")
        .header("payment-required", &encoded(&required))
        .body("{}")
}

fn v2_required(resource: &str, path: &str, terms: &Terms, method: Option<&str>) -> Value {
    let mut extra = json!({"name": "USD Coin", "version": "2"});
    if let Some(method) = method {
        extra["assetTransferMethod"] = json!(method);
    }
    let mut accepts = vec![
        json!({"scheme": "exact", "network": "eip155:8453", "amount": terms.amount,
        "asset": USDC, "payTo": terms.pay_to, "maxTimeoutSeconds": 60, "extra": extra}),
    ];
    if let Some((network, amount)) = terms.second {
        accepts.push(
            json!({"scheme": "exact", "network": network, "amount": amount,
            "asset": USDC, "payTo": terms.pay_to, "maxTimeoutSeconds": 60, "extra": extra}),
        );
    }
    json!({
        "x402Version": 2,
        "error": "Payment required",
        "resource": {"url": resource, "description": path, "mimeType": "application/json"},
        "accepts": accepts,
    })
}

/// The seller: a v2 x402 resource with changeable terms and hand-built edge cases.
fn seller(terms: Arc<Mutex<Terms>>) -> Handler {
    Arc::new(move |seen: &Seen| {
        let mut shared = terms.lock().expect("terms");
        shared.answered_at = Some(chrono::Utc::now());
        let terms = shared.clone();
        drop(shared);
        match seen.path.as_str() {
            "/quote" => match terms.mode {
                "free" => Reply::new(200).body("{\"quote\":1}"),
                "broken" => Reply::new(500).body("oops"),
                "moved" => Reply::new(302).header("location", &url("/v1")),
                _ => v2_challenge("/quote", &url("/quote"), &terms, None),
            },
            "/permit2" => v2_challenge("/permit2", &url("/permit2"), &terms, Some("permit2")),
            "/erc7710" => v2_challenge("/erc7710", &url("/erc7710"), &terms, Some("erc7710")),
            "/mislabeled" => v2_challenge("/mislabeled", &url("/elsewhere"), &terms, None),
            "/v1" => Reply::new(402).header("content-type", "application/json").body(
                json!({"x402Version": 1, "error": "X-PAYMENT header is required",
                    "accepts": [{"scheme": "exact", "network": "base", "maxAmountRequired": terms.amount,
                    "resource": url("/v1"), "description": "v1", "mimeType": "application/json",
                    "payTo": terms.pay_to, "maxTimeoutSeconds": 60, "asset": USDC,
                    "extra": {"name": "USD Coin", "version": "2"}}]})
                .to_string(),
            ),
            "/redirect" => Reply::new(302).header("location", &url("/quote")),
            "/wide20" => wide_challenge("/wide20", &terms, 20 * 1024),
            "/wide40" => wide_challenge("/wide40", &terms, 40 * 1024),
            "/slow" => {
                v2_challenge("/slow", &url("/slow"), &terms, None).after(Duration::from_secs(7))
            }
            "/big" => Reply::new(402).body(vec![b' '; 1024 * 1024]),
            _ => Reply::new(404),
        }
    })
}

struct Rig {
    stack: &'static DevStack,
    /// A fresh buyer of this rig's own: tests share the binary's stack, never a balance.
    buyer: Buyer,
    server: TestServer,
    site: Site,
    terms: Arc<Mutex<Terms>>,
    _ca: TestCa,
}

async fn rig() -> Rig {
    rig_on(&shared_stack().field("rpc_url")).await
}

/// A rig whose eip155:8453 RPC endpoint is `rpc` (the stack's anvil, or a dead address).
async fn rig_on(rpc: &str) -> Rig {
    let stack = shared_stack();
    let terms = Arc::new(Mutex::new(Terms {
        amount: "10000".into(),
        pay_to: MERCHANT.into(),
        mode: "x402",
        second: None,
        answered_at: None,
    }));
    let ca = TestCa::new();
    let site = Site::start(ca.server_config(&[HOST]), seller(terms.clone())).await;
    let mut env: Vec<(String, String)> = vec![
        ("FACTOMAT_PAY_TO".into(), stack.field("pay_to")),
        (
            "FACTOMAT_FACILITATOR_URL".into(),
            stack.field("facilitator_url"),
        ),
        ("FACTOMAT_RPC_URL_EIP155_8453".into(), rpc.to_string()),
        (
            "FACTOMAT_FACILITATOR_SETTLE_TIMEOUT_MS".into(),
            "20000".into(),
        ),
    ];
    env.extend(ca.env(&[(HOST, site.addr)]));
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = TestServer::with_env(&pairs).await;
    Rig {
        stack,
        buyer: stack.fresh_buyer(BUYER_USDC),
        server,
        site,
        terms,
        _ca: ca,
    }
}

impl Rig {
    /// One paid call through the official client; returns the 200 body.
    fn pay(&self, path: &str, body: &Value) -> Value {
        let answer = self
            .stack
            .pay_as(&self.buyer, &format!("{}{path}", self.server.url), body);
        assert_eq!(answer["status"], 200, "paid call failed: {answer}");
        assert_eq!(answer["payment_response"]["success"], true, "{answer}");
        answer["body"].clone()
    }

    fn set(&self, change: impl FnOnce(&mut Terms)) {
        change(&mut self.terms.lock().expect("terms"));
    }

    fn probes_of(&self, path: &str) -> Vec<Seen> {
        self.site
            .seen()
            .into_iter()
            .filter(|s| s.path == path)
            .collect()
    }
}

fn assert_clean_probe(seen: &Seen, method: &str, body: &str) {
    assert_eq!(seen.method, method);
    assert_eq!(String::from_utf8_lossy(&seen.body), body);
    for (name, _) in &seen.headers {
        let name = name.to_ascii_lowercase();
        assert!(
            !name.contains("payment")
                && name != "authorization"
                && name != "cookie"
                && !name.starts_with("x-"),
            "the probe sent {name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm08_baseline_continue_changed_and_hold() {
    let rig = rig().await;
    let request = json!({"resource_url": url("/quote"), "method": "POST"});
    let first = rig.pay(VM08, &request);
    assert_eq!(first["decision"], "BASELINE_CREATED", "{first}");
    assert_eq!(first["observation_kind"], "first");
    assert_eq!(first["baseline"]["reusable"], true);
    assert_eq!(first["fingerprint"]["requirements"][0]["amount"], "10000");
    assert_sealed_by(&first["baseline"], "baseline_sha256");
    assert_eq!(
        first["fingerprint_sha256"],
        canonical_sha256(&first["fingerprint"])
    );
    assert_eq!(first["probe"]["body_sha256"], canonical_sha256(&json!({})));
    let probes = rig.probes_of("/quote");
    assert_eq!(probes.len(), 1, "exactly one unpaid probe");
    assert_clean_probe(&probes[0], "POST", "{}");

    let with_baseline = |b: &Value| {
        let mut r = request.clone();
        r["baseline"] = b["baseline"].clone();
        r
    };
    let same = rig.pay(VM08, &with_baseline(&first));
    assert_eq!(same["decision"], "CONTINUE", "{same}");
    assert_eq!(same["material_change_classes"], json!([]));

    rig.set(|t| t.amount = "10400".into());
    let modest = rig.pay(VM08, &with_baseline(&same));
    assert_eq!(modest["decision"], "CHANGED");
    assert_eq!(
        modest["material_change_classes"],
        json!(["AMOUNT_INCREASE_MODEST"])
    );
    assert_eq!(
        modest["price_policy"],
        json!({"modest_increase_bps": 500, "max_increase_bps": 2000})
    );

    rig.set(|t| t.amount = "20000".into());
    let mut steep = with_baseline(&modest);
    steep["price_policy"] = json!({"modest_increase_bps": 100, "max_increase_bps": 5000});
    let above = rig.pay(VM08, &steep);
    assert_eq!(
        above["material_change_classes"],
        json!(["AMOUNT_INCREASE_ABOVE_POLICY"]),
        "{above}"
    );

    rig.set(|t| t.pay_to = OTHER_MERCHANT.into());
    let moved = rig.pay(VM08, &with_baseline(&above));
    assert_eq!(moved["decision"], "CHANGED");
    assert_eq!(moved["material_change_classes"], json!(["PAY_TO_CHANGED"]));

    // HOLD (500, 302) and NO_LONGER_X402 (200 without payment) never hand back a reusable
    // baseline: the caller keeps its own, and the answer says why.
    for (mode, decision, classes) in [
        ("broken", "HOLD", json!([])),
        ("moved", "HOLD", json!([])),
        ("free", "CHANGED", json!(["NO_LONGER_X402"])),
    ] {
        rig.set(|t| t.mode = mode);
        let answer = rig.pay(VM08, &with_baseline(&moved));
        assert_eq!(answer["decision"], decision, "{mode}: {answer}");
        assert_eq!(answer["material_change_classes"], classes, "{mode}");
        let returned = &answer["baseline"];
        assert_eq!(returned["reusable"], false, "{mode}: {answer}");
        assert_eq!(returned["fingerprint"], Value::Null, "{mode}");
        assert_eq!(returned["fingerprint_sha256"], Value::Null, "{mode}");
        assert!(
            returned["hold_reason"]
                .as_str()
                .is_some_and(|r| r.contains("Keep your own baseline")),
            "{mode}: {answer}"
        );
        assert_ne!(
            answer["recommended_action"], "store_returned_baseline",
            "{mode}"
        );
        // A non-reusable baseline sent back is refused before payment.
        let mut back = request.clone();
        back["baseline"] = returned.clone();
        let response = rig.server.post_json(VM08, &back).await;
        assert_eq!(response.status().as_u16(), 400, "{mode}");
    }
    rig.set(|t| t.mode = "x402");

    // Every requirement is fingerprinted: a change in the second one is CHANGED and named.
    rig.set(|t| t.second = Some(("eip155:84532", "30000")));
    let two = rig.pay(VM08, &with_baseline(&moved));
    assert_eq!(
        two["material_change_classes"],
        json!(["REQUIREMENT_ADDED"]),
        "{two}"
    );
    assert_eq!(two["fingerprint"]["requirement_count"], 2);
    rig.set(|t| t.second = Some(("eip155:1", "30000")));
    let other_network = rig.pay(VM08, &with_baseline(&two));
    assert_eq!(other_network["decision"], "CHANGED", "{other_network}");
    assert_eq!(
        other_network["changed_requirements"],
        json!([{"accepts_index": 1, "baseline_index": 1, "classes": ["NETWORK_CHANGED"]}]),
        "{other_network}"
    );
    assert!(
        other_network["reason"]
            .as_str()
            .is_some_and(|r| r.contains("accepts[1]: NETWORK_CHANGED")),
        "{other_network}"
    );
    rig.set(|t| t.second = Some(("eip155:1", "90000")));
    let dearer = rig.pay(VM08, &with_baseline(&other_network));
    assert_eq!(
        dearer["changed_requirements"],
        json!([{"accepts_index": 1, "baseline_index": 1, "classes": ["AMOUNT_INCREASE_ABOVE_POLICY"]}]),
        "{dearer}"
    );
    rig.set(|t| t.second = None);

    // A tampered baseline is a 400 before payment: no probe, no outbound request.
    let before = (rig.server.outbound(), rig.site.seen().len());
    let mut tampered = with_baseline(&moved);
    tampered["baseline"]["fingerprint"]["requirements"][0]["amount"] = json!("1");
    let response = rig.server.post_json(VM08, &tampered).await;
    assert_eq!(response.status().as_u16(), 400);
    let mut foreign = with_baseline(&moved);
    foreign["resource_url"] = json!(url("/permit2"));
    let response = rig.server.post_json(VM08, &foreign).await;
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!(before, (rig.server.outbound(), rig.site.seen().len()));

    // v1 challenge over GET; a redirect is not followed.
    let v1 = rig.pay(VM08, &json!({"resource_url": url("/v1"), "method": "GET"}));
    assert_eq!(v1["decision"], "BASELINE_CREATED", "{v1}");
    assert_eq!(v1["fingerprint"]["requirements"][0]["network"], "base");
    assert_clean_probe(&rig.probes_of("/v1")[0], "GET", "");
    let redirect = rig.pay(
        VM08,
        &json!({"resource_url": url("/redirect"), "method": "GET"}),
    );
    assert_eq!(redirect["decision"], "HOLD");
    assert_eq!(redirect["baseline"]["reusable"], false);
    assert_eq!(rig.probes_of("/redirect").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm08_binds_the_post_body_and_compares_a_listing_it_never_fetches() {
    let rig = rig().await;
    let body = json!({"symbol": "BTC", "size": 2, "nested": {"b": 1, "a": [1, 2]}});
    let listing = json!({
        "resource": url("/listed-only"),
        "type": "http",
        "accepts": [{"scheme": "exact", "network": "eip155:8453", "asset": USDC,
            "amount": "9999", "payTo": MERCHANT, "maxTimeoutSeconds": 60}],
        "extensions": {"bazaar": {"info": {"input": {"type": "http", "method": "GET"}}}},
    });
    let request = json!({"resource_url": url("/quote"), "method": "POST", "body": body, "discovery": listing});
    let first = rig.pay(VM08, &request);
    assert_eq!(first["decision"], "BASELINE_CREATED", "{first}");
    assert_eq!(first["probe"]["method"], "POST");
    assert_eq!(first["probe"]["body_sha256"], canonical_sha256(&body));
    let probes = rig.probes_of("/quote");
    assert_eq!(probes.len(), 1);
    assert_eq!(
        probes[0].method, "POST",
        "the listing never picks the method"
    );
    let sent: Value = serde_json::from_slice(&probes[0].body).expect("the probe sent JSON");
    assert_eq!(sent, body, "the caller's body is sent as given");
    assert!(
        rig.probes_of("/listed-only").is_empty(),
        "the listing is never fetched"
    );
    assert_eq!(
        first["discovery_comparison"],
        json!({"resource_matches": false, "payment_terms_match": false, "differing_fields": ["amount"]})
    );

    // The baseline is bound to the body: another body is refused before payment.
    let before = (rig.server.outbound(), rig.site.seen().len());
    let mut other = request.clone();
    other["body"] = json!({"symbol": "ETH"});
    other["baseline"] = first["baseline"].clone();
    let response = rig.server.post_json(VM08, &other).await;
    assert_eq!(response.status().as_u16(), 400);
    let error: Value = response.json().await.expect("json");
    assert_eq!(
        error["error"]["code"], "baseline_request_mismatch",
        "{error}"
    );
    assert_eq!(before, (rig.server.outbound(), rig.site.seen().len()));

    let mut same = request.clone();
    same["baseline"] = first["baseline"].clone();
    let again = rig.pay(VM08, &same);
    assert_eq!(again["decision"], "CONTINUE", "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm09_holds_when_the_balance_cannot_be_read() {
    let closed = closed_port();
    let rpc = format!("http://{}/v2/SECRET-rpc-key-77", closed.addr);
    let rig = rig_on(&rpc).await;
    let buyer = rig.buyer.address.clone();
    let answer = rig.stack.pay_as(
        &rig.buyer,
        &format!("{}{VM09}", rig.server.url),
        &vm09_request("/quote", &buyer, "10000", &[MERCHANT]),
    );
    assert_eq!(answer["status"], 200, "{answer}");
    let packet = &answer["body"];
    assert_eq!(packet["decision"], "HOLD", "{packet}");
    assert_eq!(packet["status"], "HOLD");
    let codes = packet["reason_codes"].as_array().expect("codes");
    assert!(codes.contains(&json!("BALANCE_UNAVAILABLE")), "{codes:?}");
    assert!(!codes.contains(&json!("BALANCE_SUFFICIENT")));
    assert!(
        !answer.to_string().contains("SECRET-rpc-key"),
        "the RPC key leaked"
    );
}

/// A lagging node's "header not found" on the balance read: the read is asked again, and the
/// packet says so among its limitations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm09_states_a_balance_read_asked_again_after_a_lagging_node() {
    let (decide, lagged) = lagging_once("eth_call");
    let (node, _) = rpc_proxy(shared_stack().field("rpc_url"), decide).await;
    let rig = rig_on(&format!("http://{node}")).await;
    let buyer = rig.buyer.address.clone();
    let packet = rig.pay(VM09, &vm09_request("/quote", &buyer, "10000", &[MERCHANT]));
    assert!(
        lagged.load(Ordering::SeqCst),
        "the balance read met the lagging node"
    );
    assert_eq!(packet["decision"], "READY", "{packet}");
    let limitations = packet["limitations"].to_string();
    assert!(
        limitations.contains(
            "did not know the requested block yet (a lagging node); the read was asked again"
        ),
        "{limitations}"
    );
}

fn vm09_request(path: &str, payer: &str, max: &str, allowed: &[&str]) -> Value {
    json!({"resource_url": url(path), "method": "POST", "body": {"symbol": "ETH"},
        "payer_address": payer, "max_amount_atomic": max, "allowed_pay_to": allowed})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm09_ready_and_each_non_ready_reason() {
    let rig = rig().await;
    let buyer = rig.buyer.address.clone();
    let ready = rig.pay(VM09, &vm09_request("/quote", &buyer, "10000", &[MERCHANT]));
    assert_eq!(ready["decision"], "READY", "{ready}");
    assert_eq!(
        ready["reason_codes"],
        json!([
            "DIRECT_CONTRACT_COMPLETE",
            "SUPPORTED_TRANSFER_METHOD",
            "WITHIN_CALLER_LIMIT",
            "BALANCE_SUFFICIENT"
        ])
    );
    let at = |field: &str| {
        chrono::DateTime::parse_from_rfc3339(ready[field].as_str().expect("time")).expect("rfc3339")
    };
    assert_eq!(
        (at("expires_at") - at("observed_at")).num_milliseconds(),
        60_000
    );
    // observed_at is when the challenge came back, to the millisecond: not before the seller
    // answered, and not after the reads that followed.
    let answered = rig
        .terms
        .lock()
        .expect("terms")
        .answered_at
        .expect("the seller answered");
    let lag = (at("observed_at").with_timezone(&chrono::Utc) - answered).num_milliseconds();
    assert!(
        (0..500).contains(&lag),
        "observed_at is {lag} ms after the seller answered: {ready}"
    );
    assert!(
        ready["observed_at"].as_str().is_some_and(|t| t.len() == 24),
        "millisecond precision: {}",
        ready["observed_at"]
    );
    for flag in [
        "signing",
        "payment_execution",
        "transaction_construction",
        "custody",
        "recommendation",
    ] {
        assert_eq!(ready[flag], false);
    }
    assert_eq!(ready["resource_identity_match"], true);
    assert_eq!(
        ready["selected_requirement"]["asset_transfer_method"],
        "eip3009"
    );
    // Read before our own fee settled: the balance now plus the VM09 price.
    let now: u128 = rig
        .stack
        .usdc_balance(&buyer)
        .trim_matches('"')
        .parse()
        .expect("balance");
    assert_eq!(
        ready["payer_balance"]["balance_raw"],
        json!((now + 10_000).to_string())
    );
    assert_sealed_by(&ready, "handoff_sha256");
    assert_clean_probe(&rig.probes_of("/quote")[0], "POST", "{\"symbol\":\"ETH\"}");

    let code_of = |request: &Value, expected_decision: &str, code: &str| {
        let answer = rig.pay(VM09, request);
        assert_eq!(answer["decision"], expected_decision, "{answer}");
        let codes = answer["reason_codes"].as_array().expect("codes");
        assert!(codes.contains(&json!(code)), "{code} missing: {answer}");
        answer
    };
    code_of(
        &vm09_request("/quote", &buyer, "9999", &[MERCHANT]),
        "NOT_READY",
        "ABOVE_CALLER_LIMIT",
    );
    code_of(
        &vm09_request("/quote", &buyer, "10000", &[OTHER_MERCHANT]),
        "NOT_READY",
        "PAY_TO_NOT_ALLOWED",
    );
    code_of(
        &vm09_request("/quote", EMPTY_PAYER, "10000", &[MERCHANT]),
        "NOT_READY",
        "BALANCE_INSUFFICIENT",
    );
    code_of(
        &vm09_request("/permit2", &buyer, "10000", &[MERCHANT]),
        "NOT_READY",
        "UNSUPPORTED_TRANSFER_METHOD",
    );
    code_of(
        &vm09_request("/erc7710", &buyer, "10000", &[MERCHANT]),
        "NOT_READY",
        "UNSUPPORTED_TRANSFER_METHOD",
    );
    let mismatch = code_of(
        &vm09_request("/mislabeled", &buyer, "10000", &[MERCHANT]),
        "NOT_READY",
        "RESOURCE_IDENTITY_MISMATCH",
    );
    assert_eq!(mismatch["resource_identity_match"], false);
    code_of(
        &vm09_request("/v1", &buyer, "10000", &[MERCHANT]),
        "NOT_READY",
        "UNSUPPORTED_REQUIREMENT",
    );
    let mut with_baseline = vm09_request("/quote", &buyer, "10000", &[MERCHANT]);
    with_baseline["baseline"] = json!({"resource_url": url("/quote"), "method": "POST",
        "body_sha256": canonical_sha256(&json!({"symbol": "ETH"})), "scheme": "exact",
        "network": "eip155:8453", "asset": USDC, "amount": "5000", "pay_to": MERCHANT});
    let moved = code_of(&with_baseline, "NOT_READY", "BASELINE_MISMATCH");
    assert_eq!(
        moved["baseline_evidence"]["changed_fields"],
        json!(["amount"])
    );
    // A 20 KiB PAYMENT-REQUIRED is read (the cap is 32 KiB); 40 KiB stays unreadable.
    for (path, status, code) in [
        ("/redirect", "HOLD", "REDIRECT_REFUSED"),
        ("/big", "HOLD", "CHALLENGE_UNREADABLE"),
        ("/wide20", "READY", "BALANCE_SUFFICIENT"),
        ("/wide40", "HOLD", "CHALLENGE_UNREADABLE"),
        ("/slow", "HOLD", "PROBE_FAILED"),
    ] {
        code_of(
            &vm09_request(path, &buyer, "10000", &[MERCHANT]),
            status,
            code,
        );
    }
    for mode in ["free", "broken"] {
        rig.set(|t| t.mode = mode);
        code_of(
            &vm09_request("/quote", &buyer, "10000", &[MERCHANT]),
            "HOLD",
            "NO_PAYMENT_CHALLENGE",
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm10_states_paths_and_baselines() {
    let rig = rig().await;
    let buyer = rig.buyer.address.clone();
    let request = |path: &str, payer: &str| json!({"resource_url": url(path), "method": "GET", "payer_address": payer});
    let ready = rig.pay(VM10, &request("/quote", &buyer));
    assert_eq!(ready["state"], "READY_EXISTING", "{ready}");
    assert_eq!(ready["authority_path"], "eip3009_authorization");
    assert_eq!(ready["allowance"], Value::Null);
    assert_eq!(
        ready["evidence_block_number"],
        ready["balance"]["block_number"]
    );
    for flag in [
        "signing",
        "payment_execution",
        "transaction_construction",
        "approval_mutation",
        "custody",
        "recommendation",
        "gas_sufficiency_judgment",
    ] {
        assert_eq!(ready[flag], false);
    }
    assert_sealed_by(&ready, "snapshot_sha256");
    assert_clean_probe(&rig.probes_of("/quote")[0], "GET", "");

    let poor = rig.pay(VM10, &request("/quote", EMPTY_PAYER));
    assert_eq!(poor["state"], "INSUFFICIENT_BALANCE");
    assert_eq!(poor["recovery_path"], "balance_top_up");

    let permit = rig.pay(VM10, &request("/permit2", &buyer));
    assert_eq!(permit["state"], "ALLOWANCE_REQUIRED", "{permit}");
    assert_eq!(permit["allowance"]["allowance_raw"], "0");
    assert_eq!(permit["identities"]["canonical_spender"], PERMIT2);
    assert_eq!(
        permit["identities"]["signed_proxy"],
        "0x402085c248EeA27D92E8b30b2C58ed07f9E20001"
    );
    let key = rig.buyer.key.clone();
    rig.stack
        .chain(&["approve", "--from-key", &key, "usdc", PERMIT2, "1000000"]);
    let mut again = request("/permit2", &buyer);
    again["baseline"] = permit["baseline"].clone();
    let approved = rig.pay(VM10, &again);
    assert_eq!(approved["state"], "READY_EXISTING", "{approved}");
    assert_eq!(approved["allowance"]["allowance_raw"], "1000000");
    let changes = approved["baseline_changes"].as_array().expect("changes");
    assert!(
        changes.contains(&json!("allowance_raw")) && changes.contains(&json!("recovery_path")),
        "{approved}"
    );

    let delegated = rig.pay(VM10, &request("/erc7710", &buyer));
    assert_eq!(delegated["state"], "UNSUPPORTED_METHOD");
    assert_eq!(delegated["recovery_path"], "unsupported_method");

    // HOLD returns the caller's baseline unchanged.
    rig.set(|t| t.mode = "free");
    let mut held = request("/quote", &buyer);
    held["baseline"] = ready["baseline"].clone();
    let hold = rig.pay(VM10, &held);
    assert_eq!(hold["state"], "HOLD", "{hold}");
    assert_eq!(hold["baseline"], ready["baseline"]);

    // Tampered baseline: 400 before payment, nothing probed.
    let before = (rig.server.outbound(), rig.site.seen().len());
    held["baseline"]["balance_raw"] = json!("1");
    let response = rig.server.post_json(VM10, &held).await;
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!(before, (rig.server.outbound(), rig.site.seen().len()));
}

/// The official @x402/express seller (devstack/seller.mjs) over HTTPS on loopback; its price
/// and payTo change through its stdin. The child is killed when dropped.
struct RealSeller {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    port: u16,
}

impl RealSeller {
    fn start(leaf: &Leaf, facilitator: &str) -> RealSeller {
        use std::io::BufRead;
        let cert = common::temp_path("seller-cert.pem");
        let key = common::temp_path("seller-key.pem");
        std::fs::write(&cert, leaf.cert_pem()).expect("cert");
        std::fs::write(&key, leaf.key_pem()).expect("key");
        let mut child = std::process::Command::new("node")
            .arg(common::repo_root().join("devstack/seller.mjs"))
            .arg("--cert")
            .arg(&cert)
            .arg("--key")
            .arg(&key)
            .args([
                "--facilitator",
                facilitator,
                "--pay-to",
                MERCHANT,
                "--amount",
                "10000",
            ])
            .current_dir(common::repo_root().join("devstack"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("node seller starts");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("port line");
        let port = serde_json::from_str::<Value>(&line).expect("json")["port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .expect("port");
        RealSeller {
            child,
            stdin,
            stdout,
            port,
        }
    }

    fn set(&mut self, change: Value) {
        use std::io::{BufRead, Write};
        writeln!(self.stdin, "{change}").expect("write");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("ack");
        assert!(line.contains("\"ok\":true"), "{line}");
    }
}

impl Drop for RealSeller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_express_seller_through_vm08_to_vm10() {
    let stack = shared_stack();
    let buyer = stack.fresh_buyer(BUYER_USDC);
    let ca = TestCa::new();
    let mut seller = RealSeller::start(&ca.leaf(&[HOST]), &stack.field("facilitator_url"));
    let mut env: Vec<(String, String)> = vec![
        ("FACTOMAT_PAY_TO".into(), stack.field("pay_to")),
        (
            "FACTOMAT_FACILITATOR_URL".into(),
            stack.field("facilitator_url"),
        ),
        (
            "FACTOMAT_RPC_URL_EIP155_8453".into(),
            stack.field("rpc_url"),
        ),
        (
            "FACTOMAT_FACILITATOR_SETTLE_TIMEOUT_MS".into(),
            "20000".into(),
        ),
    ];
    let seller_addr = std::net::SocketAddr::from(([127, 0, 0, 1], seller.port));
    env.extend(ca.env(&[(HOST, seller_addr)]));
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = TestServer::with_env(&pairs).await;
    let pay = |path: &str, body: &Value| {
        let answer = stack.pay_as(&buyer, &format!("{}{path}", server.url), body);
        assert_eq!(answer["status"], 200, "{answer}");
        answer["body"].clone()
    };
    let request = json!({"resource_url": url("/quote"), "method": "POST"});
    let first = pay(VM08, &request);
    assert_eq!(first["decision"], "BASELINE_CREATED", "{first}");
    assert_eq!(first["fingerprint"]["requirements"][0]["amount"], "10000");
    assert_sealed_by(&first["baseline"], "baseline_sha256");
    assert_eq!(
        first["fingerprint"]["requirements"][0]["resource_url"],
        url("/quote")
    );
    let mut again = request.clone();
    again["baseline"] = first["baseline"].clone();
    assert_eq!(pay(VM08, &again)["decision"], "CONTINUE");
    seller.set(json!({"amount": "10300"}));
    let modest = pay(VM08, &again);
    assert_eq!(
        modest["material_change_classes"],
        json!(["AMOUNT_INCREASE_MODEST"]),
        "{modest}"
    );
    seller.set(json!({"amount": "50000", "pay_to": OTHER_MERCHANT}));
    let moved = pay(VM08, &again);
    assert_eq!(
        moved["material_change_classes"],
        json!(["PAY_TO_CHANGED", "AMOUNT_INCREASE_ABOVE_POLICY"]),
        "{moved}"
    );

    let packet = pay(
        VM09,
        &json!({"resource_url": url("/quote"), "method": "POST", "payer_address": buyer.address,
            "max_amount_atomic": "50000", "allowed_pay_to": [OTHER_MERCHANT]}),
    );
    assert_eq!(packet["decision"], "READY", "{packet}");
    assert_eq!(packet["resource_identity_match"], true);

    let snapshot = pay(
        VM10,
        &json!({"resource_url": url("/quote"), "method": "POST", "payer_address": buyer.address}),
    );
    assert_eq!(snapshot["state"], "READY_EXISTING", "{snapshot}");
    assert_eq!(snapshot["identities"]["merchant"], OTHER_MERCHANT);
}
