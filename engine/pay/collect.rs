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
//! | none, or the `id` bound to another payload | normal processing; 409 `payment_identifier_conflict` for the `id` |

use std::time::Duration;

use tokio::time::Instant;

use crate::catalog::manifest::Manifest;
use crate::pay::gate::{PaidCall, PaidOutcome, PaymentRail, Refusal, ledger_failure, reject};
use crate::pay::ledger::{Keep, Outcome, Retained};
use crate::pay::reconcile::{outcome_of, payment_of};
use crate::pay::retained::{self, Answer, Lookup, Retention};
use crate::pay::settlement::{self, Finding, our_settle_response};
use crate::support::metrics::metrics;

/// How long a resend waits for the original still running elsewhere before it gets a 503.
const IN_FLIGHT_WAIT: Duration = Duration::from_secs(15);
/// How often the ledger is asked whether the original has finished.
const IN_FLIGHT_POLL: Duration = Duration::from_millis(250);
/// How long past `validBefore` a still-reserved row is waited on: after that it is left to
/// reconciliation's chain rules.
const RESERVED_MARGIN_SECONDS: u64 = 60;
/// The 402 reason of a resend whose retained answer's window has passed.
pub(crate) const ANSWER_EXPIRED: &str = "payment_answer_expired";

/// What one look at the retained answers decided.
enum Look {
    /// Answer the resend with this.
    Answer(PaidOutcome),
    /// The original is still running: look again shortly.
    Wait,
    /// Nothing retained for this payment: process it as a new one.
    New,
}

/// The answer of a resend, or None when this payment and request have nothing retained (the
/// call goes on as a new one).
pub(crate) async fn again(
    rail: &PaymentRail,
    retention: &Retention,
    manifest: &Manifest,
    call: &PaidCall<'_>,
    lookup: &Lookup,
) -> Option<PaidOutcome> {
    let until = Instant::now() + IN_FLIGHT_WAIT;
    loop {
        match look(rail, retention, manifest, call, lookup).await {
            Look::Answer(outcome) => return Some(outcome),
            Look::New => return None,
            Look::Wait if Instant::now() + IN_FLIGHT_POLL < until => {
                tokio::time::sleep(IN_FLIGHT_POLL).await;
            }
            Look::Wait => return Some(PaidOutcome::Failed(Refusal::InProgress)),
        }
    }
}

async fn look(
    rail: &PaymentRail,
    retention: &Retention,
    manifest: &Manifest,
    call: &PaidCall<'_>,
    lookup: &Lookup,
) -> Look {
    let key = lookup.key_hex();
    let found = match rail
        .ledger
        .retained(&key, lookup.id_sha256.as_deref())
        .await
    {
        Ok(found) => found,
        Err(error) => return Look::Answer(ledger_failure(&error)),
    };
    if found.iter().any(|entry| entry.lookup_sha256 != key) {
        metrics().retained("conflict");
        tracing::info!(machine = %call.machine.machine, "payment identifier reused on another payment or request: 409");
        return Look::Answer(PaidOutcome::Failed(Refusal::IdentifierConflict));
    }
    let Some(entry) = found.into_iter().next() else {
        return Look::New;
    };
    match (entry.attempt.state.as_str(), entry.kind.as_str()) {
        (_, "sent") => Look::Answer(sent(rail, retention, lookup, &entry).await),
        ("settled" | "settle_pending", "held") => {
            Look::Answer(held(rail, retention, manifest, call, lookup, &entry).await)
        }
        ("reserved", _) if still_running(&entry) => Look::Wait,
        ("reserved" | "settle_pending", _) => {
            Look::Answer(PaidOutcome::Failed(Refusal::InProgress))
        }
        _ => Look::New,
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
    crate::pay::gate::unix_now() < valid_before.saturating_add(RESERVED_MARGIN_SECONDS)
}

/// The answer as first sent, within its window.
async fn sent(
    rail: &PaymentRail,
    retention: &Retention,
    lookup: &Lookup,
    entry: &Retained,
) -> PaidOutcome {
    let open_until = entry.collectable_until.unwrap_or(i64::MAX);
    let now = i64::try_from(crate::pay::gate::unix_now()).unwrap_or(i64::MAX);
    if now > open_until {
        metrics().retained("expired");
        return reject(ANSWER_EXPIRED);
    }
    let Some(answer) = opened(retention, lookup, entry) else {
        return reject("payment_nonce_already_presented");
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
    let finding = settlement::find(chain, &payment, row.transaction_hash.as_deref()).await;
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
                Outcome::NonceBurned { .. } => crate::pay::gate::NONCE_BURNED,
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
        collectable_until: Some(retention.collectable_until(lookup, crate::pay::gate::unix_now())),
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
        retry_after_seconds: valid_before
            .saturating_sub(crate::pay::gate::unix_now())
            .max(1),
        payment_response: response,
    }
}
