//! Settlement that tells the truth, end to end on loopback: anvil, the official facilitator
//! (behind a proxy that burns nonces, answers `settlement_pending`, hangs or fails), an RPC
//! proxy that refuses `eth_getLogs` ranges over 10 blocks as Alchemy's free tier does, the
//! official TypeScript and Python clients, and both ledger backends.
//!
//! A payment is paid only when a receipt shows our `AuthorizationUsed` followed by the
//! payment's Transfer; an unknown outcome is never answered with a fresh challenge.

mod common;

use std::time::Duration;

use common::devstack::{Buyer, DevStack, shared_stack};
use common::facilitator_proxy::{Settle, advance_past};
use common::paid_rig::{PRICE, Rig, fresh_payment_id, payment_response, reason_of, wait_for};
use common::unix_now;
use serde_json::Value;

on_both_ledgers!(
    a_pending_settlement_that_lands_within_the_wait_is_delivered_once,
    an_authorization_that_expires_unused_is_unpaid_for_sure,
    a_window_too_short_or_too_long_is_refused_before_any_outbound_request,
    the_facilitator_sees_our_listing_and_a_rewritten_echo_is_refused,
    reconcile_rechecks_the_proof_of_settled_rows_it_is_asked_about,
    a_burned_nonce_is_never_paid_and_its_payer_cools_off,
    one_transaction_proves_one_row_and_burns_the_other,
    an_outcome_still_unknown_after_the_wait_is_pending_and_never_paid_twice,
    a_pending_settlement_is_recorded_by_the_service_and_its_result_collected,
    a_refused_authorization_executed_later_is_found_and_answered,
);

/// A facilitator that answers `success: true` naming no transaction, with nothing on chain
/// yet, leaves the outcome unknown: a 503 `settlement_pending` and no fresh challenge (the
/// buyer must not sign again), the row `settle_pending` for reconcile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_naming_no_transaction_is_never_a_fresh_challenge() {
    let stack = shared_stack();
    let buyer = stack.fresh_buyer("1000000");
    let short = [("FACTOMAT_SETTLEMENT_WAIT_MS", "1000")];
    let rig = Rig::start(stack, Settle::SucceedNamingNoTx, &short).await;
    let (_, _, response) = rig.pay_once(&buyer).await;
    assert_eq!(response.status().as_u16(), 503);
    assert!(response.headers().get("payment-required").is_none());
    let pending: Value = response.json().await.expect("json");
    assert_published_pending_body(&rig, &pending).await;
    assert_eq!(rig.only_row().await.state, "settle_pending");
}

