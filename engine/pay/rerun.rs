//! The work of a paid row whose answer was not retained, run once more for its buyer
//! (`collect` decides when): the answer goes out as a paid 200 naming the row's transaction,
//! without `/verify` or `/settle`, and is retained like a first answer (at a window of zero,
//! its binding goes instead, as after any delivery). The row's re-run lock is held until
//! then, so concurrent resends collect this answer, or at a window of zero hear that it was
//! delivered (402 `payment_answer_expired`), instead of running the work.

use crate::pay::call::{PaidOutcome, Refusal, WORK_GRACE};
use crate::pay::collect::{Rerun, Resend};
use crate::pay::ledger::{Binding, LedgerError};
use crate::pay::retained::{self, Answer};
use crate::pay::settlement::our_settle_response;
use crate::support::metrics::metrics;

impl Resend<'_> {
    /// Runs `work` for the paid row of `rerun` and answers with it, retained (`keep`).
    pub(crate) async fn run_again<E: std::fmt::Display>(
        &self,
        rerun: Rerun,
        work: impl Future<Output = Result<Vec<u8>, E>>,
    ) -> PaidOutcome {
        let machine = self.call.machine;
        let budget = machine.overall_timeout() + WORK_GRACE;
        let body = match tokio::time::timeout(budget, work).await {
            Ok(Ok(body)) => body,
            Ok(Err(error)) => {
                tracing::error!(machine = %machine.machine, %error, attempt = rerun.row.id, "the paid work run again failed");
                return PaidOutcome::Failed(Refusal::RerunFailed);
            }
            Err(_) => return PaidOutcome::Failed(Refusal::RerunFailed),
        };
        let network = &self.manifest.payment.network;
        let transaction = rerun.row.transaction_hash.as_deref();
        let response = our_settle_response(network, &rerun.row.payer, true, None, transaction);
        let answer = self.call.finisher.finish(body, &response);
        self.keep(&rerun, &answer).await;
        metrics().retained("collected");
        PaidOutcome::Answered(answer)
    }

    /// Retains the answer run again under this payment's binding, until its window ends; when
    /// none is kept of a delivered answer bought this way (a window of zero), the binding
    /// goes, as after any delivery.
    async fn keep(&self, rerun: &Rerun, answer: &Answer) {
        let attempt = rerun.row.id;
        if !self.rail.retention.keeps_delivered(self.lookup) {
            if let Err(error) = self.rail.ledger.forget(attempt).await {
                tracing::warn!(%error, attempt, "could not remove a delivered answer's binding");
            }
            return;
        }
        let binding = Binding {
            lookup_sha256: self.lookup.key_hex(),
            id_sha256: self.lookup.id_sha256.clone(),
        };
        let stored = match retained::seal(&self.rail.retention.secret, self.lookup, answer) {
            Ok(sealed) => {
                let until = rerun.collectable_until;
                self.rail
                    .ledger
                    .retain(attempt, &binding, &sealed, until)
                    .await
            }
            Err(error) => Err(LedgerError::Storage(error.to_string())),
        };
        match stored {
            Ok(()) => {
                if let Err(error) = self.rail.ledger.note_collected(attempt).await {
                    tracing::warn!(%error, attempt, "could not count a collected answer");
                }
            }
            Err(error) => {
                tracing::error!(%error, attempt, "the answer run again was not retained")
            }
        }
    }
}
