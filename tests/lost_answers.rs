//! A paid answer is never lost (issue 26): the buyer collects it again by resending the same
//! payment — after a cut connection, while the original still works, once a pending
//! settlement lands, and with or without a payment-identifier `id` — without a second work
//! run, `/settle` or charge. Retained answers expire, are swept, and are unreadable at rest.
//! End to end on loopback: anvil, the official facilitator behind a recording proxy, a
//! provider-like RPC proxy, the official TypeScript client, and both ledger backends.

mod common;

use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use common::devstack::{Buyer, payment_identifier_declaration, random_hex32, shared_stack};
use common::evidence::key_file;
use common::facilitator_proxy::Settle;
use common::ledgers::{fresh_ledger_url, sqlite_count, sqlite_file};
use common::paid_rig::{
    PRICE, Rig, USDC, VM02, fresh_payment_id, payment_response, reason_of, wait_for,
};
use common::{TestServer, decode_header, expect_400, machine_routes, unix_now};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

on_both_ledgers!(
    a_settled_answer_is_collected_again_with_the_same_payment,
    a_buyer_cut_off_before_the_answer_collects_it_with_the_same_payment,
    a_pending_settlement_is_collected_once_the_transfer_is_on_chain,
    two_payments_with_one_id_verified_together_bind_it_once_at_the_reserve,
);

/// What each fresh buyer holds (atomic USDC).
const FUNDS: u128 = 1_000_000;
/// Permit2: a spender other than our payee, for "another request".
const PERMIT2: &str = "0x000000000022D473030F116dDEE9F6B43aC78BA3";

/// An answer as the buyer received it: status, the headers a resend must repeat, body text.
#[derive(Debug, PartialEq, Eq)]
struct Received {
    status: u16,
    payment_response: Option<String>,
    evidence_seal: Option<String>,
    content_digest: Option<String>,
    body: String,
}

impl Received {
    async fn of(response: reqwest::Response) -> Received {
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|v| v.to_str().expect("ascii").to_string())
        };
        let (payment_response, evidence_seal, content_digest) = (
            header("payment-response"),
            header("evidence-seal"),
            header("content-digest"),
        );
        let status = response.status().as_u16();
        let bytes = response.bytes().await.expect("body");
        Received {
            status,
            payment_response,
            evidence_seal,
            content_digest,
            body: String::from_utf8(bytes.to_vec()).expect("UTF-8 body"),
        }
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("JSON body")
    }

    /// The decoded PAYMENT-RESPONSE.
    fn settlement(&self) -> Value {
        decode_header(self.payment_response.as_deref().expect("PAYMENT-RESPONSE"))
    }
}

/// A rig on the shared stack whose facilitator forwards every call, started with `env`; a
/// buyer holding [`FUNDS`]; and that buyer's VM02 request.
async fn forwarding_rig(env: &[(&str, &str)]) -> (Rig<'static>, Buyer, Value) {
    settling_rig(Settle::Forward, env).await
}

/// [`forwarding_rig`], whose facilitator proxy treats `/settle` as `settle` says.
async fn settling_rig(settle: Settle, env: &[(&str, &str)]) -> (Rig<'static>, Buyer, Value) {
    let stack = shared_stack();
    let buyer = stack.fresh_buyer(&FUNDS.to_string());
    let rig = Rig::start(stack, settle, env).await;
    let body = rig.request(&buyer);
    (rig, buyer, body)
}

/// A [`forwarding_rig`] whose buyer has bought its request once: the rig, the buyer, the
/// body and the PAYMENT-SIGNATURE that paid.
async fn bought_once() -> (Rig<'static>, Buyer, Value, String) {
    let (rig, buyer, body) = forwarding_rig(&[]).await;
    let (header, _) = rig.sign(&buyer, &body, &[]).await;
    assert_eq!(paid(&rig, &body, &header).await.status, 200);
    (rig, buyer, body, header)
}

/// One payment left pending: a rig whose transfer lands `delay` after `/settle`, with the
/// settle timeout and the settlement wait cut to 1 s (then `env`); a fresh buyer; its VM02
/// request and PAYMENT-SIGNATURE; and the first answer, a 503 `settlement_pending`.
async fn left_pending(
    delay: Duration,
    env: &[(&str, &str)],
) -> (Rig<'static>, Buyer, Value, String, reqwest::Response) {
    let mut short = vec![
        ("FACTOMAT_FACILITATOR_SETTLE_TIMEOUT_MS", "1000"),
        ("FACTOMAT_SETTLEMENT_WAIT_MS", "1000"),
    ];
    short.extend_from_slice(env);
    let (rig, buyer, body) = settling_rig(Settle::After(delay), &short).await;
    let (header, _) = rig.sign(&buyer, &body, &[]).await;
    let pending = rig.send(&body, &header).await;
    assert_eq!(pending.status().as_u16(), 503);
    assert_eq!(
        payment_response(&pending)["errorReason"],
        "settlement_pending"
    );
    (rig, buyer, body, header, pending)
}

/// The answer to one paid call with this header.
async fn paid(rig: &Rig<'_>, body: &Value, header: &str) -> Received {
    Received::of(rig.send(body, header).await).await
}

/// The same owner and token as `rig.request(buyer)`, another spender: another request.
fn another_request(buyer: &Buyer) -> Value {
    json!({"owner": buyer.address, "token": USDC, "spender": PERMIT2})
}

/// Asserts the facilitator saw `verifies` /verify and `settles` /settle requests.
/// The buyer paid exactly one price: one transfer, whatever was sent again.
fn assert_charged_once(rig: &Rig<'_>, buyer: &Buyer) {
    assert_eq!(rig.balance(&buyer.address), FUNDS - PRICE, "charged once");
}

fn assert_facilitator_saw(rig: &Rig<'_>, verifies: usize, settles: usize) {
    let recorder = &rig.facilitator.recorder;
    assert_eq!(
        (recorder.verifies(), recorder.settles()),
        (verifies, settles),
        "(/verify, /settle) requests"
    );
}

/// Every machine's 402 declares the payment-identifier extension as optional: the body
/// carries the official declaration (`@x402/extensions`' `info` and schema), the header its
/// compact form (the `info` alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_402_declares_the_payment_identifier_extension_as_optional() {
    let server = TestServer::start().await;
    let official = payment_identifier_declaration();
    assert_eq!(official["info"], json!({"required": false}), "{official}");
    for (id, path, example) in machine_routes() {
        let response = server.post_json(&path, &example).await;
        assert_eq!(response.status().as_u16(), 402, "{id}");
        let header = common::payment_required(&response);
        assert_eq!(
            header["extensions"]["payment-identifier"],
            json!({"info": {"required": false}}),
            "{id}: the header's compact declaration"
        );
        let body: Value = response.json().await.expect("402 body");
        assert_eq!(
            body["extensions"]["payment-identifier"], official,
            "{id}: the body's declaration"
        );
    }
}