/// `/settle` refused before broadcasting, naming no transaction. For the payer's balance:
/// unpaid (402) only once our node shows the funds gone too, asked again while it still shows
/// them; the payer struck only when the logs account for their balance and the funds did not
/// go to us (a log index that lags is asked again, and if it never catches up, no one is
/// struck). A node that shows them to the end of the wait has not seen what
/// the facilitator saw (it lags, or the facilitator is wrong), and the funds may have left
/// through this very authorization: the outcome is pending, never a fresh challenge. For
/// `validBefore`: pending too. A read that fails is asked again within the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_before_broadcasting_is_unpaid_only_when_our_node_agrees() {
    let stack = shared_stack();
    let short = [("FACTOMAT_SETTLEMENT_WAIT_MS", "1000")];
    let wait = [("FACTOMAT_SETTLEMENT_WAIT_MS", "8000")];

    let buyer = stack.fresh_buyer("1000000");
    let refuse = Settle::RefuseForFunds {
        sweep_key: None,
        sweep_late: false,
        to_us: None,
    };
    let rig = Rig::start(stack, refuse, &short).await;
    let (body, header, response) = rig.pay_once(&buyer).await;
    assert_eq!(
        response.status().as_u16(),
        503,
        "our node still shows the funds"
    );
    assert!(response.headers().get("payment-required").is_none());
    let row = rig.only_row().await;
    assert_eq!(row.state, "settle_pending");
    let evidence = row.evidence.unwrap_or_default();
    assert!(
        evidence.contains("our node still shows the payer's balance 1000000"),
        "{evidence}"
    );
    let again = rig.send(&body, &header).await;
    assert_eq!(
        again.status().as_u16(),
        503,
        "its resend is not invited to pay"
    );
    assert_eq!(rig.balance(&buyer.address), 1_000_000, "no money moved");

    // The eth_calls each paid call made: the work's, then the refusal's readings. In the
    // first, the buyer pays us 1 unit during the call: what they paid us meanwhile is summed,
    // and falls short of the price.
    let mut reads = Vec::new();
    for sweep_late in [false, true] {
        let buyer = stack.fresh_buyer("1000000");
        let paid_us = if sweep_late { 0 } else { 1 };
        let refuse = Settle::RefuseForFunds {
            sweep_key: Some(buyer.key.clone()),
            sweep_late,
            to_us: (paid_us > 0).then_some(paid_us),
        };
        let rig = Rig::start(stack, refuse, &wait).await;
        if !sweep_late {
            // The log index misses the sweep at first: the strike waits until it catches up.
            rig.rpc.freeze_log_index(Some(1)).await;
        }
        let (body, _, response) = rig.pay_once(&buyer).await;
        reads.push(rig.rpc.calls("eth_call"));
        assert_eq!(rig.rpc.logs_left_out(), u64::from(!sweep_late));
        assert_eq!(
            response.status().as_u16(),
            402,
            "late {sweep_late}: funds gone"
        );
        assert_eq!(
            reason_of(&response),
            "invalid_exact_evm_insufficient_balance"
        );
        assert_eq!(payment_response(&response)["success"], false);
        let row = rig.only_row().await;
        assert_eq!(row.state, "settle_failed", "{row:?}");
        let evidence = row.evidence.unwrap_or_default();
        assert!(evidence.contains("the payer holds 0"), "{evidence}");
        let meanwhile = format!("it paid us {paid_us} meanwhile");
        assert!(evidence.contains(&meanwhile), "{evidence}");
        let (header, _) = rig.sign(&buyer, &body, &[]).await;
        let response = rig.send(&body, &header).await;
        assert_eq!(reason_of(&response), "payer_recently_unpaid", "struck");
    }
    assert!(
        reads[1] >= reads[0] + 2,
        "a node a block behind was asked again (state and balance) before the verdict: {reads:?}"
    );

    // The funds went to us (as when another call of theirs settled first): unpaid, and not
    // struck for a shortfall our own charge caused.
    let buyer = stack.fresh_buyer("0");
    let refuse = swept_at_settle(&buyer, Some(1_000_000));
    let rig = Rig::start(stack, refuse, &wait).await;
    // The provider's log index misses the buyer's deposit (just before the call) and the
    // transfer to us at first, then catches up. Missed together, they still balance: only
    // the shortfall's leaving, which /verify implies, tells the logs are incomplete.
    rig.rpc.freeze_log_index(Some(2)).await;
    stack.chain(&["mint", &buyer.address, "1000000"]);
    let (body, _, response) = rig.pay_once(&buyer).await;
    assert_eq!(response.status().as_u16(), 402, "funds gone");
    assert_eq!(rig.rpc.logs_left_out(), 2, "the first search missed both");
    let row = rig.only_row().await;
    assert_eq!(row.state, "settle_failed", "{row:?}");
    let evidence = row.evidence.unwrap_or_default();
    assert!(
        evidence.contains("our own charge took the funds"),
        "{evidence}"
    );
    assert_not_struck(&rig, &buyer, &body).await;

    // The same, while the provider's log index lags its state reads for good: the logs never
    // account for the payer's balance, so no one is struck.
    let buyer = stack.fresh_buyer("1000000");
    let refuse = swept_at_settle(&buyer, Some(1_000_000));
    let rig = Rig::start(stack, refuse, &[("FACTOMAT_SETTLEMENT_WAIT_MS", "3000")]).await;
    rig.rpc.freeze_log_index(None).await;
    let (body, _, response) = rig.pay_once(&buyer).await;
    assert_eq!(response.status().as_u16(), 402, "funds gone");
    let row = rig.only_row().await;
    assert_eq!(row.state, "settle_failed", "{row:?}");
    let evidence = row.evidence.unwrap_or_default();
    assert!(
        evidence.contains(
            "do not account for its balance (a log index behind the block answers []): not struck"
        ),
        "{evidence}"
    );
    assert!(rig.rpc.logs_left_out() >= 2, "asked again within the wait");
    assert_not_struck(&rig, &buyer, &body).await;

    // A search of the payer's transfers still running when the wait ends: no one is struck,
    // and the 402 stands (the chain proved the payment unpaid already).
    let buyer = stack.fresh_buyer("1000000");
    let refuse = swept_at_settle(&buyer, None);
    let rig = Rig::start(stack, refuse, &short).await;
    rig.rpc.set_delay("eth_getLogs", Duration::from_secs(3));
    let (_, _, response) = rig.pay_once(&buyer).await;
    assert_eq!(response.status().as_u16(), 402, "unpaid, not pending");
    let row = rig.only_row().await;
    assert_eq!(row.state, "settle_failed", "{row:?}");
    let evidence = row.evidence.unwrap_or_default();
    assert!(
        evidence.contains("where its funds went was not read by the wait's end: not struck"),
        "{evidence}"
    );

    // A refusal for validBefore: the facilitator's clock is not the chain's, and the
    // authorization may still run until a block reaches it: pending, not a fresh challenge.
    let buyer = stack.fresh_buyer("1000000");
    let refuse = Settle::Refuse("invalid_exact_evm_payload_authorization_valid_before");
    let rig = Rig::start(stack, refuse, &short).await;
    let (_, _, response) = rig.pay_once(&buyer).await;
    assert_eq!(response.status().as_u16(), 503);
    assert!(response.headers().get("payment-required").is_none());
    assert_eq!(rig.only_row().await.state, "settle_pending");

    // A refusal on the payment's own terms whose first authorizationState read fails: asked
    // again within the wait, and unpaid once the chain answers.
    let buyer = stack.fresh_buyer("1000000");
    let refuse = Settle::Refuse("invalid_exact_evm_signature");
    let rig = Rig::start(stack, refuse, &wait).await;
    let selector = alloy::primitives::keccak256("authorizationState(address,bytes32)");
    rig.rpc
        .fail_calls_to(&alloy::hex::encode_prefixed(&selector[..4]), 1);
    let (_, _, response) = rig.pay_once(&buyer).await;
    assert_eq!(response.status().as_u16(), 402, "the second read answered");
    assert_eq!(reason_of(&response), "invalid_exact_evm_signature");
    assert_eq!(rig.only_row().await.state, "settle_failed");
}

