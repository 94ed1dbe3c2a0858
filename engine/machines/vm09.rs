//! VM09 x402 pre-sign handoff packet. One unpaid probe, the requirement selection of
//! engine/web/x402_probe.rs (eip3009 only), the caller's ceiling and payTo list, the payer's
//! USDC balance at one block, and the optional compact baseline. Decision rules, reason
//! codes and hashes: docs/vm09-presign-handoff.md.

use alloy::primitives::U256;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use super::probe_reads::{self, ProbeRequest};
use super::{Call, CheckFailure, Need, WorkError};
use crate::catalog::manifest::Machine;
use crate::chain::token_reads::TokenReads;
use crate::machines::checks as rc;
use crate::support::canonical::canonical_sha256;
use crate::support::evm;
use crate::support::timestamp::millis as timestamp;
use crate::web::x402_probe::{self, Probe, Requirement, Selection};

/// VM09 x402 pre-sign handoff packet.
pub(crate) struct Vm09;

/// A VM09 request.
#[derive(Debug, Deserialize)]
pub(crate) struct Request {
    /// What to probe.
    #[serde(flatten)]
    pub probe: ProbeRequest,
    /// The payer whose USDC balance is read.
    pub payer_address: String,
    /// The caller's ceiling in atomic units (uint256 decimal string).
    pub max_amount_atomic: String,
    /// The payTo addresses the caller approves.
    pub allowed_pay_to: Vec<String>,
    /// The optional compact baseline, compared field by field.
    pub baseline: Option<Value>,
}

impl super::Machine for Vm09 {
    const ID: &'static str = "VM09";
    type Request = Request;
    type Answer = Value;
    const NEEDS: &'static [Need] = &[Need::Probe, Need::Rpc("eip155:8453")];

    fn check(_machine: &Machine, request: &Request) -> Result<(), CheckFailure> {
        request.probe.check()?;
        rc::address(&request.payer_address, "/payer_address")?;
        rc::uint256(&request.max_amount_atomic, "/max_amount_atomic")?;
        rc::address_list(&request.allowed_pay_to, "/allowed_pay_to")?;
        if let Some(baseline) = &request.baseline {
            if let Some(url) = rc::text_at(baseline, "/resource_url") {
                rc::public_url(url, "/baseline/resource_url")?;
            }
            rc::optional_address(rc::text_at(baseline, "/pay_to"), "/baseline/pay_to")?;
        }
        Ok(())
    }

    async fn observe(call: Call<'_, Request>) -> Result<Value, WorkError> {
        let (context, machine, request) = call.parts();
        let (probe, selection) =
            probe_reads::probe_and_select(context, machine, &request.probe).await?;
        // The packet's 60 s run from when the challenge was received, not from when our
        // reads end.
        let observed_at = probe.received_at;
        let selected = match &selection {
            Selection::Selected(requirement) => Some(requirement),
            _ => None,
        };
        // VM09 reads the balance only: eip3009 names no spender.
        let reads =
            probe_reads::read_payer(context, machine, &request.payer_address, selected, |_| None)
                .await?;
        response(
            machine,
            request,
            &probe,
            &selection,
            reads.as_ref(),
            observed_at,
        )
    }
}

/// Whether `pay_to` is in the caller's list (addresses compared as addresses).
fn pay_to_allowed(request: &Request, pay_to: &str) -> bool {
    let Ok(pay_to) = evm::parse_address(pay_to) else {
        return false;
    };
    request
        .allowed_pay_to
        .iter()
        .filter_map(|a| evm::parse_address(a).ok())
        .any(|a| a == pay_to)
}

fn within_ceiling(request: &Request, amount: &str) -> bool {
    match (
        evm::parse_uint256(amount),
        evm::parse_uint256(&request.max_amount_atomic),
    ) {
        (Ok(amount), Ok(max)) => amount <= max,
        _ => false,
    }
}

/// The baseline comparison: each field of the compact baseline against the current
/// request identity and selected requirement (addresses case-insensitively).
fn baseline_evidence(
    request: &Request,
    probe: &Probe,
    selected: Option<&Requirement>,
) -> Option<Value> {
    let baseline = request.baseline.as_ref()?;
    let body_sha = probe.target.body_sha256();
    let current: [(&str, Option<String>, bool); 8] = [
        (
            "resource_url",
            Some(probe.target.url.as_str().to_string()),
            false,
        ),
        ("method", Some(probe.target.method.to_string()), false),
        ("body_sha256", body_sha, false),
        ("scheme", selected.and_then(|r| r.scheme.clone()), false),
        ("network", selected.and_then(|r| r.network.clone()), false),
        ("asset", selected.and_then(|r| r.asset.clone()), true),
        ("amount", selected.and_then(|r| r.amount.clone()), false),
        ("pay_to", selected.and_then(|r| r.pay_to.clone()), true),
    ];
    let mut changed = Vec::new();
    for (name, now, is_address) in &current {
        let then = baseline.get(*name).and_then(Value::as_str);
        let same = match (then, now.as_deref()) {
            (Some(a), Some(b)) if *is_address => a.eq_ignore_ascii_case(b),
            (a, b) => a == b,
        };
        if !same {
            changed.push(*name);
        }
    }
    let compared: Vec<&str> = current.iter().map(|(n, _, _)| *n).collect();
    Some(
        json!({"matches": changed.is_empty(), "compared_fields": compared, "changed_fields": changed}),
    )
}