/// The identical PAYMENT-SIGNATURE and body, resent after a settled 200, get the same answer
/// byte for byte — body, PAYMENT-RESPONSE, evidence seal and content digest — with one
/// /verify, one /settle, one ledger row and one transfer.
async fn a_settled_answer_is_collected_again_with_the_same_payment() {
    let signing_key = key_file("evidence.pem").display().to_string();
    let signing = [("FACTOMAT_EVIDENCE_SIGNING_KEY_FILE", signing_key.as_str())];
    let (rig, buyer, body) = forwarding_rig(&signing).await;
    let (header, _) = rig.sign(&buyer, &body, &[]).await;
    let first = paid(&rig, &body, &header).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.json()["machine"], "VM02");
    assert_eq!(first.settlement()["success"], true);
    assert!(
        first.evidence_seal.is_some() && first.content_digest.is_some(),
        "signing is on: {first:?}"
    );

    let again = paid(&rig, &body, &header).await;
    assert_eq!(again, first, "the same answer, byte for byte");
    assert_facilitator_saw(&rig, 1, 1);
    let row = rig.only_row().await;
    assert_eq!(row.state, "settled");
    assert_eq!(row.collected_again, 1, "counted for ledger report");
    assert_charged_once(&rig, &buyer);
}

/// x402 lets a facilitator leave `payer` out of its SettleResponse: the answer still carries
/// the receipt, the seal and the digest, and they and PAYMENT-RESPONSE name the
/// authorization's signer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_answer_without_payer_still_gets_evidence_naming_the_signer() {
    let signing_key = key_file("evidence.pem").display().to_string();
    let signing = [("FACTOMAT_EVIDENCE_SIGNING_KEY_FILE", signing_key.as_str())];
    let (rig, buyer, body) = settling_rig(Settle::ForwardWithout("payer"), &signing).await;
    let (header, _) = rig.sign(&buyer, &body, &[]).await;
    let answer = paid(&rig, &body, &header).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let payer = answer.settlement()["payer"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        payer.eq_ignore_ascii_case(&buyer.address),
        "{payer} for {}",
        buyer.address
    );
    assert!(
        answer.evidence_seal.is_some() && answer.content_digest.is_some(),
        "{answer:?}"
    );
    assert_evidence_of(&rig, &answer).await;
    assert_charged_once(&rig, &buyer);
}

/// The same PAYMENT-SIGNATURE with another request body collects nothing and buys nothing: a
/// 402 whose fresh challenge (still declaring payment-identifier) says the payment was already
/// presented, and no /verify.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_payment_with_another_body_is_refused_as_already_presented() {
    let (rig, buyer, _, header) = bought_once().await;

    let response = rig.send(&another_request(&buyer), &header).await;
    assert_eq!(response.status().as_u16(), 402);
    assert_eq!(reason_of(&response), "payment_nonce_already_presented");
    let challenge = common::payment_required(&response);
    assert_eq!(
        challenge["extensions"]["payment-identifier"],
        json!({"info": {"required": false}})
    );
    let answer: Value = response.json().await.expect("402 body");
    assert!(answer.get("machine").is_none(), "no result: {answer}");
    assert_facilitator_saw(&rig, 1, 1);
    assert_eq!(rig.rows().await.len(), 1);
    assert_charged_once(&rig, &buyer);
}

/// Without a payment-identifier `id` an answer is collected again only briefly after its
/// settlement (`FACTOMAT_DELIVERY_COLLECT_WITHOUT_ID_SECONDS`, 2 s here), then refused with
/// `payment_answer_expired`; one bought with an `id`, older still, is collected within the
/// retention, the same bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_id_an_answer_is_collected_briefly_and_with_one_for_the_retention() {
    let brief = [("FACTOMAT_DELIVERY_COLLECT_WITHOUT_ID_SECONDS", "2")];
    let (rig, buyer, body) = forwarding_rig(&brief).await;
    // Bought first: it is the older of the two when the other's window closes.
    let (with_id, _) = rig.sign_with_id(&buyer, &body, &fresh_payment_id()).await;
    let kept = paid(&rig, &body, &with_id).await;
    assert_eq!(kept.status, 200, "{kept:?}");

    let (without_id, _) = rig.sign(&buyer, &body, &[]).await;
    let first = paid(&rig, &body, &without_id).await;
    let answered = Instant::now();
    assert_eq!(first.status, 200, "{first:?}");
    let mut collected = 0;
    let refused = loop {
        let response = rig.send(&body, &without_id).await;
        if response.status() != 200 {
            break response;
        }
        assert_eq!(Received::of(response).await, first);
        collected += 1;
        assert!(
            answered.elapsed() < Duration::from_secs(15),
            "still collected long past the window"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(collected > 0, "collected again within the window");
    assert!(
        answered.elapsed() >= Duration::from_secs(1),
        "refused before the window closed"
    );
    assert_eq!(refused.status().as_u16(), 402);
    assert_eq!(reason_of(&refused), "payment_answer_expired");

    assert_eq!(
        paid(&rig, &body, &with_id).await,
        kept,
        "bought with an id: collected within the retention"
    );
    assert_facilitator_saw(&rig, 2, 2);
    assert_eq!(rig.balance(&buyer.address), FUNDS - 2 * PRICE);
}

/// A payment-identifier `id` is bound to the payment that bought with it: the same `id` with a
/// new signature, or the same payment on another body, is `409 payment_identifier_conflict`;
/// an `id` outside 16–128 characters of `[A-Za-z0-9_-]` is `400 invalid_payment_identifier`.
/// None reaches /verify, and nothing more is charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_conflicts_with_any_other_payment_and_a_malformed_one_is_refused() {
    let (rig, buyer, body) = forwarding_rig(&[]).await;
    let id = fresh_payment_id();
    let (header, _) = rig.sign_with_id(&buyer, &body, &id).await;
    assert_eq!(paid(&rig, &body, &header).await.status, 200);

    let (resigned, _) = rig.sign_with_id(&buyer, &body, &id).await;
    let other = another_request(&buyer);
    for (what, body, header) in [
        ("a new signature", &body, &resigned),
        ("another body", &other, &header),
    ] {
        let response = rig.send(body, header).await;
        assert_eq!(response.status().as_u16(), 409, "{what}");
        let answer: Value = response.json().await.expect("a JSON error");
        assert_eq!(
            answer["error"]["code"], "payment_identifier_conflict",
            "{what}: {answer}"
        );
    }
    for malformed in ["short", "has a space in it"] {
        let (header, _) = rig.sign_with_id(&buyer, &body, malformed).await;
        let response = rig.send(&body, &header).await;
        expect_400(response, "invalid_payment_identifier", malformed).await;
    }
    assert_facilitator_saw(&rig, 1, 1);
    assert_eq!(rig.rows().await.len(), 1);
    assert_charged_once(&rig, &buyer);
}