/// A facilitator that moves `buyer`'s funds away during `/settle` (`to_us` of them to our
/// payTo, the rest elsewhere), then refuses for funds.
fn swept_at_settle(buyer: &Buyer, to_us: Option<u128>) -> Settle {
    Settle::RefuseForFunds {
        sweep_key: Some(buyer.key.clone()),
        sweep_late: false,
        to_us,
    }
}

/// `buyer`, refused for funds once on `rig`, was not struck: funded again, their next payment
/// reaches `/verify` and is refused at settle again (the facilitator proxy still refuses).
async fn assert_not_struck(rig: &Rig<'_>, buyer: &Buyer, body: &Value) {
    rig.stack.chain(&["mint", &buyer.address, "1000000"]);
    let (header, _) = rig.sign(buyer, body, &[]).await;
    let response = rig.send(body, &header).await;
    assert_eq!(
        reason_of(&response),
        "invalid_exact_evm_insufficient_balance",
        "not struck: verified, and refused again at settle"
    );
    assert_eq!(rig.rows().await.len(), 2, "the next call reached /verify");
}

/// `body` is what the published OpenAPI document says a pending settlement's 503 carries
/// (`SettlementPending`), and not a plain `Error`: one of the 503's `oneOf` holds.
async fn assert_published_pending_body(rig: &Rig<'_>, body: &Value) {
    let openapi: Value = rig.server.get_json("/openapi.json").await;
    let schemas = &openapi["components"]["schemas"];
    let mut pending = schemas["SettlementPending"].clone();
    // OpenAPI 3.0's `nullable` in JSON Schema's words.
    assert_eq!(pending["properties"]["transaction"]["nullable"], true);
    pending["properties"]["transaction"]["type"] = serde_json::json!(["string", "null"]);
    let valid = |schema: &Value| {
        jsonschema::validator_for(schema)
            .expect("schema compiles")
            .is_valid(body)
    };
    assert!(valid(&pending), "{body}");
    assert!(!valid(&schemas["Error"]), "{body}");
}

/// A failure naming no transaction after the node took the transfer (the reference
/// facilitator's answer when its `writeContract` throws) is not taken for "never sent": the
/// chain is followed, the transfer found once mined, and the buyer gets the answer, charged
/// once. Read as "unused, so unpaid", it was a fresh 402 while the transfer sat in the pool.
/// So is a refusal "before broadcasting" that answered a resent `/settle`, the first sending
/// having broadcast before its connection was reset: that refusal speaks for the copy only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_naming_no_transaction_after_a_broadcast_is_followed_to_the_chain() {
    // Blocks every 2 s, so the answer comes while the transfer waits in the pool.
    let stack = DevStack::start_with(&["--block-time", "2"]);
    for settle in [
        Settle::BroadcastThenFailNamingNoTx,
        Settle::BroadcastThenLoseTheAnswer,
    ] {
        let case = format!("{settle:?}");
        let sendings = if matches!(settle, Settle::BroadcastThenLoseTheAnswer) {
            2
        } else {
            1
        };
        let (rig, buyer, before, response) = one_paid_call(&stack, settle).await;
        assert_eq!(
            response.status().as_u16(),
            200,
            "{case}: followed to the chain"
        );
        assert!(response.headers().get("payment-required").is_none());
        let settlement = payment_response(&response);
        assert_eq!(settlement["success"], true, "{case}: {settlement}");
        let answer: Value = response.json().await.expect("json");
        assert_eq!(answer["machine"], "VM02");
        assert_eq!(
            before - rig.balance(&buyer.address),
            PRICE,
            "{case}: one transfer"
        );
        let row = rig.only_row().await;
        assert_eq!(row.state, "settled", "{case}: {row:?}");
        assert!(row.transfer_log_index.is_some(), "{case}: proven on chain");
        assert_eq!(rig.facilitator.recorder.forwarded_settles(), 1, "{case}");
        assert_eq!(
            rig.facilitator.recorder.settles(),
            sendings,
            "{case}: /settle sent"
        );
    }
}

