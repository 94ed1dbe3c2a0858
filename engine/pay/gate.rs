//! The x402 payment gate of a structurally valid request that carries `PAYMENT-SIGNATURE`.
//! It keeps only the order of the steps; each step's rules live in their own module:
//!
//! decode → a retained answer for this exact payment and request (`collect`) → `accepted`
//! and the buyer's echo (`echo`) → the authorization's window (`window`) → the local check
//! (`local_check`) → the ledger's nonce and strike pre-check → facilitator `/verify` →
//! ledger reserve (binding where the answer will be retained) → the machine's work → the
//! settlement (`settlement`) → ledger record, with the answer retained (`retained`).
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
use serde_json::Value;
use tokio::time::Instant;

use crate::catalog::manifest::{Machine, Manifest};
use crate::chain::authorization::{AuthorizationReader, PaymentTerms};
use crate::pay::collect::{self, ANSWER_EXPIRED};
use crate::pay::echo::{self, Declared};
use crate::pay::facilitator::{FacilitatorClient, FacilitatorError, SETTLEMENT_PENDING};
use crate::pay::ledger::{Binding, Keep, Ledger, LedgerError, NewAttempt, Outcome};
use crate::pay::listing::ListingBoard;
use crate::pay::local_check::{self, Expected, LocalVerdict};
use crate::pay::retained::{self, Answer, Finisher, Lookup, Retention};
use crate::pay::settlement::{self, Payment, Settlement, Settling, encoded, our_settle_response};
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
    /// How paid answers are retained for collecting again; None when retention is off.
    pub retention: Option<Retention>,
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
}

impl Refusal {
    /// The stable error code of the refusal.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Refusal::LedgerUnavailable => "ledger_unavailable",
            Refusal::FacilitatorUnavailable { .. } => "facilitator_unavailable",
            Refusal::WorkFailed => "work_failed",
            Refusal::Misconfigured => "payment_misconfigured",
            Refusal::IdentifierInvalid => "invalid_payment_identifier",
            Refusal::IdentifierConflict => "payment_identifier_conflict",
            Refusal::InProgress => "payment_in_progress",
        }
    }
}

/// What the gate decided; the server turns it into HTTP.
#[derive(Debug)]
pub(crate) enum PaidOutcome {
    /// The paid answer as it goes out (first sent, or collected again).
    Answered(Answer),
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

/// A 402 with a fresh challenge naming `reason`.
pub(crate) fn reject(reason: &str) -> PaidOutcome {
    metrics().payment("rejected", reason);
    PaidOutcome::Rejected {
        reason: reason.to_string(),
    }
}

/// Now, in unix seconds.
pub(crate) fn unix_now() -> u64 {
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
async fn precheck(
    rail: &PaymentRail,
    call: &PaidCall<'_>,
    presented: &Presented,
) -> Result<(), PaidOutcome> {
    let payer = format!("{:#x}", presented.payer);
    match rail
        .ledger
        .precheck(&presented.nonce_sha256, &payer, unix_now())
        .await
    {
        Ok(found) if found.nonce_known => {
            Err(reject(already_presented(rail, call, presented).await))
        }
        Ok(found) if found.payer_struck => {
            metrics().payment("payer_struck", "");
            tracing::info!(%payer, "payer refused before /verify: a recent verified payment ended unpaid");
            Err(reject(PAYER_STRUCK))
        }
        Ok(_) => Ok(()),
        Err(error) => Err(ledger_failure(&error)),
    }
}

/// A 503 for a ledger that cannot answer.
pub(crate) fn ledger_failure(error: &LedgerError) -> PaidOutcome {
    tracing::error!(%error, "ledger failure");
    PaidOutcome::Failed(Refusal::LedgerUnavailable)
}

/// Why a known nonce is refused: the same request's settled payment whose answer is no
/// longer retained says so; anything else was simply presented already.
async fn already_presented(
    rail: &PaymentRail,
    call: &PaidCall<'_>,
    presented: &Presented,
) -> &'static str {
    if rail.retention.is_none() {
        return "payment_nonce_already_presented";
    }
    match rail.ledger.row_by_nonce(&presented.nonce_sha256).await {
        Ok(Some(row)) if row.state == "settled" && row.request_sha256 == call.request_sha256 => {
            metrics().retained("expired");
            ANSWER_EXPIRED
        }
        _ => "payment_nonce_already_presented",
    }
}

/// Every check before `/verify`, in order; none goes outbound.
async fn admit(
    rail: &PaymentRail,
    manifest: &Manifest,
    call: &PaidCall<'_>,
    presented: &Presented,
) -> Result<Instant, PaidOutcome> {
    echo::check(&presented.payload, call.requirement, call.declared)
        .map_err(|refusal| reject(refusal.reason()))?;
    let deadline = call_deadline(rail, call.machine, manifest, presented)?;
    check_locally(rail, call.machine, call.pay_to, presented)?;
    precheck(rail, call, presented).await?;
    Ok(deadline)
}

/// Where this payment's answer is retained: the exact payload, the request and the
/// payment-identifier `id` (a malformed `id` is a 400 before anything else).
fn lookup_of(call: &PaidCall<'_>, presented: &Presented) -> Result<Lookup, PaidOutcome> {
    let id = retained::payment_identifier(&presented.payload)
        .map_err(|_| PaidOutcome::Failed(Refusal::IdentifierInvalid))?;
    let resource_url = call
        .declared
        .resource
        .get("url")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Ok(Lookup::new(
        &canonical_sha256(&presented.payload),
        call.request_sha256,
        id,
        call.pay_to,
        resource_url,
    ))
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
    let presented = match decode(call.header) {
        Ok(presented) => presented,
        Err(outcome) => return outcome,
    };
    let lookup = match lookup_of(&call, &presented) {
        Ok(lookup) => lookup,
        Err(outcome) => return outcome,
    };
    if let Some(retention) = &rail.retention
        && let Some(outcome) = collect::again(rail, retention, manifest, &call, &lookup).await
    {
        return outcome;
    }
    let deadline = match admit(rail, manifest, &call, &presented).await {
        Ok(deadline) => deadline,
        Err(outcome) => return outcome,
    };
    let sent = echo::for_facilitator(&presented.payload, call.requirement, call.declared);
    if let Err(outcome) = verify(rail, &call, &presented, &sent, deadline).await {
        return outcome;
    }
    let attempt = new_attempt(manifest, &call, &presented);
    let reserved_at = unix_now();
    let binding = rail.retention.as_ref().map(|_| Binding {
        lookup_sha256: lookup.key_hex(),
        id_sha256: lookup.id_sha256.clone(),
    });
    let id = match rail.ledger.reserve_bound(&attempt, binding.as_ref()).await {
        Ok(id) => id,
        Err(LedgerError::Duplicate) => return reject("payment_nonce_already_presented"),
        Err(LedgerError::IdentifierBound) => {
            metrics().retained("conflict");
            return PaidOutcome::Failed(Refusal::IdentifierConflict);
        }
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
        lookup: &lookup,
        finisher: call.finisher,
    };
    let body = serde_json::to_vec(&body).unwrap_or_default();
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
        request_sha256: call.request_sha256.to_string(),
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

/// The reserved row of one paid call, and what its answer is made of.
struct Row<'a> {
    rail: &'a PaymentRail,
    id: i64,
    machine: &'a Machine,
    manifest: &'a Manifest,
    presented: &'a Presented,
    lookup: &'a Lookup,
    finisher: &'a dyn Finisher,
}

impl Row<'_> {
    /// Until when the payer is refused, when the payment ended unpaid by their doing.
    fn strike_until(&self) -> Option<u64> {
        let seconds = self.rail.strike_seconds;
        (seconds > 0).then(|| unix_now().saturating_add(seconds))
    }

