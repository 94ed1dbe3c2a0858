//! VM08 x402 service change snapshot. One unpaid probe (engine/web/x402_probe.rs) yields a
//! contract fingerprint of every requirement of the live challenge; it is compared with the
//! caller's sealed baseline (fingerprint_sha256 over the fingerprint, baseline_sha256 over the
//! whole baseline). Decision rules and price_policy semantics: docs/vm08-x402-change.md.

use alloy::primitives::U256;
use serde::Deserialize;
use serde_json::{Value, json};

use super::probe_reads::{self, ProbeRequest};
use super::{Call, CheckFailure, Need, WorkError, limit};
use crate::catalog::manifest::Machine;
use crate::machines::checks as rc;
use crate::support::canonical::{canonical_json, canonical_sha256};
use crate::support::evm;
use crate::web::x402_probe::{Probe, ProbeOutcome, Requirement};

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
    type Answer = Value;
    const NEEDS: &'static [Need] = &[Need::Probe];

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
            rc::baseline_methodology(baseline, &machine.methodology_version)?;
            rc::seal_matches(
                rc::text_at(baseline, "/fingerprint_sha256"),
                "/baseline/fingerprint_sha256",
                baseline.get("fingerprint").unwrap_or(&Value::Null),
            )?;
            rc::self_sealed(baseline, "baseline_sha256")?;
            if baseline.get("reusable") != Some(&Value::Bool(true)) {
                return Err(CheckFailure::field(
                    "baseline_not_reusable",
                    "/baseline/reusable",
                    "only a baseline returned with reusable: true can be compared against",
                ));
            }
            baseline_binding(request, baseline)?;
        }
        Ok(())
    }

    async fn observe(call: Call<'_, Request>) -> Result<Value, WorkError> {
        let (context, machine, request) = call.parts();
        let target = request.probe.target()?;
        let probe = probe_reads::probe(context, machine, target).await?;
        response(machine, request, &probe, &super::vm01::now())
    }
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

/// The contract fingerprint of one requirement.
fn requirement_fingerprint(requirement: &Requirement) -> Value {
    json!({
        "scheme": requirement.scheme,
        "network": requirement.network,
        "asset": requirement.asset,
        "amount": requirement.amount,
        "pay_to": requirement.pay_to,
        "max_timeout_seconds": requirement.max_timeout_seconds,
        "extra": requirement.extra,
        "resource_url": requirement.resource_url,
    })
}

/// The order-independent sort key of a requirement fingerprint: its canonical JSON with the
/// case-insensitive addresses lowercased.
fn order_key(requirement: &Value) -> String {
    let mut key = requirement.clone();
    for field in ["asset", "pay_to"] {
        if let Some(text) = key.get(field).and_then(Value::as_str) {
            key[field] = Value::String(text.to_ascii_lowercase());
        }
    }
    canonical_json(&key)
}

/// The live requirements as (accepts index, fingerprint), in canonical order; None when there
/// is none or any of them lacks a contract field (the observation is then incomplete).
fn requirement_fingerprints(requirements: &[Requirement]) -> Option<Vec<(usize, Value)>> {
    if requirements.is_empty() || !requirements.iter().all(Requirement::complete) {
        return None;
    }
    let mut listed: Vec<(usize, Value)> = requirements
        .iter()
        .map(|r| (r.index, requirement_fingerprint(r)))
        .collect();
    listed.sort_by_cached_key(|(_, fp)| order_key(fp));
    Some(listed)
}

/// The contract fingerprint of the whole challenge: every requirement of `accepts`, in
/// canonical order (so reordering `accepts` changes nothing), and their count. None when the
/// challenge has no requirement or one lacks a contract field.
pub(crate) fn fingerprint(requirements: &[Requirement]) -> Option<Value> {
    let listed = requirement_fingerprints(requirements)?;
    Some(json!({
        "requirement_count": listed.len(),
        "requirements": listed.into_iter().map(|(_, fp)| fp).collect::<Vec<_>>(),
    }))
}

/// The caller's price policy, each key it leaves out taken from the manifest's
/// `default_modest_increase_bps` and `default_max_increase_bps`; modest is capped at max.
fn price_policy(machine: &Machine, request: &Request) -> Result<(u64, u64), WorkError> {
    let policy = request.price_policy.as_ref();
    let max = match policy.and_then(|p| p.max_increase_bps) {
        Some(max) => max,
        None => limit(machine, "default_max_increase_bps")?,
    };
    let modest = match policy.and_then(|p| p.modest_increase_bps) {
        Some(modest) => modest,
        None => limit(machine, "default_modest_increase_bps")?,
    };
    Ok((modest.min(max), max))
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

/// Material change classes between one baseline requirement and one live requirement.
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
    classes
}

