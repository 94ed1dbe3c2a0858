//! The x402 payment rail end to end on one machine: the official client pays, the official
//! facilitator settles a real EIP-3009 transfer on anvil, the ledger records it. Every
//! network peer is on 127.0.0.1.

mod common;

use common::closing_relay::closing_idle_connections;
use common::devstack::{Buyer, DevStack, fresh_payee, shared_stack};
use common::facilitator_proxy::{Settle, proxied_facilitator};
use common::ledgers::{
    Backend, backend, execute_sql, fresh_ledger_url, ledger_cli, report_entry, rows_of,
    vm02_attempt,
};
use common::logs::{capture, logs};
use common::onchain::{calls_after_start_up, rpc_tripwire};
use common::paid_rig::{PRICE, USDC, VM02, reason_of};
use common::{TestServer, closed_port, decode_header};
use factomat::pay::ledger::{AttemptRow, Ledger, NewAttempt, PoolOptions};
use serde_json::{Value, json};

const OWNER_KEY: &str = "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba";
const UINT256_MAX: &str =
    "115792089237316195423570985008687907853269984665640564039457584007913129639935";

on_both_ledgers!(
    the_official_client_pays_for_vm02_and_the_observation_is_exact,
    a_signature_runs_the_work_once_even_when_50_copies_race,
    a_failed_settlement_withholds_the_result_and_is_recorded,
    a_settlement_the_facilitator_fails_but_that_landed_is_delivered,
    a_buyer_who_disconnects_during_settlement_is_still_settled_and_recorded,
    each_row_keeps_the_nonce_that_reconciles_it_on_chain,
    the_ledger_keeps_no_signature_or_response_and_reports_per_family,
    rows_left_reserved_by_a_crash_are_reported_at_start_up,
);

/// One paying test: its own server, ledger, buyer and payee on the binary's shared dev stack,
/// so that tests running side by side never share a balance, a nonce or a ledger row.
struct Rig {
    stack: &'static DevStack,
    buyer: Buyer,
    pay_to: String,
    server: TestServer,
    ledger_url: String,
}

/// What one buyer is given: enough for every call a test here makes.
const BUYER_USDC: &str = "1000000";

/// A rig whose server reaches the given facilitator and RPC endpoint.
async fn rig_with(facilitator: &str, rpc: &str) -> Rig {
    rig_with_timeout(facilitator, rpc, "10000").await
}

/// A rig whose /verify timeout is `verify_ms` (the default is generous so that 50 concurrent
/// verifies on a loaded 2-core machine still answer).
async fn rig_with_timeout(facilitator: &str, rpc: &str, verify_ms: &str) -> Rig {
    capture();
    let stack = shared_stack();
    let (buyer, pay_to, ledger_url) = (
        stack.fresh_buyer(BUYER_USDC),
        fresh_payee(),
        fresh_ledger_url(),
    );
    let server = TestServer::with_env(&[
        ("FACTOMAT_PAY_TO", pay_to.as_str()),
        ("FACTOMAT_FACILITATOR_URL", facilitator),
        ("FACTOMAT_RPC_URL_EIP155_8453", rpc),
        ("FACTOMAT_DATABASE_URL", ledger_url.as_str()),
        ("FACTOMAT_FACILITATOR_VERIFY_TIMEOUT_MS", verify_ms),
        ("FACTOMAT_FACILITATOR_SETTLE_TIMEOUT_MS", "20000"),
    ])
    .await;
    Rig {
        stack,
        buyer,
        pay_to,
        server,
        ledger_url,
    }
}

/// A rig on the shared stack's own facilitator and anvil.
async fn rig() -> Rig {
    let stack = shared_stack();
    rig_with(&stack.field("facilitator_url"), &stack.field("rpc_url")).await
}

