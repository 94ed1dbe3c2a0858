//! Getting listed by the CDP Bazaar (issue 27): the crawler's unpaid probes of every machine
//! (no body, `{}`, GET, HEAD) get the machine's 402 when `unpaid_empty_body = "challenge"`,
//! the same probes with a payment get 400 before any facilitator call, and the default mode
//! keeps SPEC §7's 400s and says at start-up what it costs.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use common::{
    ALL_PROVIDERS, BASE_URL, PAY_TO, TestServer, decode_header, expect_400, machine_routes,
    manifest,
};
use serde_json::{Value, json};
use warp::Filter;

/// A loopback facilitator that answers `/supported` and counts every other request
/// (`/verify`, `/settle`), accepting every payment.
async fn counting_facilitator() -> (String, Arc<AtomicU64>) {
    let calls = Arc::new(AtomicU64::new(0));
    let counted = calls.clone();
    let supported = warp::path!("supported").map(|| {
        warp::reply::json(
            &json!({"kinds": [{"x402Version": 2, "scheme": "exact", "network": "eip155:8453"}]}),
        )
    });
    let others = warp::any().map(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        warp::reply::json(&json!({"isValid": true, "payer": PAY_TO}))
    });
    let addr = common::onchain::serve(supported.or(others)).await;
    (format!("http://{addr}"), calls)
}