/// One requirement that differs between the baseline and the live challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequirementChange {
    /// Its index in the live challenge's `accepts`; None when it was removed.
    pub accepts_index: Option<usize>,
    /// Its position in the baseline fingerprint's `requirements`; None when it was added.
    pub baseline_index: Option<usize>,
    pub classes: Vec<&'static str>,
}

impl RequirementChange {
    fn to_json(&self) -> Value {
        json!({
            "accepts_index": self.accepts_index,
            "baseline_index": self.baseline_index,
            "classes": self.classes,
        })
    }

    fn describe(&self) -> String {
        let which = match (self.accepts_index, self.baseline_index) {
            (Some(live), _) => format!("accepts[{live}]"),
            (None, Some(old)) => format!("baseline requirement {old}"),
            (None, None) => "a requirement".into(),
        };
        format!("{which}: {}", self.classes.join(", "))
    }
}

/// Pairs the baseline's requirements with the live ones, independent of their order: equal
/// requirements first, then each remaining live requirement with the remaining baseline one
/// it differs from least; the rest were added or removed.
pub(crate) fn requirement_changes(
    prior: &[Value],
    current: &[(usize, Value)],
    policy: (u64, u64),
) -> Vec<RequirementChange> {
    let mut prior_open: Vec<bool> = vec![true; prior.len()];
    let mut current_open: Vec<bool> = vec![true; current.len()];
    for (c, (_, live)) in current.iter().enumerate() {
        let equal = (0..prior.len())
            .find(|&p| prior_open[p] && changes(&prior[p], live, policy).is_empty());
        if let Some(p) = equal {
            prior_open[p] = false;
            current_open[c] = false;
        }
    }
    let mut found = Vec::new();
    for (c, (accepts_index, live)) in current.iter().enumerate() {
        if !current_open[c] {
            continue;
        }
        let closest = (0..prior.len())
            .filter(|&p| prior_open[p])
            .map(|p| (p, changes(&prior[p], live, policy)))
            .min_by_key(|(_, classes)| classes.len());
        let (baseline_index, classes) = match closest {
            Some((p, classes)) => {
                prior_open[p] = false;
                (Some(p), classes)
            }
            None => (None, vec!["REQUIREMENT_ADDED"]),
        };
        found.push(RequirementChange {
            accepts_index: Some(*accepts_index),
            baseline_index,
            classes,
        });
    }
    found.extend(
        (0..prior.len())
            .filter(|&p| prior_open[p])
            .map(|p| RequirementChange {
                accepts_index: None,
                baseline_index: Some(p),
                classes: vec!["REQUIREMENT_REMOVED"],
            }),
    );
    found
}

/// The union of the classes of every changed requirement, without repeats, in first-seen order.
fn union_of(changed: &[RequirementChange]) -> Vec<&'static str> {
    let mut classes: Vec<&'static str> = Vec::new();
    for class in changed.iter().flat_map(|c| c.classes.iter()) {
        if !classes.contains(class) {
            classes.push(class);
        }
    }
    classes
}

/// What the comparison decided.
struct Verdict {
    status: &'static str,
    decision: &'static str,
    changed: Vec<RequirementChange>,
    /// NO_LONGER_X402 or the union of the requirement changes.
    classes: Vec<&'static str>,
    reason: String,
    action: &'static str,
    /// Whether the current observation is complete, hence returned as a reusable baseline.
    returns_current: bool,
}

