//! The x402 payment gate of a structurally valid request that carries `PAYMENT-SIGNATURE`.
//! It keeps only the order of the steps; each step's rules live in their own module:
//!
//! decode → a retained answer for this exact payment and request (`collect`; or its work
//! run again, `rerun`) → `accepted`
//! and the buyer's echo (`echo`) → the authorization's window (`window`) → the local check
//! (`local_check`) → the ledger's nonce and strike pre-check → facilitator `/verify` →
//! ledger reserve (binding where the answer will be retained) → the machine's work → the
//! settlement (`settlement`) → ledger record and the buyer's answer (`record`), with the
//! answer retained (`retained`).
//!
//! A payment refused before `/verify` costs no outbound request, with one bounded exception:
//! a payer presenting its own nonce whose settlement is undecided makes the chain be read
//! for it (`collect::known_nonce`; at most once per row every 2 s, one reading at a time).
//! No work and no facilitator call happens before `/verify` says the payment is valid, and
//! the unique nonce in the ledger makes sure one authorization runs the work at most once.

use std::str::FromStr;
use std::sync::atomic::Ordering;

use alloy_primitives::{Address, B256, U256};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;
use tokio::time::Instant;

use crate::catalog::manifest::{Machine, Manifest};
use crate::chain::authorization::PaymentTerms;
use crate::pay::call::{
    ALREADY_PRESENTED, PAYER_STRUCK, PaidCall, PaidOutcome, PaymentRail, Refusal, WORK_GRACE,
    ledger_failure, reject, reject_reported, unix_now,
};
use crate::pay::collect::{ANSWER_EXPIRED, Collect, Resend, Resent, known_nonce};
use crate::pay::echo;
use crate::pay::facilitator::{FacilitatorError, PaymentBody};
use crate::pay::ledger::{Binding, LedgerError, NewAttempt};
use crate::pay::local_check::{self, Expected, LocalVerdict};
use crate::pay::payload::{Echoes, Payload};
use crate::pay::record::{Row, work_failed};
use crate::pay::retained::{self, Lookup};
use crate::pay::settlement::{self, Payment, Settling};
use crate::pay::window::{self, Bounds, WindowRefusal};
use crate::support::canonical::sha256_hex;
use crate::support::metrics::metrics;

/// Payment headers are small; anything larger is not a payment.
const MAX_PAYMENT_HEADER_BYTES: usize = 16 * 1024;

/// The parts of a PaymentPayload the gate relies on.
struct Presented {
    payload: Payload,
    payer: Address,
    nonce_sha256: String,
    nonce: B256,
    valid_before: u64,
}

/// Decodes a `PAYMENT-SIGNATURE`: base64 of JSON, x402Version 2, an authorization with a
/// nonce, a payer and a `validBefore`; echoes of our 402 as it came are recognized, not
/// parsed (`payload`).
fn decode(header: &[u8], ours: &Echoes) -> Result<Presented, PaidOutcome> {
    if header.len() > MAX_PAYMENT_HEADER_BYTES {
        return Err(reject("invalid_payload"));
    }
    let trimmed = std::str::from_utf8(header)
        .map(str::trim)
        .map_err(|_| reject("invalid_payload"))?;
    let bytes = STANDARD
        .decode(trimmed)
        .map_err(|_| reject("invalid_payload"))?;
    // UTF-8 checked once for the whole payload, so the parser need not check each string.
    let text = std::str::from_utf8(&bytes).map_err(|_| reject("invalid_payload"))?;
    let payload = Payload::parse(text, ours).map_err(|_| reject("invalid_payload"))?;
    if payload.get("x402Version").and_then(Value::as_u64) != Some(2) {
        return Err(reject("invalid_x402_version"));
    }
    // Two lookups: `Value::pointer` would allocate each segment of its path.
    let authorization = payload
        .get("payload")
        .and_then(|inner| inner.get("authorization"));
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
        Ok(found) if found.nonce_known => Err(known_nonce_answer(rail, call, presented).await),
        Ok(found) if found.payer_struck => {
            metrics().payment("payer_struck", "");
            tracing::info!(%payer, "payer refused before /verify: a recent verified payment ended unpaid");
            Err(reject(PAYER_STRUCK))
        }
        Ok(_) => Ok(()),
        Err(error) => Err(ledger_failure(&error)),
    }
}

/// What the ledger says became of this payment's nonce; None when it is not on record.
async fn nonce_on_record(
    rail: &PaymentRail,
    call: &PaidCall<'_>,
    presented: &Presented,
) -> Option<PaidOutcome> {
    let resent = Resent {
        nonce_sha256: &presented.nonce_sha256,
        payer: presented.payer,
    };
    // Boxed: a nonce on record is rare, and its answer may read the chain.
    Box::pin(known_nonce(rail, call, resent)).await
}

/// The answer to a nonce the ledger holds (a row that vanished meanwhile was presented).
async fn known_nonce_answer(
    rail: &PaymentRail,
    call: &PaidCall<'_>,
    presented: &Presented,
) -> PaidOutcome {
    nonce_on_record(rail, call, presented)
        .await
        .unwrap_or_else(|| reject(ALREADY_PRESENTED))
}