impl Rig {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url)
    }

    async fn ledger_rows(&self) -> Vec<AttemptRow> {
        rows_of(&self.ledger_url).await
    }

    fn buyer(&self) -> String {
        self.buyer.address.clone()
    }

    /// The VM02 body most tests pay for: the buyer's USDC allowance for our payee.
    fn payee_allowance_body(&self) -> Value {
        vm02_request(&self.buyer.address, USDC, &self.pay_to)
    }

    /// The official client paying for one VM02 call as this rig's buyer.
    fn pay(&self, body: &Value) -> Value {
        self.stack.pay_as(&self.buyer, &self.url(VM02), body)
    }

    /// A PAYMENT-SIGNATURE from this rig's buyer (see [`DevStack::sign`]).
    fn sign(&self, required: &str, mutations: &[&str]) -> Value {
        self.stack.sign_as(&self.buyer, required, mutations)
    }

    /// The header value of [`Rig::sign`].
    fn payment_header(&self, required: &str, mutations: &[&str]) -> String {
        self.stack
            .payment_header_as(&self.buyer, required, mutations)
    }

    /// USDC balances of (buyer, payee).
    fn balances(&self) -> (u128, u128) {
        let parse = |s: String| s.trim_matches('"').parse::<u128>().expect("balance");
        (
            parse(self.stack.usdc_balance(&self.buyer.address)),
            parse(self.stack.usdc_balance(&self.pay_to)),
        )
    }

    /// The PAYMENT-REQUIRED header of an unpaid call.
    async fn challenge(&self, body: &Value) -> String {
        self.server.challenge(VM02, body).await.0
    }

    async fn send_paid(&self, body: &Value, header: &str) -> reqwest::Response {
        self.server.post_paid(VM02, body, header).await
    }
}

fn vm02_request(owner: &str, token: &str, spender: &str) -> Value {
    json!({"owner": owner, "token": token, "spender": spender})
}

async fn the_official_client_pays_for_vm02_and_the_observation_is_exact() {
    let rig = rig().await;
    let token = rig.stack.deploy_erc20("Test Token", "TST", "18");
    let owner = rig.stack.chain(&[
        "approve",
        "--from-key",
        OWNER_KEY,
        &token,
        "0x0000000000000000000000000000000000000001",
        "0",
    ])["owner"]
        .as_str()
        .expect("owner")
        .to_string();
    rig.stack
        .chain(&["mint", &owner, "100000000000000000000", "--token", &token]);
    // (spender, allowance, expected allowance_adjusted, exposure_adjusted, covers, max, unlimited)
    let cases = [
        (
            "0x00000000000000000000000000000000000000a1",
            "0",
            "0",
            "0",
            false,
            false,
            false,
        ),
        (
            "0x00000000000000000000000000000000000000a2",
            "40000000000000000000",
            "40",
            "40",
            false,
            false,
            false,
        ),
        (
            "0x00000000000000000000000000000000000000a3",
            "250500000000000000000",
            "250.5",
            "100",
            true,
            false,
            false,
        ),
        (
            "0x00000000000000000000000000000000000000a4",
            UINT256_MAX,
            "115792089237316195423570985008687907853269984665640564039457.584007913129639935",
            "100",
            true,
            true,
            true,
        ),
    ];
    for (spender, allowance, ..) in &cases {
        if *allowance != "0" {
            rig.stack.chain(&[
                "approve",
                "--from-key",
                OWNER_KEY,
                &token,
                spender,
                allowance,
            ]);
        }
    }
    let outbound_before = rig.server.outbound_asked();
    for (i, (spender, allowance, allowance_adjusted, exposure_adjusted, covers, max, unlimited)) in
        cases.iter().enumerate()
    {
        let (buyer_before, payee_before) = rig.balances();
        let answer = rig.pay(&vm02_request(&owner, &token, spender));
        assert_eq!(answer["status"], 200, "case {i}: {answer}");
        let settlement = &answer["payment_response"];
        assert_eq!(settlement["success"], true, "case {i}");
        assert_eq!(settlement["network"], "eip155:8453");
        let tx = settlement["transaction"].as_str().expect("tx hash");
        assert!(tx.starts_with("0x") && tx.len() == 66, "{tx}");
        let (buyer_after, payee_after) = rig.balances();
        assert_eq!(
            buyer_before - buyer_after,
            PRICE,
            "case {i}: exactly the price left the buyer"
        );
        assert_eq!(
            payee_after - payee_before,
            PRICE,
            "case {i}: exactly the price reached pay_to"
        );
        let body = &answer["body"];
        assert_eq!(body["status"], "OK", "case {i}: {body}");
        assert_eq!(body["machine"], "VM02");
        assert_eq!(
            body["token_metadata"],
            json!({"symbol": "TST", "decimals": 18})
        );
        assert_eq!(body["allowance_raw"], *allowance, "case {i}");
        assert_eq!(body["balance_raw"], "100000000000000000000", "case {i}");
        assert_eq!(body["balance_adjusted"], "100", "case {i}");
        assert_eq!(body["allowance_adjusted"], *allowance_adjusted, "case {i}");
        assert_eq!(
            body["allowance_balance_exposure_adjusted"], *exposure_adjusted,
            "case {i}"
        );
        assert_eq!(
            body["allowance_covers_current_balance"], *covers,
            "case {i}"
        );
        assert_eq!(body["max_uint256_approval"], *max, "case {i}");
        assert_eq!(body["effectively_unlimited"], *unlimited, "case {i}");
        assert_eq!(body["evidence"]["same_block_reads"], true);
        assert_eq!(body["evidence"]["token_code_present"], true);
        assert_eq!(body["block_number"], body["evidence"]["block_number"]);
        assert!(
            body["block_number"]
                .as_str()
                .is_some_and(|b| b.parse::<u64>().is_ok())
        );
        assert_eq!(body["limitations"], json!([]));
    }
    let rows = rig.ledger_rows().await;
    assert_eq!(rows.len(), cases.len());
    for row in &rows {
        assert_eq!(
            (
                row.state.as_str(),
                row.machine.as_str(),
                row.family.as_str()
            ),
            ("settled", "VM02", "ONCHAIN_PREFLIGHT")
        );
        assert_eq!(row.amount_atomic, "10000");
        assert!(
            row.transaction_hash
                .as_deref()
                .is_some_and(|t| t.len() == 66)
        );
        assert_eq!(row.payer.to_lowercase(), rig.buyer().to_lowercase());
    }
    // Per paid call: 1 verify + 2 RPC requests (eth_blockNumber, then one batch of five
    // reads) + 1 settle, nothing else.
    assert_eq!(
        rig.server.outbound_asked() - outbound_before,
        4 * cases.len() as u64
    );
}