/// Two payments with one `id` for one request, verified at the same moment, both pass every
/// check before the ledger (no answer is retained yet to conflict with). The reserve binds
/// the `id` to one of them; the other is `409 payment_identifier_conflict` after its
/// `/verify` and is never settled: one row, one charge. Afterwards the `id` answers as
/// bound: the winner's payment collects its answer again, the loser's is refused before
/// `/verify`.
async fn two_payments_with_one_id_verified_together_bind_it_once_at_the_reserve() {
    let (rig, buyer, body) = forwarding_rig(&[]).await;
    let id = fresh_payment_id();
    let (first, _) = rig.sign_with_id(&buyer, &body, &id).await;
    let (second, _) = rig.sign_with_id(&buyer, &body, &id).await;
    rig.facilitator.recorder.hold_verifies(2);
    let (a, b) = tokio::join!(paid(&rig, &body, &first), paid(&rig, &body, &second));
    let ((winner, bought), (loser, refused)) = if a.status == 200 {
        ((&first, a), (&second, b))
    } else {
        ((&second, b), (&first, a))
    };
    assert_eq!(bought.status, 200, "{bought:?}");
    assert_eq!(refused.status, 409, "{refused:?}");
    assert_eq!(
        refused.json()["error"]["code"],
        "payment_identifier_conflict"
    );
    assert_facilitator_saw(&rig, 2, 1);
    let row = rig.only_row().await;
    assert_eq!(row.state, "settled");

    assert_eq!(
        paid(&rig, &body, winner).await,
        bought,
        "the winner collects again"
    );
    assert_eq!(
        paid(&rig, &body, loser).await.status,
        409,
        "the loser stays refused"
    );
    assert_facilitator_saw(&rig, 2, 1);
    assert_charged_once(&rig, &buyer);
}

/// Two copies of one payment sent at once both pass `/verify`; the ledger reserves one, and
/// the other, told the outcome is unknown, waits for it. When the first ends unpaid (the
/// settle refused before broadcasting), the copy hears that its nonce was presented, with a
/// fresh challenge like the first's, instead of a 503 that asks the buyer to come back for an
/// outcome already known.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_verified_with_its_first_hears_when_that_one_ends_unpaid() {
    let (rig, buyer, body) = settling_rig(Settle::Fail, &[]).await;
    let (header, _) = rig.sign(&buyer, &body, &[]).await;
    rig.facilitator.recorder.hold_verifies(2);
    let (a, b) = tokio::join!(rig.send(&body, &header), rig.send(&body, &header));
    let mut reasons = Vec::new();
    for response in [a, b] {
        assert_eq!(response.status().as_u16(), 402, "neither is left unknown");
        reasons.push(reason_of(&response));
    }
    reasons.sort();
    assert_eq!(
        reasons,
        [
            "invalid_exact_evm_transaction_simulation_failed",
            "payment_nonce_already_presented"
        ]
    );
    assert_facilitator_saw(&rig, 2, 1);
    assert_eq!(rig.only_row().await.state, "settle_failed");
    assert_eq!(rig.balance(&buyer.address), FUNDS);
}

/// Past its retention (`FACTOMAT_DELIVERY_RETENTION_SECONDS`, 2 s here) a retained answer is
/// swept from `retained_answers` by the timer, and a resend of its payment is refused with
/// `payment_answer_expired`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_past_its_retention_is_swept_and_refused_as_expired() {
    let short = [("FACTOMAT_DELIVERY_RETENTION_SECONDS", "2")];
    let (rig, buyer, body) = forwarding_rig(&short).await;
    let (header, _) = rig.sign_with_id(&buyer, &body, &fresh_payment_id()).await;
    let first = paid(&rig, &body, &header).await;
    let answered = Instant::now();
    assert_eq!(first.status, 200, "{first:?}");
    let retained = || sqlite_count(&rig.ledger_url, "retained_answers");
    assert_eq!(retained(), 1, "the answer is retained");
    assert_eq!(
        paid(&rig, &body, &header).await,
        first,
        "within the retention"
    );

    wait_for("the sweep", async || retained() == 0).await;
    assert!(
        answered.elapsed() >= Duration::from_secs(1),
        "swept before its retention ended"
    );
    let refused = rig.send(&body, &header).await;
    assert_eq!(refused.status().as_u16(), 402);
    assert_eq!(reason_of(&refused), "payment_answer_expired");

    // The same payment once its validBefore has passed too: its nonce, not its window, says
    // what became of it.
    let nonce = decode_header(&header)["payload"]["authorization"]["nonce"]
        .as_str()
        .expect("nonce")
        .to_string();
    let past = (unix_now() - 60).to_string();
    let (late, _) = rig
        .sign(&buyer, &body, &["--nonce", &nonce, "--valid-before", &past])
        .await;
    let refused = rig.send(&body, &late).await;
    assert_eq!(refused.status().as_u16(), 402);
    assert_eq!(reason_of(&refused), "payment_answer_expired");
    assert_facilitator_saw(&rig, 1, 1);
    assert_charged_once(&rig, &buyer);
}

/// A resend's chain reading is held to `delivery_in_flight_wait_ms`: a node too slow to finish
/// it leaves the outcome unknown (503 `settlement_pending`, no challenge) instead of holding
/// the buyer's request for as long as the reading takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resends_chain_reading_is_held_to_the_in_flight_wait() {
    let wait = [("FACTOMAT_DELIVERY_IN_FLIGHT_WAIT_MS", "1000")];
    let (rig, _, body, header, _) = left_pending(Duration::from_secs(30), &wait).await;
    rig.rpc.set_delay("eth_call", Duration::from_secs(3));
    let started = Instant::now();
    let resent = rig.send(&body, &header).await;
    let took = started.elapsed();
    rig.rpc.set_delay("eth_call", Duration::ZERO);
    assert_eq!(resent.status().as_u16(), 503);
    assert!(resent.headers().get("payment-required").is_none());
    assert_eq!(
        payment_response(&resent)["errorReason"],
        "settlement_pending"
    );
    assert!(
        took < Duration::from_millis(2500),
        "the resend took {took:?}"
    );
    assert_eq!(rig.only_row().await.state, "settle_pending");
}

