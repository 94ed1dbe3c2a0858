//! The x402 payment gate of a structurally valid request that carries `PAYMENT-SIGNATURE`:
//! decode → x402Version 2 → `accepted` equals our requirement → the local check (signature,
//! payee, price, window; see `local_check`) → facilitator `/verify` →
//! ledger reserve → the machine's work → facilitator `/settle` → ledger record.
//!
//! A payment the local check refuses never costs a facilitator call. Nothing goes outbound
//! before `/verify` says the payment is valid, and the unique nonce in
//! the ledger makes sure one authorization runs the work at most once.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use alloy::sol_types::Eip712Domain;
use alloy_primitives::{Address, B256, U256};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::catalog::manifest::{Machine, Manifest};
use crate::pay::facilitator::{FacilitatorClient, FacilitatorError, SettleOutcome};
use crate::pay::ledger::{Ledger, LedgerError, NewAttempt, Outcome};
use crate::pay::local_check::{self, Expected, LocalVerdict};
use crate::support::canonical::{canonical_sha256, sha256_hex};

/// Payment headers are small; anything larger is not a payment.
const MAX_PAYMENT_HEADER_BYTES: usize = 16 * 1024;

/// The configured facilitator and ledger, and what the local check needs.
pub(crate) struct PaymentRail {
    /// The facilitator client (`/verify`, `/settle`, `/supported`).
    pub facilitator: FacilitatorClient,
    /// Where every paid attempt is recorded.
    pub ledger: Arc<dyn Ledger>,
    /// The asset's EIP-712 domain (`local_check::payment_domain`).
    pub domain: Eip712Domain,
    /// Payments refused by the local check, which never reached the facilitator.
    pub refused_locally: AtomicU64,
    /// Smart-wallet signatures passed to the facilitator unchecked.
    pub signatures_deferred: AtomicU64,
}

/// One paid call as the gate sees it: what is sold, what must be paid, and the payment.
pub(crate) struct PaidCall<'a> {
    /// The manifest entry of the machine sold.
    pub machine: &'a Machine,
    /// The PaymentRequirements a payment's `accepted` must equal.
    pub requirement: &'a Value,
    /// Our configured payTo address.
    pub pay_to: &'a str,
    /// The request as received, for the ledger's request hash.
    pub request: &'a Value,
    /// The `PAYMENT-SIGNATURE` header.
    pub header: &'a [u8],
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
    /// 402 with PAYMENT-RESPONSE success:false; the work ran but its result is withheld.
    SettleFailed {
        reason: String,
        payment_response: String,
    },
    /// A refusal of ours; nothing was charged.
    Failed(Refusal),
}

/// The parts of a PaymentPayload the gate relies on.
struct Presented {
    payload: Value,
    payer: String,
    nonce_sha256: String,
    nonce: String,
    valid_before: String,
}

fn reject(reason: &str) -> PaidOutcome {
    PaidOutcome::Rejected {
        reason: reason.to_string(),
    }
}

