//! What a paid call's settlement makes of its reserved row: the ledger record (with the
//! answer retained in the same transaction) and the buyer's answer — paid, withheld or
//! pending (docs/payment.md, "What happens to my money").

use alloy_primitives::Address;
use serde_json::Value;

use crate::catalog::manifest::{Machine, Manifest};
use crate::pay::call::{NONCE_BURNED, PaidOutcome, PaymentRail, Refusal, strike_until, unix_now};
use crate::pay::facilitator::SETTLEMENT_PENDING;
use crate::pay::ledger::{Keep, LedgerError, Outcome, refusal_may_still_run};
use crate::pay::retained::{self, Answer, Finisher, Lookup, Retention};
use crate::pay::settlement::{Settlement, encoded, our_settle_response};
use crate::support::json_value::non_empty_str;
use crate::support::metrics::metrics;

/// Records a paid call whose work failed or overran its budget: nothing is settled, so the
/// buyer is not charged.
pub(super) async fn work_failed(
    rail: &PaymentRail,
    id: i64,
    machine: &Machine,
    reason: String,
) -> PaidOutcome {
    tracing::error!(machine = %machine.machine, error = %reason, "paid work failed; not settling");
    metrics().payment("work_failed", "");
    if let Err(e) = rail
        .ledger
        .finish(id, &Outcome::WorkFailed { reason })
        .await
    {
        tracing::error!(error = %e, attempt = id, "could not record work_failed");
    }
    PaidOutcome::Failed(Refusal::WorkFailed)
}

/// The reserved row of one paid call, and what its answer is made of.
pub(super) struct Row<'a> {
    pub(super) rail: &'a PaymentRail,
    /// The reserved row's id.
    pub(super) id: i64,
    pub(super) machine: &'a Machine,
    pub(super) manifest: &'a Manifest,
    /// Who signed the payment.
    pub(super) payer: Address,
    /// The authorization's `validBefore` (unix seconds).
    pub(super) valid_before: u64,
    /// Where the answer is retained.
    pub(super) lookup: &'a Lookup,
    pub(super) finisher: &'a dyn Finisher,
}