/// With retention off (`FACTOMAT_DELIVERY_RETENTION_SECONDS=0`) no delivered answer is kept,
/// but a result held back while its settlement is pending still is, and a buyer is never
/// invited to pay again while a payment's outcome is unknown: the identical resend of a
/// pending settlement is a 503 `settlement_pending` with `Retry-After` and no challenge, and
/// so is a copy of its nonce by another payer; resends at once share one chain reading. Once
/// the transfer is on chain, the buyer's resend reads the chain, resolves the row `settled`
/// and collects the held result, charged once; a later resend is told the answer can no
/// longer be collected (402 `payment_answer_expired`). Before, the paid buyer got that 402
/// and never the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_retention_off_a_payment_of_unknown_outcome_is_never_a_fresh_challenge() {
    let off = [("FACTOMAT_DELIVERY_RETENTION_SECONDS", "0")];
    // The transfer lands 14 s after /settle: every resend below comes before it, with room
    // for a loaded CI machine (at 9 s, one run's burst came after it and was decided).
    let (rig, buyer, body, header, _) = left_pending(Duration::from_secs(14), &off).await;

    let before = chain_reads(&rig);
    let resent = rig.send(&body, &header).await;
    let one_reading = chain_reads(&rig) - before;
    assert!(one_reading > 0, "the buyer's resend asks the chain");
    assert_eq!(resent.status().as_u16(), 503);
    assert!(resent.headers().get("retry-after").is_some());
    assert!(
        resent.headers().get("payment-required").is_none(),
        "never a fresh challenge while the outcome is unknown"
    );
    let refusal: Value = resent.json().await.expect("JSON error");
    assert_eq!(refusal["error"]["code"], "settlement_pending", "{refusal}");
    assert_eq!(rig.only_row().await.state, "settle_pending");

    // Another payer presenting the same nonce learns nothing more and is not challenged.
    let nonce = decode_header(&header)["payload"]["authorization"]["nonce"]
        .as_str()
        .expect("nonce")
        .to_string();
    let stranger = rig.stack.fresh_buyer(&FUNDS.to_string());
    let (copy, _) = rig.sign(&stranger, &body, &["--nonce", &nonce]).await;
    let copied = rig.send(&body, &copy).await;
    assert_eq!(copied.status().as_u16(), 503);
    assert!(copied.headers().get("payment-required").is_none());

    // Nor is the buyer's payment sent again on other terms (as after a price change): its
    // `accepted` no longer matches ours, but its outcome is still unknown.
    let mut other_terms = decode_header(&header);
    other_terms["accepted"]["maxTimeoutSeconds"] = json!(61);
    let other_terms = STANDARD.encode(other_terms.to_string());
    let refused = rig.send(&body, &other_terms).await;
    assert_eq!(refused.status().as_u16(), 503);
    assert!(refused.headers().get("payment-required").is_none());

    // Concurrent resends share one chain reading: once the last one is 2 s old, four
    // resends overlap a reading slowed to 500 ms, and the chain is read once.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    rig.rpc.set_delay("eth_call", Duration::from_millis(500));
    let before = chain_reads(&rig);
    let burst = tokio::join!(
        rig.send(&body, &header),
        rig.send(&body, &header),
        rig.send(&body, &header),
        rig.send(&body, &header),
    );
    rig.rpc.set_delay("eth_call", Duration::ZERO);
    for answer in [burst.0, burst.1, burst.2, burst.3] {
        assert_eq!(answer.status().as_u16(), 503);
    }
    assert_eq!(
        chain_reads(&rig) - before,
        one_reading,
        "one reading for four resends"
    );

    wait_for("the late settlement lands", async || {
        rig.balance(&buyer.address) == FUNDS - PRICE
    })
    .await;
    // A chain reading is reused for 2 s: the buyer resends until the row is decided.
    let mut decided = None;
    wait_for("a resend learns the outcome", async || {
        let answer = rig.send(&body, &header).await;
        match answer.status().as_u16() {
            503 => false,
            _ => {
                decided = Some(answer);
                true
            }
        }
    })
    .await;
    let decided = decided.expect("decided");
    assert_eq!(decided.status().as_u16(), 200, "the held result, collected");
    assert_eq!(payment_response(&decided)["success"], true);
    assert_eq!(
        rig.only_row().await.state,
        "settled",
        "resolved from the chain"
    );
    // Delivered, it is not kept: its window of zero seconds has passed a second later.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let later = rig.send(&body, &header).await;
    assert_eq!(later.status().as_u16(), 402);
    assert_eq!(reason_of(&later), "payment_answer_expired");
    assert_eq!(rig.facilitator.recorder.verifies(), 1);
    assert_charged_once(&rig, &buyer);
}

/// A buyer whose connection is cut once the paid request is sent (the provider is slow, so
/// before any answer) loses nothing: the server settles and records the call anyway, and the
/// identical header and body resent collect the result — a 200 whose PAYMENT-RESPONSE names
/// the recorded transfer, the same bytes again on a third resend — with one ledger row, one
/// /settle and one transfer.
async fn a_buyer_cut_off_before_the_answer_collects_it_with_the_same_payment() {
    let (rig, buyer, body) = forwarding_rig(&[]).await;
    rig.rpc.set_delay("eth_call", Duration::from_secs(2));
    let (header, _) = rig.sign(&buyer, &body, &[]).await;

    let addr = rig.server.server.addr;
    let content = serde_json::to_vec(&body).expect("json");
    let head = format!(
        "POST {VM02} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nPAYMENT-SIGNATURE: {header}\r\n\r\n",
        content.len()
    );
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(&content).await.expect("body");
    wait_for("the call is reserved", async || {
        !rig.rows().await.is_empty()
    })
    .await;
    let mut unread = [0u8; 1];
    assert!(
        matches!(stream.try_read(&mut unread), Err(e) if e.kind() == ErrorKind::WouldBlock),
        "the connection is cut before any answer"
    );
    drop(stream);
    wait_for("the call settles", async || {
        rig.rows()
            .await
            .first()
            .is_some_and(|r| r.state == "settled")
    })
    .await;

    let collected = paid(&rig, &body, &header).await;
    assert_eq!(collected.status, 200, "{collected:?}");
    assert_eq!(collected.json()["machine"], "VM02");
    let settlement = collected.settlement();
    assert_eq!(settlement["success"], true, "{settlement}");
    let row = rig.only_row().await;
    assert_eq!(
        row.transaction_hash.as_deref(),
        settlement["transaction"].as_str()
    );
    assert_eq!(paid(&rig, &body, &header).await, collected, "a third time");
    assert_facilitator_saw(&rig, 1, 1);
    assert_charged_once(&rig, &buyer);
}

