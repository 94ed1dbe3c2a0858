//! VM08 x402 service change snapshot. One unpaid probe (engine/web/x402_probe.rs) yields a
//! contract fingerprint of the live challenge; it is compared with the caller's sealed
//! baseline (fingerprint_sha256 = canonical sha256 of the fingerprint). Decision rules and
//! price_policy semantics: docs/vm08-x402-change.md.

use alloy::primitives::U256;
use serde::Deserialize;
use serde_json::{Value, json};

use super::probe_reads::{self, ProbeRequest};
use super::{CheckFailure, NotReady, WorkContext, WorkError};
use crate::catalog::manifest::Machine;
use crate::config::Config;
use crate::machines::checks as rc;
use crate::support::canonical::canonical_sha256;
use crate::support::evm;
use crate::web::x402_probe::{Probe, ProbeOutcome, Requirement};

/// Defaults when the caller sends no price_policy (or only one of its keys).
pub(crate) const DEFAULT_MODEST_INCREASE_BPS: u64 = 500;
pub(crate) const DEFAULT_MAX_INCREASE_BPS: u64 = 2000;

/// VM08 x402 service change snapshot.
pub(crate) struct Vm08;

/// A VM08 request.
#[derive(Debug, Deserialize)]
pub(crate) struct Request {
    /// What to probe.
    #[serde(flatten)]
    pub probe: ProbeRequest,
    /// The caller's thresholds for amount increases.
    pub price_policy: Option<PricePolicy>,
    /// The baseline of an earlier response, kept as sent: its seal covers its exact JSON.
    pub baseline: Option<Value>,
    /// A caller-supplied discovery listing, compared with the live challenge.
    pub discovery: Option<Value>,
}

/// The caller's thresholds for amount increases, in basis points.
#[derive(Debug, Deserialize)]
pub(crate) struct PricePolicy {
    /// Increases up to this are modest.
    pub modest_increase_bps: Option<u64>,
    /// Increases above this are beyond the caller's ceiling.
    pub max_increase_bps: Option<u64>,
}

impl super::Machine for Vm08 {
    const ID: &'static str = "VM08";
    type Request = Request;

    fn check(machine: &Machine, request: &Request) -> Result<(), CheckFailure> {
        check(machine, request)
    }

    fn readiness(machine: &Machine, config: &Config) -> Result<(), NotReady> {
        probe_reads::probe_ready(machine, config)
    }

    async fn observe(
        context: &WorkContext,
        machine: &'static Machine,
        request: &Request,
    ) -> Result<Value, WorkError> {
        let target = request.probe.target()?;
        let probe = probe_reads::probe(context, machine, target).await?;
        Ok(response(machine, request, &probe, &super::vm01::now()))
    }
}

fn check(machine: &Machine, request: &Request) -> Result<(), CheckFailure> {
    request.probe.check()?;
    if let Some(PricePolicy {
        modest_increase_bps: Some(modest),
        max_increase_bps: Some(max),
    }) = &request.price_policy
        && modest > max
    {
        return Err(CheckFailure::field(
            "invalid_price_policy",
            "/price_policy",
            "modest_increase_bps must not exceed max_increase_bps",
        ));
    }
    if let Some(baseline) = &request.baseline {
        rc::baseline_methodology(
            rc::text_at(baseline, "/methodology_version"),
            &machine.methodology_version,
        )?;
        if let Some(fingerprint) = baseline.get("fingerprint") {
            rc::seal_matches(
                rc::text_at(baseline, "/fingerprint_sha256"),
                "/baseline/fingerprint_sha256",
                fingerprint,
            )?;
        }
        baseline_binding(request, baseline)?;
    }
    Ok(())
}

/// A baseline is bound to the method, URL and POST body fingerprint it was made for; a
/// baseline of another request is rejected before payment.
fn baseline_binding(request: &Request, baseline: &Value) -> Result<(), CheckFailure> {
    let target = request.probe.target().map_err(|_| {
        CheckFailure::field("invalid_request", "/resource_url", "unreadable request")
    })?;
    let bound = json!({
        "method": baseline.get("method"),
        "resource_url": baseline.get("resource_url"),
        "body_sha256": baseline.get("body_sha256"),
    });
    if bound != target.to_json() {
        return Err(CheckFailure::field(
            "baseline_request_mismatch",
            "/baseline",
            "the baseline is bound to another method, resource_url or POST body",
        ));
    }
    Ok(())
}