/// A success naming another network than ours proves nothing about our transfer: the chain
/// is read, the transfer proven, and the answer's PAYMENT-RESPONSE (and so its receipt)
/// states the network the payment settled on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_naming_another_network_is_proven_on_chain_and_states_ours() {
    let stack = shared_stack();
    let buyer = stack.fresh_buyer("1000000");
    let testnet = Settle::ForwardNaming("network", "eip155:84532");
    let rig = Rig::start(stack, testnet, &[]).await;
    let (_, _, response) = rig.pay_once(&buyer).await;
    assert_eq!(response.status().as_u16(), 200);
    let settlement = payment_response(&response);
    assert_eq!(settlement["success"], true, "{settlement}");
    assert_eq!(settlement["network"], "eip155:8453", "{settlement}");
    let row = rig.only_row().await;
    assert_eq!(row.state, "settled", "{row:?}");
    assert!(row.transfer_log_index.is_some(), "proven on chain: {row:?}");
    assert_eq!(
        rig.balance(&buyer.address),
        1_000_000 - PRICE,
        "charged once"
    );
}

/// One paid VM02 call by the stack's buyer through a facilitator that settles as `settle`
/// says: the rig, the buyer, the buyer's balance before the call, and the answer.
async fn one_paid_call(
    stack: &DevStack,
    settle: Settle,
) -> (Rig<'_>, Buyer, u128, reqwest::Response) {
    let rig = Rig::start(stack, settle, &[]).await;
    let buyer = stack.buyer();
    let body = rig.request(&buyer);
    let before = rig.balance(&buyer.address);
    let (header, _) = rig.sign(&buyer, &body, &[]).await;
    let response = rig.send(&body, &header).await;
    (rig, buyer, before, response)
}

/// One official client's paid call: the stack, the buyer, the URL and the body.
type PaidCall = fn(&DevStack, &Buyer, &str, &Value) -> Value;

async fn a_burned_nonce_is_never_paid_and_its_payer_cools_off() {
    let stack = shared_stack();
    let buyer = stack.fresh_buyer("1000000");
    let burn = Settle::BurnNonceThenForward {
        buyer_key: buyer.key.clone(),
    };
    let rig = Rig::start(stack, burn, &[]).await;
    let (body, _, response) = rig.pay_once(&buyer).await;
    assert_eq!(
        response.status().as_u16(),
        402,
        "withheld: nothing was paid"
    );
    assert_eq!(reason_of(&response), "payment_nonce_burned");
    let settlement = payment_response(&response);
    assert_eq!(settlement["success"], false);
    assert!(
        settlement["transaction"]
            .as_str()
            .is_some_and(|t| t.len() == 66),
        "the burning transaction is named: {settlement}"
    );
    let answer: Value = response.json().await.expect("json");
    assert!(answer.get("machine").is_none(), "result withheld: {answer}");
    // The buyer's own balance tells (the shared stack's payee is paid by other tests).
    assert_eq!(rig.balance(&buyer.address), 1_000_000, "no money moved");
    let row = rig.only_row().await;
    assert_eq!(row.state, "nonce_burned", "{row:?}");
    assert_eq!(
        row.transaction_hash.as_deref(),
        settlement["transaction"].as_str()
    );
    assert!(
        rig.rpc.calls("eth_getLogs") > 0,
        "the burn was found by the event search, through the provider's range limit"
    );
    assert_eq!(rig.vm02_paid_calls(), 0, "never revenue");
    assert!(rig.reconcile().is_empty(), "a burned row is final");
    assert_eq!(rig.rows().await[0].state, "nonce_burned");

    // The same payer, with a fresh and valid payment: refused before /verify.
    let verifies = rig.facilitator.recorder.verifies();
    let outbound = rig.server.outbound();
    let (header, _) = rig.sign(&buyer, &body, &[]).await;
    let response = rig.send(&body, &header).await;
    assert_eq!(response.status().as_u16(), 402);
    assert_eq!(reason_of(&response), "payer_recently_unpaid");
    assert_eq!(rig.facilitator.recorder.verifies(), verifies);
    assert_eq!(rig.server.outbound(), outbound, "nothing went outbound");
}