/// Decodes and checks a `PAYMENT-SIGNATURE` against the machine's requirement.
fn decode(header: &[u8], requirement: &Value) -> Result<Presented, PaidOutcome> {
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
    if payload.get("accepted") != Some(requirement) {
        return Err(reject("payment_requirements_mismatch"));
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
    let payer = field("from")
        .ok_or_else(|| reject("invalid_payload"))?
        .to_string();
    let valid_before = field("validBefore")
        .filter(|v| v.parse::<u64>().is_ok())
        .ok_or_else(|| reject("invalid_payload"))?
        .to_string();
    Ok(Presented {
        nonce_sha256: sha256_hex(nonce.as_slice()),
        nonce: nonce.to_string(),
        valid_before,
        payer,
        payload,
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
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let expected = Expected {
        domain: &rail.domain,
        pay_to,
        amount,
        now,
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

fn ledger_failure(error: &LedgerError) -> PaidOutcome {
    tracing::error!(%error, "ledger failure");
    PaidOutcome::Failed(Refusal::LedgerUnavailable)
}

/// Runs the whole paid path for one request. `work` is the machine's paid work, not yet
/// started: it runs only after `/verify` accepted the payment and the ledger reserved it.
pub(crate) async fn run<E: std::fmt::Display>(
    rail: &PaymentRail,
    manifest: &Manifest,
    call: PaidCall<'_>,
    work: impl Future<Output = Result<Value, E>>,
) -> PaidOutcome {
    let PaidCall {
        machine,
        requirement,
        pay_to,
        request,
        header,
    } = call;
    let presented = match decode(header, requirement) {
        Ok(presented) => presented,
        Err(outcome) => return outcome,
    };
    if let Err(outcome) = check_locally(rail, machine, pay_to, &presented) {
        return outcome;
    }
    match rail.ledger.knows_nonce(&presented.nonce_sha256) {
        Ok(true) => return reject("payment_nonce_already_presented"),
        Ok(false) => {}
        Err(error) => return ledger_failure(&error),
    }
    match rail
        .facilitator
        .verify(&presented.payload, requirement)
        .await
    {
        Ok(verdict) if verdict.is_valid => {}
        Ok(verdict) => {
            let reason = verdict
                .invalid_reason
                .unwrap_or_else(|| "payment_invalid".into());
            tracing::info!(machine = %machine.machine, %reason, "payment refused by the facilitator");
            return reject(&reason);
        }
        Err(error) => return facilitator_down("verify", &error),
    }
    let attempt = NewAttempt {
        machine: machine.machine.clone(),
        family: machine.family.clone(),
        payer: presented.payer.clone(),
        amount_atomic: machine.price_atomic.clone(),
        asset: manifest.payment.asset.clone(),
        network: manifest.payment.network.clone(),
        pay_to: pay_to.to_string(),
        nonce_sha256: presented.nonce_sha256.clone(),
        nonce: presented.nonce.clone(),
        valid_before: presented.valid_before.clone(),
        request_sha256: canonical_sha256(request),
    };
    let id = match rail.ledger.reserve(&attempt) {
        Ok(id) => id,
        Err(LedgerError::Duplicate) => return reject("payment_nonce_already_presented"),
        Err(error) => return ledger_failure(&error),
    };
    let body = match work.await {
        Ok(body) => body,
        Err(error) => return work_failed(rail, id, machine, &error),
    };
    let settled = rail
        .facilitator
        .settle(&presented.payload, requirement)
        .await;
    finish_settlement(rail, id, machine, manifest, &presented, settled, body)
}

fn work_failed(
    rail: &PaymentRail,
    id: i64,
    machine: &Machine,
    error: &dyn std::fmt::Display,
) -> PaidOutcome {
    tracing::error!(machine = %machine.machine, %error, "paid work failed; not settling");
    let reason = error.to_string();
    if let Err(e) = rail.ledger.finish(id, &Outcome::WorkFailed { reason }) {
        tracing::error!(error = %e, attempt = id, "could not record work_failed");
    }
    PaidOutcome::Failed(Refusal::WorkFailed)
}

fn finish_settlement(
    rail: &PaymentRail,
    id: i64,
    machine: &Machine,
    manifest: &Manifest,
    presented: &Presented,
    settled: Result<SettleOutcome, FacilitatorError>,
    body: Value,
) -> PaidOutcome {
    let ledger = rail.ledger.as_ref();
    match settled {
        Ok(outcome) if outcome.success && outcome.transaction.is_some() => {
            let transaction = outcome.transaction.clone().unwrap_or_default();
            tracing::info!(machine = %machine.machine, %transaction, "payment settled");
            if let Err(error) = ledger.finish(id, &Outcome::Settled { transaction }) {
                // Settled on chain: deliver, and leave the row reserved for start-up reporting.
                tracing::error!(%error, attempt = id, "settled but not recorded");
            }
            PaidOutcome::Delivered {
                body,
                payment_response: STANDARD
                    .encode(serde_json::to_vec(&outcome.response).unwrap_or_default()),
            }
        }
        Ok(outcome) => {
            let reason = outcome
                .error_reason
                .clone()
                .unwrap_or_else(|| "settlement_failed".into());
            tracing::warn!(machine = %machine.machine, %reason, "settlement failed; result withheld");
            record_settle_failure(ledger, id, reason.clone());
            let mut response = outcome.response;
            response["success"] = json!(false);
            if response.get("transaction").is_none() {
                response["transaction"] = json!("");
            }
            PaidOutcome::SettleFailed {
                reason,
                payment_response: STANDARD
                    .encode(serde_json::to_vec(&response).unwrap_or_default()),
            }
        }
        Err(error) => {
            tracing::error!(machine = %machine.machine, %error, "settlement outcome unknown; result withheld");
            let reason = "settlement_unconfirmed".to_string();
            record_settle_failure(ledger, id, format!("{reason}: {error}"));
            let response = json!({
                "success": false,
                "errorReason": reason,
                "transaction": "",
                "network": manifest.payment.network,
                "payer": presented.payer,
            });
            PaidOutcome::SettleFailed {
                reason,
                payment_response: STANDARD
                    .encode(serde_json::to_vec(&response).unwrap_or_default()),
            }
        }
    }
}

fn record_settle_failure(ledger: &dyn Ledger, id: i64, reason: String) {
    if let Err(error) = ledger.finish(id, &Outcome::SettleFailed { reason }) {
        tracing::error!(%error, attempt = id, "could not record settle_failed");
    }
}

fn facilitator_down(step: &'static str, error: &FacilitatorError) -> PaidOutcome {
    tracing::warn!(step, %error, "facilitator unavailable");
    PaidOutcome::Failed(Refusal::FacilitatorUnavailable { step })
}
