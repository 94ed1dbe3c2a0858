//! VM10 payment authority snapshot. A baseline must be ours and intact
//! (baseline_sha256 = canonical sha256 of the baseline without that field).

use serde_json::Value;

use super::{WorkContext, WorkError};
use crate::api_error::ApiError;
use crate::config::Config;
use crate::manifest::Machine;
use crate::request_checks as rc;

pub fn check(machine: &Machine, request: &Value) -> Result<(), ApiError> {
    rc::public_url(request, "/resource_url")?;
    rc::no_body_for_get(request)?;
    rc::address(request, "/payer_address")?;
    if request.get("baseline").is_some() {
        rc::baseline_methodology(request, &machine.methodology_version)?;
        let sealed = rc::without_keys(request, "/baseline", &["baseline_sha256"]);
        rc::seal_matches(request, "/baseline/baseline_sha256", &sealed)?;
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
