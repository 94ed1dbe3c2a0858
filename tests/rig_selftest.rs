//! Self-tests of the loopback rig the settlement tests drive (issue 25): the chain commands,
//! the two-authorization contract, the facilitator proxy's modes, the provider-like RPC proxy,
//! the dev stack with a block time, both official clients, the shared stack and sign.mjs's
//! echo mutations. Every peer is on 127.0.0.1: anvil, the official facilitator, factomat.

mod common;

use std::time::Duration;

use base64::Engine as _;
use common::devstack::{DevStack, fresh_payee, shared_stack};
use common::facilitator_proxy::{Settle, anvil_rpc, facilitator_proxy};
use common::paid_rig::wait_for;
use common::rpc_proxy::{LogLimit, RpcLimits, range_limited_rpc, rpc_proxy};
use common::{TestServer, decode_header};
use serde_json::{Value, json};

const USDC: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
const PRICE: &str = "10000";

/// A PAYMENT-REQUIRED (base64) for one exact USDC payment of PRICE to `pay_to`, with a
/// resource and a bazaar declaration to echo.
fn required(pay_to: &str) -> String {
    let pr = json!({
        "x402Version": 2,
        "resource": {"url": "http://127.0.0.1/v1/rig", "description": "rig", "mimeType": "application/json"},
        "accepts": [{"scheme": "exact", "network": "eip155:8453", "amount": PRICE, "asset": USDC,
            "payTo": pay_to, "maxTimeoutSeconds": 60, "extra": {"name": "USD Coin", "version": "2"}}],
        "extensions": {"bazaar": {"info": {"input": {"type": "http", "method": "POST"}}, "schema": {}}},
    });
    base64::engine::general_purpose::STANDARD.encode(pr.to_string())
}

/// The facilitator request for a signed payment (`sign.mjs` output) against `required`.
fn facilitator_body(signed: &Value, required: &str) -> Value {
    json!({"x402Version": 2, "paymentPayload": signed["payload"],
        "paymentRequirements": decode_header(required)["accepts"][0]})
}

async fn post(url: &str, body: &Value) -> Value {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
        .post(url)
        .json(body)
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON answer")
}

fn balance(stack: &DevStack, address: &str) -> u128 {
    stack
        .usdc_balance(address)
        .trim_matches('"')
        .parse()
        .expect("balance")
}

/// The token events of a receipt as (log index, event, args).
fn events(receipt: &Value) -> Vec<(u64, String, Value)> {
    receipt["logs"]
        .as_array()
        .expect("logs")
        .iter()
        .map(|l| {
            (
                l["log_index"].as_u64().expect("log_index"),
                l["event"].as_str().unwrap_or("?").to_string(),
                l["args"].clone(),
            )
        })
        .collect()
}

