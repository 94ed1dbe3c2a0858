//! Collecting a paid answer again: what a resend of an exact PaymentPayload for the same
//! request gets, decided before any other check (a resend after `validBefore` or after a price
//! change must still reach it), without `/verify`, without work and without a charge.
//!
//! | The retained answer's row | The resend gets |
//! |---|---|
//! | settled, answer within its window | the same status, body bytes and payment headers |
//! | settled, answer past its window | 402 `payment_answer_expired` |
//! | `settle_pending`, answer held | the chain asked by the settlement rules: paid → 200 with the answer; unknown → the same 503 `settlement_pending`; unpaid → 402, the answer deleted |
//! | `settle_pending`, answer held that does not open, or none stored | the same, but paid → the row `settled` and the work runs once more within the window |
//! | `settled` (by reconcile or another replica), answer still held | 200 with the answer: the row's record is the proof, the chain is not read |
//! | `settle_failed` refused before broadcasting, result held (its authorization may still be executed) | the chain asked by the settlement rules: paid → the row `settled`, 200 with the answer (one that could not be sealed: the work runs once more); burned or unused past `validBefore` → 402, the answer deleted; unknown → the nonce pre-check's 402 `payment_nonce_already_presented`, as before |
//! | `reserved` (still running on some replica) | waits for it (bounded), else 503 `payment_in_progress` with `Retry-After` |
//! | `reserved` more than 10 s past `validBefore` (its replica stopped) | the chain decides by the settlement rules: paid → the work runs once more; unpaid → 402; unknown → 503 |
//! | none, but the nonce's row is `settled` for this request and payer, within the window | the work runs once more (once per replica for concurrent resends) and the answer is retained (a crash, or an answer that could not be sealed); at a window of zero the binding is what is left of an answer never delivered, owed for the held results' window, and goes once the re-run delivers it |
//! | none, and the nonce's row ended unpaid for good for this request and payer (a reconcile decided it) | 402 `settlement_failed` or `payment_nonce_burned` |
//! | none, or the `id` bound to another payload | normal processing; 409 `payment_identifier_conflict` for the `id` |
//! | any of the above, presented on another machine's route (a body both take) | nothing collected, run or resolved: 402 `payment_nonce_already_presented`, or 503 `payment_in_progress` while the outcome is unknown |
//!
//! A payment that finds no binding but whose nonce is on record is answered by
//! [`known_nonce`]: never a fresh challenge while the nonce's outcome is unknown.
//!
//! A resend of a pending payment reads the chain at most once per row every two seconds
//! (`settlement::PendingReads`), however often it is sent.

use std::time::Duration;

use alloy_primitives::Address;
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use crate::catalog::manifest::Manifest;
use crate::pay::call::{
    ALREADY_PRESENTED, NONCE_BURNED, PaidCall, PaidOutcome, PaymentRail, Refusal, reject,
    resend_ledger_failure, strike_until, unix_now,
};
use crate::pay::facilitator::SETTLEMENT_PENDING;
use crate::pay::ledger::{AttemptRow, Keep, LedgerError, Outcome, Retained};
use crate::pay::reconcile::{RESERVED_MARGIN_SECONDS, outcome_of, payment_of};
use crate::pay::retained::{self, Answer, Lookup};
use crate::pay::settlement::{Finding, SETTLEMENT_FAILED, our_settle_response};
use crate::support::metrics::metrics;

/// How often the ledger is asked whether the original has finished.
const IN_FLIGHT_POLL: Duration = Duration::from_millis(250);
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
    /// Paid, but no answer was retained: run the work once more (`rerun`) and deliver it.
    RunAgain(Rerun),
    /// Nothing retained for this payment: process it as a new one.
    New,
}

/// A paid row whose answer was not retained, to run once more for its buyer.
pub(crate) struct Rerun {
    /// The paid row.
    pub row: Box<AttemptRow>,
    /// Until when the new answer may be collected (the window it is owed in).
    pub collectable_until: i64,
    /// The row's re-run lock, held until the answer is retained (or, at a window of zero, its
    /// binding dropped); None until taken.
    _one_run: Option<OwnedMutexGuard<()>>,
}

/// The work of paid `row` to run once more, its answer collectable until
/// `collectable_until`.
fn run_again(row: AttemptRow, collectable_until: i64) -> Collect {
    Collect::RunAgain(Rerun {
        row: Box::new(row),
        collectable_until,
        _one_run: None,
    })
}