fn verdict(
    probe: &Probe,
    current: Option<&[(usize, Value)]>,
    prior: Option<&[Value]>,
    policy: (u64, u64),
) -> Verdict {
    match (current, prior) {
        (Some(_), None) => Verdict {
            status: "OK",
            decision: "BASELINE_CREATED",
            changed: Vec::new(),
            classes: Vec::new(),
            reason: "No baseline was supplied; the complete direct observation is returned as a reusable baseline.".into(),
            action: "store_returned_baseline",
            returns_current: true,
        },
        (Some(current), Some(prior)) => {
            let changed = requirement_changes(prior, current, policy);
            let classes = union_of(&changed);
            if changed.is_empty() {
                return Verdict {
                    status: "OK",
                    decision: "CONTINUE",
                    changed,
                    classes,
                    reason: "Every requirement of the live payment contract equals the baseline's fingerprint.".into(),
                    action: "store_returned_baseline",
                    returns_current: true,
                };
            }
            let described: Vec<String> = changed.iter().map(RequirementChange::describe).collect();
            Verdict {
                status: "OK",
                decision: "CHANGED",
                reason: format!(
                    "The live payment contract differs from the baseline: {}.",
                    described.join("; ")
                ),
                changed,
                classes,
                action: "review_material_changes",
                returns_current: true,
            }
        }
        (None, prior) => {
            let no_longer = prior.is_some()
                && matches!(probe.outcome, ProbeOutcome::NotPaymentRequired { status } if (200..300).contains(&status));
            if no_longer {
                return Verdict {
                    status: "OK",
                    decision: "CHANGED",
                    changed: Vec::new(),
                    classes: vec!["NO_LONGER_X402"],
                    reason: "The resource answered successfully without asking for payment; it no longer presents an x402 payment contract.".into(),
                    action: "review_material_changes",
                    returns_current: false,
                };
            }
            let reason = probe.limitation().unwrap_or_else(|| {
                "A requirement of the challenge lacks a scheme, network, asset, amount or payTo (or there is none), so no complete fingerprint could be made.".into()
            });
            Verdict {
                status: "HOLD",
                decision: "HOLD",
                changed: Vec::new(),
                classes: Vec::new(),
                reason,
                action: "keep_prior_baseline",
                returns_current: false,
            }
        }
    }
}

/// The baseline's requirement fingerprints, as sent (already seal-checked before payment).
fn prior_requirements(request: &Request) -> Option<Vec<Value>> {
    request
        .baseline
        .as_ref()
        .and_then(|b| rc::at(b, "/fingerprint/requirements"))
        .and_then(Value::as_array)
        .cloned()
}

/// The baseline block of the response, sealed with baseline_sha256. Reusable only when this
/// observation is complete (SPEC 2.9); otherwise it carries no fingerprint and says why, and
/// the caller keeps its own baseline (SPEC Part 3 rule 2).
fn baseline_block(
    machine: &Machine,
    probe: &Probe,
    current: Option<&Value>,
    verdict: &Verdict,
    observed_at: &str,
) -> Value {
    let (fingerprint, hold_reason) = match current {
        Some(fingerprint) if verdict.returns_current => (Some(fingerprint), None),
        _ => (
            None,
            Some(format!(
                "This observation is not a complete payment contract, so it is no baseline: {} Keep your own baseline.",
                verdict.reason
            )),
        ),
    };
    let mut baseline = json!({
        "reusable": fingerprint.is_some(),
        "methodology_version": machine.methodology_version,
        "provenance": "direct_service",
        "observed_at": observed_at,
        "resource_url": probe.target.url.as_str(),
        "method": probe.target.method,
        "body_sha256": probe.target.body_sha256(),
        "fingerprint": fingerprint,
        "fingerprint_sha256": fingerprint.map(canonical_sha256),
        "hold_reason": hold_reason,
    });
    let seal = canonical_sha256(&baseline);
    baseline["baseline_sha256"] = Value::String(seal);
    baseline
}