async fn a_signature_runs_the_work_once_even_when_50_copies_race() {
    let rig = rig().await;
    let body = rig.payee_allowance_body();
    let required = rig.challenge(&body).await;
    let (buyer_start, _) = rig.balances();

    let signed = rig.sign(&required, &[]);
    let header = signed["header"].as_str().expect("header").to_string();
    let first = rig.send_paid(&body, &header).await;
    assert_eq!(first.status().as_u16(), 200);
    assert!(first.headers().contains_key("payment-response"));
    let first_id = first.headers()["x-request-id"]
        .to_str()
        .expect("ascii")
        .to_string();
    // The same payment on another request is a replay; on the same request it collects the
    // answer already bought (docs/payment.md), never a second run.
    let another = vm02_request(
        &rig.buyer(),
        USDC,
        "0x000000000022D473030F116dDEE9F6B43aC78BA3",
    );
    let replay = rig.send_paid(&another, &header).await;
    assert_eq!(replay.status().as_u16(), 402);
    assert_eq!(reason_of(&replay), "payment_nonce_already_presented");

    let raced = rig.sign(&required, &[]);
    let header = raced["header"].as_str().expect("header").to_string();
    let attempts = (0..50).map(|_| rig.send_paid(&body, &header));
    let responses = futures_util::future::join_all(attempts).await;
    common::assert_one_answer(responses).await;

    let (buyer_end, _) = rig.balances();
    assert_eq!(
        buyer_start - buyer_end,
        2 * PRICE,
        "two signatures, two charges, never more"
    );
    let rows = rig.ledger_rows().await;
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.state == "settled"));
    assert_eq!(
        rows[0].request_id.as_deref(),
        Some(first_id.as_str()),
        "the ledger row keeps the paid call's request id"
    );
    let settled_line = logs()
        .lines()
        .find(|line| line.contains(&first_id) && line.contains("payment settled"))
        .map(str::to_string);
    assert!(
        settled_line.is_some(),
        "the paid call's log lines carry its request id"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_payments_get_402_with_their_reason_and_charge_nothing() {
    let rig = rig().await;
    let body = rig.payee_allowance_body();
    let required = rig.challenge(&body).await;
    let balances = rig.balances();
    let past = (common::unix_now() - 100).to_string();
    let empty_key = "0x1b9f1c3a8c2b8f2e5d6c7b8a9f0e1d2c3b4a5968778695a4b3c2d1e0f1a2b3c4";
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        (
            "wrong amount",
            vec!["--signed-value", "5000"],
            "invalid_exact_evm_payload_authorization_value_mismatch",
        ),
        (
            "wrong payTo",
            vec!["--to", "0x90F79bf6EB2c4f870365E785982E1f101E93b906"],
            "invalid_exact_evm_recipient_mismatch",
        ),
        (
            "wrong network",
            vec!["--accepted-network", "eip155:84532"],
            "payment_requirements_mismatch",
        ),
        (
            "wrong asset",
            vec![
                "--accepted-asset",
                "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            ],
            "payment_requirements_mismatch",
        ),
        (
            "wrong accepted amount",
            vec!["--accepted-amount", "1"],
            "payment_requirements_mismatch",
        ),
        (
            "expired validBefore",
            vec!["--valid-before", past.as_str()],
            "invalid_exact_evm_payload_authorization_valid_before",
        ),
        (
            "bad signature",
            vec!["--corrupt-signature"],
            "invalid_exact_evm_signature",
        ),
        (
            "insufficient balance",
            vec!["--key", empty_key],
            "invalid_exact_evm_insufficient_balance",
        ),
        (
            "x402 version 1",
            vec!["--x402-version", "1"],
            "invalid_x402_version",
        ),
    ];
    for (name, mutations, reason) in cases {
        let header = rig.sign(&required, &mutations)["header"]
            .as_str()
            .expect("header")
            .to_string();
        let response = rig.send_paid(&body, &header).await;
        assert_eq!(response.status().as_u16(), 402, "{name}");
        assert_eq!(reason_of(&response), reason, "{name}");
        assert!(
            response.headers().get("payment-response").is_none(),
            "{name}: nothing was settled"
        );
    }
    for (name, header) in [
        ("not base64", "%%%"),
        ("not JSON", "bm90IGpzb24="),
        ("url-safe base64", "eyJ4NDAyVmVyc2lvbiI6Mn0_"),
    ] {
        let response = rig.send_paid(&body, header).await;
        assert_eq!(response.status().as_u16(), 402, "{name}");
        assert_eq!(reason_of(&response), "invalid_payload", "{name}");
    }
    assert_eq!(rig.balances(), balances, "no wrong payment moved any money");
    assert!(
        rig.ledger_rows().await.is_empty(),
        "no wrong payment reserved a ledger row"
    );
}

async fn a_failed_settlement_withholds_the_result_and_is_recorded() {
    let stack = shared_stack();
    let failing = proxied_facilitator(stack.field("facilitator_url"), Settle::Fail).await;
    let rpc = stack.field("rpc_url");
    let rig = rig_with(&format!("http://{failing}"), &rpc).await;
    let body = rig.payee_allowance_body();
    let required = rig.challenge(&body).await;
    let balances = rig.balances();
    let header = rig.payment_header(&required, &[]);
    let response = rig.send_paid(&body, &header).await;
    assert_eq!(response.status().as_u16(), 402);
    assert_eq!(
        response.headers()["cache-control"],
        "no-store",
        "a refusal's fresh challenge is never cached"
    );
    let settlement = decode_header(
        response.headers()["payment-response"]
            .to_str()
            .expect("ascii"),
    );
    assert_eq!(settlement["success"], false);
    assert_eq!(
        settlement["errorReason"],
        "invalid_exact_evm_transaction_simulation_failed"
    );
    assert_eq!(
        reason_of(&response),
        "invalid_exact_evm_transaction_simulation_failed"
    );
    let challenge: Value = response.json().await.expect("json body");
    assert_eq!(challenge["x402Version"], 2, "the body is a fresh challenge");
    assert!(
        challenge.get("machine").is_none() && challenge.get("block_number").is_none(),
        "the result is withheld: {challenge}"
    );
    assert_eq!(rig.balances(), balances);
    let rows = rig.ledger_rows().await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].state, "settle_failed");
}

