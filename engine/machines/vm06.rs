//! VM06 transaction gas preflight. Execution-control fields are refused by the schema, each
//! with the code the manifest's `unsupported[]` gives it.

use serde_json::Value;

use super::{WorkContext, WorkError};
use crate::api_error::ApiError;
use crate::config::Config;
use crate::manifest::Machine;
use crate::request_checks as rc;

pub fn check(machine: &Machine, request: &Value) -> Result<(), ApiError> {
    rc::address(request, "/to")?;
    rc::address(request, "/from")?;
    rc::uint256(request, "/value_wei")?;
    let data = rc::text(request, "/data").unwrap_or("0x");
    let calldata_bytes = (data.len().saturating_sub(2) / 2) as u64;
    if let Some(max) = machine.limit("max_calldata_bytes")
        && calldata_bytes > max
    {
        return Err(ApiError::invalid_field(
            "calldata_too_large",
            "/data",
            format!("calldata holds {calldata_bytes} bytes; at most {max}"),
        ));
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