fn eq_ignore_case(a: &Value, b: &str) -> bool {
    a.as_str().is_some_and(|a| a.eq_ignore_ascii_case(b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burn_nonce_uses_the_nonce_with_a_value_0_self_transfer() {
    let stack = shared_stack();
    let buyer = stack.fresh_buyer("1000000");
    let nonce = common::devstack::random_hex32();
    let burned = stack.chain(&["burn-nonce", "--from-key", &buyer.key, &nonce]);
    let tx = burned["transaction"].as_str().expect("transaction");
    let state = stack.chain(&["auth-state", &buyer.address, &nonce]);
    assert_eq!(state["used"], true, "{state}");
    let receipt = stack.chain(&["receipt", tx]);
    assert_eq!(receipt["status"], "success");
    let events = events(&receipt);
    assert_eq!(events.len(), 2, "{receipt}");
    let kinds: Vec<(u64, &str)> = from_first_log(&events).collect();
    assert_eq!(kinds, [(0, "AuthorizationUsed"), (1, "Transfer")]);
    assert!(eq_ignore_case(&events[0].2["nonce"], &nonce));
    assert!(eq_ignore_case(&events[1].2["from"], &buyer.address));
    assert!(eq_ignore_case(&events[1].2["to"], &buyer.address));
    assert_eq!(events[1].2["value"], "0");
    assert_eq!(balance(stack, &buyer.address), 1_000_000, "nothing moved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_transaction_burns_one_nonce_and_executes_another_payment() {
    let stack = shared_stack();
    let (burner, payer) = (stack.fresh_buyer("0"), stack.fresh_buyer("1000000"));
    // A payee of its own: other tests of this binary pay the stack's payee meanwhile.
    let pay_to = fresh_payee();
    let signed = stack.sign_as(&payer, &required(&pay_to), &[]);
    let burn_nonce = common::devstack::random_hex32();
    let execute = signed["payload"]["payload"].to_string();
    let batch = stack.chain(&[
        "batch-authorizations",
        "--burn-key",
        &burner.key,
        "--burn-nonce",
        &burn_nonce,
        "--execute",
        &execute,
    ]);
    let tx = batch["transaction"].as_str().expect("transaction");
    let events = events(&stack.chain(&["receipt", tx]));
    let kinds: Vec<(u64, &str)> = from_first_log(&events).collect();
    assert_eq!(
        kinds,
        [
            (0, "AuthorizationUsed"),
            (1, "Transfer"),
            (2, "AuthorizationUsed"),
            (3, "Transfer")
        ]
    );
    assert!(eq_ignore_case(&events[0].2["nonce"], &burn_nonce));
    assert_eq!(events[1].2["value"], "0");
    assert!(eq_ignore_case(
        &events[2].2["nonce"],
        signed["nonce"].as_str().expect("nonce")
    ));
    assert!(eq_ignore_case(&events[3].2["to"], &pay_to));
    assert_eq!(events[3].2["value"], PRICE);
    assert_eq!(balance(stack, &pay_to), 10_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorder_keeps_what_the_facilitator_saw() {
    let stack = shared_stack();
    let buyer = stack.fresh_buyer("1000000");
    let proxy = facilitator_proxy(stack, Settle::Forward).await;
    let required = required(&stack.field("pay_to"));
    let body = facilitator_body(&stack.sign_as(&buyer, &required, &[]), &required);
    let verified = post(&format!("{}/verify", proxy.url), &body).await;
    assert_eq!(verified["isValid"], true, "{verified}");
    let settled = post(&format!("{}/settle", proxy.url), &body).await;
    assert_eq!(settled["success"], true, "{settled}");
    assert_eq!(
        (proxy.recorder.verifies(), proxy.recorder.settles()),
        (1, 1)
    );
    assert_eq!(proxy.recorder.forwarded_settles(), 1);
    let seen = &proxy.recorder.bodies("settle")[0];
    assert_eq!(seen, &body);
    assert_eq!(
        seen["paymentPayload"]["resource"]["url"],
        "http://127.0.0.1/v1/rig"
    );
    assert!(seen["paymentPayload"]["extensions"]["bazaar"].is_object());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burn_nonce_then_forward_leaves_the_settle_unpaid_and_the_nonce_used() {
    let stack = shared_stack();
    let buyer = stack.fresh_buyer("1000000");
    let proxy = facilitator_proxy(
        stack,
        Settle::BurnNonceThenForward {
            buyer_key: buyer.key.clone(),
        },
    )
    .await;
    let pay_to = stack.field("pay_to");
    let required = required(&pay_to);
    let signed = stack.sign_as(&buyer, &required, &[]);
    let body = facilitator_body(&signed, &required);
    let settled = post(&format!("{}/settle", proxy.url), &body).await;
    assert_eq!(settled["success"], false, "{settled}");
    let nonce = signed["nonce"].as_str().expect("nonce");
    assert_eq!(
        stack.chain(&["auth-state", &buyer.address, nonce])["used"],
        true
    );
    assert_eq!(
        balance(stack, &buyer.address),
        1_000_000,
        "the buyer paid nothing"
    );
    assert_eq!(proxy.recorder.forwarded_settles(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_never_answers() {
    let stack = shared_stack();
    let buyer = stack.fresh_buyer("1000000");
    let proxy = facilitator_proxy(stack, Settle::Hang).await;
    let required = required(&stack.field("pay_to"));
    let body = facilitator_body(&stack.sign_as(&buyer, &required, &[]), &required);
    let answer = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(700))
        .build()
        .expect("client")
        .post(format!("{}/settle", proxy.url))
        .json(&body)
        .send()
        .await;
    assert!(answer.is_err_and(|e| e.is_timeout()));
    // The proxy records once it has read the body, which a loaded machine may do after our
    // timeout fired.
    wait_for("the proxy recorded the settle", async || {
        proxy.recorder.settles() > 0
    })
    .await;
    assert_eq!(proxy.recorder.settles(), 1);
    assert_eq!(proxy.recorder.forwarded_settles(), 0);
}

/// A stack with a 2 s block time: the facilitator still settles, and PendingWithRealHash
/// answers `settlement_pending` with the hash before the block, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_with_real_hash_answers_before_the_block_and_broadcasts_once() {
    let stack = DevStack::start_with(&["--block-time", "2"]);
    let buyer = stack.buyer();
    let pay_to = stack.field("pay_to");
    let required = required(&pay_to);

    let plain = facilitator_proxy(&stack, Settle::Forward).await;
    let body = facilitator_body(&stack.sign_as(&buyer, &required, &[]), &required);
    let settled = post(&format!("{}/settle", plain.url), &body).await;
    assert_eq!(settled["success"], true, "with a block time: {settled}");

    let proxy = facilitator_proxy(&stack, Settle::PendingWithRealHash).await;
    let signed = stack.sign_as(&buyer, &required, &[]);
    let body = facilitator_body(&signed, &required);
    let before = balance(&stack, &pay_to);
    // Blocks stop while the proxy answers: with a 2 s block time, the next block could come
    // between its answer and the receipt read below, whatever the proxy did.
    let rpc = stack.field("rpc_url");
    anvil_rpc(&rpc, "evm_setIntervalMining", json!([0])).await;
    let started = std::time::Instant::now();
    let first = post(&format!("{}/settle", proxy.url), &body).await;
    let answered_in = started.elapsed();
    assert_eq!(first["success"], false, "{first}");
    assert_eq!(first["errorReason"], "settlement_pending");
    assert_eq!(first["network"], "eip155:8453");
    assert!(eq_ignore_case(&first["payer"], &buyer.address));
    let hash = first["transaction"].as_str().expect("hash").to_string();
    let receipt = anvil_rpc(&rpc, "eth_getTransactionReceipt", json!([hash])).await;
    assert!(
        receipt.is_null(),
        "answered in {answered_in:?}, before the block"
    );
    anvil_rpc(&rpc, "evm_setIntervalMining", json!([2])).await;
    let retry = post(&format!("{}/settle", proxy.url), &body).await;
    assert_eq!(retry, first, "a retry gets the same pending answer");
    let mined = stack.chain(&["receipt", &hash]);
    let events = events(&mined);
    assert_eq!(events.len(), 2, "{mined}");
    assert!(eq_ignore_case(
        &events[0].2["nonce"],
        signed["nonce"].as_str().expect("nonce")
    ));
    assert!(eq_ignore_case(&events[1].2["to"], &pay_to));
    assert_eq!(balance(&stack, &pay_to) - before, 10_000, "one transfer");
    assert_eq!(
        (proxy.recorder.settles(), proxy.recorder.forwarded_settles()),
        (2, 1)
    );
}

/// On its own stack: it moves anvil's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_naming_unmined_tx_can_expire_the_window_first() {
    let stack = DevStack::start();
    let buyer = stack.fresh_buyer("1000000");
    let rpc = stack.field("rpc_url");
    let block = |stack: &DevStack| stack.chain(&["block"])["timestamp"].clone();
    let t0: u64 = block(&stack).as_str().expect("ts").parse().expect("n");
    let moved = stack.chain(&["advance-time", "100"]);
    let t1: u64 = moved["timestamp"].as_str().expect("ts").parse().expect("n");
    assert!(t1 >= t0 + 100, "{t0} → {moved}");

    let required = required(&stack.field("pay_to"));
    let signed = stack.sign_as(&buyer, &required, &[]);
    let valid_before: u64 = signed["payload"]["payload"]["authorization"]["validBefore"]
        .as_str()
        .expect("validBefore")
        .parse()
        .expect("n");
    let proxy = facilitator_proxy(
        &stack,
        Settle::FailNamingUnminedTx {
            advance_past_valid_before: true,
        },
    )
    .await;
    let answer = post(
        &format!("{}/settle", proxy.url),
        &facilitator_body(&signed, &required),
    )
    .await;
    assert_eq!(answer["success"], false, "{answer}");
    let hash = answer["transaction"].as_str().expect("a hash");
    assert_eq!(hash.len(), 66);
    let receipt = anvil_rpc(&rpc, "eth_getTransactionReceipt", json!([hash])).await;
    assert!(receipt.is_null(), "never mined");
    let now: u64 = block(&stack).as_str().expect("ts").parse().expect("n");
    assert!(now >= valid_before, "{now} < {valid_before}");
    assert_eq!(proxy.recorder.forwarded_settles(), 0);
    let nonce = signed["nonce"].as_str().expect("nonce");
    assert_eq!(
        stack.chain(&["auth-state", &buyer.address, nonce])["used"],
        false
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rpc_proxy_refuses_wide_log_ranges_like_the_providers() {
    let stack = shared_stack();
    let anvil = stack.field("rpc_url");
    let logs = |from: &str, to: &str| json!([{"fromBlock": from, "toBlock": to, "address": USDC}]);
    let alchemy = range_limited_rpc(&anvil, 10).await;
    let refused = common::onchain::rpc_call(&alchemy.url, "eth_getLogs", logs("0x0", "0xa")).await;
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert_eq!(
        refused["error"]["message"],
        "You can make eth_getLogs requests with up to a 10 block range. Based on your parameters, this block range should work: [0x0, 0x9]"
    );
    let fits = common::onchain::rpc_call(&alchemy.url, "eth_getLogs", logs("0x0", "0x9")).await;
    assert!(fits["result"].is_array(), "{fits}");
    // "latest" spans more than 10 blocks once the head reaches 10; the other tests share this
    // anvil and mine, so the head is read on both sides of the call.
    let before = block_number(&anvil).await;
    let latest =
        common::onchain::rpc_call(&alchemy.url, "eth_getLogs", logs("0x0", "latest")).await;
    let after = block_number(&anvil).await;
    let refused = latest["error"]["code"] == -32600;
    assert_ne!(refused, latest["result"].is_array(), "{latest}");
    if before >= 10 || after < 10 {
        assert_eq!(refused, before >= 10, "head {before}..{after}: {latest}");
    }
    assert_eq!(alchemy.calls("eth_getLogs"), 3);
    assert_eq!(alchemy.refused_log_ranges(), u64::from(refused) + 1);

    let quicknode = rpc_proxy(
        &anvil,
        RpcLimits {
            max_log_blocks: 10_000,
            style: LogLimit::QuickNode,
        },
    )
    .await;
    let answer = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
        .post(&quicknode.url)
        .json(&json!({"jsonrpc": "2.0", "id": 7, "method": "eth_getLogs", "params": logs("0x0", "0x2710")}))
        .send()
        .await
        .expect("answered");
    assert_eq!(answer.status().as_u16(), 413);
    let body: Value = answer.json().await.expect("json");
    assert_eq!(
        body["error"],
        json!({"code": -32614, "message": "eth_getLogs is limited to a 10,000 range"})
    );
    assert_eq!(body["id"], 7);

    // A node far behind: a read pinned to the head is "header not found", block 0 is
    // answered; batches count each call. The head is read again here, and the lag is wide:
    // the other tests share this anvil and mine meanwhile.
    alchemy.set_lag(1_000_000);
    let head = block_number(&anvil).await;
    let at = |n: u64| format!("{n:#x}");
    let buyer = stack.field("buyer_address");
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "eth_getBalance", "params": [buyer, at(head)]},
        {"jsonrpc": "2.0", "id": 2, "method": "eth_getBalance", "params": [buyer, "0x0"]},
    ]);
    let answers = post(&alchemy.url, &batch).await;
    assert_eq!(
        answers[0]["error"],
        json!({"code": -32000, "message": "header not found"})
    );
    assert!(answers[1]["result"].is_string(), "{answers}");
    assert_eq!(alchemy.calls("eth_getBalance"), 2);
    alchemy.set_lag(0);
    let synced =
        common::onchain::rpc_call(&alchemy.url, "eth_getBalance", json!([buyer, at(head)])).await;
    assert!(synced["result"].is_string(), "{synced}");
}

/// The server of the client tests: VM02 paid through the shared stack's facilitator.
async fn vm02_server(stack: &DevStack) -> TestServer {
    let (pay_to, facilitator, rpc) = (
        stack.field("pay_to"),
        stack.field("facilitator_url"),
        stack.field("rpc_url"),
    );
    TestServer::with_env(&[
        ("FACTOMAT_PAY_TO", pay_to.as_str()),
        ("FACTOMAT_FACILITATOR_URL", facilitator.as_str()),
        ("FACTOMAT_RPC_URL_EIP155_8453", rpc.as_str()),
        ("FACTOMAT_FACILITATOR_SETTLE_TIMEOUT_MS", "20000"),
    ])
    .await
}

/// Both official clients pay one real factomat call, signing exactly once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_official_clients_pay_a_real_call_and_sign_once() {
    let stack = shared_stack();
    let server = vm02_server(stack).await;
    let pay_to = stack.field("pay_to");
    let url = format!("{}/v1/allowance-exposure", server.url);
    for (client, buyer) in [
        ("typescript", stack.fresh_buyer("1000000")),
        ("python", stack.fresh_buyer("1000000")),
    ] {
        let body = json!({"owner": buyer.address, "token": USDC, "spender": pay_to});
        let answer = if client == "python" {
            stack.pay_python_as(&buyer, &url, &body)
        } else {
            stack.pay_as(&buyer, &url, &body)
        };
        assert_eq!(answer["status"], 200, "{client}: {answer}");
        assert_eq!(answer["payment_response"]["success"], true, "{client}");
        assert_eq!(answer["body"]["machine"], "VM02", "{client}");
        assert_eq!(
            (
                answer["signed"].as_u64(),
                answer["signatures_sent"].as_u64()
            ),
            (Some(1), Some(1)),
            "{client}"
        );
        assert_eq!(answer["requests"], 2, "{client}");
        assert!(eq_ignore_case(
            &answer["payment_payload"]["payload"]["authorization"]["from"],
            &buyer.address
        ));
        assert_eq!(
            balance(stack, &buyer.address),
            1_000_000 - 10_000,
            "{client} paid the price once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_stack_is_one_stack_with_fresh_buyers() {
    let (a, b) = (shared_stack(), shared_stack());
    assert_eq!(a.state_path, b.state_path);
    let (x, y) = (a.fresh_buyer("5"), a.fresh_buyer("7"));
    assert_ne!(x.address, y.address);
    assert_eq!((balance(a, &x.address), balance(a, &y.address)), (5, 7));
}

/// sign.mjs's mutated path has the official client's shape, and each echo mutation changes
/// one thing; the real facilitator still verifies them (it does not compare the echo).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_echo_mutations_change_one_thing_each() {
    let stack = shared_stack();
    let buyer = stack.fresh_buyer("1000000");
    let required = required(&stack.field("pay_to"));
    let official = stack.sign_as(&buyer, &required, &[])["payload"].clone();
    let nonce = common::devstack::random_hex32();
    let by_hand = stack.sign_as(&buyer, &required, &["--nonce", &nonce])["payload"].clone();
    let keys =
        |p: &Value| -> Vec<String> { p.as_object().expect("object").keys().cloned().collect() };
    assert_eq!(keys(&official), keys(&by_hand));
    for key in ["extensions", "resource", "accepted"] {
        assert_eq!(official[key], by_hand[key], "{key}");
    }
    let mutated = |flags: &[&str]| stack.sign_as(&buyer, &required, flags)["payload"].clone();
    let moved = mutated(&["--resource-url", "https://elsewhere.example/x"]);
    assert_eq!(moved["resource"]["url"], "https://elsewhere.example/x");
    assert_eq!(moved["resource"]["description"], "rig");
    let info = mutated(&["--extension-info", r#"bazaar={"input":{"type":"mcp"}}"#]);
    assert_eq!(
        info["extensions"]["bazaar"],
        json!({"info": {"input": {"type": "mcp"}}, "schema": {}})
    );
    let extra = mutated(&["--accepted-extra", "note=hello"]);
    assert_eq!(
        extra["accepted"]["extra"],
        json!({"name": "USD Coin", "version": "2", "note": "hello"})
    );
    let bare = mutated(&["--no-echo"]);
    assert_eq!(keys(&bare), ["x402Version", "payload", "accepted"]);
    let facilitator = stack.field("facilitator_url");
    for payload in [moved, info, extra, bare] {
        let body = json!({"x402Version": 2, "paymentPayload": payload,
            "paymentRequirements": decode_header(&required)["accepts"][0]});
        let verified = post(&format!("{facilitator}/verify"), &body).await;
        assert_eq!(verified["isValid"], true, "{verified}");
    }
}

/// The node's `eth_blockNumber`.
async fn block_number(rpc: &str) -> u64 {
    let head = common::onchain::rpc_call(rpc, "eth_blockNumber", json!([])).await;
    let hex = head["result"].as_str().expect("head");
    u64::from_str_radix(hex.trim_start_matches("0x"), 16).expect("a hex block number")
}

/// Each event's log index counted from the transaction's first log (anvil may mine other
/// tests' transactions in the same block, before this one's), with its name.
fn from_first_log(events: &[(u64, String, Value)]) -> impl Iterator<Item = (u64, &str)> {
    let first = events.first().map_or(0, |e| e.0);
    events.iter().map(move |e| (e.0 - first, e.1.as_str()))
}
