//! Collecting a paid answer again: what a resend of an exact PaymentPayload for the same
//! request gets, decided before any other check (a resend after `validBefore` or after a price
//! change must still reach it), without `/verify`, without work and without a charge.
//!
//! | The retained answer's row | The resend gets |
//! |---|---|
//! | settled, answer within its window | the same status, body bytes and payment headers |
//! | settled, answer past its window | 402 `payment_answer_expired` |
//! | `settle_pending`, answer held | the chain asked by the settlement rules: paid → 200 with the answer; unknown → the same 503 `settlement_pending`; unpaid → 402, the answer deleted |
//! | `reserved` (still running on some replica) | waits for it (bounded), else 503 `payment_in_progress` with `Retry-After` |
//! | `reserved` more than a minute past `validBefore` (a crash) | the chain decides by the settlement rules: paid → the work runs once more; unpaid → 402; unknown → 503 |
//! | none, but the nonce's row is `settled` for this request and payer, within the window | the work runs once more and the answer is retained (a crash, or an answer that could not be sealed) |
//! | none, or the `id` bound to another payload | normal processing; 409 `payment_identifier_conflict` for the `id` |
//!
//! A resend of a pending payment reads the chain at most once per row every two seconds
//! (`settlement::PendingReads`), however often it is sent.

use std::time::Duration;

use alloy_primitives::Address;
use tokio::time::Instant;

use crate::catalog::manifest::Manifest;
use crate::pay::call::{
    ALREADY_PRESENTED, NONCE_BURNED, PaidCall, PaidOutcome, PaymentRail, Refusal, ledger_failure,
    reject, unix_now,
};
use crate::pay::ledger::{AttemptRow, Keep, Outcome, Retained};
use crate::pay::reconcile::{outcome_of, payment_of};
use crate::pay::retained::{self, Answer, Lookup, Retention};
use crate::pay::settlement::{Finding, our_settle_response};
use crate::support::metrics::metrics;

/// How often the ledger is asked whether the original has finished.
const IN_FLIGHT_POLL: Duration = Duration::from_millis(250);
/// How long past `validBefore` a still-reserved row is waited on: after that it is left to
/// reconciliation's chain rules.
const RESERVED_MARGIN_SECONDS: u64 = 60;
/// The 402 reason of a resend whose retained answer's window has passed.
pub(crate) const ANSWER_EXPIRED: &str = "payment_answer_expired";

/// The payment a resend presents, as far as collecting needs it.
pub(crate) struct Resent<'a> {
    /// sha256 of its nonce.
    pub nonce_sha256: &'a str,
    /// Its payer.
    pub payer: Address,
}

/// What the retained answers say about a resend.
pub(crate) enum Collect {
    /// Answer with this.
    Done(PaidOutcome),
    /// Paid, but no answer was retained: run the work once more and deliver it, retained
    /// until `collectable_until`.
    RunAgain {
        /// The paid row.
        row: Box<AttemptRow>,
        /// Until when the new answer may be collected (the original window).
        collectable_until: i64,
    },
    /// Nothing retained for this payment: process it as a new one.
    New,
}

/// What one look at the retained answers decided; None while the original still runs.
type Look = Option<Collect>;

fn answer(outcome: PaidOutcome) -> Look {
    Some(Collect::Done(outcome))
}

/// What a resend gets from the retained answers.
pub(crate) async fn again(
    rail: &PaymentRail,
    retention: &Retention,
    manifest: &Manifest,
    call: &PaidCall<'_>,
    lookup: &Lookup,
    resent: &Resent<'_>,
) -> Collect {
    let until = Instant::now() + retention.in_flight_wait;
    loop {
        match look(rail, retention, manifest, call, lookup, resent).await {
            Some(collect) => return collect,
            None if Instant::now() + IN_FLIGHT_POLL < until => {
                tokio::time::sleep(IN_FLIGHT_POLL).await;
            }
            None => return Collect::Done(PaidOutcome::Failed(Refusal::InProgress)),
        }
    }
}

