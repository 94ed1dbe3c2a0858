//! VM11 discovery visibility change snapshot: the VM05 reading as a sealed, caller-held
//! baseline, compared with the baseline the caller sends back.
//!
//! Before payment, a sealed baseline must be ours, intact, reusable and bound to this
//! request's resource, pay_to and normalized queries. After payment the provider is read
//! once (1 merchant GET + 1 search GET per normalized query) and the decision is one of
//! BASELINE_CREATED, CONTINUE, CHANGED or HOLD. An incomplete observation is never
//! reusable, never CONTINUE and never compared. Rules: docs/vm05-vm11-discovery.md.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::listing::ListingRequest;
use super::listing::model::{self, Inputs, Observation, Presence, Visibility};
use super::{Call, CheckFailure, Need, WorkError};
use crate::catalog::manifest::Machine;
use crate::machines::checks as rc;
use crate::support::canonical::{canonical_json, canonical_sha256, sha256_hex};
use crate::support::json_value::str_items;
use crate::support::timestamp::now as now_iso;

/// VM11 discovery visibility change snapshot.
pub(crate) struct Vm11;

/// A VM11 request.
#[derive(Debug, Deserialize)]
pub(crate) struct Request {
    /// Which resource, paid to whom, found by which searches.
    #[serde(flatten)]
    pub listing: ListingRequest,
    /// The sealed `current_baseline` of an earlier response, kept as sent: its hashes cover
    /// its exact JSON.
    pub baseline: Option<Value>,
}

impl super::Machine for Vm11 {
    const ID: &'static str = "VM11";
    type Request = Request;
    type Answer = Value;
    const NEEDS: &'static [Need] = &[Need::Discovery];

    fn check(machine: &Machine, request: &Request) -> Result<(), CheckFailure> {
        let queries = request.listing.check(machine)?;
        let Some(baseline) = &request.baseline else {
            return Ok(());
        };
        rc::baseline_methodology(baseline, &machine.methodology_version)?;
        let observation = baseline.get("observation").cloned().unwrap_or(Value::Null);
        rc::seal_matches(
            rc::text_at(baseline, "/observation_sha256"),
            "/baseline/observation_sha256",
            &observation,
        )?;
        rc::self_sealed(baseline, "baseline_sha256")?;
        check_binding(request, baseline, &queries)?;
        check_reusable(baseline)
    }

    async fn observe(call: Call<'_, Request>) -> Result<Value, WorkError> {
        let (context, machine, request) = call.parts();
        let (inputs, reading) = request.listing.observe(context, machine).await?;
        let limits = Vm11Limits::from_machine(machine)?;
        let observation = sealed_observation(&reading, &limits);
        let (baseline, oversize) = seal(machine, request, &inputs, observation, &reading, &limits);
        let outcome = decide(request.baseline.as_ref(), &baseline, &reading, oversize);
        Ok(respond(machine, request, &inputs, baseline, outcome))
    }
}

fn check_binding(
    request: &Request,
    baseline: &Value,
    queries: &[String],
) -> Result<(), CheckFailure> {
    if !same_resource(request, baseline) {
        return Err(foreign("/baseline/resource", "resource"));
    }
    let pay_to_matches = match (
        rc::text_at(baseline, "/pay_to").map(|p| rc::address(p, "/baseline/pay_to")),
        rc::address(&request.listing.pay_to, "/pay_to"),
    ) {
        (Some(Ok(a)), Ok(b)) => a == b,
        _ => false,
    };
    if !pay_to_matches {
        return Err(foreign("/baseline/pay_to", "pay_to"));
    }
    if !str_items(baseline.get("queries")).eq(queries.iter().map(String::as_str)) {
        return Err(foreign("/baseline/queries", "normalized queries"));
    }
    Ok(())
}

/// Whether the baseline is bound to the request's resource. The caller may spell the same
/// URL differently between calls (host case, the default port, `/` for an empty path), so
/// both are compared as parsed URLs under the URL equality rule used for listings, never as
/// text; each response still quotes the caller's own text.
fn same_resource(request: &Request, baseline: &Value) -> bool {
    let submitted = rc::public_url(&request.listing.resource, "/resource").ok();
    match (submitted, rc::text_at(baseline, "/resource")) {
        (Some(submitted), Some(sealed)) => model::same_resource(&submitted, sealed),
        _ => false,
    }
}

