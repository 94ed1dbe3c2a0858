//! The x402 payment gate of a structurally valid request that carries `PAYMENT-SIGNATURE`.
//! It keeps only the order of the steps; each step's rules live in their own module:
//!
//! decode → `accepted` and the buyer's echo (`echo`) → the authorization's window (`window`)
//! → the local check (`local_check`) → the ledger's nonce and strike pre-check → facilitator
//! `/verify` → ledger reserve → the machine's work → the settlement (`settlement`) → ledger
//! record.
//!
//! A payment refused before `/verify` never costs an outbound request. Nothing goes outbound
//! before `/verify` says the payment is valid, and the unique nonce in the ledger makes sure
//! one authorization runs the work at most once.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use alloy::sol_types::Eip712Domain;
use alloy_primitives::{Address, B256, U256};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::catalog::manifest::{Machine, Manifest};
use crate::chain::authorization::{AuthorizationReader, PaymentTerms};
use crate::pay::echo::{self, Declared};
use crate::pay::facilitator::{FacilitatorClient, FacilitatorError, SETTLEMENT_PENDING};
use crate::pay::ledger::{Ledger, LedgerError, NewAttempt, Outcome};
use crate::pay::listing::ListingBoard;
use crate::pay::local_check::{self, Expected, LocalVerdict};
use crate::pay::settlement::{self, Payment, Settlement, Settling};
use crate::pay::window::{self, Bounds, WindowRefusal};
use crate::support::canonical::{canonical_sha256, sha256_hex};
use crate::support::metrics::metrics;

/// Payment headers are small; anything larger is not a payment.
const MAX_PAYMENT_HEADER_BYTES: usize = 16 * 1024;
/// How far past its own `overall_timeout_ms` a machine's work may run before the gate cuts
/// it (the settle margin of `window` absorbs it).
const WORK_GRACE: Duration = Duration::from_secs(2);
/// The 402 reason of a payment whose nonce another authorization spent.
pub(crate) const NONCE_BURNED: &str = "payment_nonce_burned";
/// The 402 reason of a payer refused during the cooling period after an unpaid payment.
pub(crate) const PAYER_STRUCK: &str = "payer_recently_unpaid";

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
    pub domain: Eip712Domain,
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
}

impl PaymentRail {
    /// The chain reader, when it may decide a payment's outcome: one of its endpoints has
    /// answered `eth_chainId` 8453. An unverified reader never concludes "unpaid".
    fn trusted_chain(&self) -> Option<&AuthorizationReader> {
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
    /// The request as received, for the ledger's request hash.
    pub request: &'a Value,
    /// The `PAYMENT-SIGNATURE` header.
    pub header: &'a [u8],
    /// The request's `x-request-id`, kept in the ledger row.
    pub request_id: &'a str,
}

/// A refusal of ours on the paid path: nothing was charged.
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
}

impl Refusal {
    /// The stable error code of the refusal.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Refusal::LedgerUnavailable => "ledger_unavailable",
            Refusal::FacilitatorUnavailable { .. } => "facilitator_unavailable",
            Refusal::WorkFailed => "work_failed",
            Refusal::Misconfigured => "payment_misconfigured",
        }
    }
}