/// Every check before `/verify`, in order; none calls the facilitator or runs work.
async fn admit(
    rail: &PaymentRail,
    manifest: &Manifest,
    call: &PaidCall<'_>,
    presented: &Presented,
) -> Result<Instant, PaidOutcome> {
    match checked_on_its_terms(rail, manifest, call, presented) {
        Ok(deadline) => {
            precheck(rail, call, presented).await?;
            Ok(deadline)
        }
        // A payment refused on its own terms (a window that passed or is too short, terms
        // changed since, another replica's manifest) is often an earlier payment sent again:
        // its nonce says what became of it, and while that is unknown no challenge may go
        // out.
        Err(refused) => Err(nonce_on_record(rail, call, presented)
            .await
            .unwrap_or(refused)),
    }
}

/// The checks of the payment against our terms alone, without the ledger: the echo, the
/// window (the call's deadline) and the local check.
fn checked_on_its_terms(
    rail: &PaymentRail,
    manifest: &Manifest,
    call: &PaidCall<'_>,
    presented: &Presented,
) -> Result<Instant, PaidOutcome> {
    echo::check(&presented.payload, call.requirement, call.declared)
        .map_err(|refusal| reject(refusal.reason()))?;
    let deadline = call_deadline(rail, call.machine, manifest, presented)?;
    check_locally(rail, call.machine, call.pay_to, presented)?;
    Ok(deadline)
}

/// Where this payment's answer is retained: the exact payload, the request and the
/// payment-identifier `id` (a malformed `id` is a 400 before anything else).
fn lookup_of(call: &PaidCall<'_>, presented: &Presented) -> Result<Lookup, PaidOutcome> {
    let id = retained::payment_identifier(presented.payload.fields())
        .map_err(|_| PaidOutcome::Failed(Refusal::IdentifierInvalid))?;
    Ok(Lookup::new(
        &presented.payload.canonical_sha256(call.declared.echoes()),
        call.request_sha256,
        id,
        call.pay_to,
        call.declared.url(),
    ))
}

/// `/verify` with our own resource, extensions and requirements.
async fn verify(
    rail: &PaymentRail,
    call: &PaidCall<'_>,
    presented: &Presented,
    body: &PaymentBody,
    deadline: Instant,
) -> Result<(), PaidOutcome> {
    let verified = rail.facilitator.verify(body, deadline).await;
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
            if let Some(outcome) = nonce_on_record(rail, call, presented).await {
                return Err(outcome);
            }
            let reason = verdict
                .invalid_reason
                .unwrap_or_else(|| "payment_invalid".into());
            tracing::info!(machine = %call.machine.machine, %reason, "payment refused by the facilitator");
            Err(reject_reported(reason))
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
    work: impl Future<Output = Result<Vec<u8>, E>>,
) -> PaidOutcome {
    let outcome = decide(rail, manifest, call, work).await;
    if let PaidOutcome::Rejected { reason } = &outcome {
        reason.count();
    }
    outcome
}

/// [`run`]'s steps, in order.
async fn decide<E: std::fmt::Display>(
    rail: &PaymentRail,
    manifest: &Manifest,
    call: PaidCall<'_>,
    work: impl Future<Output = Result<Vec<u8>, E>>,
) -> PaidOutcome {
    let presented = match decode(call.header, call.declared.echoes()) {
        Ok(presented) => presented,
        Err(outcome) => return outcome,
    };
    let lookup = match lookup_of(&call, &presented) {
        Ok(lookup) => lookup,
        Err(outcome) => return outcome,
    };
    let resend = || Resend {
        rail,
        manifest,
        call: &call,
        lookup: &lookup,
        resent: Resent {
            nonce_sha256: &presented.nonce_sha256,
            payer: presented.payer,
        },
    };
    match resend().collect().await {
        Collect::Done(outcome) => return outcome,
        Collect::RunAgain(rerun) => return resend().run_again(rerun, work).await,
        Collect::New => {}
    }
    let outcome = first_presentation(rail, manifest, &call, &presented, &lookup, work).await;
    if !met_its_own_nonce(&outcome) {
        return outcome;
    }
    // A copy that raced the first presentation of this payment past the lookup is not
    // invited to pay again: it collects the first one's answer, waiting for it if need be.
    match resend().collect().await {
        Collect::Done(collected) => collected,
        // Nothing to collect after all: a first that was still undecided has ended (unpaid,
        // its answer dropped; or paid with retention off), and its nonce's row now says so.
        Collect::New if matches!(outcome, PaidOutcome::Failed(Refusal::OutcomeUnknown)) => {
            nonce_on_record(rail, &call, &presented)
                .await
                .unwrap_or(outcome)
        }
        // A paid first whose answer was not retained: `work` is spent here, so the copy is
        // asked to come back (503, `Retry-After`), and its resend runs the work again
        // ("Collecting an answer again") instead of hearing that the answer expired.
        Collect::RunAgain(_) => PaidOutcome::Failed(Refusal::InProgress),
        Collect::New => outcome,
    }
}

