//! `factomat ledger reconcile`: rows whose settlement outcome is unknown or may still change
//! (`reserved` after a crash, `settle_pending` after a wait that ended undecided,
//! `settle_failed`, whose refused authorization may still be executed until `validBefore`) are
//! matched against the chain by the settlement's own rules
//! (`settlement::find`): a receipt with the payment's Transfer → `settled`; the nonce spent by
//! another authorization or cancelled → `nonce_burned`; unused past `validBefore` → `expired`
//! (`settle_failed` from `settle_pending`); anything else is left alone with what was seen.
//! Rows named with `--id` are examined whatever their state: a `settled` row's transaction is
//! re-checked against the Transfer rule and the verdict printed, the row left as it is.
//!
//! Every change is a conditional update from the state that was read, so running it on
//! several replicas at once, or twice, is safe. The service runs the same examination on a
//! timer (`pay::reconcile_pass`), so a payment whose outcome was unknown is recorded without
//! an operator or a resend.

use alloy_primitives::{Address, B256, U256};
use serde::Serialize;

use crate::catalog::embedded::MANIFEST;
use crate::chain::authorization::{AuthorizationReader, PaymentTerms};
use crate::pay::call::strike_until;
use crate::pay::ledger::{AttemptRow, Ledger, LedgerError, Outcome, UNRESOLVED};
use crate::pay::settlement::{self, Finding, Payment};

/// How long past `validBefore` a row still `reserved` is left to the call that reserved it.
/// The gate clips every step of a call to `validBefore` − 6 s, so a row still reserved after
/// this was abandoned (its replica stopped): the chain decides it.
pub(crate) const RESERVED_MARGIN_SECONDS: u64 = 10;
/// What `state_after` says of a row another process moved between the read and the update.
const CHANGED_ELSEWHERE: &str = "changed elsewhere";

/// One examined row, as `--json` prints it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Examined {
    /// The ledger row id.
    pub id: i64,
    /// The machine id.
    pub machine: String,
    /// The payer address.
    pub payer: String,
    /// The EIP-3009 nonce, when the row kept it.
    pub nonce: Option<String>,
    /// The row's state before reconciliation.
    pub state_before: String,
    /// The row's state after (unchanged when the chain could not tell).
    pub state_after: String,
    /// What the chain showed.
    pub evidence: String,
}

/// Why a row's authorization cannot be asked of the chain.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unreadable {
    #[error("network {0} is not reconciled")]
    OtherNetwork(String),
    #[error("the row predates kept nonces: check the payer's transfers by hand")]
    NoNonce,
    #[error("the stored {0} is unreadable")]
    Bad(&'static str),
}

/// What the chain is asked about a row's payment.
pub(crate) fn payment_of(row: &AttemptRow) -> Result<Payment, Unreadable> {
    // The payment chain's reader is the only one reconciliation has.
    if row.network != MANIFEST.payment.network {
        return Err(Unreadable::OtherNetwork(row.network.clone()));
    }
    let nonce = row
        .nonce
        .as_deref()
        .ok_or(Unreadable::NoNonce)?
        .parse::<B256>()
        .map_err(|_| Unreadable::Bad("nonce"))?;
    let address = |text: &str, what| text.parse::<Address>().map_err(|_| Unreadable::Bad(what));
    let terms = PaymentTerms {
        asset: address(&row.asset, "asset")?,
        payer: address(&row.payer, "payer")?,
        pay_to: address(&row.pay_to, "pay_to")?,
        value: U256::from_str_radix(&row.amount_atomic, 10)
            .map_err(|_| Unreadable::Bad("amount"))?,
        nonce,
    };
    let valid_before = row
        .valid_before
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or(Unreadable::Bad("validBefore"))?;
    let presented_at = chrono::DateTime::parse_from_rfc3339(&row.created_at)
        .ok()
        .and_then(|at| u64::try_from(at.timestamp()).ok())
        .ok_or(Unreadable::Bad("created_at"))?;
    Ok(Payment {
        terms,
        presented_at,
        valid_before,
    })
}

/// The outcome a finding gives a row in `state`, if any. Rows whose state is final
/// (`settled`, `work_failed`, `nonce_burned`, `expired`) stay as they are; a nonce found
/// burned strikes its payer until `burn_strike_until`, as a burn found at settlement does,
/// unless the row was `settle_failed`: its buyer was told it was unpaid and invited to pay
/// afresh, and cancelling the refused authorization (so it can never be charged besides the
/// new one) is what a careful buyer does.
pub(crate) fn outcome_of(
    state: &str,
    finding: &Finding,
    burn_strike_until: Option<u64>,
) -> Option<Outcome> {
    match (finding, state) {
        (_, "settled" | "work_failed" | "nonce_burned" | "expired")
        | (Finding::Unknown { .. }, _) => None,
        (
            Finding::Paid {
                transaction,
                transfer_log_index,
                evidence,
            },
            _,
        ) => Some(Outcome::Settled {
            transaction: transaction.clone(),
            transfer_log_index: Some(*transfer_log_index),
            evidence: Some(evidence.clone()),
        }),
        (
            Finding::Burned {
                transaction,
                evidence,
            },
            _,
        ) => Some(Outcome::NonceBurned {
            transaction: transaction.clone(),
            evidence: evidence.clone(),
            strike_until: burn_strike_until.filter(|_| state != "settle_failed"),
        }),
        (Finding::Unpaid { evidence }, "settle_pending") => Some(Outcome::SettleFailed {
            reason: settlement::SETTLEMENT_FAILED.into(),
            evidence: Some(evidence.clone()),
            strike_until: None,
        }),
        (Finding::Unpaid { evidence }, _) => Some(Outcome::Expired {
            evidence: evidence.clone(),
        }),
    }
}