async fn a_buyer_who_disconnects_during_settlement_is_still_settled_and_recorded() {
    let stack = shared_stack();
    let slow = proxied_facilitator(
        stack.field("facilitator_url"),
        Settle::After(std::time::Duration::from_secs(3)),
    )
    .await;
    let rpc = stack.field("rpc_url");
    let rig = rig_with(&format!("http://{slow}"), &rpc).await;
    let body = rig.payee_allowance_body();
    let required = rig.challenge(&body).await;
    let (buyer_before, payee_before) = rig.balances();
    let header = rig.payment_header(&required, &[]);
    // The buyer gives up while /settle is still pending, closing the connection.
    let impatient = reqwest::Client::builder()
        .no_proxy()
        .timeout(std::time::Duration::from_millis(1500))
        .build()
        .expect("client");
    let gave_up = impatient
        .post(rig.url(VM02))
        .header("content-type", "application/json")
        .header("PAYMENT-SIGNATURE", &header)
        .json(&body)
        .send()
        .await;
    assert!(gave_up.is_err(), "the buyer was meant to time out first");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut rows = rig.ledger_rows().await;
    while rows.first().is_none_or(|r| r.state == "reserved") && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        rows = rig.ledger_rows().await;
    }
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0].state, "settled",
        "the call ran to its end: {rows:?}"
    );
    assert!(rows[0].transaction_hash.is_some());
    let (buyer_after, payee_after) = rig.balances();
    assert_eq!(buyer_before - buyer_after, 10_000);
    assert_eq!(payee_after - payee_before, 10_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_or_silent_facilitator_means_503_and_no_work() {
    // An RPC tripwire: any request reaching it would mean paid work ran.
    let (tripwire, rpc_hits) = rpc_tripwire().await;
    let closed = closed_port();
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let silent_addr = silent.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let rpc = format!("http://{tripwire}");
    let down = rig_with(&format!("http://{}", closed.addr), &rpc).await;
    let body = down.payee_allowance_body();
    let required = down.challenge(&body).await;
    let header = down.payment_header(&required, &[]);
    let balances = down.balances();
    let response = down.send_paid(&body, &header).await;
    assert_eq!(response.status().as_u16(), 503);
    assert!(
        response.headers().contains_key("retry-after"),
        "every 503 says when to retry"
    );
    let error: Value = response.json().await.expect("json");
    assert_eq!(error["error"]["code"], "facilitator_unavailable");

    let hanging = rig_with_timeout(&format!("http://{silent_addr}"), &rpc, "1500").await;
    // Signed now: the window check refuses an authorization that would expire before this
    // call could be settled, and making the second rig's buyer takes a while.
    let body = hanging.payee_allowance_body();
    let required = hanging.challenge(&body).await;
    let header = hanging.payment_header(&required, &[]);
    let started = std::time::Instant::now();
    let response = hanging.send_paid(&body, &header).await;
    let status = response.status().as_u16();
    assert_eq!(status, 503, "{}", response.text().await.unwrap_or_default());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the verify timeout bounds the wait: {:?}",
        started.elapsed()
    );
    let error: Value = response.json().await.expect("json");
    assert_eq!(error["error"]["code"], "facilitator_unavailable");

    assert_eq!(
        rpc_hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no work ran"
    );
    assert_eq!(down.balances(), balances, "nothing was charged");
    let rows = (down.ledger_rows().await, hanging.ledger_rows().await);
    assert!(rows.0.is_empty() && rows.1.is_empty(), "{rows:?}");
}