/// The refusals of a payment whose nonce the ledger already held ([`known_nonce`]): a copy
/// racing its first presentation may collect that one's answer.
fn met_its_own_nonce(outcome: &PaidOutcome) -> bool {
    match outcome {
        PaidOutcome::Rejected { reason } => {
            [ALREADY_PRESENTED, ANSWER_EXPIRED].contains(&reason.code())
        }
        PaidOutcome::Failed(refusal) => matches!(refusal, Refusal::OutcomeUnknown),
        _ => false,
    }
}

/// The paid path of a payment not presented before: the checks, `/verify`, the reserve, the
/// work, the settlement and the record.
async fn first_presentation<E: std::fmt::Display>(
    rail: &PaymentRail,
    manifest: &Manifest,
    call: &PaidCall<'_>,
    presented: &Presented,
    lookup: &Lookup,
    work: impl Future<Output = Result<Vec<u8>, E>>,
) -> PaidOutcome {
    let deadline = match admit(rail, manifest, call, presented).await {
        Ok(deadline) => deadline,
        Err(outcome) => return outcome,
    };
    let sent = echo::for_facilitator(&presented.payload, call.declared);
    let sent = match PaymentBody::new(&sent, call.declared.wire_requirement()) {
        Ok(sent) => sent,
        Err(error) => return facilitator_down("verify", &error),
    };
    // Before `/verify`: a shortfall at settle is ours only if the payer paid us after the
    // facilitator checked their balance (`settlement`'s funds rule).
    let presented_at = unix_now();
    if let Err(outcome) = verify(rail, call, presented, &sent, deadline).await {
        return outcome;
    }
    let id = match reserve(rail, manifest, call, presented, lookup).await {
        Ok(id) => id,
        Err(outcome) => return outcome,
    };
    let body = match bounded_work(rail, id, call.machine, deadline, work).await {
        Ok(body) => body,
        Err(outcome) => return outcome,
    };
    let Some(terms) = terms_of(manifest, call, presented) else {
        return PaidOutcome::Failed(Refusal::Misconfigured);
    };
    let settling = Settling {
        facilitator: &rail.facilitator,
        chain: rail.trusted_chain(),
        body: &sent,
        payment: Payment {
            terms,
            presented_at,
            valid_before: presented.valid_before,
        },
        deadline,
        wait: rail.settlement_wait,
        listing: &rail.listing,
        machine: &call.machine.machine,
        network: &manifest.payment.network,
    };
    let settled = settlement::settle(&settling).await;
    let row = Row {
        rail,
        id,
        machine: call.machine,
        manifest,
        payer: presented.payer,
        valid_before: presented.valid_before,
        lookup,
        finisher: call.finisher,
    };
    row.record(settled, body).await
}

/// The ledger's reservation of a verified payment, bound to where its answer will be
/// retained; the row's id.
async fn reserve(
    rail: &PaymentRail,
    manifest: &Manifest,
    call: &PaidCall<'_>,
    presented: &Presented,
    lookup: &Lookup,
) -> Result<i64, PaidOutcome> {
    let attempt = new_attempt(manifest, call, presented);
    let binding = Binding {
        lookup_sha256: lookup.key_hex(),
        id_sha256: lookup.id_sha256.clone(),
    };
    match rail.ledger.reserve_bound(&attempt, &binding).await {
        Ok(id) => Ok(id),
        Err(LedgerError::Duplicate) => Err(known_nonce_answer(rail, call, presented).await),
        Err(LedgerError::IdentifierBound) => {
            metrics().retained("conflict");
            Err(PaidOutcome::Failed(Refusal::IdentifierConflict))
        }
        Err(error) => Err(ledger_failure(&error)),
    }
}

/// The machine's work for reserved row `id`, cut by the deadline or by a backstop past the
/// machine's own overall timeout (which turns a slow upstream into a truthful HOLD): only a
/// machine that overruns its own bound is cut by it. A failed or cut work is recorded.
async fn bounded_work<E: std::fmt::Display>(
    rail: &PaymentRail,
    id: i64,
    machine: &Machine,
    deadline: Instant,
    work: impl Future<Output = Result<Vec<u8>, E>>,
) -> Result<Vec<u8>, PaidOutcome> {
    let budget = machine.overall_timeout() + WORK_GRACE;
    match tokio::time::timeout_at(deadline.min(Instant::now() + budget), work).await {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(error)) => Err(work_failed(rail, id, machine, error.to_string()).await),
        Err(_) => {
            let reason = format!("the work ran past its {} ms budget", budget.as_millis());
            Err(work_failed(rail, id, machine, reason).await)
        }
    }
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

fn facilitator_down(step: &'static str, error: &FacilitatorError) -> PaidOutcome {
    tracing::warn!(step, %error, "facilitator unavailable");
    PaidOutcome::Failed(Refusal::FacilitatorUnavailable { step })
}
