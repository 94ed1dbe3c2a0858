//! One paid call's shared vocabulary: the rail it runs on (`PaymentRail`), what the gate is
//! asked (`PaidCall`), and how a call may end (`PaidOutcome`, `Refusal`). The gate orders the
//! steps; `collect` answers resends; both speak these types.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use serde_json::Value;

use crate::catalog::manifest::Machine;
use crate::chain::authorization::AuthorizationReader;
use crate::pay::echo::Declared;
use crate::pay::facilitator::FacilitatorClient;
use crate::pay::ledger::{Ledger, LedgerError};
use crate::pay::listing::ListingBoard;
use crate::pay::local_check::PaymentDomain;
use crate::pay::retained::{Answer, Finisher, Retention};
use crate::pay::row_locks::RowLocks;
use crate::pay::settlement::PendingReads;
use crate::support::metrics::metrics;

/// The 402 reason of a payment already presented (on another request, or unknown).
pub(crate) const ALREADY_PRESENTED: &str = "payment_nonce_already_presented";
/// The 402 reason of a payment whose nonce another authorization spent.
pub(crate) const NONCE_BURNED: &str = "payment_nonce_burned";
/// The 402 reason of a payer refused during the cooling period after an unpaid payment.
pub(crate) const PAYER_STRUCK: &str = "payer_recently_unpaid";

/// How far past its own `overall_timeout_ms` a machine's work may run before the gate cuts
/// it (the settle margin of `window` absorbs it).
pub(crate) const WORK_GRACE: Duration = Duration::from_secs(2);

/// The configured facilitator and ledger, and what the local check needs.
pub(crate) struct PaymentRail {
    /// The facilitator client (`/verify`, `/settle`, `/supported`).
    pub facilitator: FacilitatorClient,
    /// Where every paid attempt is recorded.
    pub ledger: Arc<Ledger>,
    /// Reads the payment chain when a settlement's outcome is not a plain success; None
    /// without an eip155:8453 RPC endpoint.
    pub chain: Option<AuthorizationReader>,
    /// The asset's EIP-712 domain (`local_check::payment_domain`).
    pub domain: PaymentDomain,
    /// How long an unknown settlement is followed on chain.
    pub settlement_wait: Duration,
    /// How long a payer whose verified payment ended unpaid is refused (seconds; 0 = off).
    pub strike_seconds: u64,
    /// Payments refused by the local check, which never reached the facilitator.
    pub refused_locally: AtomicU64,
    /// Smart-wallet signatures passed to the facilitator unchecked.
    pub signatures_deferred: AtomicU64,
    /// What the index said about each machine's listing (`EXTENSION-RESPONSES`).
    pub listing: ListingBoard,
    /// How paid answers are retained for collecting again, and results held while their
    /// settlement is pending.
    pub retention: Retention,
    /// Recent chain readings about pending rows (resends of a pending payment).
    pub pending_reads: PendingReads,
    /// One re-run at a time of a paid row's work whose answer was not retained.
    pub reruns: RowLocks,
}

impl PaymentRail {
    /// The chain reader, when it may decide a payment's outcome: one of its endpoints has
    /// answered `eth_chainId` 8453. An unverified reader never concludes "unpaid".
    pub(crate) fn trusted_chain(&self) -> Option<&AuthorizationReader> {
        self.chain.as_ref().filter(|chain| chain.trusted())
    }
}

/// One paid call as the gate sees it: what is sold, what must be paid, and the payment.
pub(crate) struct PaidCall<'a> {
    /// The manifest entry of the machine sold.
    pub machine: &'a Machine,
    /// The PaymentRequirements a payment's `accepted` must match.
    pub requirement: &'a Value,
    /// What the route's 402 declared (resource, extensions).
    pub declared: &'a Declared,
    /// Our configured payTo address.
    pub pay_to: &'a str,
    /// sha256 of the canonical request (docs/hashing.md).
    pub request_sha256: &'a str,
    /// The `PAYMENT-SIGNATURE` header.
    pub header: &'a [u8],
    /// The request's `x-request-id`, kept in the ledger row.
    pub request_id: &'a str,
    /// Turns a settled result into the 200 that goes out (the edge's evidence seal).
    pub finisher: &'a dyn Finisher,
}