async fn look(
    rail: &PaymentRail,
    retention: &Retention,
    manifest: &Manifest,
    call: &PaidCall<'_>,
    lookup: &Lookup,
    resent: &Resent<'_>,
) -> Look {
    let key = lookup.key_hex();
    let found = match rail
        .ledger
        .retained(&key, lookup.id_sha256.as_deref())
        .await
    {
        Ok(found) => found,
        Err(error) => return answer(ledger_failure(&error)),
    };
    if found.iter().any(|entry| entry.lookup_sha256 != key) {
        metrics().retained("conflict");
        tracing::info!(machine = %call.machine.machine, "payment identifier reused on another payment or request: 409");
        return answer(PaidOutcome::Failed(Refusal::IdentifierConflict));
    }
    let Some(entry) = found.into_iter().next() else {
        return Some(unretained(rail, retention, call, lookup, resent).await);
    };
    match (entry.attempt.state.as_str(), entry.kind.as_str()) {
        (_, "sent") => answer(sent(rail, retention, lookup, &entry).await),
        ("settled" | "settle_pending", "held") => {
            answer(held(rail, retention, manifest, call, lookup, &entry).await)
        }
        ("reserved", _) if still_running(&entry) => None,
        ("reserved", _) => Some(stale(rail, retention, lookup, entry.attempt).await),
        ("settled", _) => Some(unretained(rail, retention, call, lookup, resent).await),
        ("settle_pending", _) => answer(PaidOutcome::Failed(Refusal::InProgress)),
        _ => Some(Collect::New),
    }
}

/// Until when an answer bought with this lookup's payment, settled at `settled_at` (RFC
/// 3339), may be collected.
fn window_end(retention: &Retention, lookup: &Lookup, settled_at: &str) -> Option<i64> {
    let settled = chrono::DateTime::parse_from_rfc3339(settled_at).ok()?;
    let settled = u64::try_from(settled.timestamp()).ok()?;
    Some(retention.collectable_until(lookup, settled))
}

/// Nothing retained: a paid row of this payer, nonce and request within its window runs the
/// work once more (the answer was lost in a crash, or could not be sealed); anything else is
/// a new payment to the gate (whose nonce pre-check then refuses a replay).
async fn unretained(
    rail: &PaymentRail,
    retention: &Retention,
    call: &PaidCall<'_>,
    lookup: &Lookup,
    resent: &Resent<'_>,
) -> Collect {
    let row = match rail.ledger.row_by_nonce(resent.nonce_sha256).await {
        Ok(Some(row)) => row,
        Ok(None) => return Collect::New,
        Err(error) => return Collect::Done(ledger_failure(&error)),
    };
    let same_buyer = row
        .payer
        .parse::<Address>()
        .is_ok_and(|payer| payer == resent.payer);
    if row.state != "settled" || row.request_sha256 != call.request_sha256 || !same_buyer {
        return Collect::New;
    }
    let now = i64::try_from(unix_now()).unwrap_or(i64::MAX);
    match window_end(retention, lookup, &row.updated_at) {
        Some(until) if now <= until => {
            tracing::warn!(
                attempt = row.id,
                "a paid row has no retained answer: running its work once more"
            );
            Collect::RunAgain {
                row: Box::new(row),
                collectable_until: until,
            }
        }
        _ => Collect::New,
    }
}

/// A row left `reserved` long past `validBefore` (its replica stopped mid-call): the chain
/// decides it now by the settlement rules.
async fn stale(
    rail: &PaymentRail,
    retention: &Retention,
    lookup: &Lookup,
    row: AttemptRow,
) -> Collect {
    let (Some(chain), Ok(payment)) = (rail.trusted_chain(), payment_of(&row)) else {
        return Collect::Done(PaidOutcome::Failed(Refusal::InProgress));
    };
    let finding = rail.pending_reads.find(chain, &row, &payment).await;
    let Some(outcome) = outcome_of(&row.state, &finding) else {
        return Collect::Done(PaidOutcome::Failed(Refusal::InProgress));
    };
    match rail.ledger.resolve(row.id, &row.state, &outcome).await {
        Ok(true) => {}
        Ok(false) => return Collect::Done(PaidOutcome::Failed(Refusal::InProgress)),
        Err(error) => return Collect::Done(ledger_failure(&error)),
    }
    tracing::warn!(
        attempt = row.id,
        state = outcome.state(),
        "a stale reserved row was resolved from the chain on a resend"
    );
    match outcome {
        Outcome::Settled { .. } => {
            let now = unix_now();
            Collect::RunAgain {
                collectable_until: retention.collectable_until(lookup, now),
                row: Box::new(AttemptRow {
                    state: "settled".into(),
                    ..row
                }),
            }
        }
        Outcome::NonceBurned { .. } => Collect::Done(reject(NONCE_BURNED)),
        _ => Collect::Done(reject("settlement_failed")),
    }
}

/// A reserved row is waited on until `validBefore` plus a margin.
fn still_running(entry: &Retained) -> bool {
    let valid_before = entry
        .attempt
        .valid_before
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_default();
    unix_now() < valid_before.saturating_add(RESERVED_MARGIN_SECONDS)
}