/// Decision, status and reason codes (docs/vm09-presign-handoff.md).
struct Decision {
    status: &'static str,
    decision: &'static str,
    codes: Vec<&'static str>,
}

fn decide(
    probe: &Probe,
    selection: &Selection,
    ceiling: (Option<bool>, Option<bool>),
    identity_match: bool,
    balance_ok: Option<bool>,
    baseline_matches: Option<bool>,
) -> Decision {
    let hold = |codes: Vec<&'static str>| Decision {
        status: "HOLD",
        decision: "HOLD",
        codes,
    };
    match selection {
        Selection::NoChallenge => {
            let code = match probe.outcome {
                x402_probe::ProbeOutcome::Redirect { .. } => "REDIRECT_REFUSED",
                x402_probe::ProbeOutcome::NotPaymentRequired { .. } => "NO_PAYMENT_CHALLENGE",
                x402_probe::ProbeOutcome::UnreadableChallenge { .. } => "CHALLENGE_UNREADABLE",
                _ => "PROBE_FAILED",
            };
            return hold(vec![code]);
        }
        Selection::Incomplete => return hold(vec!["DIRECT_CONTRACT_INCOMPLETE"]),
        Selection::NoSupportedRequirement => {
            return Decision {
                status: "OK",
                decision: "NOT_READY",
                codes: vec!["DIRECT_CONTRACT_COMPLETE", "UNSUPPORTED_REQUIREMENT"],
            };
        }
        Selection::UnsupportedMethod(_) => {
            return Decision {
                status: "OK",
                decision: "NOT_READY",
                codes: vec!["DIRECT_CONTRACT_COMPLETE", "UNSUPPORTED_TRANSFER_METHOD"],
            };
        }
        Selection::Selected(_) => {}
    }
    let mut codes = vec!["DIRECT_CONTRACT_COMPLETE", "SUPPORTED_TRANSFER_METHOD"];
    let mut ready = true;
    if !identity_match {
        codes.push("RESOURCE_IDENTITY_MISMATCH");
        ready = false;
    }
    if ceiling.0 == Some(true) {
        codes.push("WITHIN_CALLER_LIMIT");
    } else {
        codes.push("ABOVE_CALLER_LIMIT");
        ready = false;
    }
    if ceiling.1 != Some(true) {
        codes.push("PAY_TO_NOT_ALLOWED");
        ready = false;
    }
    match balance_ok {
        Some(true) => codes.push("BALANCE_SUFFICIENT"),
        Some(false) => {
            codes.push("BALANCE_INSUFFICIENT");
            ready = false;
        }
        None => {
            codes.push("BALANCE_UNAVAILABLE");
            return hold(codes);
        }
    }
    if baseline_matches == Some(false) {
        codes.push("BASELINE_MISMATCH");
        ready = false;
    }
    Decision {
        status: "OK",
        decision: if ready { "READY" } else { "NOT_READY" },
        codes,
    }
}

/// When the packet was observed and when it expires, both in whole milliseconds, so
/// `expires_at - observed_at` is exactly the manifest's `freshness_ms`.
fn fresh_window(
    machine: &Machine,
    observed_at: DateTime<Utc>,
) -> Result<(DateTime<Utc>, DateTime<Utc>), WorkError> {
    let freshness = machine
        .limit("freshness_ms")
        .and_then(|ms| i64::try_from(ms).ok())
        .ok_or_else(|| WorkError::manifest(&machine.machine, "no limit freshness_ms"))?;
    let observed_at = DateTime::<Utc>::from_timestamp_millis(observed_at.timestamp_millis())
        .unwrap_or(observed_at);
    Ok((
        observed_at,
        observed_at + chrono::Duration::milliseconds(freshness),
    ))
}