/// What the gate decided; the server turns it into HTTP.
#[derive(Debug)]
pub(crate) enum PaidOutcome {
    /// 200 with the result and the PAYMENT-RESPONSE header value.
    Delivered {
        body: Value,
        payment_response: String,
    },
    /// 402 with a fresh challenge whose `error` names the reason; nothing ran or was charged.
    Rejected { reason: String },
    /// 402 with PAYMENT-RESPONSE success:false; unpaid for sure, the result withheld.
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

/// The parts of a PaymentPayload the gate relies on.
struct Presented {
    payload: Value,
    payer: Address,
    nonce_sha256: String,
    nonce: B256,
    valid_before: u64,
}

fn reject(reason: &str) -> PaidOutcome {
    metrics().payment("rejected", reason);
    PaidOutcome::Rejected {
        reason: reason.to_string(),
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// Decodes a `PAYMENT-SIGNATURE`: base64 of JSON, x402Version 2, an authorization with a
/// nonce, a payer and a `validBefore`.
fn decode(header: &[u8]) -> Result<Presented, PaidOutcome> {
    if header.len() > MAX_PAYMENT_HEADER_BYTES {
        return Err(reject("invalid_payload"));
    }
    let trimmed = std::str::from_utf8(header)
        .map(str::trim)
        .map_err(|_| reject("invalid_payload"))?;
    let bytes = STANDARD
        .decode(trimmed)
        .map_err(|_| reject("invalid_payload"))?;
    let payload: Value = serde_json::from_slice(&bytes).map_err(|_| reject("invalid_payload"))?;
    if payload.get("x402Version").and_then(Value::as_u64) != Some(2) {
        return Err(reject("invalid_x402_version"));
    }
    let authorization = payload.pointer("/payload/authorization");
    let field = |name: &str| {
        authorization
            .and_then(|a| a.get(name))
            .and_then(Value::as_str)
    };
    let nonce: B256 = field("nonce")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| reject("invalid_payload"))?;
    let payer: Address = field("from")
        .and_then(|f| Address::from_str(f).ok())
        .ok_or_else(|| reject("invalid_payload"))?;
    let valid_before = field("validBefore")
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| reject("invalid_payload"))?;
    Ok(Presented {
        nonce_sha256: sha256_hex(nonce.as_slice()),
        nonce,
        valid_before,
        payer,
        payload,
    })
}

/// The window check: the call's deadline, or a 402 before any outbound request.
fn call_deadline(
    rail: &PaymentRail,
    machine: &Machine,
    manifest: &Manifest,
    presented: &Presented,
) -> Result<Instant, PaidOutcome> {
    let bounds = Bounds {
        verify: rail.facilitator.verify_timeout(),
        work: machine.overall_timeout(),
        max_timeout_seconds: manifest.payment.max_timeout_seconds,
    };
    window::deadline(presented.valid_before, unix_now(), &bounds).map_err(|refusal| {
        rail.refused_locally.fetch_add(1, Ordering::Relaxed);
        let kind = match refusal {
            WindowRefusal::TooShort => "too_short",
            WindowRefusal::TooLong => "too_long",
        };
        tracing::info!(machine = %machine.machine, window = kind, %refusal, "payment refused before /verify");
        reject("invalid_exact_evm_payload_authorization_valid_before")
    })
}

/// The local check (no network); a refusal is counted and answered like the facilitator's.
fn check_locally(
    rail: &PaymentRail,
    machine: &Machine,
    pay_to: &str,
    presented: &Presented,
) -> Result<(), PaidOutcome> {
    let (Ok(pay_to), Ok(amount)) = (
        Address::from_str(pay_to),
        U256::from_str_radix(&machine.price_atomic, 10),
    ) else {
        return Err(PaidOutcome::Failed(Refusal::Misconfigured));
    };
    let expected = Expected {
        domain: &rail.domain,
        pay_to,
        amount,
        now: unix_now(),
    };
    let payload = presented.payload.get("payload").unwrap_or(&Value::Null);
    match local_check::check(payload, &expected) {
        Ok(LocalVerdict::Checked) => Ok(()),
        Ok(LocalVerdict::SignatureDeferred) => {
            rail.signatures_deferred.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        Err(refusal) => {
            rail.refused_locally.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(machine = %machine.machine, reason = refusal.reason(), %refusal, "payment refused before /verify");
            Err(reject(refusal.reason()))
        }
    }
}

/// The ledger's pre-check: a nonce already presented, or a payer in its cooling period.
async fn precheck(rail: &PaymentRail, presented: &Presented) -> Result<(), PaidOutcome> {
    let payer = format!("{:#x}", presented.payer);
    match rail
        .ledger
        .precheck(&presented.nonce_sha256, &payer, unix_now())
        .await
    {
        Ok(found) if found.nonce_known => Err(reject("payment_nonce_already_presented")),
        Ok(found) if found.payer_struck => {
            metrics().payment("payer_struck", "");
            tracing::info!(%payer, "payer refused before /verify: a recent verified payment ended unpaid");
            Err(reject(PAYER_STRUCK))
        }
        Ok(_) => Ok(()),
        Err(error) => Err(ledger_failure(&error)),
    }
}

fn ledger_failure(error: &LedgerError) -> PaidOutcome {
    tracing::error!(%error, "ledger failure");
    PaidOutcome::Failed(Refusal::LedgerUnavailable)
}

/// Every check before `/verify`, in order; none goes outbound.
async fn admit(
    rail: &PaymentRail,
    manifest: &Manifest,
    call: &PaidCall<'_>,
) -> Result<(Presented, Instant), PaidOutcome> {
    let presented = decode(call.header)?;
    echo::check(&presented.payload, call.requirement, call.declared)
        .map_err(|refusal| reject(refusal.reason()))?;
    let deadline = call_deadline(rail, call.machine, manifest, &presented)?;
    check_locally(rail, call.machine, call.pay_to, &presented)?;
    precheck(rail, &presented).await?;
    Ok((presented, deadline))
}

/// `/verify` with our own resource, extensions and requirements.
async fn verify(
    rail: &PaymentRail,
    call: &PaidCall<'_>,
    presented: &Presented,
    sent: &Value,
    deadline: Instant,
) -> Result<(), PaidOutcome> {
    let verified = rail
        .facilitator
        .verify(sent, call.requirement, deadline)
        .await;
    if let Ok(verdict) = &verified {
        let responses = verdict.extension_responses.as_ref();
        rail.listing
            .record(&call.machine.machine, "verify", responses);
    }
    match verified {
        Ok(verdict) if verdict.is_valid => {
            metrics().payment("verified", "");
            Ok(())
        }
        Ok(verdict) => {
            // A copy racing the first presentation of the same payment can reach /verify after
            // that one settled, and the facilitator then calls the nonce used: the buyer's
            // truthful reason is ours, the payment was already presented here.
            if matches!(
                rail.ledger.knows_nonce(&presented.nonce_sha256).await,
                Ok(true)
            ) {
                return Err(reject("payment_nonce_already_presented"));
            }
            let reason = verdict
                .invalid_reason
                .unwrap_or_else(|| "payment_invalid".into());
            tracing::info!(machine = %call.machine.machine, %reason, "payment refused by the facilitator");
            Err(reject(&reason))
        }
        Err(error) => Err(facilitator_down("verify", &error)),
    }
}

/// Runs the whole paid path for one request. `work` is the machine's paid work, not yet
/// started: it runs only after `/verify` accepted the payment and the ledger reserved it.
pub(crate) async fn run<E: std::fmt::Display>(
    rail: &PaymentRail,
    manifest: &Manifest,
    call: PaidCall<'_>,
    work: impl Future<Output = Result<Value, E>>,
) -> PaidOutcome {
    let (presented, deadline) = match admit(rail, manifest, &call).await {
        Ok(admitted) => admitted,
        Err(outcome) => return outcome,
    };
    let sent = echo::for_facilitator(&presented.payload, call.requirement, call.declared);
    if let Err(outcome) = verify(rail, &call, &presented, &sent, deadline).await {
        return outcome;
    }
    let attempt = new_attempt(manifest, &call, &presented);
    let reserved_at = unix_now();
    let id = match rail.ledger.reserve(&attempt).await {
        Ok(id) => id,
        Err(LedgerError::Duplicate) => return reject("payment_nonce_already_presented"),
        Err(error) => return ledger_failure(&error),
    };
    // A backstop past the machine's own overall timeout (which turns a slow upstream into a
    // truthful HOLD): only a machine that overruns its own bound, or the deadline, cuts it.
    let budget = call.machine.overall_timeout() + WORK_GRACE;
    let body = match tokio::time::timeout_at(deadline.min(Instant::now() + budget), work).await {
        Ok(Ok(body)) => body,
        Ok(Err(error)) => return work_failed(rail, id, call.machine, error.to_string()).await,
        Err(_) => {
            let reason = format!("the work ran past its {} ms budget", budget.as_millis());
            return work_failed(rail, id, call.machine, reason).await;
        }
    };
    let Some(terms) = terms_of(manifest, &call, &presented) else {
        return PaidOutcome::Failed(Refusal::Misconfigured);
    };
    let settling = Settling {
        facilitator: &rail.facilitator,
        chain: rail.trusted_chain(),
        payload: &sent,
        requirement: call.requirement,
        payment: Payment {
            terms,
            reserved_at,
            valid_before: presented.valid_before,
        },
        deadline,
        wait: rail.settlement_wait,
        listing: &rail.listing,
        machine: &call.machine.machine,
    };
    let settled = settlement::settle(&settling).await;
    let row = Row {
        rail,
        id,
        machine: call.machine,
        manifest,
        presented: &presented,
    };
    row.record(settled, body).await
}

fn new_attempt(manifest: &Manifest, call: &PaidCall<'_>, presented: &Presented) -> NewAttempt {
    NewAttempt {
        machine: call.machine.machine.clone(),
        family: call.machine.family.clone(),
        payer: presented.payer.to_checksum(None),
        amount_atomic: call.machine.price_atomic.clone(),
        asset: manifest.payment.asset.clone(),
        network: manifest.payment.network.clone(),
        pay_to: call.pay_to.to_string(),
        nonce_sha256: presented.nonce_sha256.clone(),
        nonce: presented.nonce.to_string(),
        valid_before: presented.valid_before.to_string(),
        request_sha256: canonical_sha256(call.request),
        request_id: call.request_id.to_string(),
    }
}

fn terms_of(
    manifest: &Manifest,
    call: &PaidCall<'_>,
    presented: &Presented,
) -> Option<PaymentTerms> {
    Some(PaymentTerms {
        asset: manifest.payment.asset.parse().ok()?,
        payer: presented.payer,
        pay_to: call.pay_to.parse().ok()?,
        value: U256::from_str_radix(&call.machine.price_atomic, 10).ok()?,
        nonce: presented.nonce,
    })
}

async fn work_failed(
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

fn encoded(response: &Value) -> String {
    STANDARD.encode(serde_json::to_vec(response).unwrap_or_default())
}

/// A SettleResponse of ours (when the facilitator's is not the answer).
fn settle_response(
    manifest: &Manifest,
    presented: &Presented,
    success: bool,
    reason: Option<&str>,
    transaction: Option<&str>,
) -> Value {
    let mut response = json!({
        "success": success,
        "transaction": transaction.unwrap_or_default(),
        "network": manifest.payment.network,
        "payer": presented.payer.to_checksum(None),
    });
    if let Some(reason) = reason {
        response["errorReason"] = json!(reason);
    }
    response
}

/// The reserved row of one paid call, and what its answer is made of.
struct Row<'a> {
    rail: &'a PaymentRail,
    id: i64,
    machine: &'a Machine,
    manifest: &'a Manifest,
    presented: &'a Presented,
}

impl Row<'_> {
    /// Until when the payer is refused, when the payment ended unpaid by their doing.
    fn strike_until(&self) -> Option<u64> {
        let seconds = self.rail.strike_seconds;
        (seconds > 0).then(|| unix_now().saturating_add(seconds))
    }

    fn response(&self, success: bool, reason: Option<&str>, transaction: Option<&str>) -> Value {
        settle_response(self.manifest, self.presented, success, reason, transaction)
    }

    async fn finish(&self, outcome: &Outcome) -> Result<(), LedgerError> {
        self.rail.ledger.finish(self.id, outcome).await
    }

    async fn finish_logged(&self, outcome: &Outcome) {
        finish_logged(self.rail, self.id, outcome).await;
    }

    /// Records the settlement and decides the answer.
    async fn record(&self, settled: Settlement, body: Value) -> PaidOutcome {
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
            } => self.unpaid(reason, response, evidence, payer_fault).await,
            Settlement::Pending {
                transaction,
                evidence,
            } => self.pending(transaction, evidence).await,
        }
    }

    async fn paid(
        &self,
        transaction: String,
        transfer_log_index: Option<u64>,
        response: Option<Value>,
        evidence: Option<String>,
        body: Value,
    ) -> PaidOutcome {
        let outcome = Outcome::Settled {
            transaction: transaction.clone(),
            transfer_log_index,
            evidence,
        };
        match self.finish(&outcome).await {
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
        let response = response.unwrap_or_else(|| self.response(true, None, Some(&transaction)));
        PaidOutcome::Delivered {
            body,
            payment_response: encoded(&response),
        }
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
        let response = self.response(false, Some(NONCE_BURNED), Some(&transaction));
        PaidOutcome::SettleFailed {
            reason: NONCE_BURNED.into(),
            payment_response: encoded(&response),
        }
    }

    async fn unpaid(
        &self,
        reason: String,
        response: Option<Value>,
        evidence: String,
        payer_fault: bool,
    ) -> PaidOutcome {
        tracing::warn!(machine = %self.machine.machine, %reason, %evidence, "settlement failed; result withheld");
        metrics().payment("settle_failed", "");
        let outcome = Outcome::SettleFailed {
            reason: reason.clone(),
            evidence: Some(evidence),
            strike_until: self.strike_until().filter(|_| payer_fault),
        };
        self.finish_logged(&outcome).await;
        let mut response = response.unwrap_or_else(|| self.response(false, Some(&reason), None));
        response["success"] = json!(false);
        if response.get("transaction").is_none() {
            response["transaction"] = json!("");
        }
        PaidOutcome::SettleFailed {
            reason,
            payment_response: encoded(&response),
        }
    }

    async fn pending(&self, transaction: Option<String>, evidence: String) -> PaidOutcome {
        tracing::warn!(machine = %self.machine.machine, transaction = ?transaction, %evidence, "settlement outcome unknown after the wait; answering pending");
        metrics().payment("settle_pending", "");
        let outcome = Outcome::SettlePending {
            transaction: transaction.clone(),
            evidence,
        };
        self.finish_logged(&outcome).await;
        let response = self.response(false, Some(SETTLEMENT_PENDING), transaction.as_deref());
        PaidOutcome::Pending {
            transaction,
            retry_after_seconds: self
                .presented
                .valid_before
                .saturating_sub(unix_now())
                .max(1),
            payment_response: encoded(&response),
        }
    }
}

async fn finish_logged(rail: &PaymentRail, id: i64, outcome: &Outcome) {
    if let Err(error) = rail.ledger.finish(id, outcome).await {
        tracing::error!(%error, attempt = id, state = outcome.state(), "could not record the settlement outcome");
    }
}

fn facilitator_down(step: &'static str, error: &FacilitatorError) -> PaidOutcome {
    tracing::warn!(step, %error, "facilitator unavailable");
    PaidOutcome::Failed(Refusal::FacilitatorUnavailable { step })
}