/// Rows of two payments left `settle_pending` (the facilitator hangs), then one transaction
/// that burns the first's nonce and executes the second: reconcile settles exactly one.
async fn one_transaction_proves_one_row_and_burns_the_other() {
    let stack = shared_stack();
    let buyer = stack.fresh_buyer("1000000");
    let short = [
        ("FACTOMAT_FACILITATOR_SETTLE_TIMEOUT_MS", "1000"),
        ("FACTOMAT_SETTLEMENT_WAIT_MS", "1000"),
    ];
    let rig = Rig::start(stack, Settle::Hang, &short).await;
    let body = rig.request(&buyer);
    let mut signed = Vec::new();
    for _ in 0..2 {
        let (header, payment) = rig.sign(&buyer, &body, &[]).await;
        let response = rig.send(&body, &header).await;
        assert_eq!(response.status().as_u16(), 503);
        assert!(response.headers().get("payment-required").is_none());
        signed.push(payment);
    }
    let rows = rig.rows().await;
    assert!(rows.iter().all(|r| r.state == "settle_pending"), "{rows:?}");
    let burned_nonce = signed[0]["nonce"].as_str().expect("nonce");
    let executed = signed[1]["payload"]["payload"].to_string();
    let batch = stack.chain(&[
        "batch-authorizations",
        "--burn-key",
        &buyer.key,
        "--burn-nonce",
        burned_nonce,
        "--execute",
        &executed,
    ]);
    let transaction = batch["transaction"].as_str().expect("transaction");
    assert_eq!(
        rig.balance(&buyer.address),
        1_000_000 - PRICE,
        "one payment moved"
    );

    let entries = rig.reconcile();
    assert_eq!(entries.len(), 2, "{entries:?}");
    let rows = rig.rows().await;
    let state_of = |nonce: &str| {
        rows.iter()
            .find(|r| {
                r.nonce
                    .as_deref()
                    .is_some_and(|n| n.eq_ignore_ascii_case(nonce))
            })
            .map(|r| (r.state.clone(), r.transaction_hash.clone()))
            .expect("row")
    };
    let first = state_of(burned_nonce);
    let second = state_of(signed[1]["nonce"].as_str().expect("nonce"));
    assert_eq!(first.0, "nonce_burned", "{rows:?}");
    assert_eq!(second.0, "settled", "{rows:?}");
    for (_, hash) in [&first, &second] {
        assert!(
            hash.as_deref()
                .is_some_and(|h| h.eq_ignore_ascii_case(transaction))
        );
    }
    assert_eq!(rig.vm02_paid_calls(), 1, "one payment is revenue");
}

/// The facilitator settles only after our wait ended: both official clients get 503 pending,
/// sign once, and are charged once; reconcile then records the row settled.
async fn an_outcome_still_unknown_after_the_wait_is_pending_and_never_paid_twice() {
    let stack = shared_stack();
    let late = Settle::After(Duration::from_secs(6));
    let short = [
        ("FACTOMAT_FACILITATOR_SETTLE_TIMEOUT_MS", "1500"),
        ("FACTOMAT_SETTLEMENT_WAIT_MS", "1500"),
    ];
    let rig = Rig::start(stack, late, &short).await;
    let clients: [(&str, PaidCall); 2] = [
        ("typescript", |s, b, u, body| s.pay_as(b, u, body)),
        ("python", |s, b, u, body| s.pay_python_as(b, u, body)),
    ];
    for (client, pay) in clients {
        let buyer = stack.fresh_buyer("1000000");
        let body = rig.request(&buyer);
        let answer = pay(stack, &buyer, &rig.url(), &body);
        assert_eq!(answer["status"], 503, "{client}: {answer}");
        assert_eq!(answer["signed"], 1, "{client} signed once: {answer}");
        assert_eq!(answer["signatures_sent"], 1, "{client}: {answer}");
        assert_eq!(
            answer["payment_response"]["errorReason"], "settlement_pending",
            "{client}: {answer}"
        );
        wait_for("the late settlement lands", async || {
            rig.balance(&buyer.address) == 1_000_000 - PRICE
        })
        .await;
    }
    // Each buyer was charged exactly once.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rows = rig.rows().await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows.iter().all(|r| r.state == "settle_pending"), "{rows:?}");
    let entries = rig.reconcile();
    assert!(
        entries.iter().all(|e| e["state_after"] == "settled"),
        "{entries:?}"
    );
    assert!(rig.rows().await.iter().all(|r| r.state == "settled"));
}