/// What one look at the retained answers decided; None while the original still runs.
type Look = Option<Collect>;

fn answer(outcome: PaidOutcome) -> Look {
    Some(Collect::Done(outcome))
}

/// One resend as the retained answers see it: the rail, the call, and where its answer would
/// be.
pub(crate) struct Resend<'a> {
    /// The rail (ledger, chain reader, recent readings, the retention settings and secret).
    pub rail: &'a PaymentRail,
    /// The manifest (the payment network).
    pub manifest: &'a Manifest,
    /// The call.
    pub call: &'a PaidCall<'a>,
    /// The lookup of this exact payload and request.
    pub lookup: &'a Lookup,
    /// The payment presented.
    pub resent: Resent<'a>,
}

impl Resend<'_> {
    /// What the resend gets: waits (bounded by `delivery_in_flight_wait_ms`) while the
    /// original is still running. Concurrent resends of a paid row whose answer was not
    /// retained take its re-run lock in turn: the first runs the work, and the others, let in
    /// after it, collect the answer it retained (at a window of zero, where the delivery drops
    /// the binding, they hear 402 `payment_answer_expired`).
    pub(crate) async fn collect(&self) -> Collect {
        let rerun = match self.decided().await {
            Collect::RunAgain(rerun) => rerun,
            other => return other,
        };
        let one_run = self.rail.reruns.lock(rerun.row.id).await;
        match self.decided().await {
            Collect::RunAgain(rerun) => Collect::RunAgain(Rerun {
                _one_run: Some(one_run),
                ..rerun
            }),
            other => other,
        }
    }

    /// What the retained answers decide, waited for while the original still runs.
    async fn decided(&self) -> Collect {
        let until = Instant::now() + self.rail.retention.in_flight_wait;
        loop {
            match self.look().await {
                Some(collect) => return collect,
                None if Instant::now() + IN_FLIGHT_POLL < until => {
                    tokio::time::sleep(IN_FLIGHT_POLL).await;
                }
                None => return Collect::Done(PaidOutcome::Failed(Refusal::InProgress)),
            }
        }
    }

    async fn look(&self) -> Look {
        let key = self.lookup.key_hex();
        let id = self.lookup.id_sha256.as_deref();
        let mut found = match self.rail.ledger.retained(&key, id).await {
            Ok(found) => found,
            Err(error) => return answer(resend_ledger_failure(&error)),
        };
        // This exact payload's binding answers, even when its `id` now binds another payment
        // (a refused payment lets its `id` go, and the buyer's retry takes it).
        let exact = found.iter().position(|entry| entry.lookup_sha256 == key);
        if exact.is_none() && !found.is_empty() {
            metrics().retained("conflict");
            tracing::info!(machine = %self.call.machine.machine, "payment identifier reused on another payment or request: payment_identifier_conflict");
            return answer(PaidOutcome::Failed(Refusal::IdentifierConflict));
        }
        // No binding of this exact payload, request and id: nothing of ours to collect. The
        // gate then treats it as a new presentation, and the nonce pre-check answers it
        // ([`known_nonce`]: in progress, expired or presented). Running the work again for a nonce alone would sell it to
        // any copy of the payment (its authorization and signature are public on chain) or
        // to the same payment under a new `id`.
        let Some(entry) = exact.map(|at| found.swap_remove(at)) else {
            return Some(Collect::New);
        };
        if entry.attempt.machine != self.call.machine.machine {
            return answer(another_machines(&entry.attempt));
        }
        match (entry.attempt.state.as_str(), entry.kind.as_str()) {
            (_, "sent") => Some(self.sent(&entry).await),
            // Boxed: they read the chain, and a fresh payment's task should not carry that.
            // A refusal's binding without a result (it could not be sealed) asks the chain
            // too: executed after all, the work runs once more.
            ("settled", "held") | ("settle_pending", _) | ("settle_failed", _) => {
                Some(Box::pin(self.held(&entry)).await)
            }
            ("reserved", _) if still_running(&entry.attempt) => None,
            ("reserved", _) => Some(Box::pin(self.stale(entry.attempt)).await),
            ("settled", _) => Some(self.unretained().await),
            _ => Some(Collect::New),
        }
    }

    /// This exact payment's binding holds no answer though its row is paid (the answer could
    /// not be sealed, or the row was settled from the chain after a crash or a pending
    /// settlement; at a window of zero, where a delivery removes the binding, an answer never
    /// delivered): within the window the answer is owed in, the work runs once more; anything
    /// else is a new payment to the gate (whose nonce pre-check then refuses a replay).
    async fn unretained(&self) -> Collect {
        let row = match self
            .rail
            .ledger
            .row_by_nonce(self.resent.nonce_sha256)
            .await
        {
            Ok(Some(row)) => row,
            Ok(None) => return Collect::New,
            Err(error) => return Collect::Done(resend_ledger_failure(&error)),
        };
        let same_buyer = row
            .payer
            .parse::<Address>()
            .is_ok_and(|payer| payer == self.resent.payer);
        let same_request = row.request_sha256 == self.call.request_sha256;
        if row.state != "settled" || !same_request || !same_buyer {
            return Collect::New;
        }
        let now = i64::try_from(unix_now()).unwrap_or(i64::MAX);
        match self.owed_until(&row.updated_at) {
            Some(until) if now <= until => {
                tracing::warn!(
                    attempt = row.id,
                    "a paid row has no retained answer: running its work once more"
                );
                run_again(row, until)
            }
            _ => Collect::New,
        }
    }

    /// Until when an answer of this payment stored now may be collected.
    fn collectable_from_now(&self) -> i64 {
        self.rail
            .retention
            .collectable_until(self.lookup, unix_now())
    }

    /// Until when the answer of this payment, settled at `settled_at` (RFC 3339) and not
    /// retained, may be run again and collected.
    fn owed_until(&self, settled_at: &str) -> Option<i64> {
        let settled = chrono::DateTime::parse_from_rfc3339(settled_at).ok()?;
        let settled = u64::try_from(settled.timestamp()).ok()?;
        Some(self.rail.retention.owed_until(self.lookup, settled))
    }

    /// [`Resend::owed_until`] for a row settled now.
    fn owed_from_now(&self) -> i64 {
        self.rail.retention.owed_until(self.lookup, unix_now())
    }

    /// A row left `reserved` long past `validBefore` (its replica stopped mid-call): the
    /// chain decides it now by the settlement rules.
    async fn stale(&self, row: AttemptRow) -> Collect {
        let in_progress = || Collect::Done(PaidOutcome::Failed(Refusal::InProgress));
        let Some(outcome) = chain_outcome(self.rail, &row).await else {
            return in_progress();
        };
        match self.rail.ledger.resolve(row.id, &row.state, &outcome).await {
            Ok(true) => {}
            Ok(false) => return in_progress(),
            Err(error) => return Collect::Done(resend_ledger_failure(&error)),
        }
        tracing::warn!(
            attempt = row.id,
            state = outcome.state(),
            "a stale reserved row was resolved from the chain on a resend"
        );
        match outcome {
            Outcome::Settled { transaction, .. } => {
                run_again(settled_row(row, &transaction), self.owed_from_now())
            }
            outcome => Collect::Done(reject(unpaid_reason(&outcome))),
        }
    }

    /// The answer as first sent, within its window. One that no longer opens (the delivery
    /// key was replaced) is treated as not retained.
    async fn sent(&self, entry: &Retained) -> Collect {
        let open_until = entry.collectable_until.unwrap_or(i64::MAX);
        let now = i64::try_from(unix_now()).unwrap_or(i64::MAX);
        if now > open_until {
            metrics().retained("expired");
            return Collect::Done(reject(ANSWER_EXPIRED));
        }
        let Some(answer) = self.opened(entry) else {
            return self.unretained().await;
        };
        self.collected(entry.attempt.id).await;
        Collect::Done(PaidOutcome::Answered(answer))
    }

    async fn collected(&self, attempt: i64) {
        metrics().retained("collected");
        if let Err(error) = self.rail.ledger.note_collected(attempt).await {
            tracing::warn!(%error, attempt, "could not count a collected answer");
        }
        tracing::info!(attempt, "paid answer collected again");
    }

    fn opened(&self, entry: &Retained) -> Option<Answer> {
        let sealed = entry.sealed.as_deref()?;
        retained::open(&self.rail.retention.secret, self.lookup, sealed)
            .map_err(|error| {
                tracing::error!(%error, attempt = entry.attempt.id, "a retained answer does not open");
            })
            .ok()
    }

    /// A result held back while its settlement was pending (or a pending row whose answer
    /// was never stored): the chain decides now, unless the ledger already records the row
    /// settled (reconcile, or another replica's resend, proved it), whose record is the
    /// proof.
    async fn held(&self, entry: &Retained) -> Collect {
        let row = &entry.attempt;
        let decided = match recorded_settlement(row) {
            Some(settled) => Some(settled),
            None => chain_outcome(self.rail, row).await,
        };
        match &decided {
            Some(settled @ Outcome::Settled { transaction, .. }) => match self.opened(entry) {
                Some(held) => {
                    let paid = self.paid_late(entry, held, settled, transaction).await;
                    Collect::Done(paid)
                }
                None => self.paid_unopened(entry, settled, transaction).await,
            },
            Some(outcome) if row.state != "settled" => {
                if let Err(error) = self.rail.ledger.resolve(row.id, &row.state, outcome).await {
                    return Collect::Done(resend_ledger_failure(&error));
                }
                tracing::warn!(
                    attempt = row.id,
                    state = outcome.state(),
                    "a pending payment ended unpaid; its held answer is deleted"
                );
                Collect::Done(reject(unpaid_reason(outcome)))
            }
            // A refusal before broadcasting the chain has not decided: nothing to collect;
            // the nonce pre-check answers it, as before the refusal could be executed.
            None if row.state == "settle_failed" => Collect::New,
            _ => Collect::Done(self.still_pending(entry)),
        }
    }

    /// A payment the chain proves whose held answer does not open (the delivery key was
    /// replaced) or was never stored: recorded `settled`, then, like a sent answer that does
    /// not open, its work runs once more within its window.
    async fn paid_unopened(
        &self,
        entry: &Retained,
        settled: &Outcome,
        transaction: &str,
    ) -> Collect {
        let row = &entry.attempt;
        if row.state != "settled" {
            match self.rail.ledger.resolve(row.id, &row.state, settled).await {
                Ok(true) => {}
                // Another resend or reconcile moved the row first; the next look reads it.
                Ok(false) => return Collect::Done(self.still_pending(entry)),
                Err(error) => return Collect::Done(resend_ledger_failure(&error)),
            }
        }
        tracing::warn!(
            attempt = row.id,
            "a pending payment settled but its held answer does not open: running its work once more"
        );
        run_again(settled_row(row.clone(), transaction), self.owed_from_now())
    }

    /// The held answer of a payment the chain now proves: finished as a paid 200 (receipt
    /// and seal included), recorded `settled` with it in one transaction, and sent.
    async fn paid_late(
        &self,
        entry: &Retained,
        held: Answer,
        settled: &Outcome,
        transaction: &str,
    ) -> PaidOutcome {
        let row = &entry.attempt;
        let network = &self.manifest.payment.network;
        let response = our_settle_response(network, &row.payer, true, None, Some(transaction));
        let answer = self.call.finisher.finish(held.body, &response);
        let Ok(sealed) = retained::seal(&self.rail.retention.secret, self.lookup, &answer) else {
            return self.still_pending(entry);
        };
        let answer = match self.store_delivered(row, settled, &sealed).await {
            Err(error) => return resend_ledger_failure(&error),
            // Counted once: when the held answer becomes the sent one.
            Ok(true) => {
                metrics().payment("settled", "");
                answer
            }
            // A concurrent resend stored (and counted) it first: its bytes are the answer
            // every later resend collects, so they are this one's too.
            Ok(false) => {
                tracing::info!(
                    attempt = row.id,
                    "a concurrent resend delivered this held answer first"
                );
                self.stored_answer().await.unwrap_or(answer)
            }
        };
        if row.state == "settle_failed" {
            // Money taken after its buyer heard 402: they may have paid afresh meanwhile.
            tracing::warn!(attempt = row.id, %transaction, "a payment refused before broadcasting was executed after all; its held answer is delivered on the resend");
        } else {
            tracing::info!(attempt = row.id, %transaction, "a pending payment settled; its answer is delivered on the resend");
        }
        self.collected(row.id).await;
        PaidOutcome::Answered(answer)
    }

    /// Stores the sealed answer of a held result as the sent one, with the row's move to
    /// `settled` or, once a reconcile recorded the row `settled` (before this resend read it,
    /// or while it was deciding), only while the result is still held. False when another
    /// resend stored it first.
    async fn store_delivered(
        &self,
        row: &AttemptRow,
        settled: &Outcome,
        sealed: &[u8],
    ) -> Result<bool, LedgerError> {
        let until = self.collectable_from_now();
        let ledger = &self.rail.ledger;
        if row.state != "settled" {
            let keep = Keep::Store {
                sealed,
                held: false,
                collectable_until: Some(until),
            };
            if ledger
                .resolve_keeping(row.id, &row.state, settled, keep)
                .await?
            {
                return Ok(true);
            }
        }
        ledger.deliver_held(row.id, sealed, until).await
    }

    /// This payment's answer as stored `sent`, if it opens.
    async fn stored_answer(&self) -> Option<Answer> {
        let key = self.lookup.key_hex();
        let id = self.lookup.id_sha256.as_deref();
        let found = self.rail.ledger.retained(&key, id).await.ok()?;
        let sent = found
            .into_iter()
            .find(|entry| entry.lookup_sha256 == key && entry.kind == "sent")?;
        self.opened(&sent)
    }

    /// The same pending answer as the first: no fresh challenge, `Retry-After`.
    fn still_pending(&self, entry: &Retained) -> PaidOutcome {
        let row = &entry.attempt;
        let transaction = row.transaction_hash.clone();
        let response = our_settle_response(
            &self.manifest.payment.network,
            &row.payer,
            false,
            Some(SETTLEMENT_PENDING),
            transaction.as_deref(),
        );
        PaidOutcome::Pending {
            transaction,
            retry_after_seconds: valid_before(row).saturating_sub(unix_now()).max(1),
            payment_response: response,
        }
    }
}