/// The server's outbound count once its start-up `/supported` call is done.
async fn settled_outbound(server: &TestServer) -> u64 {
    for _ in 0..200 {
        if server.outbound() > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    server.outbound()
}

async fn server_in(mode: Option<&str>, facilitator: &str) -> TestServer {
    let mut env = vec![
        ("FACTOMAT_PAY_TO", PAY_TO),
        ("FACTOMAT_BASE_URL", BASE_URL),
        ("FACTOMAT_FACILITATOR_URL", facilitator),
    ];
    if let Some(mode) = mode {
        env.push(("FACTOMAT_UNPAID_EMPTY_BODY", mode));
    }
    env.extend_from_slice(ALL_PROVIDERS);
    TestServer::with_env(&env).await
}

/// The crawler's probes: (what, method, content type, body).
const PROBES: [(&str, &str, Option<&str>, &[u8]); 5] = [
    ("no body, no content type", "POST", None, b""),
    (
        "no body, JSON content type",
        "POST",
        Some("application/json"),
        b"",
    ),
    (
        "{} with a JSON content type",
        "POST",
        Some("application/json"),
        b"{}",
    ),
    ("{} without a content type", "POST", None, b" { } "),
    ("GET", "GET", None, b""),
];

async fn send(
    server: &TestServer,
    path: &str,
    (method, content_type, body): (&str, Option<&str>, &[u8]),
    payment: Option<&str>,
) -> reqwest::Response {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut request = server
        .client
        .request(method, format!("{}{path}", server.url));
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    if let Some(payment) = payment {
        request = request.header("payment-signature", payment);
    }
    if !body.is_empty() {
        request = request.body(body.to_vec());
    }
    request.send().await.expect("answered")
}

/// A well-formed payment for the terms of a 402 header (its signature is never checked:
/// these requests must be refused before the gate).
fn payment_for(required: &Value) -> String {
    let payload = json!({
        "x402Version": 2,
        "resource": required["resource"],
        "accepted": required["accepts"][0],
        "payload": {
            "signature": format!("0x{}", "11".repeat(65)),
            "authorization": {
                "from": PAY_TO, "to": PAY_TO, "value": required["accepts"][0]["amount"],
                "validAfter": "0", "validBefore": "99999999999",
                "nonce": format!("0x{}", "22".repeat(32)),
            },
        },
    });
    base64::engine::general_purpose::STANDARD.encode(payload.to_string())
}

#[tokio::test]
async fn in_challenge_mode_every_probe_of_every_machine_gets_its_402_and_nothing_else() {
    let (facilitator, calls) = counting_facilitator().await;
    let server = server_in(Some("challenge"), &facilitator).await;
    let outbound = settled_outbound(&server).await;
    let health: Value = server.get_json("/health").await;
    assert_eq!(health["payment"]["unpaid_empty_body"], "challenge");
    for (id, path, _) in machine_routes() {
        let mut terms = None;
        for (what, method, content_type, body) in PROBES {
            let response = send(&server, &path, (method, content_type, body), None).await;
            assert_eq!(response.status().as_u16(), 402, "{id} {what}");
            let header = response.headers()["payment-required"]
                .to_str()
                .expect("ascii")
                .to_string();
            let required = decode_header(&header);
            assert_eq!(required["x402Version"], 2, "{id} {what}");
            assert_eq!(required["accepts"][0]["payTo"], PAY_TO, "{id} {what}");
            assert_eq!(
                required["resource"]["url"],
                format!("{BASE_URL}{path}"),
                "{id} {what}"
            );
            let body: Value = response.json().await.expect("402 body is JSON");
            assert_eq!(body["accepts"], required["accepts"], "{id} {what}");
            terms = Some(required);
        }
        let head = send(&server, &path, ("HEAD", None, b""), None).await;
        assert_eq!(head.status().as_u16(), 402, "{id} HEAD");
        assert!(head.headers().contains_key("payment-required"), "{id} HEAD");

        let payment = payment_for(&terms.expect("a 402 was seen"));
        for (what, method, content_type, body) in PROBES {
            let response = send(&server, &path, (method, content_type, body), Some(&payment)).await;
            let status = response.status().as_u16();
            assert!(
                response.headers().get("payment-required").is_none(),
                "{id} paid {what}"
            );
            assert_eq!(status, 400, "{id} paid {what}");
        }
        // Every other invalid body keeps its 400, paid or not.
        let response = send(&server, &path, ("POST", None, b"[]"), None).await;
        expect_400(response, "invalid_body", &format!("{id} []")).await;
        let response = send(&server, &path, ("POST", None, b"{\"x\":1}"), None).await;
        assert_eq!(response.status().as_u16(), 400, "{id} an unknown field");
        let response = send(&server, &path, ("POST", Some("text/plain"), b"{}"), None).await;
        expect_400(response, "unsupported_content_type", &id).await;
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no facilitator call");
    assert_eq!(server.outbound(), outbound, "no outbound request");
}

#[tokio::test]
async fn by_default_the_probes_keep_their_400s_and_start_up_says_what_that_costs() {
    common::logs::capture();
    let (facilitator, calls) = counting_facilitator().await;
    let server = server_in(None, &facilitator).await;
    let outbound = settled_outbound(&server).await;
    let health: Value = server.get_json("/health").await;
    assert_eq!(health["payment"]["unpaid_empty_body"], "reject");
    for (id, path, _) in machine_routes() {
        let response = send(&server, &path, ("POST", None, b""), None).await;
        expect_400(response, "empty_body", &id).await;
        let response = send(
            &server,
            &path,
            ("POST", Some("application/json"), b"{}"),
            None,
        )
        .await;
        expect_400(response, "empty_request", &id).await;
        let response = send(&server, &path, ("GET", None, b""), None).await;
        assert_eq!(response.status().as_u16(), 405, "{id} GET");
        let response = send(
            &server,
            &path,
            ("POST", None, b"{}"),
            Some("eyJ4NDAyVmVyc2lvbiI6Mn0="),
        )
        .await;
        expect_400(response, "empty_request", &id).await;
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(server.outbound(), outbound);
    let logs = common::logs::logs();
    assert!(
        logs.contains("the CDP Bazaar will not list this deployment")
            && logs.contains("unpaid_empty_body = \"challenge\""),
        "the start-up line names the setting"
    );
}

/// Runs devstack/bazaar-check.mjs (the official `@x402/extensions` bazaar code) on 402 bodies.
fn official_bazaar_check(bodies: &[Value]) -> Vec<Value> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("node")
        .arg(common::repo_root().join("devstack/bazaar-check.mjs"))
        .current_dir(common::repo_root().join("devstack"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node runs (run scripts/install-test-tools)");
    let input = serde_json::to_vec(bodies).expect("json");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&input)
        .expect("write");
    let output = child.wait_with_output().expect("bazaar-check.mjs ends");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let parsed: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "bazaar-check.mjs: {e}: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    parsed["results"].as_array().expect("results").clone()
}

#[tokio::test]
async fn every_machine_declaration_passes_the_official_bazaar_validator() {
    let server = TestServer::start().await;
    let mut bodies = Vec::new();
    for (id, path, example) in machine_routes() {
        let response = server.post_json(&path, &example).await;
        assert_eq!(response.status().as_u16(), 402, "{id}");
        let header = common::payment_required(&response);
        let body: Value = response.json().await.expect("json");
        assert_eq!(header["resource"], body["resource"], "{id}");
        bodies.push(body);
    }
    let listing = &manifest()["service"]["listing"];
    let results = official_bazaar_check(&bodies);
    assert_eq!(results.len(), bodies.len());
    for ((id, _, _), (result, body)) in machine_routes().iter().zip(results.iter().zip(&bodies)) {
        assert_eq!(result["valid"], true, "{id}: {result}");
        assert_eq!(result["spec"], true, "{id}: {result}");
        let info = &result["extracted"]["discoveryInfo"];
        let m = common::machine(id);
        assert_eq!(info["input"]["type"], "http", "{id}: {result}");
        assert_eq!(info["input"]["method"], "POST", "{id}");
        assert_eq!(info["input"]["body"], m["input_example"], "{id}");
        assert_eq!(info["output"]["example"], m["output_example"], "{id}");
        assert_eq!(result["serviceName"], listing["service_name"], "{id}");
        assert_eq!(result["tags"], listing["tags"], "{id}");
        assert_eq!(
            result["iconUrl"],
            format!("{BASE_URL}{}", listing["icon"].as_str().expect("icon")),
            "{id}"
        );
        assert!(
            body["resource"]["description"]
                .as_str()
                .is_some_and(|d| d.chars().count() <= 500),
            "{id}"
        );
    }
    let icon = server.get(listing["icon"].as_str().expect("icon")).await;
    assert_eq!(icon.status().as_u16(), 200);
    assert!(icon.headers().contains_key("etag") && icon.headers().contains_key("cache-control"));
}

fn factomat() -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_factomat"));
    command.current_dir(common::repo_root());
    for (name, _) in std::env::vars() {
        if name.starts_with("FACTOMAT_") {
            command.env_remove(name);
        }
    }
    command
}

/// `factomat discovery check URL --json` in a blocking task: (exit code, parsed report).
async fn discovery_check(url: String) -> (Option<i32>, Value) {
    tokio::task::spawn_blocking(move || {
        let output = factomat()
            .args(["discovery", "check", &url, "--json"])
            .output()
            .expect("factomat runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let report = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "--json output parses: {e}: {stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
        (output.status.code(), report)
    })
    .await
    .expect("check task")
}

fn failed_required(report: &Value) -> Vec<Value> {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["required"] == true && c["passed"] == false)
        .cloned()
        .collect()
}

#[tokio::test]
async fn the_discovery_check_passes_in_challenge_mode_and_fails_by_default_with_the_hint() {
    let mut env = vec![
        ("FACTOMAT_PAY_TO", PAY_TO),
        ("FACTOMAT_BASE_URL", BASE_URL),
        ("FACTOMAT_UNPAID_EMPTY_BODY", "challenge"),
    ];
    env.extend_from_slice(ALL_PROVIDERS);
    let listed = TestServer::with_env(&env).await;
    let (code, report) = discovery_check(listed.url.clone()).await;
    assert_eq!(failed_required(&report), Vec::<Value>::new(), "{report:#}");
    assert_eq!((code, &report["passed"]), (Some(0), &json!(true)));
    let checks = report["checks"].as_array().expect("checks");
    let names: Vec<&str> = checks.iter().filter_map(|c| c["check"].as_str()).collect();
    for name in [
        "reachable",
        "returns_402_no_body",
        "returns_402_empty_json",
        "header_decodes",
        "x402_version_2",
        "accepts_fields",
        "bazaar_schema",
        "bazaar_input",
        "description_length",
        "service_name",
        "tags",
        "openapi_x_payment_info",
        "well_known_consistent",
    ] {
        assert!(names.contains(&name), "{name} ran");
    }
    let probes = checks
        .iter()
        .filter(|c| c["check"] == "returns_402_no_body")
        .count();
    assert_eq!(
        probes,
        machine_routes().len(),
        "every paid resource is probed"
    );
    assert!(
        checks.iter().all(|c| c["passed"] == true),
        "advisory checks pass on our own deployment too: {report:#}"
    );

    let unlisted = TestServer::start().await;
    let (code, report) = discovery_check(unlisted.url.clone()).await;
    assert_eq!(code, Some(1), "a failed required check exits non-zero");
    assert_eq!(report["passed"], false);
    let failed = failed_required(&report);
    assert!(
        failed.iter().any(|c| c["check"] == "returns_402_no_body"
            && c["detail"]
                .as_str()
                .is_some_and(|d| d.contains("unpaid_empty_body = \"challenge\""))),
        "{failed:#?}"
    );
    assert_eq!(listed.outbound() + unlisted.outbound(), 0);
}

/// `message` signed with EIP-191 personal_sign by `key`, by viem (the devstack's signer).
fn personal_sign(key: &str, message: &str) -> String {
    let script = format!(
        "import {{ privateKeyToAccount }} from 'viem/accounts';\
         console.log(await privateKeyToAccount({key:?}).signMessage({{ message: {message:?} }}));"
    );
    let output = std::process::Command::new("node")
        .args(["--input-type=module", "-e", &script])
        .current_dir(common::repo_root().join("devstack"))
        .output()
        .expect("node runs (run scripts/install-test-tools)");
    let signature = String::from_utf8_lossy(&output.stdout).trim().to_string();
    assert!(
        signature.starts_with("0x") && signature.len() == 132,
        "viem signed: {signature} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    signature
}

/// anvil's key #2: PAY_TO's.
const PAY_TO_KEY: &str = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a";
/// anvil's key #1: some other wallet's.
const OTHER_KEY: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";

#[tokio::test]
async fn ownership_proofs_are_checked_at_start_up_and_published_in_both_documents() {
    let message = factomat()
        .args(["discovery", "ownership-message"])
        .env("FACTOMAT_BASE_URL", format!("{BASE_URL}/"))
        .output()
        .expect("runs");
    assert!(message.status.success());
    let message = String::from_utf8(message.stdout).expect("utf-8");
    assert_eq!(
        message, BASE_URL,
        "exactly the origin, nothing else on stdout"
    );

    let proof = personal_sign(PAY_TO_KEY, &message);
    let mut env = vec![
        ("FACTOMAT_PAY_TO", PAY_TO),
        ("FACTOMAT_BASE_URL", BASE_URL),
        ("FACTOMAT_OWNERSHIP_PROOFS", proof.as_str()),
    ];
    env.extend_from_slice(ALL_PROVIDERS);
    let server = TestServer::with_env(&env).await;
    let openapi: Value = server.get_json("/openapi.json").await;
    assert_eq!(openapi["x-discovery"]["ownershipProofs"], json!([proof]));
    let well_known: Value = server.get_json("/.well-known/x402").await;
    assert_eq!(well_known["ownershipProofs"], json!([proof]));

    let another_origin = personal_sign(PAY_TO_KEY, "https://another.example");
    let another_key = personal_sign(OTHER_KEY, &message);
    for wrong in [another_origin, another_key] {
        let output = factomat()
            .arg("serve")
            .env("FACTOMAT_LISTEN", "127.0.0.1:0")
            .env("FACTOMAT_PAY_TO", PAY_TO)
            .env("FACTOMAT_BASE_URL", BASE_URL)
            .env("FACTOMAT_OWNERSHIP_PROOFS", format!("{proof},{wrong}"))
            .output()
            .expect("runs");
        assert_eq!(output.status.code(), Some(2), "start-up stops");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("ownership_proofs") && stderr.contains("FACTOMAT_OWNERSHIP_PROOFS"),
            "{stderr}"
        );
    }
}

/// A loopback facilitator that accepts every payment and reports a bazaar outcome in
/// `EXTENSION-RESPONSES` on `/verify` and `/settle`: success first, then rejected.
async fn reporting_facilitator() -> String {
    let calls = Arc::new(AtomicU64::new(0));
    let supported = warp::path!("supported").map(|| {
        warp::reply::json(
            &json!({"kinds": [{"x402Version": 2, "scheme": "exact", "network": "eip155:8453"}]}),
        )
    });
    let others = warp::path::param::<String>().map(move |step: String| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let outcome = if n == 0 {
            json!({"bazaar": {"status": "success"}})
        } else {
            json!({"bazaar": {"status": "rejected", "rejectedReason": "info failed schema validation"}})
        };
        let body = if step == "verify" {
            json!({"isValid": true, "payer": PAY_TO})
        } else {
            json!({"success": true, "transaction": format!("0x{}", "ab".repeat(32)), "network": "eip155:8453"})
        };
        warp::reply::with_header(
            warp::reply::json(&body),
            "extension-responses",
            base64::engine::general_purpose::STANDARD.encode(outcome.to_string()),
        )
    });
    let addr = common::onchain::serve(supported.or(others)).await;
    format!("http://{addr}")
}

/// A PAYMENT-SIGNATURE for a PAYMENT-REQUIRED header, signed offline by the official client.
fn signed_payment(required: &str, key: &str) -> String {
    let output = std::process::Command::new("node")
        .arg(common::repo_root().join("devstack/sign.mjs"))
        .args(["--required", required, "--key", key])
        .current_dir(common::repo_root().join("devstack"))
        .output()
        .expect("node runs");
    let signed: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("sign.mjs: {e}: {}", String::from_utf8_lossy(&output.stderr)));
    signed["header"].as_str().expect("header").to_string()
}

#[tokio::test]
async fn the_index_verdict_is_counted_and_shown_to_the_operator_only() {
    common::logs::capture();
    let facilitator = reporting_facilitator().await;
    let mut env = vec![
        ("FACTOMAT_PAY_TO", PAY_TO),
        ("FACTOMAT_BASE_URL", BASE_URL),
        ("FACTOMAT_FACILITATOR_URL", facilitator.as_str()),
        ("FACTOMAT_ADMIN_LISTEN", "127.0.0.1:0"),
    ];
    env.extend_from_slice(ALL_PROVIDERS);
    let server = TestServer::with_env(&env).await;
    let vm02 = common::machine("VM02");
    let path = vm02["path"].as_str().expect("path");
    for _ in 0..2 {
        let (required, _) = server.challenge(path, &vm02["input_example"]).await;
        let payment = signed_payment(&required, OTHER_KEY);
        let response = server
            .post_paid(path, &vm02["input_example"], &payment)
            .await;
        // The facilitator reports on /verify and on /settle: four outcomes in all.
        assert!(response.headers().get("extension-responses").is_none());
        if let Some(receipt) = response.headers().get("payment-response") {
            let receipt = decode_header(receipt.to_str().expect("ascii"));
            assert!(receipt.get("extensionResponses").is_none(), "{receipt}");
            assert!(!receipt.to_string().contains("bazaar"), "{receipt}");
        }
        let text = response.text().await.expect("body");
        assert!(
            !text.contains("rejectedReason") && !text.contains("schema validation"),
            "{text}"
        );
    }
    let admin = server.admin_url();
    let view: Value = server
        .client
        .get(format!("{admin}/health"))
        .send()
        .await
        .expect("admin answers")
        .json()
        .await
        .expect("json");
    let listing = &view["machines"]["VM02"]["listing"];
    assert_eq!(listing["status"], "rejected", "{view:#}");
    assert_eq!(listing["rejectedReason"], "info failed schema validation");
    assert_eq!(view["machines"]["VM01"]["listing"]["status"], "unknown");
    let metrics = server
        .client
        .get(format!("{admin}/metrics"))
        .send()
        .await
        .expect("admin answers")
        .text()
        .await
        .expect("text");
    for (status, count) in [("success", 1), ("rejected", 3)] {
        let series = format!(
            "factomat_discovery_listing_total{{status=\"{status}\",machine=\"VM02\"}} {count}"
        );
        assert!(metrics.contains(&series), "{series} in {metrics}");
    }
    let public = server.get("/health").await.text().await.expect("text");
    assert!(
        !public.contains("rejected") && !public.contains("listing\""),
        "{public}"
    );
    assert!(common::logs::logs().contains("the bazaar rejected this machine's listing"));
}

/// A loopback facilitator that accepts every payment and keeps the body of every `/verify`.
async fn recording_facilitator() -> (String, Arc<std::sync::Mutex<Vec<Value>>>) {
    let verified = Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = verified.clone();
    let supported = warp::path!("supported").map(|| {
        warp::reply::json(
            &json!({"kinds": [{"x402Version": 2, "scheme": "exact", "network": "eip155:8453"}]}),
        )
    });
    let steps = warp::path::param::<String>().and(warp::body::json()).map(
        move |step: String, body: Value| {
            if step == "verify" {
                kept.lock().expect("kept").push(body);
                warp::reply::json(&json!({"isValid": true, "payer": PAY_TO}))
            } else {
                warp::reply::json(&json!({"success": false, "errorReason": "not_settled_here",
                    "transaction": "", "network": "eip155:8453"}))
            }
        },
    );
    let addr = common::onchain::serve(supported.or(steps)).await;
    (format!("http://{addr}"), verified)
}

/// What reaches the facilitator is our whole listing: for every machine, the `resource` and
/// `extensions.bazaar` of the PaymentPayload sent to `/verify` pass the official validator
/// (`@x402/extensions`), equal the 402 body's, and carry machines.yaml's input and output
/// examples.
#[tokio::test]
async fn the_listing_sent_to_verify_passes_the_official_validator_for_every_machine() {
    let (facilitator, verified) = recording_facilitator().await;
    let server = server_in(None, &facilitator).await;
    let mut quoted = Vec::new();
    for (id, path, example) in machine_routes() {
        let (required, quote) = server.challenge(&path, &example).await;
        quoted.push(quote);
        let paid = server
            .post_paid(&path, &example, &signed_payment(&required, OTHER_KEY))
            .await;
        assert_ne!(
            paid.status().as_u16(),
            400,
            "{id}: the payment reached /verify"
        );
    }
    let sent: Vec<Value> = verified
        .lock()
        .expect("kept")
        .iter()
        .map(|body| body["paymentPayload"].clone())
        .collect();
    assert_eq!(sent.len(), quoted.len(), "one /verify per machine");
    let results = official_bazaar_check(&sent);
    for (((id, _, _), result), (payload, body)) in machine_routes()
        .iter()
        .zip(&results)
        .zip(sent.iter().zip(&quoted))
    {
        assert_eq!(result["valid"], true, "{id}: {result}");
        assert_eq!(result["spec"], true, "{id}: {result}");
        assert_eq!(payload["resource"], body["resource"], "{id}");
        assert_eq!(
            payload["extensions"]["bazaar"], body["extensions"]["bazaar"],
            "{id}"
        );
        let info = &result["extracted"]["discoveryInfo"];
        let m = common::machine(id);
        assert_eq!(info["input"]["body"], m["input_example"], "{id}");
        assert_eq!(info["output"]["example"], m["output_example"], "{id}");
    }
}