/// The contract fingerprint of the primary requirement (accepts[0]); None when that
/// requirement lacks a contract field.
pub(crate) fn fingerprint(requirements: &[Requirement]) -> Option<Value> {
    let first = requirements.first().filter(|r| r.complete())?;
    Some(json!({
        "scheme": first.scheme,
        "network": first.network,
        "asset": first.asset,
        "amount": first.amount,
        "pay_to": first.pay_to,
        "max_timeout_seconds": first.max_timeout_seconds,
        "extra": first.extra,
        "resource_url": first.resource_url,
        "requirement_count": requirements.len(),
    }))
}

/// The caller's price policy with defaults; modest is capped at max.
fn price_policy(request: &Request) -> (u64, u64) {
    let policy = request.price_policy.as_ref();
    let max = policy
        .and_then(|p| p.max_increase_bps)
        .unwrap_or(DEFAULT_MAX_INCREASE_BPS);
    let modest = policy
        .and_then(|p| p.modest_increase_bps)
        .unwrap_or(DEFAULT_MODEST_INCREASE_BPS)
        .min(max);
    (modest, max)
}

/// The amount class of a change from `old` to `new` under (modest, max) basis points.
/// The increase in bps is rounded up, so any increase counts as at least 1 bps.
pub(crate) fn amount_class(old: &str, new: &str, modest: u64, max: u64) -> Option<&'static str> {
    let (Ok(old), Ok(new)) = (evm::parse_uint256(old), evm::parse_uint256(new)) else {
        return Some("AMOUNT_CHANGED");
    };
    if new == old {
        return None;
    }
    if new < old {
        return Some("AMOUNT_DECREASE");
    }
    if old.is_zero() {
        return Some("AMOUNT_INCREASE_ABOVE_POLICY");
    }
    let diff = (new - old).saturating_mul(U256::from(10_000u64));
    let bps = diff.div_ceil(old);
    Some(if bps <= U256::from(modest) {
        "AMOUNT_INCREASE_MODEST"
    } else if bps <= U256::from(max) {
        "AMOUNT_INCREASE_WITHIN_POLICY"
    } else {
        "AMOUNT_INCREASE_ABOVE_POLICY"
    })
}

/// Material change classes between a baseline fingerprint and the current one.
pub(crate) fn changes(prior: &Value, current: &Value, policy: (u64, u64)) -> Vec<&'static str> {
    let differs = |key: &str| prior.get(key) != current.get(key);
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    let mut classes = Vec::new();
    if differs("scheme") {
        classes.push("SCHEME_CHANGED");
    }
    if differs("network") {
        classes.push("NETWORK_CHANGED");
    }
    if !text(prior, "asset").eq_ignore_ascii_case(&text(current, "asset")) {
        classes.push("ASSET_CHANGED");
    }
    if !text(prior, "pay_to").eq_ignore_ascii_case(&text(current, "pay_to")) {
        classes.push("PAY_TO_CHANGED");
    }
    if let Some(class) = amount_class(
        &text(prior, "amount"),
        &text(current, "amount"),
        policy.0,
        policy.1,
    ) {
        classes.push(class);
    }
    if differs("max_timeout_seconds") {
        classes.push("TIMEOUT_CHANGED");
    }
    let method = |v: &Value| v.pointer("/extra/assetTransferMethod").cloned();
    if method(prior) != method(current) {
        classes.push("TRANSFER_METHOD_CHANGED");
    }
    if differs("extra") {
        classes.push("EXTRA_CHANGED");
    }
    if differs("resource_url") {
        classes.push("RESOURCE_URL_CHANGED");
    }
    let count = |v: &Value| {
        v.get("requirement_count")
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    match count(current).cmp(&count(prior)) {
        std::cmp::Ordering::Greater => classes.push("REQUIREMENT_ADDED"),
        std::cmp::Ordering::Less => classes.push("REQUIREMENT_REMOVED"),
        std::cmp::Ordering::Equal => {}
    }
    classes
}

/// What the comparison decided.
struct Verdict {
    status: &'static str,
    decision: &'static str,
    classes: Vec<&'static str>,
    reason: String,
    action: &'static str,
    /// The baseline returned: the current one (Some(fingerprint)) or the caller's.
    returns_current: bool,
}