/// A payment for another machine presented on this one's route with a body both take (VM01
/// and VM07 take `{"url"}`): the lookup names the payload and the body, not the route, and a
/// payment buys its own machine's answer only. Its outcome still unknown, no challenge.
fn another_machines(row: &AttemptRow) -> PaidOutcome {
    match row.state.as_str() {
        "reserved" | "settle_pending" => PaidOutcome::Failed(Refusal::OutcomeUnknown),
        _ => reject(ALREADY_PRESENTED),
    }
}

/// `row` as a proven settlement leaves it: `settled`, naming the proven `transaction`.
fn settled_row(row: AttemptRow, transaction: &str) -> AttemptRow {
    AttemptRow {
        state: "settled".into(),
        transaction_hash: Some(transaction.to_owned()),
        ..row
    }
}

/// A `settled` row's own record of its transfer, as the outcome that proved it.
fn recorded_settlement(row: &AttemptRow) -> Option<Outcome> {
    if row.state != "settled" {
        return None;
    }
    Some(Outcome::Settled {
        transaction: row.transaction_hash.clone()?,
        transfer_log_index: row.transfer_log_index.and_then(|i| u64::try_from(i).ok()),
        evidence: None,
    })
}

/// The outcome the chain gives a row now (read at most once per row and block), if any.
async fn chain_outcome(rail: &PaymentRail, row: &AttemptRow) -> Option<Outcome> {
    let (chain, payment) = (rail.trusted_chain()?, payment_of(row).ok()?);
    let budget = rail.retention.in_flight_wait;
    let finding = rail.pending_reads.find(chain, row, &payment, budget).await;
    match finding {
        Finding::Paid {
            transaction,
            transfer_log_index,
            evidence,
        } => Some(Outcome::Settled {
            transaction,
            transfer_log_index: Some(transfer_log_index),
            evidence: Some(evidence),
        }),
        other => outcome_of(&row.state, &other, strike_until(rail.strike_seconds)),
    }
}