/// The answer as first sent, within its window.
async fn sent(
    rail: &PaymentRail,
    retention: &Retention,
    lookup: &Lookup,
    entry: &Retained,
) -> PaidOutcome {
    let open_until = entry.collectable_until.unwrap_or(i64::MAX);
    let now = i64::try_from(unix_now()).unwrap_or(i64::MAX);
    if now > open_until {
        metrics().retained("expired");
        return reject(ANSWER_EXPIRED);
    }
    let Some(answer) = opened(retention, lookup, entry) else {
        return reject(ALREADY_PRESENTED);
    };
    collected(rail, entry.attempt.id).await;
    PaidOutcome::Answered(answer)
}

async fn collected(rail: &PaymentRail, attempt: i64) {
    metrics().retained("collected");
    if let Err(error) = rail.ledger.note_collected(attempt).await {
        tracing::warn!(%error, attempt, "could not count a collected answer");
    }
    tracing::info!(attempt, "paid answer collected again");
}

fn opened(retention: &Retention, lookup: &Lookup, entry: &Retained) -> Option<Answer> {
    let sealed = entry.sealed.as_deref()?;
    retained::open(&retention.secret, lookup, sealed)
        .map_err(|error| {
            tracing::error!(%error, attempt = entry.attempt.id, "a retained answer does not open");
        })
        .ok()
}

/// A result held back while its settlement was pending: the chain decides now.
async fn held(
    rail: &PaymentRail,
    retention: &Retention,
    manifest: &Manifest,
    call: &PaidCall<'_>,
    lookup: &Lookup,
    entry: &Retained,
) -> PaidOutcome {
    let row = &entry.attempt;
    let (Some(chain), Ok(payment)) = (rail.trusted_chain(), payment_of(row)) else {
        return still_pending(manifest, entry);
    };
    let finding = rail.pending_reads.find(chain, row, &payment).await;
    if let Finding::Paid {
        transaction,
        transfer_log_index,
        evidence,
    } = &finding
    {
        let settled = Outcome::Settled {
            transaction: transaction.clone(),
            transfer_log_index: Some(*transfer_log_index),
            evidence: Some(evidence.clone()),
        };
        return paid_late(rail, retention, manifest, call, lookup, entry, &settled).await;
    }
    match outcome_of(&row.state, &finding) {
        Some(outcome) => {
            let reason = match &outcome {
                Outcome::NonceBurned { .. } => NONCE_BURNED,
                _ => "settlement_failed",
            };
            if let Err(error) = rail.ledger.resolve(row.id, &row.state, &outcome).await {
                return ledger_failure(&error);
            }
            tracing::warn!(
                attempt = row.id,
                state = outcome.state(),
                "a pending payment ended unpaid; its held answer is deleted"
            );
            reject(reason)
        }
        None => still_pending(manifest, entry),
    }
}

/// The held answer of a payment the chain now proves: finished as a paid 200 (receipt and
/// seal included), recorded `settled` with it in one transaction, and sent.
async fn paid_late(
    rail: &PaymentRail,
    retention: &Retention,
    manifest: &Manifest,
    call: &PaidCall<'_>,
    lookup: &Lookup,
    entry: &Retained,
    settled: &Outcome,
) -> PaidOutcome {
    let row = &entry.attempt;
    let Some(body) = opened(retention, lookup, entry).map(|answer| answer.body) else {
        return still_pending(manifest, entry);
    };
    let Outcome::Settled { transaction, .. } = settled else {
        return still_pending(manifest, entry);
    };
    let response = our_settle_response(
        &manifest.payment.network,
        &row.payer,
        true,
        None,
        Some(transaction),
    );
    let answer = call.finisher.finish(body, &response);
    let Ok(sealed) = retained::seal(&retention.secret, lookup, &answer) else {
        return still_pending(manifest, entry);
    };
    let keep = Keep::Store {
        sealed: &sealed,
        held: false,
        collectable_until: Some(retention.collectable_until(lookup, unix_now())),
    };
    match rail
        .ledger
        .resolve_keeping(row.id, &row.state, settled, keep)
        .await
    {
        Ok(_) => {
            tracing::info!(attempt = row.id, %transaction, "a pending payment settled; its answer is delivered on the resend");
            metrics().payment("settled", "");
            collected(rail, row.id).await;
            PaidOutcome::Answered(answer)
        }
        Err(error) => ledger_failure(&error),
    }
}

/// The same pending answer as the first: no fresh challenge, `Retry-After`.
fn still_pending(manifest: &Manifest, entry: &Retained) -> PaidOutcome {
    let row = &entry.attempt;
    let valid_before = row
        .valid_before
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_default();
    let transaction = row.transaction_hash.clone();
    let response = our_settle_response(
        &manifest.payment.network,
        &row.payer,
        false,
        Some(crate::pay::facilitator::SETTLEMENT_PENDING),
        transaction.as_deref(),
    );
    PaidOutcome::Pending {
        transaction,
        retry_after_seconds: valid_before.saturating_sub(unix_now()).max(1),
        payment_response: response,
    }
}