/// The dev stack's facilitator, like any Node server, closes a kept-alive connection when
/// its 5 s idle timer fires; a verify written in that instant must be sent again, not
/// answered 503 (two CI runs met that instant).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_facilitator_closing_an_idle_connection_as_we_write_costs_the_buyer_nothing() {
    let stack = shared_stack();
    let idle = std::time::Duration::from_millis(100);
    let facilitator = closing_idle_connections(&stack.field("facilitator_url"), idle).await;
    let rpc = stack.field("rpc_url");
    let rig = rig_with(&facilitator.url, &rpc).await;
    let body = rig.payee_allowance_body();
    let (buyer_before, _) = rig.balances();
    for call in 0..2 {
        tokio::time::sleep(3 * idle).await;
        let answer = rig.pay(&body);
        assert_eq!(answer["status"], 200, "call {call}: {answer}");
        assert_eq!(answer["payment_response"]["success"], true, "call {call}");
    }
    assert!(
        facilitator.dropped() >= 1,
        "the relay closed no connection as a request arrived"
    );
    let (buyer_after, _) = rig.balances();
    assert_eq!(buyer_before - buyer_after, 2 * PRICE, "each call paid once");
    let rows = rig.ledger_rows().await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows.iter().all(|row| row.state == "settled"), "{rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_rpc_node_gives_a_paid_truthful_hold_and_never_leaks_its_url() {
    let stack = shared_stack();
    let facilitator = stack.field("facilitator_url");
    let closed = closed_port();
    let secret_rpc = format!("http://{}/v2/SECRETKEY-do-not-leak-4242", closed.addr);
    let rig = rig_with(&facilitator, &secret_rpc).await;
    let body = rig.payee_allowance_body();
    let answer = rig.pay(&body);
    assert_eq!(answer["status"], 200, "{answer}");
    assert_eq!(answer["payment_response"]["success"], true);
    let result = &answer["body"];
    assert_eq!(result["status"], "HOLD");
    assert_eq!(result["block_number"], Value::Null);
    assert_eq!(result["allowance_raw"], Value::Null);
    assert_eq!(result["evidence"]["same_block_reads"], false);
    assert_eq!(result["allowance_covers_current_balance"], false);
    let limitations = result["limitations"].as_array().expect("limitations");
    assert!(!limitations.is_empty());
    assert!(
        limitations.iter().any(|l| l
            .as_str()
            .is_some_and(|l| l.contains("false by default: not assessed"))),
        "HOLD flags are marked as not assessed: {limitations:?}"
    );
    assert!(
        limitations[0]
            .as_str()
            .is_some_and(|l| l.contains("could not be read")),
        "{limitations:?}"
    );
    let everything = format!("{answer}\n{}", logs());
    assert!(!everything.contains("SECRETKEY"), "the RPC key leaked");
    assert_eq!(
        rig.ledger_rows().await[0].state,
        "settled",
        "HOLD is a paid, truthful result"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_code_fails_each_batched_read_on_its_own_and_holds() {
    let rig = rig().await;
    // The payee is an account without code: every eth_call in the batch answers empty data.
    let not_a_token = rig.pay_to.clone();
    let body = vm02_request(&rig.buyer(), &not_a_token, &rig.buyer());
    let answer = rig.pay(&body);
    assert_eq!(answer["status"], 200, "{answer}");
    let result = &answer["body"];
    assert_eq!(result["status"], "HOLD", "{result}");
    let block = result["block_number"].as_str().expect("the block was read");
    assert_eq!(result["evidence"]["token_code_present"], false);
    assert_eq!(result["allowance_raw"], Value::Null);
    assert_eq!(result["token_metadata"]["symbol"], Value::Null);
    let limitations: Vec<&str> = result["limitations"]
        .as_array()
        .expect("limitations")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for read in [
        "allowance(owner, spender)",
        "balanceOf(owner)",
        "decimals()",
        "symbol()",
    ] {
        let expected = format!(
            "{read} could not be read at block {block}: the call returned no decodable value."
        );
        assert!(limitations.contains(&expected.as_str()), "{limitations:?}");
    }
    assert!(
        limitations
            .iter()
            .any(|l| l.contains("holds no contract code")),
        "{limitations:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rpc_that_refuses_batches_gives_one_limitation_and_a_hold() {
    let stack = shared_stack();
    let facilitator = stack.field("facilitator_url");
    // Single requests reach anvil; a batch gets one error object, as from an endpoint
    // without batch support.
    let (proxy, seen) = common::onchain::rpc_proxy(stack.field("rpc_url"), |method| {
        if method == "batch" {
            common::onchain::RpcAction::Error(
                json!({"code": -32600, "message": "batch requests are not supported"}),
            )
        } else {
            common::onchain::RpcAction::Forward
        }
    })
    .await;
    let rig = rig_with(&facilitator, &format!("http://{proxy}")).await;
    let body = rig.payee_allowance_body();
    let answer = rig.pay(&body);
    assert_eq!(answer["status"], 200, "{answer}");
    let result = &answer["body"];
    assert_eq!(result["status"], "HOLD", "{result}");
    let block = result["block_number"].as_str().expect("the block was read");
    let limitations = result["limitations"].as_array().expect("limitations");
    assert_eq!(limitations.len(), 2, "{limitations:?}");
    assert!(
        limitations[1]
            .as_str()
            .is_some_and(|l| l.contains("effectively_unlimited are false by default")),
        "the forced flags are said to be unassessed: {limitations:?}"
    );
    assert!(
        limitations[0].as_str().is_some_and(|l| l.contains(&format!(
            "The endpoint answered none of the reads batched at block {block}"
        ))),
        "{limitations:?}"
    );
    let reads = calls_after_start_up(&seen);
    assert_eq!(
        reads,
        vec!["eth_blockNumber".to_string(), "batch".to_string()]
    );
}

async fn each_row_keeps_the_nonce_that_reconciles_it_on_chain() {
    let rig = rig().await;
    let body = rig.payee_allowance_body();
    let answer = rig.pay(&body);
    assert_eq!(answer["status"], 200, "{answer}");
    let authorization = &answer["payment_payload"]["payload"]["authorization"];
    let nonce = authorization["nonce"]
        .as_str()
        .expect("nonce")
        .to_lowercase();
    let valid_before = authorization["validBefore"].as_str().expect("validBefore");
    let rows = rig.ledger_rows().await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].nonce.as_deref(), Some(nonce.as_str()));
    assert_eq!(rows[0].valid_before.as_deref(), Some(valid_before));
    // What an operator asks the chain for a row whose outcome is unknown.
    let used = rig.stack.chain(&["auth-state", &rig.buyer(), &nonce]);
    assert_eq!(used["used"], true, "{used}");
    let unknown = format!("0x{}", "11".repeat(32));
    let unused = rig.stack.chain(&["auth-state", &rig.buyer(), &unknown]);
    assert_eq!(unused["used"], false, "{unused}");
}

