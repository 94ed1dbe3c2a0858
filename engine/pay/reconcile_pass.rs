//! The service's reconcile pass: on a timer, each replica asks the chain about the payments
//! whose outcome is unknown and records what it proves, by `ledger reconcile`'s own
//! examination (`reconcile::examine`), so such a payment is decided without an operator or a
//! resend. The pass only chooses which rows to read, and when:
//!
//! - a `settle_pending` row at every pass, newest first (its buyer is likely waiting);
//! - a `reserved` row (its replica stopped mid-call) once `validBefore`, the abandoned-row
//!   margin and the held results' window (a day, or the longest delivery window) have passed:
//!   until then its buyer's resend decides it and gets the work run once more, which a
//!   settlement recorded without them would cut to the window counted from it;
//! - a `settle_failed` row refused before broadcasting, as a pending one: the authorization stays
//!   valid until `validBefore`, and someone (the payer, a facilitator's retry) may still
//!   execute it. Read used, it is settled (its buyer's resend collects the held result) or
//!   burned; read unused at a block past `validBefore`, it is `expired` and never read again.
//!   One read unused past `validBefore` at settlement (`settlement_failed`) is final already;
//! - never one the chain cannot be asked about (`ledger reconcile` reports it).
//!
//! A row the chain leaves undecided is read again after a wait that doubles from the
//! interval up to an hour, so a row whose event search keeps failing does not load the RPC
//! at every pass.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::chain::authorization::AuthorizationReader;
use crate::pay::call::unix_now;
use crate::pay::ledger::{AttemptRow, Ledger};
use crate::pay::reconcile::{self, Examined, RESERVED_MARGIN_SECONDS, payment_of};
use crate::support::metrics::metrics;

/// The longest wait before an undecided row is read again.
const MAX_BACKOFF_SECONDS: u64 = 3_600;

/// One replica's pass and what it remembers between runs.
pub(crate) struct ReconcilePass {
    /// The ledger whose undecided rows are read.
    pub ledger: Arc<Ledger>,
    /// The payment chain's reader; a pass waits while its chain is unconfirmed.
    pub chain: AuthorizationReader,
    /// How long a payer whose nonce is found burned is refused (`unpaid_strike_seconds`).
    pub strike_seconds: u64,
    /// How long a `reserved` row is left to its buyer's resend past its abandoned-row
    /// margin: the held results' window.
    pub buyer_first_seconds: u64,
    /// The wait between the end of one pass and the start of the next.
    pub interval: Duration,
    /// Rows the chain left undecided: when each is read again, and the wait after that.
    pub backoff: HashMap<i64, Backoff>,
}

/// When an undecided row is read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    /// Not before this (unix seconds).
    pub next: u64,
    /// The wait that set it, doubled after the next undecided reading.
    pub wait: u64,
}

impl ReconcilePass {
    /// Runs a pass one interval after the last one ended, for the life of the process.
    pub(crate) async fn run_forever(mut self) {
        loop {
            tokio::time::sleep(self.interval).await;
            if self.chain.trusted() {
                self.once().await;
            } else {
                tracing::debug!("reconcile pass skipped: the payment chain is not confirmed");
            }
        }
    }

    /// One pass: the due rows, pending newest first; a ledger failure ends it.
    async fn once(&mut self) {
        let rows = match self.ledger.undecided().await {
            Ok(rows) => rows,
            Err(error) => {
                tracing::warn!(%error, "the reconcile pass could not read the ledger");
                return;
            }
        };
        self.backoff
            .retain(|id, _| rows.iter().any(|row| row.id == *id));
        let now = unix_now();
        let buyer_first = self.buyer_first_seconds;
        let mut due: Vec<AttemptRow> = rows
            .into_iter()
            .filter(|row| due(row, now, buyer_first, self.backoff.get(&row.id)))
            .collect();
        due.sort_by_key(|row| (row.state != "settle_pending", Reverse(row.id)));
        for row in due {
            match reconcile::examine(&self.ledger, &self.chain, &row, self.strike_seconds).await {
                Ok(entry) => self.note(&entry, unix_now()),
                Err(error) => {
                    tracing::warn!(%error, attempt = row.id, "the reconcile pass could not change the ledger");
                    return;
                }
            }
        }
    }