/// A resend that arrives while the original call still works (a slow provider) runs nothing
/// itself: it gets the original's answer (it waited) or a 503 with `Retry-After`, never a
/// second work run (the provider sees one call's `eth_call`s) nor a second /settle; once the
/// original has answered, the payment collects the same bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_while_the_original_works_runs_nothing_and_settles_nothing() {
    // One call's reads, counted on a first purchase.
    let (rig, buyer, body, _) = bought_once().await;
    let per_call = rig.rpc.calls("eth_call");
    assert!(per_call > 0, "VM02 reads the chain");

    rig.rpc.set_delay("eth_call", Duration::from_secs(2));
    let (header, _) = rig.sign(&buyer, &body, &[]).await;
    let ((original, answered_at), (resend, resent_at)) = tokio::join!(
        async {
            let original = paid(&rig, &body, &header).await;
            (original, Instant::now())
        },
        async {
            wait_for("the original is reserved", async || {
                rig.rows().await.len() == 2
            })
            .await;
            let resent_at = Instant::now();
            (rig.send(&body, &header).await, resent_at)
        },
    );
    assert!(resent_at < answered_at, "resent while the original worked");
    assert_eq!(original.status, 200, "{original:?}");
    match resend.status().as_u16() {
        200 => assert_eq!(Received::of(resend).await, original, "it waited"),
        503 => {
            assert!(
                resend.headers().get("retry-after").is_some(),
                "a retryable refusal"
            );
            assert_eq!(
                paid(&rig, &body, &header).await,
                original,
                "collected later"
            );
        }
        status => panic!(
            "the resend got {status}: {}",
            resend.text().await.unwrap_or_default()
        ),
    }
    assert_eq!(
        rig.rpc.calls("eth_call"),
        2 * per_call,
        "one work run per payment"
    );
    assert_facilitator_saw(&rig, 2, 2);
    assert_eq!(rig.rows().await.len(), 2);
    assert_eq!(rig.balance(&buyer.address), FUNDS - 2 * PRICE);
}

/// A settlement still unknown when the wait ends (the facilitator settles late) is answered
/// 503 `settlement_pending`; once the transfer is on chain, the identical header and body
/// collect the result: a 200 whose PAYMENT-RESPONSE is a success naming the transaction, with
/// its signed receipt and an evidence seal over the body (signing is on), no /verify or
/// /settle of its own, one ledger row and one transfer.
async fn a_pending_settlement_is_collected_once_the_transfer_is_on_chain() {
    let signing_key = key_file("evidence.pem").display().to_string();
    let signing = [("FACTOMAT_EVIDENCE_SIGNING_KEY_FILE", signing_key.as_str())];
    let (rig, buyer, body, header, pending) = left_pending(Duration::from_secs(4), &signing).await;
    assert!(pending.headers().get("retry-after").is_some());
    assert!(
        pending.headers().get("payment-required").is_none(),
        "never a fresh challenge"
    );
    let settles = rig.facilitator.recorder.settles();

    wait_for("the late settlement lands", async || {
        rig.balance(&buyer.address) == FUNDS - PRICE
    })
    .await;
    let collected = paid(&rig, &body, &header).await;
    assert_eq!(collected.status, 200, "{collected:?}");
    assert_eq!(collected.json()["machine"], "VM02");
    let settlement = collected.settlement();
    assert_eq!(settlement["success"], true, "{settlement}");
    assert!(
        settlement["transaction"]
            .as_str()
            .is_some_and(|t| t.len() == 66),
        "{settlement}"
    );
    assert_facilitator_saw(&rig, 1, settles);
    let row = rig.only_row().await;
    assert_eq!(row.state, "settled", "the collect recorded the proof");
    assert_evidence_of(&rig, &collected).await;
    assert_eq!(
        row.transaction_hash.as_deref(),
        settlement["transaction"].as_str(),
        "the transaction the chain proved"
    );
    assert_eq!(paid(&rig, &body, &header).await, collected, "and again");
    assert_charged_once(&rig, &buyer);
}

/// A held answer whose row `ledger reconcile` has proven settled is handed over on the resend
/// from the ledger's record, with no chain reading: a node that answers nothing in time
/// (or a replica without a chain reader) does not keep a paid answer from its buyer until
/// the held answer is swept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_answer_whose_row_reconcile_settled_is_delivered_without_reading_the_chain() {
    let (rig, buyer, body, header, _) = left_pending(Duration::from_secs(6), &[]).await;
    wait_for("the late settlement lands", async || {
        rig.balance(&buyer.address) == FUNDS - PRICE
    })
    .await;
    let entries = rig.reconcile();
    assert!(
        entries.iter().any(|e| e["state_after"] == "settled"),
        "{entries:?}"
    );
    for method in [
        "eth_call",
        "eth_getBlockByNumber",
        "eth_getTransactionReceipt",
        "eth_getLogs",
    ] {
        rig.rpc.set_delay(method, Duration::from_secs(30));
    }
    let reads = chain_reads(&rig);
    let collected = paid(&rig, &body, &header).await;
    assert_eq!(collected.status, 200, "{collected:?}");
    assert_eq!(collected.json()["machine"], "VM02");
    assert_eq!(collected.settlement()["success"], true);
    assert_eq!(chain_reads(&rig), reads, "the ledger's record is the proof");
    assert_charged_once(&rig, &buyer);
}

/// The collected answer carries the evidence a first-time paid answer does: a receipt in its
/// PAYMENT-RESPONSE naming its transaction, and a seal over its body bytes, both verifying
/// against the server's DID document and agreeing with each other.
async fn assert_evidence_of(rig: &Rig<'_>, answer: &Received) {
    use factomat::evidence::{DidDocument, receipt_matches_seal, verify_receipt, verify_seal};
    let did: Value = rig.server.get_json("/.well-known/did.json").await;
    let document = DidDocument::parse(&did).expect("document");
    let payment_response = answer
        .payment_response
        .as_deref()
        .expect("PAYMENT-RESPONSE");
    let receipt = verify_receipt(payment_response, &document).expect("the receipt verifies");
    let seal = answer.evidence_seal.as_deref().expect("Evidence-Seal");
    let claims = verify_seal(seal, answer.body.as_bytes(), &document).expect("the seal verifies");
    receipt_matches_seal(&receipt.payload, &claims.payload).expect("they agree");
    assert_eq!(
        receipt.payload["transaction"],
        answer.settlement()["transaction"],
        "{receipt:?}"
    );
}