/// A baseline returned with `reusable: false` (an incomplete or oversized observation) is
/// intact but must not be compared against: refusing it before payment costs the caller
/// nothing and tells them to send their last reusable baseline instead.
fn check_reusable(baseline: &Value) -> Result<(), CheckFailure> {
    let flag = |field: &str| baseline.get(field).and_then(Value::as_bool) == Some(true);
    if flag("reusable") && flag("observation_complete") {
        return Ok(());
    }
    Err(CheckFailure::field(
        "baseline_not_reusable",
        "/baseline/reusable",
        "this baseline was returned as not reusable (incomplete observation); send the last baseline returned with reusable true",
    ))
}

fn foreign(field: &str, what: &str) -> CheckFailure {
    CheckFailure::field(
        "baseline_foreign",
        field,
        format!("the baseline is bound to a different {what} than this request"),
    )
}

/// VM11's own manifest limits beyond the provider's.
struct Vm11Limits {
    search_window: u64,
    merchant_page_limit: u64,
    merchant_page_offset: u64,
    max_sealed_text_chars: usize,
    max_baseline_bytes: usize,
    max_request_bytes: usize,
}

impl Vm11Limits {
    fn from_machine(machine: &Machine) -> Result<Self, WorkError> {
        let get = |name: &str| {
            machine
                .limit(name)
                .ok_or_else(|| WorkError::manifest(&machine.machine, format!("no limit {name}")))
        };
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        Ok(Vm11Limits {
            search_window: get("search_limit")?,
            merchant_page_limit: get("merchant_limit")?,
            merchant_page_offset: get("merchant_page_offset")?,
            max_sealed_text_chars: size(get("max_sealed_text_chars")?),
            max_baseline_bytes: size(get("max_baseline_bytes")?),
            max_request_bytes: size(get("max_request_bytes")?),
        })
    }
}

/// Replaces every string longer than `max` characters by `sha256:<hex of its UTF-8>`, so a
/// sealed baseline stays small enough to be sent back while a change is still detected.
fn bound_strings(value: &mut Value, max: usize) {
    match value {
        Value::String(s) if s.chars().count() > max => {
            *s = format!("sha256:{}", sha256_hex(s.as_bytes()));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| bound_strings(v, max)),
        Value::Object(map) => map.values_mut().for_each(|v| bound_strings(v, max)),
        _ => {}
    }
}

/// The fixed note of each presence value (fixed so that only presence itself can differ).
fn merchant_note(reading: &Observation) -> Value {
    match reading.merchant.presence {
        Presence::Found => Value::Null,
        Presence::NotFound => json!("The merchant index lists no resources for this payTo."),
        Presence::MerchantFoundResourceNotListed => json!(
            "The payTo lists resources in the merchant index, but none equals the resource under the URL equality rule."
        ),
        Presence::Unknown => json!(format!(
            "Presence could not be observed: {}",
            unknown_reasons(reading).join("; ")
        )),
    }
}

fn window_note(visibility: Visibility, window: u64) -> String {
    match visibility {
        Visibility::InTop20 => format!("Position within the first {window} search results."),
        Visibility::NotInTop20 => format!(
            "Not observed in the first {window} results; not a global-rank or removal claim."
        ),
        Visibility::Unknown => "The search could not be read; visibility is unknown.".into(),
    }
}

/// Sorted, deduplicated strings (their order in a listing is not material).
fn sorted_strings(value: &Value) -> Value {
    let mut items: Vec<&str> = str_items(Some(value)).collect();
    items.sort_unstable();
    items.dedup();
    json!(items)
}

/// The observation that is sealed: presence, listing metadata, schema discovery, payment
/// fields (sorted by canonical JSON, so their listed order is not material) and per-query
/// visibility. Provider-reported quality and lastUpdated are deliberately not sealed: they
/// change with traffic, not with the listing.
fn sealed_observation(reading: &Observation, limits: &Vm11Limits) -> Value {
    let listing = reading.merchant.matched.clone().unwrap_or(Value::Null);
    let mut payment: Vec<Value> = listing["accepts"].as_array().cloned().unwrap_or_default();
    payment.sort_by_cached_key(canonical_json);
    let summary = &listing["extensions_summary"];
    let searches: Vec<Value> = reading
        .searches
        .iter()
        .map(|s| {
            json!({
                "query": s.query,
                "visibility": s.visibility.as_str(),
                "position": s.position,
                "window_note": window_note(s.visibility, limits.search_window),
            })
        })
        .collect();
    let mut observation = json!({
        "merchant_presence": reading.merchant.presence.as_str(),
        "merchant_note": merchant_note(reading),
        "metadata": {
            "service_name": listing["service_name"],
            "description": listing["description"],
            "tags": sorted_strings(&listing["tags"]),
            "curated": listing["curated"],
            "icon_url": listing["icon_url"],
            "skill_url": listing["skill_url"],
        },
        "schema_discovery": {
            "type": listing["type"],
            "x402_version": listing["x402_version"],
            "extension_names": sorted_strings(&summary["names"]),
            "discovery_info_present": summary["discovery_info_present"].as_bool().unwrap_or(false),
            "discovery_schema_present": summary["discovery_schema_present"].as_bool().unwrap_or(false),
        },
        "payment": payment,
    });
    bound_strings(&mut observation, limits.max_sealed_text_chars);
    // Queries are bound by the request and never replaced by a digest.
    observation["searches"] = json!(searches);
    observation
}