fn verdict(
    probe: &Probe,
    current: Option<&Value>,
    prior: Option<&Value>,
    policy: (u64, u64),
) -> Verdict {
    let hold = |reason: String, classes: Vec<&'static str>| Verdict {
        status: "HOLD",
        decision: "HOLD",
        classes,
        reason,
        action: "keep_prior_baseline",
        returns_current: false,
    };
    match (current, prior) {
        (Some(_), None) => Verdict {
            status: "OK",
            decision: "BASELINE_CREATED",
            classes: Vec::new(),
            reason: "No baseline was supplied; the complete direct observation is returned as a reusable baseline.".into(),
            action: "store_returned_baseline",
            returns_current: true,
        },
        (Some(current), Some(prior)) => {
            let classes = changes(prior, current, policy);
            if classes.is_empty() {
                Verdict {
                    status: "OK",
                    decision: "CONTINUE",
                    classes,
                    reason: "The live payment contract equals the baseline's fingerprint.".into(),
                    action: "store_returned_baseline",
                    returns_current: true,
                }
            } else {
                Verdict {
                    status: "OK",
                    decision: "CHANGED",
                    reason: format!(
                        "The live payment contract differs from the baseline: {}.",
                        classes.join(", ")
                    ),
                    classes,
                    action: "review_material_changes",
                    returns_current: true,
                }
            }
        }
        (None, prior) => {
            let no_longer = prior.is_some()
                && matches!(probe.outcome, ProbeOutcome::NotPaymentRequired { status } if (200..300).contains(&status));
            if no_longer {
                return Verdict {
                    status: "OK",
                    decision: "CHANGED",
                    classes: vec!["NO_LONGER_X402"],
                    reason: "The resource answered successfully without asking for payment; it no longer presents an x402 payment contract.".into(),
                    action: "review_material_changes",
                    returns_current: false,
                };
            }
            let reason = probe.limitation().unwrap_or_else(|| {
                "The challenge's first requirement lacks a scheme, network, asset, amount or payTo, so no complete fingerprint could be made.".into()
            });
            hold(reason, Vec::new())
        }
    }
}

/// The VM08 response of a probe and the caller's request.
pub(crate) fn response(
    machine: &Machine,
    request: &Request,
    probe: &Probe,
    checked_at: &str,
) -> Value {
    let current = fingerprint(probe.requirements());
    let prior = request.baseline.as_ref().and_then(|b| b.get("fingerprint"));
    let policy = price_policy(request);
    let verdict = verdict(probe, current.as_ref(), prior, policy);
    let current_sha = current.as_ref().map(canonical_sha256);
    let baseline = if verdict.returns_current {
        json!({
            "reusable": true,
            "methodology_version": machine.methodology_version,
            "provenance": "direct_service",
            "observed_at": checked_at,
            "resource_url": probe.target.url.as_str(),
            "method": probe.target.method,
            "body_sha256": probe.target.body_sha256(),
            "fingerprint": current,
            "fingerprint_sha256": current_sha,
        })
    } else if let Some(given) = &request.baseline {
        // Incomplete or HOLD evidence never replaces the caller's baseline (SPEC Part 3 rule 2).
        json!({
            "reusable": true,
            "methodology_version": machine.methodology_version,
            "provenance": "direct_service",
            "observed_at": given.get("observed_at"),
            "resource_url": given.get("resource_url"),
            "method": given.get("method"),
            "body_sha256": given.get("body_sha256"),
            "fingerprint": given.get("fingerprint"),
            "fingerprint_sha256": given.get("fingerprint_sha256"),
        })
    } else {
        json!({
            "reusable": false,
            "methodology_version": machine.methodology_version,
            "provenance": "direct_service",
            "observed_at": checked_at,
            "resource_url": probe.target.url.as_str(),
            "method": probe.target.method,
            "body_sha256": probe.target.body_sha256(),
            "fingerprint": null,
            "fingerprint_sha256": null,
        })
    };
    let mut limitations = vec![
        "The payment contract was observed through one unpaid probe; the target was not paid."
            .to_string(),
    ];
    limitations.extend(probe.limitation());
    if current.is_none() && request.baseline.is_some() {
        limitations.push(
            "Your baseline is returned unchanged; this observation does not replace it.".into(),
        );
    }
    let compared_amount = prior.is_some() && current.is_some();
    json!({
        "status": verdict.status,
        "machine": machine.machine,
        "methodology_version": machine.methodology_version,
        "candidate_id": canonical_sha256(&probe.target.to_json()),
        "decision": verdict.decision,
        "observation_kind": if prior.is_some() { "repeat" } else { "first" },
        "material_change_classes": verdict.classes,
        "checked_at": checked_at,
        "requested_resource": probe.target.url.as_str(),
        "probe": probe.target.to_json(),
        "reason": verdict.reason,
        "recommended_action": verdict.action,
        "price_policy": if compared_amount {
            json!({"modest_increase_bps": policy.0, "max_increase_bps": policy.1})
        } else {
            Value::Null
        },
        "discovery_comparison": request.discovery.as_ref().map(|d| discovery_comparison(d, probe)),
        "fingerprint": current,
        "fingerprint_sha256": current_sha,
        "baseline": baseline,
        "limitations": limitations,
    })
}