/// A settlement that lands after the buyer was told it is pending is recorded by the
/// service's own reconcile pass, with no resend and no operator. The result held for the buyer
/// outlives the delivery windows counted from that settlement (2 s here, swept every second):
/// their resend, well after, collects it, charged once and with no work run again.
async fn a_pending_settlement_is_recorded_by_the_service_and_its_result_collected() {
    let stack = shared_stack();
    let late = Settle::After(Duration::from_secs(5));
    let short = [
        ("FACTOMAT_FACILITATOR_SETTLE_TIMEOUT_MS", "1000"),
        ("FACTOMAT_SETTLEMENT_WAIT_MS", "1000"),
        ("FACTOMAT_RECONCILE_INTERVAL_SECONDS", "1"),
        ("FACTOMAT_DELIVERY_RETENTION_SECONDS", "2"),
        ("FACTOMAT_DELIVERY_COLLECT_WITHOUT_ID_SECONDS", "2"),
        ("FACTOMAT_ADMIN_LISTEN", "127.0.0.1:0"),
    ];
    let rig = Rig::start(stack, late, &short).await;
    let buyer = stack.fresh_buyer("1000000");
    let body = rig.request(&buyer);
    let (header, _) = rig.sign(&buyer, &body, &[]).await;
    assert_eq!(rig.send(&body, &header).await.status().as_u16(), 503);
    assert_eq!(rig.only_row().await.state, "settle_pending");
    wait_for(
        "the reconcile pass records the landed settlement",
        async || rig.only_row().await.state == "settled",
    )
    .await;
    let row = rig.only_row().await;
    assert!(row.transfer_log_index.is_some(), "proven on chain: {row:?}");
    // The counter is the process's, shared by this binary's servers: present is enough.
    let metrics = rig.server.admin_metrics().await;
    assert!(
        metrics.contains(r#"factomat_reconciled_total{state="settled"}"#),
        "{metrics}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    let rpc_reads: u64 = rig.rpc.all_calls().values().sum();
    let again = rig.send(&body, &header).await;
    assert_eq!(again.status().as_u16(), 200);
    let answer: Value = again.json().await.expect("json");
    assert_eq!(answer["machine"], "VM02");
    let after: u64 = rig.rpc.all_calls().values().sum();
    assert_eq!(after, rpc_reads, "the held result, not the work run again");
    assert_eq!(
        rig.balance(&buyer.address),
        1_000_000 - PRICE,
        "charged once"
    );
    assert_eq!(rig.facilitator.recorder.forwarded_settles(), 1);
}

/// An authorization refused before broadcasting stays valid until `validBefore`, so its result
/// is held: executed afterwards (here by a third party, as a facilitator's retry or the payer
/// could), the row is settled and the buyer's resend of the same payment collects the held
/// result instead of hearing "already presented". The reconcile pass finds it used; with the
/// pass off (or before it comes round), the resend asks the chain itself. Charged once for
/// it. The refused payment lets its payment-identifier `id` go at once: the buyer's new
/// payment with the same `id` is paid and answered, not a conflict, and the first one's
/// resend still collects its own result.
async fn a_refused_authorization_executed_later_is_found_and_answered() {
    let stack = shared_stack();
    for pass in ["1", "0"] {
        let env = [
            ("FACTOMAT_SETTLEMENT_WAIT_MS", "1000"),
            ("FACTOMAT_RECONCILE_INTERVAL_SECONDS", pass),
        ];
        let buyer = stack.fresh_buyer("1000000");
        let refuse = Settle::RefuseFirst("invalid_exact_evm_signature");
        let rig = Rig::start(stack, refuse, &env).await;
        let body = rig.request(&buyer);
        let id = fresh_payment_id();
        let (header, signed) = rig.sign_with_id(&buyer, &body, &id).await;
        let refused = rig.send(&body, &header).await;
        assert_eq!(refused.status().as_u16(), 402);
        assert_eq!(rig.only_row().await.state, "settle_failed");
        let resent = rig.send(&body, &header).await;
        assert_eq!(
            reason_of(&resent),
            "payment_nonce_already_presented",
            "unused on chain: as before"
        );
        let authorization = signed["payload"]["payload"].to_string();
        let executed = stack.chain(&["execute-authorization", &authorization]);
        let transaction = executed["transaction"].as_str().expect("transaction");
        let (retry, _) = rig.sign_with_id(&buyer, &body, &id).await;
        let retried = rig.send(&body, &retry).await;
        assert_eq!(retried.status().as_u16(), 200, "the same id, a new payment");
        let first_row = async || rig.rows().await.remove(0);
        let rpc_reads: u64 = if pass == "1" {
            wait_for(
                "the reconcile pass finds the refused authorization executed",
                async || first_row().await.state == "settled",
            )
            .await;
            rig.rpc.all_calls().values().sum()
        } else {
            // The first resend's reading answers its row's resends for 2 s.
            tokio::time::sleep(Duration::from_millis(2_200)).await;
            0
        };
        let again = rig.send(&body, &header).await;
        assert_eq!(again.status().as_u16(), 200, "pass {pass}: the held result");
        if pass == "1" {
            let after: u64 = rig.rpc.all_calls().values().sum();
            assert_eq!(after, rpc_reads, "delivered as held, not run again");
        }
        assert_eq!(payment_response(&again)["transaction"], transaction);
        let answer: Value = again.json().await.expect("json");
        assert_eq!(answer["machine"], "VM02");
        let row = first_row().await;
        assert_eq!(row.state, "settled");
        assert_eq!(row.transaction_hash.as_deref(), Some(transaction));
        assert_eq!(
            rig.balance(&buyer.address),
            1_000_000 - 2 * PRICE,
            "each payment charged once"
        );
    }
}

/// A pending settlement that never lands is decided unpaid by the reconcile pass once the
/// chain's clock passes `validBefore`; the buyer who comes back hears why (the held result
/// deleted, nothing charged), not merely that the payment was presented before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_settlement_the_pass_finds_unpaid_tells_its_returning_buyer_why() {
    // Its own stack: the test moves anvil's clock past validBefore.
    let stack = DevStack::start();
    let short = [
        ("FACTOMAT_SETTLEMENT_WAIT_MS", "1000"),
        ("FACTOMAT_RECONCILE_INTERVAL_SECONDS", "1"),
    ];
    let rig = Rig::start(&stack, Settle::SucceedNamingNoTx, &short).await;
    let buyer = stack.buyer();
    let before = rig.balance(&buyer.address);
    let body = rig.request(&buyer);
    let (header, _) = rig.sign(&buyer, &body, &[]).await;
    assert_eq!(rig.send(&body, &header).await.status().as_u16(), 503);
    let row = rig.only_row().await;
    assert_eq!(row.state, "settle_pending");
    let valid_before: u64 = row.valid_before.expect("kept").parse().expect("seconds");
    advance_past(&stack.field("rpc_url"), valid_before + 1).await;
    wait_for(
        "the reconcile pass finds it unused past validBefore",
        async || rig.only_row().await.state == "settle_failed",
    )
    .await;
    let again = rig.send(&body, &header).await;
    assert_eq!(again.status().as_u16(), 402);
    assert_eq!(reason_of(&again), "settlement_failed");
    assert_eq!(rig.balance(&buyer.address), before, "nothing was charged");
}

async fn a_pending_settlement_that_lands_within_the_wait_is_delivered_once() {
    // Blocks every 2 s, so the facilitator's answer comes before the receipt.
    let stack = DevStack::start_with(&["--block-time", "2"]);
    let (rig, buyer, before, response) = one_paid_call(&stack, Settle::PendingWithRealHash).await;
    assert_eq!(response.status().as_u16(), 200);
    let settlement = payment_response(&response);
    assert_eq!(settlement["success"], true, "{settlement}");
    let answer: Value = response.json().await.expect("json");
    assert_eq!(answer["machine"], "VM02");
    assert_eq!(before - rig.balance(&buyer.address), PRICE, "one transfer");
    assert_eq!(
        (
            rig.facilitator.recorder.settles(),
            rig.facilitator.recorder.forwarded_settles()
        ),
        (2, 1),
        "one retry with the identical payload, one broadcast"
    );
    let bodies = rig.facilitator.recorder.bodies("settle");
    assert_eq!(bodies[0], bodies[1], "the retry is identical");
    let rows = rig.rows().await;
    assert_eq!(rows[0].state, "settled");
    assert_eq!(
        rows[0].transaction_hash.as_deref(),
        settlement["transaction"].as_str()
    );
    assert!(rows[0].transfer_log_index.is_some(), "proven on chain");
}

async fn an_authorization_that_expires_unused_is_unpaid_for_sure() {
    // Its own stack: the proxy moves anvil's clock past validBefore.
    let stack = DevStack::start();
    let expire = Settle::FailNamingUnminedTx {
        advance_past_valid_before: true,
    };
    let rig = Rig::start(&stack, expire, &[]).await;
    let buyer = stack.buyer();
    let body = rig.request(&buyer);
    let before = rig.balance(&buyer.address);
    let (header, _) = rig.sign(&buyer, &body, &[]).await;
    let response = rig.send(&body, &header).await;
    assert_eq!(response.status().as_u16(), 402);
    assert_eq!(response.headers()["cache-control"], "no-store");
    assert!(!reason_of(&response).is_empty());
    assert_eq!(payment_response(&response)["success"], false);
    assert_eq!(rig.balance(&buyer.address), before);
    let rows = rig.rows().await;
    assert_eq!(rows[0].state, "settle_failed", "{rows:?}");
    assert_eq!(rig.vm02_paid_calls(), 0);
}

async fn a_window_too_short_or_too_long_is_refused_before_any_outbound_request() {
    let stack = shared_stack();
    let buyer = stack.fresh_buyer("1000000");
    let rig = Rig::start(stack, Settle::Forward, &[]).await;
    let body = rig.request(&buyer);
    for valid_before in [unix_now() + 7, unix_now() + 86_400] {
        let outbound = rig.server.outbound();
        let valid_before = valid_before.to_string();
        let (header, _) = rig
            .sign(&buyer, &body, &["--valid-before", &valid_before])
            .await;
        let response = rig.send(&body, &header).await;
        assert_eq!(
            response.status().as_u16(),
            402,
            "validBefore {valid_before}"
        );
        assert_eq!(
            reason_of(&response),
            "invalid_exact_evm_payload_authorization_valid_before"
        );
        assert_eq!(rig.server.outbound(), outbound, "nothing went outbound");
    }
    assert_eq!(rig.facilitator.recorder.verifies(), 0);
    assert!(rig.rows().await.is_empty());
}

async fn the_facilitator_sees_our_listing_and_a_rewritten_echo_is_refused() {
    let stack = shared_stack();
    let buyer = stack.fresh_buyer("1000000");
    let rig = Rig::start(stack, Settle::Forward, &[]).await;
    let body = rig.request(&buyer);
    let refused = [
        (
            vec![
                "--resource-url",
                "https://evil.example/v1/allowance-exposure",
            ],
            "resource_url_mismatch",
        ),
        (
            vec![
                "--extension-info",
                r#"bazaar={"input":{"type":"http","method":"GET"}}"#,
            ],
            "extension_echo_mismatch",
        ),
    ];
    for (mutation, reason) in refused {
        let (header, _) = rig.sign(&buyer, &body, &mutation).await;
        let response = rig.send(&body, &header).await;
        assert_eq!(response.status().as_u16(), 402, "{mutation:?}");
        assert_eq!(reason_of(&response), reason);
    }
    assert_eq!(
        rig.facilitator.recorder.verifies(),
        0,
        "refused before /verify"
    );

    // An additive accepted.extra key is accepted, and never forwarded.
    let (header, _) = rig
        .sign(&buyer, &body, &["--accepted-extra", "clientHint=1"])
        .await;
    let response = rig.send(&body, &header).await;
    assert_eq!(response.status().as_u16(), 200);
    let (_, ours) = rig.challenge(&body).await;
    for step in ["verify", "settle"] {
        let sent = &rig.facilitator.recorder.bodies(step)[0]["paymentPayload"];
        assert_eq!(sent["resource"], ours["resource"], "{step}");
        assert_eq!(sent["extensions"], ours["extensions"], "{step}");
        assert_eq!(sent["accepted"], ours["accepts"][0], "{step}");
    }
}

/// `ledger reconcile --id` re-checks the Transfer proof of a settled row it is asked about:
/// a row settled on the facilitator's word whose transaction holds no Transfer of the row's
/// terms (a lying facilitator) is flagged for a check by hand, a row the chain proves is
/// confirmed, and neither changes state.
async fn reconcile_rechecks_the_proof_of_settled_rows_it_is_asked_about() {
    let stack = shared_stack();
    let lying = Rig::start(stack, Settle::SucceedNamingUnminedTx, &[]).await;
    let honest = Rig::start_on(stack, Settle::Forward, &[], lying.ledger_url.clone()).await;
    for rig in [&lying, &honest] {
        let buyer = stack.fresh_buyer("1000000");
        let body = rig.request(&buyer);
        let (header, _) = rig.sign(&buyer, &body, &[]).await;
        assert_eq!(rig.send(&body, &header).await.status().as_u16(), 200);
    }
    let rows = lying.rows().await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows.iter().all(|row| row.state == "settled"), "{rows:?}");
    let ids: Vec<String> = rows.iter().map(|row| row.id.to_string()).collect();
    let entries = lying.ledger_command(&["reconcile", "--id", &ids[0], "--id", &ids[1]]);
    let entries = entries.as_array().expect("entries");
    assert_eq!(entries.len(), 2, "{entries:?}");
    let (unproven, proven) = (&entries[0], &entries[1]);
    assert_eq!(unproven["state_after"], "settled", "{unproven}");
    assert!(
        unproven["evidence"]
            .as_str()
            .is_some_and(|e| e.starts_with("NOT proven by a Transfer")),
        "{unproven}"
    );
    assert_eq!(proven["state_after"], "settled", "{proven}");
    assert!(
        proven["evidence"]
            .as_str()
            .is_some_and(|e| e.contains("AuthorizationUsed then Transfer")),
        "{proven}"
    );
}