/// The VM09 packet.
pub(crate) fn response(
    machine: &Machine,
    request: &Request,
    probe: &Probe,
    selection: &Selection,
    reads: Option<&TokenReads>,
    observed_at: DateTime<Utc>,
) -> Result<Value, WorkError> {
    let (observed_at, expires_at) = fresh_window(machine, observed_at)?;
    let selected = selection.requirement();
    let direct_url = probe.target.url.as_str();
    let caller_url = request.probe.resource_url.as_str();
    let identity_match = selected
        .and_then(|r| r.resource_url.as_deref())
        .is_some_and(|u| u == direct_url || u == caller_url);
    let amount = selected.and_then(|r| r.amount.clone());
    let pay_to = selected.and_then(|r| r.pay_to.clone());
    let ceiling = (
        amount.as_deref().map(|a| within_ceiling(request, a)),
        pay_to.as_deref().map(|p| pay_to_allowed(request, p)),
    );
    let balance_ok = match (reads.and_then(|r| r.balance), amount.as_deref()) {
        (Some(balance), Some(amount)) => {
            evm::parse_uint256(amount).ok().map(|a: U256| balance >= a)
        }
        _ => None,
    };
    let baseline_evidence = baseline_evidence(request, probe, selected);
    let baseline_matches = baseline_evidence
        .as_ref()
        .and_then(|b| b.get("matches"))
        .and_then(Value::as_bool);
    let decision = decide(
        probe,
        selection,
        ceiling,
        identity_match,
        balance_ok,
        baseline_matches,
    );
    let selected_json = selected.map(x402_probe::requirement_json);
    let direct_contract_sha256 = selected.map(|r| direct_contract_sha256(probe, r));
    let limitations = limitations(machine, probe, selection, reads);
    let packet = json!({
        "status": decision.status,
        "machine": machine.machine,
        "methodology_version": machine.methodology_version,
        "decision": decision.decision,
        "observed_at": timestamp(observed_at),
        "expires_at": timestamp(expires_at),
        "signing": false,
        "payment_execution": false,
        "transaction_construction": false,
        "custody": false,
        "recommendation": false,
        "reason_codes": decision.codes,
        "selected_requirement": selected_json,
        "direct_resource_url": direct_url,
        "resource_identity_match": identity_match,
        "payer_balance": {
            "payer_address": request.payer_address,
            "asset": selected.and_then(|r| r.asset.clone()).unwrap_or_default(),
            "balance_raw": reads.and_then(|r| r.balance).map(|b| b.to_string()),
            "block_number": reads.and_then(|r| r.block).map(|b| b.to_string()),
        },
        "caller_ceiling": {
            "max_amount_atomic": request.max_amount_atomic,
            "allowed_pay_to": request.allowed_pay_to,
            "amount_within_ceiling": ceiling.0,
            "pay_to_allowed": ceiling.1,
        },
        "baseline_evidence": baseline_evidence,
        "direct_contract_sha256": direct_contract_sha256,
        "limitations": limitations,
    });
    Ok(with_handoff_seal(packet))
}

/// What the packet does not say, in order: READY is no authorization, the probe's own
/// limitation, an unsupported transfer method, the token reads', and no usable requirement.
fn limitations(
    machine: &Machine,
    probe: &Probe,
    selection: &Selection,
    reads: Option<&TokenReads>,
) -> Vec<String> {
    let first = "READY is not authorization to pay; the packet describes the contract observed at observed_at and expires at expires_at.";
    let mut limitations = probe_reads::limitations(first, probe, selection, reads, |r| {
        let supported = x402_probe::allowlist_text(machine, "asset_transfer_methods", "or");
        format!(
            "The requirement uses asset transfer method {}; only {supported} is supported, so the packet fails closed.",
            r.asset_transfer_method()
        )
    });
    if matches!(
        selection,
        Selection::Incomplete | Selection::NoSupportedRequirement
    ) {
        let listed = |name| x402_probe::allowlist_text(machine, name, "or");
        limitations.push(format!("No requirement on scheme {}, network {} and asset {} with every contract field present was found.", listed("schemes"), listed("networks"), listed("assets")));
    }
    limitations
}

/// The hash of the contract the packet hands off: the probe, the challenge's resource and
/// the selected requirement with its `extra`.
fn direct_contract_sha256(probe: &Probe, selected: &Requirement) -> String {
    canonical_sha256(&json!({
        "probe": probe.target.to_json(),
        "challenge_resource_url": selected.resource_url,
        "selected_requirement": x402_probe::requirement_json(selected),
        "extra": selected.extra,
    }))
}

/// The packet with `handoff_sha256`, which seals the whole packet except itself, before its
/// limitations.
fn with_handoff_seal(mut packet: Value) -> Value {
    let handoff = canonical_sha256(&packet);
    if let Some(object) = packet.as_object_mut() {
        let limitations = object.remove("limitations");
        object.insert("handoff_sha256".into(), Value::String(handoff));
        object.insert(
            "limitations".into(),
            limitations.unwrap_or_else(|| json!([])),
        );
    }
    packet
}