/// The files of `dir` but `except`.
fn files_in(dir: &Path, except: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .expect("ledger folder")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.is_file() && path != except)
        .collect()
}

/// A retained answer is unreadable at rest: after a paid call with an `id`, neither the
/// SQLite file nor its WAL (nor any other file beside them but the key file) holds the
/// answer's text, the payment's signature, the PAYMENT-SIGNATURE or PAYMENT-RESPONSE values,
/// the `id`, or the deployment secret; yet, with the key file, the answer is collected again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retained_answer_is_unreadable_at_rest_and_the_database_holds_no_key() {
    let stack = shared_stack();
    let buyer = stack.fresh_buyer(&FUNDS.to_string());
    let ledger_url = fresh_ledger_url();
    let ledger = sqlite_file(&ledger_url);
    // Where a SQLite deployment's generated key lives: beside the ledger.
    let key_path = PathBuf::from(format!("{}.delivery-key", ledger.display()));
    let secret = random_hex32()[2..].to_string();
    std::fs::write(&key_path, format!("{secret}\n")).expect("key file");
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))
        .expect("owner only");
    let key = key_path.display().to_string();
    let keyed = [("FACTOMAT_DELIVERY_KEY_FILE", key.as_str())];
    let rig = Rig::start_on(stack, Settle::Forward, &keyed, ledger_url).await;
    let body = rig.request(&buyer);
    let id = fresh_payment_id();
    let (header, signed) = rig.sign_with_id(&buyer, &body, &id).await;
    let first = paid(&rig, &body, &header).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(
        paid(&rig, &body, &header).await,
        first,
        "retained and opened"
    );
    assert_eq!(sqlite_count(&rig.ledger_url, "retained_answers"), 1);

    let signature = signed["payload"]["payload"]["signature"]
        .as_str()
        .expect("signature")
        .trim_start_matches("0x")
        .to_lowercase();
    let hex = |text: &str| alloy::primitives::hex::decode(text).expect("hex");
    let needles: Vec<(&str, Vec<u8>)> = vec![
        ("the answer", first.body.clone().into_bytes()),
        (
            "a field only the answer has",
            b"allowance_balance_exposure_adjusted".to_vec(),
        ),
        ("the signature", signature.clone().into_bytes()),
        (
            "the signature (upper case)",
            signature.to_uppercase().into_bytes(),
        ),
        ("the signature's bytes", hex(signature.as_str())),
        ("the PAYMENT-SIGNATURE", header.clone().into_bytes()),
        (
            "the PAYMENT-RESPONSE",
            first
                .payment_response
                .clone()
                .expect("PAYMENT-RESPONSE")
                .into_bytes(),
        ),
        ("the id", id.into_bytes()),
        ("the secret", secret.clone().into_bytes()),
        (
            "the secret (upper case)",
            secret.to_uppercase().into_bytes(),
        ),
        ("the secret's bytes", hex(secret.as_str())),
    ];
    let files = files_in(ledger.parent().expect("ledger folder"), &key_path);
    let wal = PathBuf::from(format!("{}-wal", ledger.display()));
    assert!(
        files.contains(&ledger) && files.contains(&wal),
        "the ledger and its WAL: {files:?}"
    );
    for file in &files {
        let bytes = std::fs::read(file).expect("readable");
        for (what, needle) in &needles {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle.as_slice()),
                "{} holds {what}",
                file.display()
            );
        }
    }
}

/// The official TypeScript client with the payment-identifier extension (`@x402/fetch`,
/// `@x402/extensions`): its payment carries an `id` and pays, but the provider is slow and the
/// client gives up (its connection cut) before the answer; the PAYMENT-SIGNATURE it sent,
/// resent byte for byte with the same body, collects the answer; a new payment of the
/// official client reusing that `id` on another body is a 409, and never reaches /verify.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_client_pays_with_an_id_collects_again_and_conflicts_on_reuse() {
    let (rig, buyer, body) = forwarding_rig(&[]).await;
    rig.rpc.set_delay("eth_call", Duration::from_secs(3));
    let cut = ["--payment-id", "auto", "--timeout-ms", "1500"];
    let bought = rig.stack.pay_with(&buyer, &rig.url(), &body, &cut);
    assert!(bought["error"].is_string(), "the client gave up: {bought}");
    let id = bought["id"].as_str().expect("the payment carried an id");
    assert_eq!(
        bought["payment_payload"]["extensions"]["payment-identifier"]["info"]["id"], id,
        "{bought}"
    );
    let verified = rig.facilitator.recorder.bodies("verify");
    assert_eq!(
        verified[0]["paymentPayload"]["extensions"]["payment-identifier"]["info"]["id"], id,
        "the facilitator gets our declaration with the buyer's id"
    );
    rig.rpc.set_delay("eth_call", Duration::ZERO);
    wait_for("the cut call to settle", async || {
        rig.rows()
            .await
            .first()
            .is_some_and(|row| row.state == "settled")
    })
    .await;

    let header = bought["payment_signature"].as_str().expect("captured");
    let again = Received::of(rig.send_raw(body.to_string().into_bytes(), header).await).await;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.json()["machine"], "VM02");
    assert_eq!(again.settlement()["success"], true);
    let third = Received::of(rig.send_raw(body.to_string().into_bytes(), header).await).await;
    assert_eq!(third, again, "the same bytes again");

    let reuse = ["--payment-id", id];
    let reused = rig
        .stack
        .pay_with(&buyer, &rig.url(), &another_request(&buyer), &reuse);
    assert_eq!(reused["id"], id, "{reused}");
    assert_eq!(reused["signed"], 1, "a new payment: {reused}");
    assert_eq!(reused["status"], 409, "{reused}");
    assert_eq!(
        reused["body"]["error"]["code"], "payment_identifier_conflict",
        "{reused}"
    );
    assert_facilitator_saw(&rig, 1, 1);
    assert_charged_once(&rig, &buyer);
}

/// Only the exact payment that paid runs its work once more. A copy of a paid payment under a
/// new payment-identifier `id` (the authorization and signature are public on chain once
/// settled) finds no binding of its own: it is refused as presented, and nothing runs, is
/// verified or is settled again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_payment_under_a_new_id_runs_nothing_again() {
    let (rig, buyer, body, header) = bought_once().await;
    let per_call = rig.rpc.calls("eth_call");
    unanswer_retained_answers(&rig.ledger_url);

    let mut copy = decode_header(&header);
    copy["extensions"]["payment-identifier"] =
        json!({"info": {"required": false, "id": fresh_payment_id()}});
    let copy = STANDARD.encode(copy.to_string());
    let response = rig.send(&body, &copy).await;
    assert_eq!(response.status().as_u16(), 402);
    assert_eq!(rig.rpc.calls("eth_call"), per_call, "nothing ran again");
    assert_facilitator_saw(&rig, 1, 1);
    assert_charged_once(&rig, &buyer);
}

