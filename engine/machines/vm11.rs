//! VM11 discovery visibility change snapshot. A sealed baseline must be ours, intact, and
//! bound to this request's resource, pay_to and normalized queries.

use serde_json::Value;

use super::{WorkContext, WorkError};
use crate::api_error::ApiError;
use crate::config::Config;
use crate::manifest::Machine;
use crate::request_checks as rc;

pub fn check(machine: &Machine, request: &Value) -> Result<(), ApiError> {
    rc::public_url(request, "/resource")?;
    rc::address(request, "/pay_to")?;
    let queries = rc::normalized_queries(request)?;
    if request.get("baseline").is_none() {
        return Ok(());
    }
    rc::baseline_methodology(request, &machine.methodology_version)?;
    let observation = request
        .pointer("/baseline/observation")
        .cloned()
        .unwrap_or(Value::Null);
    rc::seal_matches(request, "/baseline/observation_sha256", &observation)?;
    let sealed = rc::without_keys(request, "/baseline", &["baseline_sha256"]);
    rc::seal_matches(request, "/baseline/baseline_sha256", &sealed)?;
    check_binding(request, &queries)
}

fn check_binding(request: &Value, queries: &[String]) -> Result<(), ApiError> {
    let same_text = |a: &str, b: &str| rc::text(request, a) == rc::text(request, b);
    if !same_text("/baseline/resource", "/resource") {
        return Err(foreign("/baseline/resource", "resource"));
    }
    let pay_to_matches = match (
        rc::address(request, "/baseline/pay_to"),
        rc::address(request, "/pay_to"),
    ) {
        (Ok(Some(a)), Ok(Some(b))) => a == b,
        _ => false,
    };
    if !pay_to_matches {
        return Err(foreign("/baseline/pay_to", "pay_to"));
    }
    let sealed_queries: Vec<&str> = request
        .pointer("/baseline/queries")
        .and_then(Value::as_array)
        .map(|q| q.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if sealed_queries != queries.iter().map(String::as_str).collect::<Vec<_>>() {
        return Err(foreign("/baseline/queries", "normalized queries"));
    }
    Ok(())
}

fn foreign(field: &str, what: &str) -> ApiError {
    ApiError::invalid_field(
        "baseline_foreign",
        field,
        format!("the baseline is bound to a different {what} than this request"),
    )
}

pub fn readiness(machine: &Machine, _config: &Config) -> Result<(), ApiError> {
    super::not_implemented(machine)
}

pub async fn observe(
    _context: &WorkContext,
    machine: &Machine,
    _request: &Value,
) -> Result<Value, WorkError> {
    Err(WorkError::NotImplemented(machine.machine.clone()))
}