fn evidence_of(finding: &Finding) -> String {
    match finding {
        Finding::Paid { evidence, .. }
        | Finding::Burned { evidence, .. }
        | Finding::Unpaid { evidence }
        | Finding::Unknown { evidence } => evidence.clone(),
    }
}

/// Examines one row and records what the chain says.
pub(crate) async fn examine(
    ledger: &Ledger,
    chain: &AuthorizationReader,
    row: &AttemptRow,
    strike_seconds: u64,
) -> Result<Examined, LedgerError> {
    let finding = match payment_of(row) {
        Err(why) => Finding::Unknown {
            evidence: why.to_string(),
        },
        Ok(payment) => settlement::find(chain, &payment, row.transaction_hash.as_deref()).await,
    };
    let mut evidence = evidence_of(&finding);
    if row.state == "settled" && !matches!(finding, Finding::Paid { .. }) {
        evidence =
            format!("NOT proven by a Transfer of the row's terms, check by hand: {evidence}");
    }
    let mut state_after = row.state.clone();
    if let Some(outcome) = outcome_of(&row.state, &finding, strike_until(strike_seconds)) {
        match ledger.resolve(row.id, &row.state, &outcome).await {
            Ok(true) => state_after = outcome.state().to_string(),
            Ok(false) => {
                evidence = format!("{evidence}; another process changed the row first");
                state_after = CHANGED_ELSEWHERE.into();
            }
            Err(LedgerError::Duplicate) => {
                evidence =
                    format!("{evidence}; that Transfer already proves another row: left alone");
            }
            Err(error) => return Err(error),
        }
    }
    Ok(Examined {
        id: row.id,
        machine: row.machine.clone(),
        payer: row.payer.clone(),
        nonce: row.nonce.clone(),
        state_before: row.state.clone(),
        state_after,
        evidence,
    })
}

/// Reconciles every `reserved`, `settle_pending` and `settle_failed` row, or only the rows
/// named by `ids` (a row in a final state is examined and reported, never changed). A nonce
/// found burned strikes its payer for `strike_seconds`.
pub async fn run(
    ledger: &Ledger,
    chain: &AuthorizationReader,
    ids: &[i64],
    strike_seconds: u64,
) -> Result<Vec<Examined>, LedgerError> {
    let rows = if ids.is_empty() {
        ledger.unresolved().await?
    } else {
        ledger.rows_by_id(ids).await?
    };
    let mut examined = Vec::new();
    for row in rows {
        let entry = examine(ledger, chain, &row, strike_seconds).await?;
        tracing::info!(
            attempt = entry.id, before = %entry.state_before, after = %entry.state_after,
            evidence = %entry.evidence, "reconciled"
        );
        examined.push(entry);
    }
    Ok(examined)
}

impl Examined {
    /// Whether the chain moved the row (not "changed elsewhere", which another process did).
    pub fn decided(&self) -> bool {
        self.state_after != self.state_before && self.state_after != CHANGED_ELSEWHERE
    }
}

/// The examined rows as a text table.
pub fn render_text(examined: &[Examined]) -> String {
    if examined.is_empty() {
        return format!("no {} rows: nothing to reconcile\n", UNRESOLVED.join(", "));
    }
    let mut out = String::from("id  machine  state before -> after  evidence\n");
    for e in examined {
        out.push_str(&format!(
            "{}  {}  {} -> {}  {}\n",
            e.id, e.machine, e.state_before, e.state_after, e.evidence
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burn_found_later_strikes_unless_refused_and_final_rows_are_never_changed() {
        let burned = Finding::Burned {
            transaction: format!("0x{}", "cd".repeat(32)),
            evidence: "AuthorizationUsed by another authorization".into(),
        };
        let Some(Outcome::NonceBurned { strike_until, .. }) =
            outcome_of("settle_pending", &burned, Some(99))
        else {
            panic!("a pending row whose nonce was burned is nonce_burned");
        };
        assert_eq!(strike_until, Some(99));
        let Some(Outcome::NonceBurned { strike_until, .. }) =
            outcome_of("settle_failed", &burned, Some(99))
        else {
            panic!("a refused row whose nonce was then spent is nonce_burned");
        };
        assert_eq!(strike_until, None, "told unpaid, the buyer may cancel it");
        let unpaid = Finding::Unpaid {
            evidence: "unused past validBefore".into(),
        };
        for state in ["settled", "work_failed", "nonce_burned", "expired"] {
            assert_eq!(outcome_of(state, &burned, Some(99)), None, "{state}");
            assert_eq!(outcome_of(state, &unpaid, Some(99)), None, "{state}");
        }
        assert!(matches!(
            outcome_of("settle_failed", &unpaid, Some(99)),
            Some(Outcome::Expired { .. })
        ));
    }
}