/// Why an observation is incomplete, for hold_reason and merchant_note.
fn unknown_reasons(reading: &Observation) -> Vec<String> {
    let mut reasons = reading.failures();
    if reasons.is_empty() {
        reasons.extend(reading.merchant.notes.iter().cloned());
    }
    reasons
}

/// Why a baseline cannot be reused although its observation is complete.
struct Oversize {
    baseline_bytes: usize,
    follow_up_bytes: usize,
    max_baseline_bytes: usize,
    max_request_bytes: usize,
}

/// Builds `current_baseline` and seals it: `observation_sha256` over the canonical
/// observation, `baseline_sha256` over the canonical baseline without `baseline_sha256`
/// (exactly what the pre-payment check recomputes).
fn seal(
    machine: &Machine,
    request: &Request,
    inputs: &Inputs,
    observation: Value,
    reading: &Observation,
    limits: &Vm11Limits,
) -> (Value, Option<Oversize>) {
    let complete = reading.complete();
    let mut baseline = json!({
        "methodology_version": machine.methodology_version,
        "resource": request.listing.resource,
        "pay_to": request.listing.pay_to,
        "queries": inputs.queries,
        "search_window": limits.search_window,
        "merchant_page_limit": limits.merchant_page_limit,
        "merchant_page_offset": limits.merchant_page_offset,
        "observation_sha256": canonical_sha256(&observation),
        "observation": observation,
        "observed_at": now_iso(),
        "reusable": complete,
        "observation_complete": complete,
    });
    let oversize = complete
        .then(|| oversize(request, &baseline, limits))
        .flatten();
    if oversize.is_some() {
        baseline["reusable"] = json!(false);
    }
    baseline["baseline_sha256"] = json!(canonical_sha256(&baseline));
    (baseline, oversize)
}

/// A reusable baseline must fit in the follow-up request that sends it back.
fn oversize(request: &Request, baseline: &Value, limits: &Vm11Limits) -> Option<Oversize> {
    let mut sealed = baseline.clone();
    sealed["baseline_sha256"] = json!("0".repeat(64));
    let follow_up = json!({
        "resource": request.listing.resource,
        "pay_to": request.listing.pay_to,
        "queries": request.listing.queries,
        "baseline": sealed,
    });
    let baseline_bytes = canonical_json(&sealed).len();
    let follow_up_bytes = canonical_json(&follow_up).len();
    (baseline_bytes > limits.max_baseline_bytes || follow_up_bytes > limits.max_request_bytes)
        .then_some(Oversize {
            baseline_bytes,
            follow_up_bytes,
            max_baseline_bytes: limits.max_baseline_bytes,
            max_request_bytes: limits.max_request_bytes,
        })
}

struct Outcome {
    decision: &'static str,
    status: &'static str,
    comparison_performed: bool,
    deltas: Vec<Delta>,
    hold_reason: Option<String>,
}

fn decide(
    caller: Option<&Value>,
    current: &Value,
    reading: &Observation,
    oversize: Option<Oversize>,
) -> Outcome {
    let hold = |status: &'static str, reason: String| Outcome {
        decision: "HOLD",
        status,
        comparison_performed: false,
        deltas: Vec::new(),
        hold_reason: Some(reason),
    };
    let keep = if caller.is_some() {
        " Keep your baseline: it stays the reference, and current_baseline is not reusable."
    } else {
        " current_baseline is not reusable."
    };
    if !reading.complete() {
        let status = if reading.status() == "HOLD" {
            "HOLD"
        } else {
            "PARTIAL"
        };
        let reason = format!(
            "The observation is incomplete ({}); no comparison was made.{keep}",
            unknown_reasons(reading).join("; ")
        );
        return hold(status, reason);
    }
    if let Some(o) = oversize {
        let reason = format!(
            "The sealed baseline takes {} bytes (max_baseline_bytes {}) and a follow-up request {} bytes (max_request_bytes {}); it could not be sent back.{keep}",
            o.baseline_bytes, o.max_baseline_bytes, o.follow_up_bytes, o.max_request_bytes
        );
        return hold("HOLD", reason);
    }
    let Some(caller) = caller else {
        return Outcome {
            decision: "BASELINE_CREATED",
            status: "OK",
            comparison_performed: false,
            deltas: Vec::new(),
            hold_reason: None,
        };
    };
    let deltas = compare(&caller["observation"], &current["observation"]);
    Outcome {
        decision: if deltas.is_empty() {
            "CONTINUE"
        } else {
            "CHANGED"
        },
        status: "OK",
        comparison_performed: true,
        deltas,
        hold_reason: None,
    }
}