/// What a payment whose nonce the ledger already holds gets when no answer of it is there to
/// collect (retention off, another payload or `id` than the one that paid, or a window that
/// passed). While the nonce's outcome is unknown its buyer is never invited to pay again: a
/// row still running, or whose settlement the chain cannot decide yet, is a 503 without a
/// challenge. The payer's own pending or abandoned row is decided from the chain now, by the
/// settlement rules. A settled payment of the same payer and request says its answer can no
/// longer be collected; anything else was presented already. A payment for another machine
/// (a body both take) is neither decided nor explained here: presented, or 503 while its
/// outcome is unknown. None: the nonce is not on record (one ledger read answers both whether
/// it is and what became of it).
pub(crate) async fn known_nonce(
    rail: &PaymentRail,
    call: &PaidCall<'_>,
    resent: Resent<'_>,
) -> Option<PaidOutcome> {
    let row = match rail.ledger.row_by_nonce(resent.nonce_sha256).await {
        Ok(Some(row)) => row,
        Ok(None) => return None,
        Err(error) => return Some(resend_ledger_failure(&error)),
    };
    if row.machine != call.machine.machine {
        return Some(another_machines(&row));
    }
    Some(known_row(rail, call.request_sha256, &resent, row).await)
}

/// [`known_nonce`]'s answer for the nonce's row.
async fn known_row(
    rail: &PaymentRail,
    request_sha256: &str,
    resent: &Resent<'_>,
    row: AttemptRow,
) -> PaidOutcome {
    let same_payer = row
        .payer
        .parse::<Address>()
        .is_ok_and(|payer| payer == resent.payer);
    let row = match decided_now(rail, row, resent, same_payer).await {
        Ok(row) => row,
        Err(outcome) => return outcome,
    };
    let own_request = same_payer && row.request_sha256 == request_sha256;
    match row.state.as_str() {
        "reserved" | "settle_pending" => PaidOutcome::Failed(Refusal::OutcomeUnknown),
        "settled" if own_request => {
            metrics().retained("expired");
            reject(ANSWER_EXPIRED)
        }
        // Decided unpaid for good while its buyer was away (a reconcile): they hear why, as
        // their own resend deciding it would have told them. A refusal before broadcasting
        // is not final (the authorization may still be executed): presented, as before.
        "nonce_burned" if own_request => reject(NONCE_BURNED),
        "expired" if own_request => reject(SETTLEMENT_FAILED),
        "settle_failed"
            if own_request && row.failure_reason.as_deref() == Some(SETTLEMENT_FAILED) =>
        {
            reject(SETTLEMENT_FAILED)
        }
        _ => reject(ALREADY_PRESENTED),
    }
}