impl Row<'_> {
    /// Until when the payer is refused, when the payment ended unpaid by their doing.
    fn strike_until(&self) -> Option<u64> {
        strike_until(self.rail.strike_seconds)
    }

    /// Our own SettleResponse, encoded for PAYMENT-RESPONSE.
    fn response(&self, success: bool, reason: Option<&str>, transaction: Option<&str>) -> String {
        let payer = self.payer.to_checksum(None);
        let network = &self.manifest.payment.network;
        our_settle_response(network, &payer, success, reason, transaction)
    }

    /// The facilitator's SettleResponse with what x402 lets it leave out (`payer`, `network`,
    /// `transaction`) filled in from the payment: the receipt and the seal state them, and a
    /// buyer reads them. A `payer` other than the authorization's signer is replaced: the
    /// signature check and the chain's Transfer name the signer, and our evidence states what
    /// we proved.
    fn completed(&self, mut response: Value, transaction: &str) -> Value {
        let payer = self.payer.to_checksum(None);
        let said_payer = non_empty_str(&response, "payer").map(str::to_string);
        let has_network = non_empty_str(&response, "network").is_some();
        let has_transaction = non_empty_str(&response, "transaction").is_some();
        let Some(fields) = response.as_object_mut() else {
            return response;
        };
        match said_payer {
            Some(said) if said.eq_ignore_ascii_case(&payer) => {}
            said => {
                if said.is_some() {
                    tracing::warn!(attempt = self.id, facilitator_payer = ?said, %payer, "the facilitator named another payer; stating the signer");
                }
                fields.insert("payer".into(), Value::String(payer));
            }
        }
        if !has_network {
            let network = self.manifest.payment.network.clone();
            fields.insert("network".into(), Value::String(network));
        }
        if !has_transaction {
            fields.insert("transaction".into(), Value::String(transaction.to_string()));
        }
        response
    }

    /// The answer sealed for retention, when sealing works.
    fn sealed(&self, answer: &Answer) -> Option<(&Retention, Vec<u8>)> {
        let retention = &self.rail.retention;
        retained::seal(&retention.secret, self.lookup, answer)
            .map_err(|error| {
                tracing::error!(%error, attempt = self.id, "answer not retained");
            })
            .ok()
            .map(|sealed| (retention, sealed))
    }

    /// Records the outcome, retaining `answer` with it in one transaction: a held result
    /// always, a delivered answer unless its window is zero (then its binding goes with it).
    async fn finish(
        &self,
        outcome: &Outcome,
        answer: &Answer,
        held: bool,
    ) -> Result<(), LedgerError> {
        if !held && !self.rail.retention.keeps_delivered(self.lookup) {
            let ledger = &self.rail.ledger;
            return ledger.finish_keeping(self.id, outcome, Keep::Forget).await;
        }
        let Some((retention, sealed)) = self.sealed(answer) else {
            return self.rail.ledger.finish(self.id, outcome).await;
        };
        let collectable_until =
            (!held).then(|| retention.collectable_until(self.lookup, unix_now()));
        let keep = Keep::Store {
            sealed: &sealed,
            held,
            collectable_until,
        };
        self.rail
            .ledger
            .finish_keeping(self.id, outcome, keep)
            .await?;
        metrics().retained("retained");
        Ok(())
    }

    /// Records `outcome` with the result held (sealed, without payment headers) until the
    /// chain decides: the buyer collects it by sending the identical request again.
    async fn hold(&self, outcome: &Outcome, body: Vec<u8>) {
        let held = Answer {
            status: 200,
            body,
            headers: Vec::new(),
        };
        if let Err(error) = self.finish(outcome, &held, true).await {
            tracing::error!(%error, attempt = self.id, state = outcome.state(), "could not record the settlement outcome");
        }
    }

    async fn finish_logged(&self, outcome: &Outcome) {
        finish_logged(self.rail, self.id, outcome).await;
    }

    /// Records the settlement and decides the answer.
    pub(super) async fn record(&self, settled: Settlement, body: Vec<u8>) -> PaidOutcome {
        match settled {
            Settlement::Paid {
                transaction,
                transfer_log_index,
                response,
                evidence,
            } => {
                self.paid(transaction, transfer_log_index, response, evidence, body)
                    .await
            }
            Settlement::Burned {
                transaction,
                evidence,
            } => self.burned(transaction, evidence).await,
            Settlement::Unpaid {
                reason,
                response,
                evidence,
                payer_fault,
            } => {
                self.unpaid(reason, response, evidence, payer_fault, body)
                    .await
            }
            Settlement::Pending {
                transaction,
                evidence,
            } => self.pending(transaction, evidence, body).await,
        }
    }

    async fn paid(
        &self,
        transaction: String,
        transfer_log_index: Option<u64>,
        response: Option<Value>,
        evidence: Option<String>,
        body: Vec<u8>,
    ) -> PaidOutcome {
        let outcome = Outcome::Settled {
            transaction: transaction.clone(),
            transfer_log_index,
            evidence,
        };
        let payment_response = match response {
            Some(response) => encoded(&self.completed(response, &transaction)),
            None => self.response(true, None, Some(&transaction)),
        };
        let answer = self.finisher.finish(body, &payment_response);
        match self.finish(&outcome, &answer, false).await {
            Err(LedgerError::Duplicate) => {
                let evidence = format!("the Transfer in {transaction} already proves another row");
                return self.burned(transaction, evidence).await;
            }
            // Paid on chain: deliver; the row left reserved is reported at start-up.
            Err(error) => tracing::error!(%error, attempt = self.id, "settled but not recorded"),
            Ok(()) => {}
        }
        tracing::info!(machine = %self.machine.machine, %transaction, "payment settled");
        metrics().payment("settled", "");
        PaidOutcome::Answered(answer)
    }

    async fn burned(&self, transaction: String, evidence: String) -> PaidOutcome {
        tracing::warn!(machine = %self.machine.machine, %transaction, %evidence, "the payment's nonce was spent by another authorization; result withheld");
        metrics().payment("nonce_burned", "");
        let outcome = Outcome::NonceBurned {
            transaction: transaction.clone(),
            evidence,
            strike_until: self.strike_until(),
        };
        self.finish_logged(&outcome).await;
        PaidOutcome::SettleFailed {
            reason: NONCE_BURNED.into(),
            payment_response: self.response(false, Some(NONCE_BURNED), Some(&transaction)),
        }
    }

    async fn unpaid(
        &self,
        reason: String,
        response: Option<Value>,
        evidence: String,
        payer_fault: bool,
        body: Vec<u8>,
    ) -> PaidOutcome {
        tracing::warn!(machine = %self.machine.machine, %reason, %evidence, "settlement failed; result withheld");
        metrics().payment("settle_failed", "");
        let outcome = Outcome::SettleFailed {
            reason: reason.clone(),
            evidence: Some(evidence),
            strike_until: self.strike_until().filter(|_| payer_fault),
        };
        if refusal_may_still_run(Some(&reason)) {
            // Refused before broadcasting: someone may still execute the authorization until
            // `validBefore`. Should the reconcile pass find it paid, a resend collects this.
            self.hold(&outcome, body).await;
        } else {
            self.finish_logged(&outcome).await;
        }
        let payment_response = match response {
            Some(mut response) => {
                response["success"] = Value::Bool(false);
                if response.get("transaction").is_none() {
                    response["transaction"] = Value::String(String::new());
                }
                encoded(&response)
            }
            None => self.response(false, Some(&reason), None),
        };
        PaidOutcome::SettleFailed {
            reason,
            payment_response,
        }
    }

    async fn pending(
        &self,
        transaction: Option<String>,
        evidence: String,
        body: Vec<u8>,
    ) -> PaidOutcome {
        tracing::warn!(machine = %self.machine.machine, transaction = ?transaction, %evidence, "settlement outcome unknown after the wait; answering pending");
        metrics().payment("settle_pending", "");
        let outcome = Outcome::SettlePending {
            transaction: transaction.clone(),
            evidence,
        };
        self.hold(&outcome, body).await;
        let response = self.response(false, Some(SETTLEMENT_PENDING), transaction.as_deref());
        PaidOutcome::Pending {
            transaction,
            retry_after_seconds: self.valid_before.saturating_sub(unix_now()).max(1),
            payment_response: response,
        }
    }
}

async fn finish_logged(rail: &PaymentRail, id: i64, outcome: &Outcome) {
    if let Err(error) = rail.ledger.finish(id, outcome).await {
        tracing::error!(%error, attempt = id, state = outcome.state(), "could not record the settlement outcome");
    }
}