/// Compares a caller-supplied listing (x402 discovery item shape: `resource`, `accepts[]`)
/// with the live challenge. Informational only: the 402 is the payment authority.
fn discovery_comparison(listing: &Value, probe: &Probe) -> Value {
    let live = probe.requirements().first();
    let listed = listing.pointer("/accepts/0");
    let resource_matches = listing
        .get("resource")
        .and_then(Value::as_str)
        .map(|r| r == probe.target.url.as_str());
    let (Some(live), Some(listed)) = (live, listed) else {
        return json!({"resource_matches": resource_matches, "payment_terms_match": null, "differing_fields": []});
    };
    let pairs = [
        ("scheme", live.scheme.clone(), listed.get("scheme")),
        ("network", live.network.clone(), listed.get("network")),
        ("asset", live.asset.clone(), listed.get("asset")),
        (
            "amount",
            live.amount.clone(),
            listed
                .get("amount")
                .or_else(|| listed.get("maxAmountRequired")),
        ),
        ("pay_to", live.pay_to.clone(), listed.get("payTo")),
    ];
    let differing: Vec<&str> = pairs
        .iter()
        .filter(|(_, live, listed)| {
            let listed = listed.and_then(Value::as_str).unwrap_or("");
            !live.as_deref().unwrap_or("").eq_ignore_ascii_case(listed)
        })
        .map(|(name, _, _)| *name)
        .collect();
    json!({
        "resource_matches": resource_matches,
        "payment_terms_match": differing.is_empty(),
        "differing_fields": differing,
    })
}

#[cfg(test)]
mod tests {
    use super::{amount_class, changes};
    use serde_json::json;

    #[test]
    fn change_classes_cover_requirements_and_methods() {
        let prior = json!({"scheme": "exact", "network": "eip155:8453", "asset": "0xaa",
            "amount": "100", "pay_to": "0xBB", "max_timeout_seconds": 60,
            "extra": {"name": "USD Coin"}, "resource_url": "https://a.example.com/x",
            "requirement_count": 1});
        let same_case = json!({"asset": "0xAA", "pay_to": "0xbb"});
        let mut current = prior.clone();
        current["asset"] = same_case["asset"].clone();
        current["pay_to"] = same_case["pay_to"].clone();
        assert!(changes(&prior, &current, (500, 2000)).is_empty());
        current["requirement_count"] = json!(2);
        current["extra"]["assetTransferMethod"] = json!("permit2");
        current["amount"] = json!("90");
        assert_eq!(
            changes(&prior, &current, (500, 2000)),
            vec![
                "AMOUNT_DECREASE",
                "TRANSFER_METHOD_CHANGED",
                "EXTRA_CHANGED",
                "REQUIREMENT_ADDED"
            ]
        );
        let mut fewer = prior.clone();
        fewer["requirement_count"] = json!(0);
        fewer["network"] = json!("base");
        assert_eq!(
            changes(&prior, &fewer, (500, 2000)),
            vec!["NETWORK_CHANGED", "REQUIREMENT_REMOVED"]
        );
    }

    #[test]
    fn amount_classes_follow_the_policy() {
        assert_eq!(amount_class("10000", "10000", 500, 2000), None);
        assert_eq!(
            amount_class("10000", "10500", 500, 2000),
            Some("AMOUNT_INCREASE_MODEST")
        );
        assert_eq!(
            amount_class("10000", "10501", 500, 2000),
            Some("AMOUNT_INCREASE_WITHIN_POLICY")
        );
        assert_eq!(
            amount_class("10000", "12000", 500, 2000),
            Some("AMOUNT_INCREASE_WITHIN_POLICY")
        );
        assert_eq!(
            amount_class("10000", "12001", 500, 2000),
            Some("AMOUNT_INCREASE_ABOVE_POLICY")
        );
        assert_eq!(
            amount_class("10000", "9999", 500, 2000),
            Some("AMOUNT_DECREASE")
        );
        assert_eq!(
            amount_class("0", "1", 500, 2000),
            Some("AMOUNT_INCREASE_ABOVE_POLICY")
        );
        assert_eq!(
            amount_class("10000", "10001", 0, 0),
            Some("AMOUNT_INCREASE_ABOVE_POLICY")
        );
    }
}