/// The row, decided from the chain when it is undecided (pending, or reserved past its
/// `validBefore`) and presented by its own payer: only they can learn, and make us read, what
/// became of it. `Err` is the answer already: still unknown, unpaid, or a ledger failure.
async fn decided_now(
    rail: &PaymentRail,
    row: AttemptRow,
    resent: &Resent<'_>,
    same_payer: bool,
) -> Result<AttemptRow, PaidOutcome> {
    let abandoned = row.state == "reserved" && !still_running(&row);
    if !same_payer || !(row.state == "settle_pending" || abandoned) {
        return Ok(row);
    }
    let Some(outcome) = chain_outcome(rail, &row).await else {
        return Err(PaidOutcome::Failed(Refusal::OutcomeUnknown));
    };
    match rail.ledger.resolve(row.id, &row.state, &outcome).await {
        Ok(true) => {}
        // Another replica decided it first: its record is the answer.
        Ok(false) => {
            return match rail.ledger.row_by_nonce(resent.nonce_sha256).await {
                Ok(Some(row)) => Ok(row),
                Ok(None) => Err(reject(ALREADY_PRESENTED)),
                Err(error) => Err(resend_ledger_failure(&error)),
            };
        }
        Err(error) => return Err(resend_ledger_failure(&error)),
    }
    tracing::warn!(
        attempt = row.id,
        state = outcome.state(),
        "a payment of unknown outcome was resolved from the chain on a resend"
    );
    if !matches!(outcome, Outcome::Settled { .. }) {
        return Err(reject(unpaid_reason(&outcome)));
    }
    Ok(AttemptRow {
        state: outcome.state().to_string(),
        ..row
    })
}

/// The 402 reason of a payment the chain shows unpaid.
fn unpaid_reason(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::NonceBurned { .. } => NONCE_BURNED,
        _ => SETTLEMENT_FAILED,
    }
}

/// A row's `validBefore` (0 when it predates kept values).
fn valid_before(row: &AttemptRow) -> u64 {
    row.valid_before
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_default()
}

/// A reserved row is waited on until `validBefore` plus a margin.
fn still_running(row: &AttemptRow) -> bool {
    unix_now() < valid_before(row).saturating_add(RESERVED_MARGIN_SECONDS)
}