    /// Logs and counts a decided row; schedules an undecided one's next reading.
    fn note(&mut self, entry: &Examined, now: u64) {
        if entry.decided() {
            self.backoff.remove(&entry.id);
            metrics().reconciled(&entry.state_after);
            tracing::warn!(
                attempt = entry.id, machine = %entry.machine, payer = %entry.payer,
                before = %entry.state_before, after = %entry.state_after,
                evidence = %entry.evidence,
                "a payment of unknown outcome was decided from the chain by the reconcile pass"
            );
            return;
        }
        let previous = self.backoff.get(&entry.id).copied();
        let backoff = next_backoff(previous, self.interval, now);
        self.backoff.insert(entry.id, backoff);
        tracing::debug!(
            attempt = entry.id, state = %entry.state_before, evidence = %entry.evidence,
            next_in_seconds = backoff.wait, "reconcile pass: still undecided"
        );
    }
}

/// Whether `row` is read at `now` (the module's rules); `backoff`, its wait if the chain left
/// it undecided before.
fn due(row: &AttemptRow, now: u64, buyer_first_seconds: u64, backoff: Option<&Backoff>) -> bool {
    let Ok(payment) = payment_of(row) else {
        return false;
    };
    if backoff.is_some_and(|b| now < b.next) {
        return false;
    }
    let past = |seconds: u64| now >= payment.valid_before.saturating_add(seconds);
    match row.state.as_str() {
        "settle_pending" | "settle_failed" => true,
        "reserved" => past(RESERVED_MARGIN_SECONDS.saturating_add(buyer_first_seconds)),
        _ => false,
    }
}

/// The wait after an undecided reading at `now`: one interval, then twice the last, at most
/// an hour.
fn next_backoff(previous: Option<Backoff>, interval: Duration, now: u64) -> Backoff {
    let wait = previous
        .map_or(interval.as_secs().max(1), |b| b.wait.saturating_mul(2))
        .min(MAX_BACKOFF_SECONDS);
    Backoff {
        next: now.saturating_add(wait),
        wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::embedded::MANIFEST;

    fn row(state: &str, valid_before: u64) -> AttemptRow {
        let address = |byte: &str| format!("0x{}", byte.repeat(20));
        AttemptRow {
            id: 1,
            machine: "VM02".into(),
            family: "wallet".into(),
            payer: address("11"),
            amount_atomic: "10000".into(),
            asset: address("22"),
            network: MANIFEST.payment.network.clone(),
            pay_to: address("33"),
            state: state.into(),
            transaction_hash: None,
            nonce: Some(format!("0x{}", "ab".repeat(32))),
            valid_before: Some(valid_before.to_string()),
            failure_reason: None,
            evidence: None,
            created_at: "2026-12-07T12:00:00.000Z".into(),
            request_id: None,
            transfer_log_index: None,
            request_sha256: String::new(),
            collected_again: 0,
            updated_at: "2026-12-07T12:00:00.000Z".into(),
        }
    }

    #[test]
    fn the_pass_leaves_a_call_and_its_buyer_first_and_reads_what_was_refused() {
        const BUYER_FIRST: u64 = 600;
        let valid_before = 1_000;
        let abandoned = valid_before + RESERVED_MARGIN_SECONDS + BUYER_FIRST;
        let due_at = |row: &AttemptRow, now| due(row, now, BUYER_FIRST, None);
        assert!(
            due_at(&row("settle_pending", valid_before), 0),
            "pending: always"
        );
        let reserved = row("reserved", valid_before);
        assert!(
            !due_at(&reserved, abandoned - 1),
            "its call or its buyer first"
        );
        assert!(due_at(&reserved, abandoned), "then nobody came back for it");
        let refused = row("settle_failed", valid_before);
        assert!(due_at(&refused, 0), "it may still be executed");
        let mut unreadable = row("settle_pending", valid_before);
        unreadable.nonce = None;
        assert!(
            !due_at(&unreadable, abandoned),
            "`ledger reconcile` reports it"
        );
        let mut elsewhere = row("settle_pending", valid_before);
        elsewhere.network = "eip155:1".into();
        assert!(!due_at(&elsewhere, abandoned));
    }

    #[test]
    fn an_undecided_row_is_read_again_after_a_wait_that_doubles_up_to_an_hour() {
        let interval = Duration::from_secs(60);
        let first = next_backoff(None, interval, 1_000);
        assert_eq!(
            first,
            Backoff {
                next: 1_060,
                wait: 60
            }
        );
        let pending = row("settle_pending", 5_000);
        assert!(!due(&pending, 1_059, 0, Some(&first)));
        assert!(due(&pending, 1_060, 0, Some(&first)));
        let second = next_backoff(Some(first), interval, 1_060);
        assert_eq!(
            second,
            Backoff {
                next: 1_180,
                wait: 120
            }
        );
        let mut last = second;
        for _ in 0..10 {
            last = next_backoff(Some(last), interval, 0);
        }
        assert_eq!(last.wait, MAX_BACKOFF_SECONDS);
    }
}