async fn the_ledger_keeps_no_signature_or_response_and_reports_per_family() {
    let rig = rig().await;
    let body = rig.payee_allowance_body();
    let mut secrets = Vec::new();
    for _ in 0..2 {
        let answer = rig.pay(&body);
        assert_eq!(answer["status"], 200, "{answer}");
        let signature = answer["payment_payload"]["payload"]["signature"]
            .as_str()
            .expect("signature")
            .to_string();
        secrets.push(signature.trim_start_matches("0x").to_string());
        secrets.push(answer["payment_signature"].as_str().expect("header")[..40].to_string());
    }
    let text = match backend() {
        Backend::Sqlite => {
            let path = rig.ledger_url.trim_start_matches("sqlite:").to_string();
            let mut bytes = std::fs::read(&path).expect("ledger file");
            for suffix in ["-wal", "-shm"] {
                bytes.extend(std::fs::read(format!("{path}{suffix}")).unwrap_or_default());
            }
            String::from_utf8_lossy(&bytes).to_lowercase()
        }
        Backend::Postgres => common::postgres::psql(
            &rig.ledger_url,
            "SELECT string_agg(t::text, ' ') FROM payment_attempts t",
        )
        .to_lowercase(),
    };
    assert!(text.contains("vm02"), "the whole ledger was read: {text}");
    for secret in &secrets {
        assert!(
            !text.contains(&secret.to_lowercase()),
            "the ledger holds a signature or payment header"
        );
    }
    for fragment in [
        "allowance_balance_exposure",
        "same_block_reads",
        "limitations",
        "usd coin",
    ] {
        assert!(
            !text.contains(fragment),
            "the ledger holds response or payload content: {fragment}"
        );
    }
    let report = ledger_cli(&rig.ledger_url, None, &["report"]);
    let family = |name: &str| report_entry(&report, "families", "family", name);
    assert_eq!(
        family("ONCHAIN_PREFLIGHT")["unique_paying_wallets"],
        1,
        "one wallet, two calls: counted once"
    );
    assert_eq!(family("WEB_INTELLIGENCE")["unique_paying_wallets"], 0);
    let vm02 = report_entry(&report, "machines", "machine", "VM02");
    assert_eq!(vm02["paid_calls"], 2);
    assert_eq!(vm02["usdc"], "0.02");
}