/// An `id` is bound to its payment only at the ledger reserve: a first attempt refused
/// before it (a corrupt signature, refused locally) leaves the `id` free, and a proper
/// payment with the same `id` is then processed and paid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_refused_before_the_reserve_may_be_signed_again() {
    let (rig, buyer, body) = forwarding_rig(&[]).await;
    let id = fresh_payment_id();
    let info = format!(
        "payment-identifier={}",
        json!({"required": false, "id": id})
    );
    let (corrupt, _) = rig
        .sign(
            &buyer,
            &body,
            &["--extension-info", &info, "--corrupt-signature"],
        )
        .await;
    let refused = rig.send(&body, &corrupt).await;
    assert_eq!(refused.status().as_u16(), 402);
    assert_eq!(rig.rows().await.len(), 0, "nothing reserved");

    let (header, _) = rig.sign_with_id(&buyer, &body, &id).await;
    let paid_now = paid(&rig, &body, &header).await;
    assert_eq!(paid_now.status, 200, "{paid_now:?}");
    assert_charged_once(&rig, &buyer);
}

/// With a PostgreSQL ledger, retained answers need the secret every replica shares: a
/// deployment without `delivery_key_file` does not start, with retention off too (the
/// results held while a settlement is pending are sealed with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_deployment_needs_a_shared_delivery_key_to_retain_answers() {
    use factomat::config::Config;
    let database = common::postgres::fresh_database();
    let env = |retention: &str| {
        let pairs = [
            ("FACTOMAT_LISTEN", "127.0.0.1:0"),
            ("FACTOMAT_PAY_TO", common::PAY_TO),
            ("FACTOMAT_FACILITATOR_URL", "http://127.0.0.1:9/facilitator"),
            ("FACTOMAT_DATABASE_URL", database.as_str()),
            ("FACTOMAT_DELIVERY_RETENTION_SECONDS", retention),
        ];
        Config::from_env(pairs.map(|(k, v)| (k.to_string(), v.to_string())))
            .expect("valid configuration")
    };
    for retention in ["600", "0"] {
        let refused = factomat::http::server::start(env(retention))
            .await
            .err()
            .expect("refused without a delivery key");
        assert!(
            refused.to_string().contains("delivery_key_file"),
            "retention {retention}: {refused}"
        );
    }
}

/// The chain reads the RPC endpoint has answered (batch elements count one each).
fn chain_reads(rig: &Rig<'_>) -> u64 {
    [
        "eth_call",
        "eth_blockNumber",
        "eth_getBlockByNumber",
        "eth_getTransactionReceipt",
        "eth_getLogs",
    ]
    .iter()
    .map(|method| rig.rpc.calls(method))
    .sum()
}

/// Runs one statement on a SQLite ledger.
fn ledger_statement(ledger_url: &str, sql: &str) {
    let connection = rusqlite::Connection::open(sqlite_file(ledger_url)).expect("ledger opens");
    connection
        .busy_timeout(Duration::from_secs(5))
        .expect("busy timeout");
    connection.execute(sql, []).expect("statement runs");
}

/// A replica that stopped between its transfer and its record leaves the row `reserved` with
/// its reserve-time binding and no answer. Past `validBefore` (+10 s) the identical resend
/// reads the chain, records the row `settled` and runs the work once more, at retention 0
/// too: the answer was owed, not delivered. Once delivered nothing of it is kept, as for any
/// delivery at retention 0, which removes the payment's binding (so a binding left on a
/// settled row means an answer still owed, for the held results' window). Before, the second
/// look under the re-run lock found the row settled with nothing to keep and sent the paid
/// buyer on to 402 `payment_answer_expired` with a fresh challenge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_retention_zero_a_paid_call_its_replica_left_reserved_is_run_again() {
    let off = [("FACTOMAT_DELIVERY_RETENTION_SECONDS", "0")];
    let (rig, buyer, body) = forwarding_rig(&off).await;
    let (header, _) = rig.sign(&buyer, &body, &[]).await;
    // The binding as the reserve wrote it, copied while the (slowed) work runs.
    rig.rpc.set_delay("eth_call", Duration::from_secs(1));
    let (first, ()) = tokio::join!(paid(&rig, &body, &header), async {
        wait_for("the call is reserved", async || {
            !rig.rows().await.is_empty()
        })
        .await;
        ledger_statement(
            &rig.ledger_url,
            "CREATE TABLE reserve_time_binding AS SELECT * FROM retained_answers",
        );
    });
    rig.rpc.set_delay("eth_call", Duration::ZERO);
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(
        sqlite_count(&rig.ledger_url, "retained_answers"),
        0,
        "delivered at retention 0: the binding goes"
    );
    assert_eq!(sqlite_count(&rig.ledger_url, "reserve_time_binding"), 1);
    let per_call = rig.rpc.calls("eth_call");
    // What the stopped replica left: the row reserved, its validBefore passed, the binding.
    let past = unix_now() - 60;
    ledger_statement(
        &rig.ledger_url,
        &format!(
            "UPDATE payment_attempts SET state = 'reserved', valid_before = '{past}',
             transaction_hash = NULL, transfer_log_index = NULL"
        ),
    );
    ledger_statement(
        &rig.ledger_url,
        "INSERT INTO retained_answers SELECT * FROM reserve_time_binding",
    );

    let again = paid(&rig, &body, &header).await;
    assert_eq!(again.status, 200, "{again:?}");
    // Nothing was retained to collect: the answer is the work's, run once more.
    assert_eq!(again.json()["machine"], "VM02");
    assert!(
        rig.rpc.calls("eth_call") > per_call,
        "the work ran once more"
    );
    let row = rig.only_row().await;
    assert_eq!(row.state, "settled");
    assert_eq!(
        again.settlement()["transaction"].as_str(),
        row.transaction_hash.as_deref()
    );
    // Delivered now, and nothing delivered is kept at retention 0: its binding goes too.
    assert_eq!(sqlite_count(&rig.ledger_url, "retained_answers"), 0);
    let after_rerun = rig.rpc.calls("eth_call");
    let later = rig.send(&body, &header).await;
    assert_eq!(later.status().as_u16(), 402);
    assert_eq!(reason_of(&later), "payment_answer_expired");
    assert_eq!(
        rig.rpc.calls("eth_call"),
        after_rerun,
        "run once, not twice"
    );
    assert_facilitator_saw(&rig, 1, 1);
    assert_charged_once(&rig, &buyer);
}