/// A refusal of ours on the paid path: this call charged nothing (a resend of a payment made
/// earlier says so in its text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// The ledger cannot record the attempt.
    #[error("the settlement ledger is unavailable; nothing was charged")]
    LedgerUnavailable,
    /// The facilitator did not answer a step.
    #[error("the payment facilitator did not answer {step}; no work ran and nothing was charged")]
    FacilitatorUnavailable {
        /// `verify` or `settle`.
        step: &'static str,
    },
    /// Our payee or this machine's price cannot be read (a configuration fault).
    #[error("the payee or price of this machine cannot be read; nothing was charged")]
    Misconfigured,
    /// The work failed; the payment was not settled.
    #[error(
        "the observation could not be produced; the payment was not settled and nothing was charged"
    )]
    WorkFailed,
    /// The work run once more for a payment settled earlier failed: nothing more is charged,
    /// and the same resend may try again within its window.
    #[error(
        "the observation could not be produced this time; this payment was settled earlier and nothing more is charged: send the identical request again within its window, and do not sign a new payment"
    )]
    RerunFailed,
    /// The ledger could not be read for a resend, which may be of a payment made earlier.
    #[error(
        "the settlement ledger is unavailable; nothing new was charged: if this payment was made before, send the identical request again shortly, and do not sign a new payment"
    )]
    LedgerUnavailableOnResend,
    /// The payment-identifier `id` is outside the extension's bounds.
    #[error(
        "extensions[\"payment-identifier\"].info.id must be 16 to 128 characters of A-Z, a-z, 0-9, '_' and '-'; nothing was verified or charged"
    )]
    IdentifierInvalid,
    /// The payment-identifier `id` is bound to another payment or request.
    #[error(
        "this payment identifier was already used with another payment or request; nothing ran and nothing was charged"
    )]
    IdentifierConflict,
    /// The same payment is still being processed: its answer will be collectable.
    #[error(
        "this payment is still being processed; send the identical request again shortly to collect its answer, and do not sign a new payment"
    )]
    InProgress,
    /// The nonce's earlier presentation has no answer here to collect and its outcome is not
    /// known yet (still running, or its settlement undecided): it may still be charged.
    #[error(
        "this payment is still being processed or its settlement is not decided yet, and it may still be charged; no answer of it is kept for this request: do not sign a new payment for it, send the identical request again later to learn its outcome"
    )]
    OutcomeUnknown,
}

impl Refusal {
    /// The stable error code of the refusal.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Refusal::LedgerUnavailable => "ledger_unavailable",
            Refusal::FacilitatorUnavailable { .. } => "facilitator_unavailable",
            Refusal::WorkFailed => "work_failed",
            Refusal::RerunFailed => "paid_work_failed",
            Refusal::LedgerUnavailableOnResend => "ledger_unavailable",
            Refusal::Misconfigured => "payment_misconfigured",
            Refusal::IdentifierInvalid => "invalid_payment_identifier",
            Refusal::IdentifierConflict => "payment_identifier_conflict",
            Refusal::InProgress | Refusal::OutcomeUnknown => "payment_in_progress",
        }
    }
}

/// What the gate decided; the server turns it into HTTP.
#[derive(Debug)]
pub(crate) enum PaidOutcome {
    /// The paid answer as it goes out (first sent, or collected again).
    Answered(Answer),
    /// 402 with a fresh challenge whose `error` names the reason; nothing ran or was charged.
    Rejected { reason: Rejection },
    /// 402 with PAYMENT-RESPONSE success:false; unpaid when decided (unused on chain), the
    /// result withheld.
    SettleFailed {
        reason: String,
        payment_response: String,
    },
    /// 503 with `Retry-After` and PAYMENT-RESPONSE `settlement_pending`, and no fresh
    /// challenge: the payment's outcome is unknown, the buyer must not pay again.
    Pending {
        transaction: Option<String>,
        retry_after_seconds: u64,
        payment_response: String,
    },
    /// A refusal of ours; nothing was charged.
    Failed(Refusal),
}

/// Why a payment gets a fresh challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// One of our own codes.
    Ours(&'static str),
    /// A reason the facilitator reported: an open string, so its metric label is bounded.
    Reported(String),
}

impl Rejection {
    /// The reason as the challenge's `error` names it.
    pub(crate) fn code(&self) -> &str {
        match self {
            Rejection::Ours(code) => code,
            Rejection::Reported(reason) => reason,
        }
    }

    /// Counts it in `payments{outcome="rejected"}`: once, for the refusal the buyer gets (a
    /// refusal replaced by its nonce's answer on the way is not counted).
    pub(crate) fn count(&self) {
        match self {
            Rejection::Ours(code) => metrics().payment("rejected", code),
            Rejection::Reported(reason) => metrics().payment_reported("rejected", reason),
        }
    }
}

/// A 402 with a fresh challenge naming `reason`, one of our own codes.
pub(crate) fn reject(reason: &'static str) -> PaidOutcome {
    PaidOutcome::Rejected {
        reason: Rejection::Ours(reason),
    }
}

/// A 402 with a fresh challenge naming a reason the facilitator reported.
pub(crate) fn reject_reported(reason: String) -> PaidOutcome {
    PaidOutcome::Rejected {
        reason: Rejection::Reported(reason),
    }
}

/// Now, in unix seconds.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// Until when a payer whose payment ended unpaid by their doing is refused before `/verify`
/// (`unpaid_strike_seconds` from now; none when it is 0).
pub(crate) fn strike_until(strike_seconds: u64) -> Option<u64> {
    (strike_seconds > 0).then(|| unix_now().saturating_add(strike_seconds))
}

/// A 503 for a ledger that cannot answer.
pub(crate) fn ledger_failure(error: &LedgerError) -> PaidOutcome {
    tracing::error!(%error, "ledger failure");
    PaidOutcome::Failed(Refusal::LedgerUnavailable)
}

/// A ledger failure while a resend is looked up: the buyer may have paid before.
pub(crate) fn resend_ledger_failure(error: &LedgerError) -> PaidOutcome {
    tracing::error!(%error, "ledger failure on a resend");
    PaidOutcome::Failed(Refusal::LedgerUnavailableOnResend)
}