async fn rows_left_reserved_by_a_crash_are_reported_at_start_up() {
    capture();
    let ledger_url = fresh_ledger_url();
    let ledger = Ledger::open(&ledger_url, PoolOptions::default()).expect("ledger");
    ledger
        .reserve(&NewAttempt {
            // The nonce apart from its hash: the start-up report names the nonce itself.
            nonce: format!("0x{}", "ef".repeat(32)),
            request_id: "crashed-request-1".into(),
            ..vm02_attempt(
                "0x00000000000000000000000000000000000c4a54",
                "ab",
                1_795_000_000,
            )
        })
        .await
        .expect("reserve");
    drop(ledger);
    let closed = closed_port();
    let facilitator = format!("http://{}", closed.addr);
    let _server = TestServer::with_env(&[
        ("FACTOMAT_PAY_TO", common::PAY_TO),
        ("FACTOMAT_FACILITATOR_URL", facilitator.as_str()),
        ("FACTOMAT_DATABASE_URL", ledger_url.as_str()),
    ])
    .await;
    let logs = logs();
    assert!(
        logs.contains("left reserved")
            && logs.contains("00000000000000000000000000000000000c4a54")
            && logs.contains(&"ef".repeat(32))
            && logs.contains("1795000000"),
        "{logs}"
    );
    let still = rows_of(&ledger_url).await;
    assert_eq!(still.len(), 1, "the row is kept, never dropped");
    assert_eq!(still[0].state, "reserved");
}