/// Change classes, in the order `material_change_classes` lists them.
const CLASSES: [&str; 7] = [
    "PRESENCE_CHANGED",
    "METADATA_CHANGED",
    "SCHEMA_DISCOVERY_CHANGED",
    "PAYMENT_CHANGED",
    "VISIBILITY_CHANGED",
    "POSITION_CHANGED",
    "OBSERVATION_SHAPE_CHANGED",
];

#[derive(Debug, Clone, PartialEq)]
struct Delta {
    class: &'static str,
    path: String,
    baseline: Option<String>,
    current: Option<String>,
}

impl Delta {
    fn to_json(&self) -> Value {
        json!({
            "class": self.class,
            "path": self.path,
            "baseline_value": self.baseline,
            "current_value": self.current,
        })
    }
}

fn class_of(key: &str) -> &'static str {
    match key {
        "merchant_presence" | "merchant_note" => "PRESENCE_CHANGED",
        "metadata" => "METADATA_CHANGED",
        "schema_discovery" => "SCHEMA_DISCOVERY_CHANGED",
        "payment" => "PAYMENT_CHANGED",
        _ => "OBSERVATION_SHAPE_CHANGED",
    }
}

/// Every difference between two observations, one delta per differing leaf. Objects are
/// compared key by key and arrays of objects index by index; scalars and arrays of scalars
/// (tags, extension names) are leaves. The caller's observation may have any shape (its
/// seal is only a hash), so absent values are compared as absent.
fn compare(baseline: &Value, current: &Value) -> Vec<Delta> {
    let mut deltas = Vec::new();
    for key in union_keys(baseline, current) {
        let (b, c) = (baseline.get(&key), current.get(&key));
        if key == "searches" {
            compare_searches(b, c, &mut deltas);
        } else {
            diff(&key, b, c, class_of(&key), &mut deltas);
        }
    }
    deltas
}

/// Keys of both objects: the current observation's order first, then baseline-only keys.
fn union_keys(baseline: &Value, current: &Value) -> Vec<String> {
    let empty = Map::new();
    let b = baseline.as_object().unwrap_or(&empty);
    let c = current.as_object().unwrap_or(&empty);
    let mut keys: Vec<String> = c.keys().cloned().collect();
    let mut extra: Vec<String> = b.keys().filter(|k| !c.contains_key(*k)).cloned().collect();
    extra.sort();
    keys.extend(extra);
    keys
}

/// Per query: a changed visibility classes every delta of that query VISIBILITY_CHANGED;
/// otherwise a moved position is POSITION_CHANGED.
fn compare_searches(baseline: Option<&Value>, current: Option<&Value>, deltas: &mut Vec<Delta>) {
    let (Some(Value::Array(b)), Some(Value::Array(c))) = (baseline, current) else {
        diff(
            "searches",
            baseline,
            current,
            "OBSERVATION_SHAPE_CHANGED",
            deltas,
        );
        return;
    };
    for i in 0..b.len().max(c.len()) {
        let (bi, ci) = (b.get(i), c.get(i));
        let visibility = |v: Option<&Value>| v.and_then(|v| v.get("visibility")).cloned();
        let class = if visibility(bi) != visibility(ci) {
            "VISIBILITY_CHANGED"
        } else {
            "POSITION_CHANGED"
        };
        diff(&format!("searches[{i}]"), bi, ci, class, deltas);
    }
}

fn holds_objects(items: &[Value]) -> bool {
    items.iter().any(|v| v.is_object() || v.is_array())
}