    /// Our own SettleResponse, encoded for PAYMENT-RESPONSE.
    fn response(&self, success: bool, reason: Option<&str>, transaction: Option<&str>) -> String {
        let payer = self.presented.payer.to_checksum(None);
        let network = &self.manifest.payment.network;
        our_settle_response(network, &payer, success, reason, transaction)
    }

    /// The answer sealed for retention, when retention is on and sealing works.
    fn sealed(&self, answer: &Answer) -> Option<(&Retention, Vec<u8>)> {
        let retention = self.rail.retention.as_ref()?;
        retained::seal(&retention.secret, self.lookup, answer)
            .map_err(|error| {
                tracing::error!(%error, attempt = self.id, "answer not retained");
            })
            .ok()
            .map(|sealed| (retention, sealed))
    }

    /// Records the outcome, retaining `answer` with it in one transaction.
    async fn finish(
        &self,
        outcome: &Outcome,
        answer: &Answer,
        held: bool,
    ) -> Result<(), LedgerError> {
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

    async fn finish_logged(&self, outcome: &Outcome) {
        finish_logged(self.rail, self.id, outcome).await;
    }

    /// Records the settlement and decides the answer.
    async fn record(&self, settled: Settlement, body: Vec<u8>) -> PaidOutcome {
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
        let payment_response = response
            .map(|response| encoded(&response))
            .unwrap_or_else(|| self.response(true, None, Some(&transaction)));
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
    ) -> PaidOutcome {
        tracing::warn!(machine = %self.machine.machine, %reason, %evidence, "settlement failed; result withheld");
        metrics().payment("settle_failed", "");
        let outcome = Outcome::SettleFailed {
            reason: reason.clone(),
            evidence: Some(evidence),
            strike_until: self.strike_until().filter(|_| payer_fault),
        };
        self.finish_logged(&outcome).await;
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
        // The result is held (sealed, without payment headers) until the chain decides: the
        // buyer collects it by sending the identical request again.
        let held = Answer {
            status: 200,
            body,
            headers: Vec::new(),
        };
        if let Err(error) = self.finish(&outcome, &held, true).await {
            tracing::error!(%error, attempt = self.id, state = outcome.state(), "could not record the settlement outcome");
        }
        let response = self.response(false, Some(SETTLEMENT_PENDING), transaction.as_deref());
        PaidOutcome::Pending {
            transaction,
            retry_after_seconds: self
                .presented
                .valid_before
                .saturating_sub(unix_now())
                .max(1),
            payment_response: response,
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
