//! VM07 web change snapshot. A caller's baseline must be ours (methodology) and intact
//! (page_sha256 = canonical sha256 of the six component hashes; docs/hashing.md).

use serde_json::Value;

use super::{WorkContext, WorkError};
use crate::api_error::ApiError;
use crate::config::Config;
use crate::manifest::Machine;
use crate::request_checks as rc;

pub fn check(machine: &Machine, request: &Value) -> Result<(), ApiError> {
    rc::public_url(request, "/url")?;
    if request.get("baseline").is_some() {
        rc::baseline_methodology(request, &machine.methodology_version)?;
        let components = request
            .pointer("/baseline/components")
            .cloned()
            .unwrap_or(Value::Null);
        rc::seal_matches(request, "/baseline/page_sha256", &components)?;
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