fn diff(
    path: &str,
    baseline: Option<&Value>,
    current: Option<&Value>,
    class: &'static str,
    deltas: &mut Vec<Delta>,
) {
    match (baseline, current) {
        (Some(b @ Value::Object(_)), Some(c @ Value::Object(_))) => {
            for key in union_keys(b, c) {
                diff(
                    &format!("{path}.{key}"),
                    b.get(&key),
                    c.get(&key),
                    class,
                    deltas,
                );
            }
        }
        (Some(Value::Array(b)), Some(Value::Array(c))) if holds_objects(b) || holds_objects(c) => {
            for i in 0..b.len().max(c.len()) {
                diff(&format!("{path}[{i}]"), b.get(i), c.get(i), class, deltas);
            }
        }
        _ => {
            let b = baseline.map(canonical_json);
            let c = current.map(canonical_json);
            if b != c {
                deltas.push(Delta {
                    class,
                    path: path.to_string(),
                    baseline: b,
                    current: c,
                });
            }
        }
    }
}

fn change_classes(deltas: &[Delta]) -> Vec<&'static str> {
    CLASSES
        .into_iter()
        .filter(|class| deltas.iter().any(|d| d.class == *class))
        .collect()
}

fn respond(
    machine: &Machine,
    request: &Request,
    inputs: &Inputs,
    baseline: Value,
    outcome: Outcome,
) -> Value {
    json!({
        "status": outcome.status,
        "decision": outcome.decision,
        "machine": machine.machine,
        "methodology_version": machine.methodology_version,
        "checked_at": now_iso(),
        "resource": request.listing.resource,
        "pay_to": request.listing.pay_to,
        "queries": inputs.queries,
        "comparison_performed": outcome.comparison_performed,
        "material_change_classes": change_classes(&outcome.deltas),
        "deltas": outcome.deltas.iter().map(Delta::to_json).collect::<Vec<_>>(),
        "hold_reason": outcome.hold_reason,
        "current_baseline": baseline,
        "direct_x402_probe": false,
        "server_baseline_stored": false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search(query: &str, visibility: &str, position: Value) -> Value {
        json!({"query": query, "visibility": visibility, "position": position, "window_note": "n"})
    }

    #[test]
    fn equal_observations_have_no_deltas() {
        let a = json!({"merchant_presence": "FOUND", "metadata": {"tags": ["a"]}, "searches": [search("q", "IN_TOP_20", json!(3))]});
        assert!(compare(&a, &a.clone()).is_empty());
    }

    #[test]
    fn each_difference_gets_its_class_and_path() {
        let b = json!({
            "merchant_presence": "FOUND",
            "metadata": {"description": "old", "tags": ["a", "b"]},
            "payment": [{"amount": "10", "pay_to": "0x1"}],
            "searches": [search("p", "IN_TOP_20", json!(4)), search("q", "IN_TOP_20", json!(1))],
            "legacy": 1,
        });
        let c = json!({
            "merchant_presence": "FOUND",
            "metadata": {"description": "new", "tags": ["a", "b"]},
            "payment": [{"amount": "20", "pay_to": "0x1"}, {"amount": "5", "pay_to": "0x2"}],
            "searches": [search("p", "IN_TOP_20", json!(2)), search("q", "NOT_IN_TOP_20", Value::Null)],
        });
        let found: Vec<(&str, String, Option<String>, Option<String>)> = compare(&b, &c)
            .into_iter()
            .map(|d| (d.class, d.path, d.baseline, d.current))
            .collect();
        let s = |v: &str| Some(v.to_string());
        assert_eq!(
            found,
            vec![
                (
                    "METADATA_CHANGED",
                    "metadata.description".into(),
                    s("\"old\""),
                    s("\"new\"")
                ),
                (
                    "PAYMENT_CHANGED",
                    "payment[0].amount".into(),
                    s("\"10\""),
                    s("\"20\"")
                ),
                (
                    "PAYMENT_CHANGED",
                    "payment[1]".into(),
                    None,
                    s(r#"{"amount":"5","pay_to":"0x2"}"#)
                ),
                (
                    "POSITION_CHANGED",
                    "searches[0].position".into(),
                    s("4"),
                    s("2")
                ),
                (
                    "VISIBILITY_CHANGED",
                    "searches[1].visibility".into(),
                    s("\"IN_TOP_20\""),
                    s("\"NOT_IN_TOP_20\"")
                ),
                (
                    "VISIBILITY_CHANGED",
                    "searches[1].position".into(),
                    s("1"),
                    s("null")
                ),
                ("OBSERVATION_SHAPE_CHANGED", "legacy".into(), s("1"), None),
            ]
        );
    }

    #[test]
    fn long_strings_are_sealed_as_digests() {
        let mut value = json!({"a": "x".repeat(5), "b": ["yy", "z".repeat(4)]});
        bound_strings(&mut value, 4);
        assert_eq!(
            value["a"],
            json!(format!("sha256:{}", sha256_hex("xxxxx".as_bytes())))
        );
        assert_eq!(value["b"], json!(["yy", "zzzz"]));
    }
}
