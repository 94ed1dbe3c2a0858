//! VM08 x402 service change snapshot.

use serde_json::Value;

use super::{WorkContext, WorkError};
use crate::api_error::ApiError;
use crate::config::Config;
use crate::manifest::Machine;
use crate::request_checks as rc;

pub fn check(machine: &Machine, request: &Value) -> Result<(), ApiError> {
    rc::public_url(request, "/resource_url")?;
    rc::no_body_for_get(request)?;
    if let Some(policy) = request.get("price_policy") {
        let modest = policy.get("modest_increase_bps").and_then(Value::as_u64);
        let max = policy.get("max_increase_bps").and_then(Value::as_u64);
        if let (Some(modest), Some(max)) = (modest, max)
            && modest > max
        {
            return Err(ApiError::invalid_field(
                "invalid_price_policy",
                "/price_policy",
                "modest_increase_bps must not exceed max_increase_bps",
            ));
        }
    }
    if request.get("baseline").is_some() {
        rc::baseline_methodology(request, &machine.methodology_version)?;
        if request.pointer("/baseline/fingerprint").is_some() {
            let fingerprint = request
                .pointer("/baseline/fingerprint")
                .cloned()
                .unwrap_or(Value::Null);
            rc::seal_matches(request, "/baseline/fingerprint_sha256", &fingerprint)?;
        }
    }
    Ok(())
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
