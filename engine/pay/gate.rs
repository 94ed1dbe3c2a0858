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
use crate::chain::authorization::AuthorizationReader;
use crate::pay::facilitator::{FacilitatorClient, FacilitatorError, SettleOutcome};
use crate::pay::ledger::{Ledger, LedgerError, NewAttempt, Outcome, Resolution};
use crate::pay::listing::ListingBoard;
use crate::pay::local_check::{self, Expected, LocalVerdict};
use crate::support::canonical::{canonical_sha256, sha256_hex};
use crate::support::metrics::metrics;

/// Payment headers are small; anything larger is not a payment.
const MAX_PAYMENT_HEADER_BYTES: usize = 16 * 1024;

/// The configured facilitator and ledger, and what the local check needs.
pub(crate) struct PaymentRail {
    /// The facilitator client (`/verify`, `/settle`, `/supported`).
    pub facilitator: FacilitatorClient,
    /// Where every paid attempt is recorded.
    pub ledger: Arc<Ledger>,
    /// Asks the chain whether a settlement the facilitator did not confirm landed anyway;
    /// None without an eip155:8453 RPC endpoint.
    pub chain: Option<AuthorizationReader>,
    /// The asset's EIP-712 domain (`local_check::payment_domain`).
    pub domain: Eip712Domain,
    /// Payments refused by the local check, which never reached the facilitator.
    pub refused_locally: AtomicU64,
    /// Smart-wallet signatures passed to the facilitator unchecked.
    pub signatures_deferred: AtomicU64,
    /// What the index said about each machine's listing (`EXTENSION-RESPONSES`).
    pub listing: ListingBoard,
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
    metrics().payment("rejected", reason);
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
        request_id,
    } = call;
    let presented = match decode(header, requirement) {
        Ok(presented) => presented,
        Err(outcome) => return outcome,
    };
    if let Err(outcome) = check_locally(rail, machine, pay_to, &presented) {
        return outcome;
    }
    match rail.ledger.knows_nonce(&presented.nonce_sha256).await {
        Ok(true) => return reject("payment_nonce_already_presented"),
        Ok(false) => {}
        Err(error) => return ledger_failure(&error),
    }
    let verified = rail
        .facilitator
        .verify(&presented.payload, requirement)
        .await;
    if let Ok(verdict) = &verified {
        let responses = verdict.extension_responses.as_ref();
        rail.listing.record(&machine.machine, "verify", responses);
    }
    match verified {
        Ok(verdict) if verdict.is_valid => metrics().payment("verified", ""),
        Ok(verdict) => {
            // A copy racing the first presentation of the same payment can reach /verify after
            // that one settled, and the facilitator then calls the nonce used: the buyer's
            // truthful reason is ours, the payment was already presented here.
            if matches!(
                rail.ledger.knows_nonce(&presented.nonce_sha256).await,
                Ok(true)
            ) {
                return reject("payment_nonce_already_presented");
            }
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
        request_id: request_id.to_string(),
    };
    let id = match rail.ledger.reserve(&attempt).await {
        Ok(id) => id,
        Err(LedgerError::Duplicate) => return reject("payment_nonce_already_presented"),
        Err(error) => return ledger_failure(&error),
    };
    let body = match work.await {
        Ok(body) => body,
        Err(error) => return work_failed(rail, id, machine, error.to_string()).await,
    };
    let settled = rail
        .facilitator
        .settle(&presented.payload, requirement)
        .await;
    if let Ok(outcome) = &settled {
        let responses = outcome.extension_responses.as_ref();
        rail.listing.record(&machine.machine, "settle", responses);
    }
    finish_settlement(rail, id, machine, manifest, &presented, settled, body).await
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

async fn finish_settlement(
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
            metrics().payment("settled", "");
            if let Err(error) = ledger.finish(id, &Outcome::Settled { transaction }).await {
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
            if let Some(delivered) = landed_anyway(rail, id, manifest, presented, &body).await {
                return delivered;
            }
            let reason = outcome
                .error_reason
                .clone()
                .unwrap_or_else(|| "settlement_failed".into());
            tracing::warn!(machine = %machine.machine, %reason, "settlement failed; result withheld");
            record_settle_failure(ledger, id, reason.clone()).await;
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
            if let Some(delivered) = landed_anyway(rail, id, manifest, presented, &body).await {
                return delivered;
            }
            tracing::error!(machine = %machine.machine, %error, "settlement outcome unknown; result withheld");
            let reason = "settlement_unconfirmed".to_string();
            record_settle_failure(ledger, id, format!("{reason}: {error}")).await;
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

/// After a settle that failed or errored, asks the chain once: when the authorization was
/// used (its `AuthorizationUsed` event found), the buyer has paid, so the result is delivered with the transaction seen on chain
/// and the row recorded settled. None when the chain shows it unused or cannot be read.
async fn landed_anyway(
    rail: &PaymentRail,
    id: i64,
    manifest: &Manifest,
    presented: &Presented,
    body: &Value,
) -> Option<PaidOutcome> {
    let chain = rail.chain.as_ref()?;
    let asset = manifest.payment.asset.parse().ok()?;
    let payer = presented.payer.parse().ok()?;
    let nonce = presented.nonce.parse().ok()?;
    let facts = match chain.read(asset, payer, nonce).await {
        Ok(facts) => facts,
        Err(error) => {
            tracing::warn!(%error, attempt = id, "after a failed settle the chain could not be read");
            return None;
        }
    };
    // authorizationState is also true for an authorization its signer cancelled: only the
    // AuthorizationUsed event proves the payment moved.
    let transaction = match (facts.used, &facts.transaction) {
        (true, Some(transaction)) => transaction.clone(),
        _ => return None,
    };
    tracing::warn!(attempt = id, %transaction, block = facts.block, "the facilitator did not confirm the settlement but the authorization was used on chain: delivering");
    let evidence = format!(
        "settle not confirmed by the facilitator; authorizationState used at block {}; AuthorizationUsed in transaction {transaction}",
        facts.block
    );
    let resolution = Resolution::Settled {
        transaction: Some(transaction.clone()),
    };
    match rail
        .ledger
        .resolve(id, "reserved", &resolution, &evidence)
        .await
    {
        Ok(true) => {}
        Ok(false) => tracing::error!(
            attempt = id,
            "settled on chain but the row was no longer reserved"
        ),
        Err(error) => tracing::error!(%error, attempt = id, "settled on chain but not recorded"),
    }
    metrics().payment("settled", "");
    let response = json!({
        "success": true,
        "transaction": transaction,
        "network": manifest.payment.network,
        "payer": presented.payer,
    });
    Some(PaidOutcome::Delivered {
        body: body.clone(),
        payment_response: STANDARD.encode(serde_json::to_vec(&response).unwrap_or_default()),
    })
}

async fn record_settle_failure(ledger: &Ledger, id: i64, reason: String) {
    metrics().payment("settle_failed", "");
    if let Err(error) = ledger.finish(id, &Outcome::SettleFailed { reason }).await {
        tracing::error!(%error, attempt = id, "could not record settle_failed");
    }
}

fn facilitator_down(step: &'static str, error: &FacilitatorError) -> PaidOutcome {
    tracing::warn!(step, %error, "facilitator unavailable");
    PaidOutcome::Failed(Refusal::FacilitatorUnavailable { step })
}