/// `factomat ledger reconcile` on the rig's ledger against the shared stack's chain.
fn reconcile_json(rig: &Rig) -> Vec<Value> {
    let entries = ledger_cli(
        &rig.ledger_url,
        Some(&rig.stack.field("rpc_url")),
        &["reconcile"],
    );
    entries.as_array().expect("entries").clone()
}

async fn a_settlement_the_facilitator_fails_but_that_landed_is_delivered() {
    let stack = shared_stack();
    let failing =
        proxied_facilitator(stack.field("facilitator_url"), Settle::ForwardThenFail).await;
    let rpc = stack.field("rpc_url");
    let rig = rig_with(&format!("http://{failing}"), &rpc).await;
    let body = rig.payee_allowance_body();
    let required = rig.challenge(&body).await;
    let (buyer_before, payee_before) = rig.balances();
    let header = rig.payment_header(&required, &[]);
    let response = rig.send_paid(&body, &header).await;
    assert_eq!(response.status().as_u16(), 200, "the buyer paid: deliver");
    assert_eq!(
        response.headers()["cache-control"],
        "private",
        "a paid answer is the buyer's alone"
    );
    let settlement = decode_header(
        response.headers()["payment-response"]
            .to_str()
            .expect("ascii"),
    );
    assert_eq!(settlement["success"], true, "{settlement}");
    let transaction = settlement["transaction"].as_str().expect("tx").to_string();
    assert!(
        transaction.starts_with("0x") && transaction.len() == 66,
        "the transaction observed on chain: {settlement}"
    );
    let result: Value = response.json().await.expect("json");
    assert_eq!(
        result["machine"], "VM02",
        "the result is delivered: {result}"
    );
    let (buyer_after, payee_after) = rig.balances();
    assert_eq!(buyer_before - buyer_after, PRICE, "charged once");
    assert_eq!(payee_after - payee_before, PRICE);
    let rows = rig.ledger_rows().await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].state, "settled");
    assert_eq!(
        rows[0].transaction_hash.as_deref(),
        Some(transaction.as_str())
    );

    // The same row as an older build left it: settle_failed, unconfirmed. Beside it, a crash
    // left two reserved rows whose authorizations were never used: one past validBefore,
    // one still valid.
    execute_sql(
        &rig.ledger_url,
        "UPDATE payment_attempts SET state = 'settle_failed', transaction_hash = NULL,
             failure_reason = 'settlement_unconfirmed', evidence = NULL",
    );
    let ledger = Ledger::open(&rig.ledger_url, PoolOptions::default()).expect("ledger");
    let buyer = rig.buyer();
    ledger
        .reserve(&vm02_attempt(&buyer, "a1", 1_000))
        .await
        .expect("reserve");
    let far = common::unix_now() + 3600;
    ledger
        .reserve(&vm02_attempt(&buyer, "a2", far))
        .await
        .expect("reserve");
    drop(ledger);

    let entries = reconcile_json(&rig);
    assert_eq!(entries.len(), 3, "{entries:?}");
    let entry = |id: i64| {
        entries
            .iter()
            .find(|e| e["id"] == id)
            .cloned()
            .expect("entry")
    };
    let landed = entry(rows[0].id);
    assert_eq!(landed["state_before"], "settle_failed");
    assert_eq!(landed["state_after"], "settled");
    assert!(
        landed["evidence"]
            .as_str()
            .is_some_and(|e| e.contains(&transaction)),
        "{landed}"
    );
    let states: Vec<(String, String)> = entries
        .iter()
        .map(|e| {
            (
                e["state_before"].as_str().unwrap_or_default().to_string(),
                e["state_after"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert!(
        states.contains(&("reserved".into(), "expired".into())),
        "{states:?}"
    );
    assert!(
        states.contains(&("reserved".into(), "reserved".into())),
        "{states:?}"
    );
    let after = rig.ledger_rows().await;
    assert_eq!(after[0].state, "settled");
    assert_eq!(
        after[0].transaction_hash.as_deref(),
        Some(transaction.as_str())
    );
    assert_eq!(after[1].state, "expired");
    assert_eq!(
        after[2].state, "reserved",
        "a still-valid authorization is left alone"
    );

    let again = reconcile_json(&rig);
    assert_eq!(again.len(), 1, "a second run changes nothing: {again:?}");
    assert_eq!(again[0]["state_after"], "reserved");
    assert_eq!(rig.balances().0, buyer_after, "reconcile never moves money");
}