/// Leaves every binding of a SQLite ledger without its answer, as an answer that could not
/// be sealed, or a row settled from the chain after a crash, leaves a paid row.
fn unanswer_retained_answers(ledger_url: &str) {
    ledger_statement(
        ledger_url,
        "UPDATE retained_answers SET kind = 'in_flight', sealed = NULL, collectable_until = NULL",
    );
}

/// Deletes every retained answer of a SQLite ledger (the sweep's work once a window ends).
fn forget_retained_answers(ledger_url: &str) {
    ledger_statement(ledger_url, "DELETE FROM retained_answers");
}

/// A paid row whose answer was never retained (a crash, or a seal that failed) is not a lost
/// purchase: the identical resend within the window runs the work once more — the provider
/// is asked again, nothing is verified or settled again — and gets a paid 200 naming the
/// row's transaction, which is then retained and collected byte for byte; concurrent resends
/// run it once. Past the window the same resend is refused as expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_row_without_its_answer_runs_the_work_once_more_within_the_window() {
    let short = [("FACTOMAT_DELIVERY_COLLECT_WITHOUT_ID_SECONDS", "4")];
    let (rig, buyer, body) = forwarding_rig(&short).await;
    let (header, _) = rig.sign(&buyer, &body, &[]).await;
    let first = paid(&rig, &body, &header).await;
    assert_eq!(first.status, 200, "{first:?}");
    let per_call = rig.rpc.calls("eth_call");
    unanswer_retained_answers(&rig.ledger_url);

    // Four resends at once: one runs the work again, the others collect its answer.
    let resends = tokio::join!(
        paid(&rig, &body, &header),
        paid(&rig, &body, &header),
        paid(&rig, &body, &header),
        paid(&rig, &body, &header),
    );
    let again = resends.0;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.json()["machine"], "VM02");
    assert_eq!(
        rig.rpc.calls("eth_call"),
        2 * per_call,
        "the work ran once more, once"
    );
    for other in [resends.1, resends.2, resends.3] {
        assert_eq!(other, again, "the same answer");
    }
    let row = rig.only_row().await;
    assert_eq!(
        again.settlement()["transaction"].as_str(),
        row.transaction_hash.as_deref(),
        "the paid 200 names the row's transaction"
    );
    assert_eq!(sqlite_count(&rig.ledger_url, "retained_answers"), 1);
    assert_eq!(
        paid(&rig, &body, &header).await,
        again,
        "the answer run again is retained"
    );
    assert_eq!(rig.rpc.calls("eth_call"), 2 * per_call);

    forget_retained_answers(&rig.ledger_url);
    wait_for("the window to close", async || {
        let response = rig.send(&body, &header).await;
        response.status().as_u16() == 402 && reason_of(&response) == "payment_answer_expired"
    })
    .await;
    assert_facilitator_saw(&rig, 1, 1);
    assert_charged_once(&rig, &buyer);
}

/// Three replicas share one PostgreSQL ledger (and one delivery key): an answer bought on one
/// is collected from the others, byte for byte, and only the first one's facilitator ever
/// saw the payment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_postgres_hand_back_each_others_answers() {
    use common::ledgers::{BACKEND, Backend};
    BACKEND
        .scope(Backend::Postgres, async {
            let stack = shared_stack();
            let buyer = stack.fresh_buyer(&FUNDS.to_string());
            let ledger = fresh_ledger_url();
            let mut replicas = Vec::new();
            for _ in 0..3 {
                replicas.push(Rig::start_on(stack, Settle::Forward, &[], ledger.clone()).await);
            }
            let body = replicas[0].request(&buyer);
            let (header, _) = replicas[0].sign(&buyer, &body, &[]).await;
            let first = paid(&replicas[0], &body, &header).await;
            assert_eq!(first.status, 200, "{first:?}");
            for other in &replicas[1..] {
                assert_eq!(paid(other, &body, &header).await, first, "another replica");
                assert_facilitator_saw(other, 0, 0);
            }
            assert_facilitator_saw(&replicas[0], 1, 1);
            assert_eq!(replicas[0].only_row().await.collected_again, 2);
            assert_charged_once(&replicas[0], &buyer);
        })
        .await;
}

/// A replaced delivery key makes the answers retained so far unreadable, not lost: a resend
/// within the window to a server with the new key runs the work once more (one settle, one
/// charge) and retains the new answer under the new key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_delivery_key_runs_the_work_once_more_within_the_window() {
    let (before, buyer, body) = forwarding_rig(&[]).await;
    let (header, _) = before.sign(&buyer, &body, &[]).await;
    assert_eq!(paid(&before, &body, &header).await.status, 200);

    let after = before.with_a_new_delivery_key().await;
    let again = paid(&after, &body, &header).await;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.json()["machine"], "VM02");
    assert!(after.rpc.calls("eth_call") > 0, "the work ran once more");
    assert_eq!(paid(&after, &body, &header).await, again, "retained anew");
    assert_facilitator_saw(&after, 0, 0);
    assert_eq!(after.rows().await.len(), 1);
    assert_charged_once(&after, &buyer);
}

/// A held answer that no longer opens (the delivery key was replaced while its settlement
/// was pending) is not a pending answer forever: once the chain proves the transfer, the
/// resend records the row settled and runs the work once more (no /verify, no /settle, one
/// charge), and the new answer is retained under the new key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_answer_under_a_replaced_delivery_key_runs_the_work_once_more_when_paid() {
    let (before, buyer, body, header, _) = left_pending(Duration::from_secs(4), &[]).await;
    wait_for("the late settlement lands", async || {
        before.balance(&buyer.address) == FUNDS - PRICE
    })
    .await;
    let after = before.with_a_new_delivery_key().await;
    let collected = paid(&after, &body, &header).await;
    assert_eq!(collected.status, 200, "{collected:?}");
    assert_eq!(collected.json()["machine"], "VM02");
    let settlement = collected.settlement();
    assert_eq!(settlement["success"], true, "{settlement}");
    let row = after.only_row().await;
    assert_eq!(row.state, "settled", "the resend recorded the proof");
    assert_eq!(
        row.transaction_hash.as_deref(),
        settlement["transaction"].as_str(),
        "the transaction the chain proved"
    );
    assert_eq!(
        paid(&after, &body, &header).await,
        collected,
        "retained anew"
    );
    assert_facilitator_saw(&after, 0, 0);
    assert_charged_once(&after, &buyer);
}