/// The VM08 response of a probe and the caller's request.
pub(crate) fn response(
    machine: &Machine,
    request: &Request,
    probe: &Probe,
    checked_at: &str,
) -> Result<Value, WorkError> {
    let listed = requirement_fingerprints(probe.requirements());
    let current = fingerprint(probe.requirements());
    let prior = prior_requirements(request);
    let policy = price_policy(machine, request)?;
    let verdict = verdict(probe, listed.as_deref(), prior.as_deref(), policy);
    let current_sha = current.as_ref().map(canonical_sha256);
    let baseline = baseline_block(machine, probe, current.as_ref(), &verdict, checked_at);
    let mut limitations = vec![
        "The payment contract was observed through one unpaid probe; the target was not paid."
            .to_string(),
    ];
    limitations.extend(probe.limitation());
    if !verdict.returns_current && request.baseline.is_some() {
        limitations.push(
            "No reusable baseline is returned; keep your own, this observation does not replace it."
                .into(),
        );
    }
    let compared_amount = prior.is_some() && current.is_some();
    Ok(json!({
        "status": verdict.status,
        "machine": machine.machine,
        "methodology_version": machine.methodology_version,
        "candidate_id": canonical_sha256(&probe.target.to_json()),
        "decision": verdict.decision,
        "observation_kind": if prior.is_some() { "repeat" } else { "first" },
        "material_change_classes": verdict.classes,
        "changed_requirements": verdict.changed.iter().map(RequirementChange::to_json).collect::<Vec<_>>(),
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
    }))
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
    use super::{Request, amount_class, changes, price_policy, requirement_changes};
    use crate::catalog::embedded::MANIFEST;
    use serde_json::{Value, json};

    #[test]
    fn a_missing_price_policy_key_takes_the_manifests_default() {
        let vm08 = MANIFEST.machine("VM08").expect("VM08");
        let mut example = vm08.input_example.clone();
        example
            .as_object_mut()
            .expect("an object")
            .remove("price_policy");
        let request = |policy: Value| {
            let mut body = example.clone();
            if !policy.is_null() {
                body["price_policy"] = policy;
            }
            serde_json::from_value::<Request>(body).expect("a request")
        };
        let declared = |name| vm08.limit(name).expect("declared");
        let defaults = (
            declared("default_modest_increase_bps"),
            declared("default_max_increase_bps"),
        );
        assert_eq!(
            price_policy(vm08, &request(Value::Null)).ok(),
            Some(defaults)
        );
        let mut other = vm08.clone();
        other
            .limits
            .insert("default_modest_increase_bps".into(), 7.into());
        other
            .limits
            .insert("default_max_increase_bps".into(), 70.into());
        assert_eq!(
            price_policy(&other, &request(Value::Null)).ok(),
            Some((7, 70))
        );
        let only_max = request(json!({"max_increase_bps": 3}));
        assert_eq!(
            price_policy(&other, &only_max).ok(),
            Some((3, 3)),
            "modest capped"
        );
        other.limits.remove("default_max_increase_bps");
        assert!(
            price_policy(&other, &request(Value::Null)).is_err(),
            "no typed default"
        );
    }

    fn requirement() -> Value {
        json!({"scheme": "exact", "network": "eip155:8453", "asset": "0xaa",
            "amount": "100", "pay_to": "0xBB", "max_timeout_seconds": 60,
            "extra": {"name": "USD Coin"}, "resource_url": "https://a.example.com/x"})
    }

    #[test]
    fn change_classes_cover_each_contract_field() {
        let prior = requirement();
        let mut current = prior.clone();
        current["asset"] = json!("0xAA");
        current["pay_to"] = json!("0xbb");
        assert!(changes(&prior, &current, (500, 2000)).is_empty());
        current["extra"]["assetTransferMethod"] = json!("permit2");
        current["amount"] = json!("90");
        current["network"] = json!("base");
        assert_eq!(
            changes(&prior, &current, (500, 2000)),
            vec![
                "NETWORK_CHANGED",
                "AMOUNT_DECREASE",
                "TRANSFER_METHOD_CHANGED",
                "EXTRA_CHANGED"
            ]
        );
    }

    #[test]
    fn every_requirement_is_compared_whatever_its_position() {
        let first = requirement();
        let mut second = requirement();
        second["network"] = json!("eip155:1");
        second["amount"] = json!("200");
        let prior = vec![first.clone(), second.clone()];
        let policy = (500, 2000);
        // The same requirements in another order: nothing changed.
        let reordered = vec![(0, second.clone()), (1, first.clone())];
        assert!(requirement_changes(&prior, &reordered, policy).is_empty());
        // Only the second requirement's amount moves: it alone is named.
        let mut dearer = second.clone();
        dearer["amount"] = json!("300");
        let live = vec![(0, first.clone()), (1, dearer)];
        let changed = requirement_changes(&prior, &live, policy);
        assert_eq!(changed.len(), 1, "{changed:?}");
        assert_eq!(changed[0].accepts_index, Some(1));
        assert_eq!(changed[0].baseline_index, Some(1));
        assert_eq!(changed[0].classes, vec!["AMOUNT_INCREASE_ABOVE_POLICY"]);
        // A third requirement appears; then the second disappears.
        let mut third = requirement();
        third["scheme"] = json!("upto");
        third["asset"] = json!("0xcc");
        third["pay_to"] = json!("0xdd");
        third["network"] = json!("eip155:10");
        let grown = vec![(0, first.clone()), (1, second.clone()), (2, third)];
        let changed = requirement_changes(&prior, &grown, policy);
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].accepts_index, Some(2));
        assert_eq!(changed[0].classes, vec!["REQUIREMENT_ADDED"]);
        let shrunk = vec![(0, first)];
        let changed = requirement_changes(&prior, &shrunk, policy);
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].accepts_index, None);
        assert_eq!(changed[0].baseline_index, Some(1));
        assert_eq!(changed[0].classes, vec!["REQUIREMENT_REMOVED"]);
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
