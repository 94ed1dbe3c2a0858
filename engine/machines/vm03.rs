//! VM03 portfolio preflight.

use serde_json::Value;

use super::{WorkContext, WorkError};
use crate::api_error::ApiError;
use crate::config::Config;
use crate::manifest::Machine;
use crate::request_checks as rc;

pub fn check(machine: &Machine, request: &Value) -> Result<(), ApiError> {
    rc::address(request, "/address")?;
    let holdings = request
        .get("declared_holdings")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    if let Some(max) = machine.limit("max_declared_holdings")
        && holdings.len() as u64 > max
    {
        return Err(ApiError::invalid_field(
            "too_many_declared_holdings",
            "/declared_holdings",
            format!("at most {max} declared holdings"),
        ));
    }
    let requested: Option<Vec<&str>> = request
        .get("chains")
        .and_then(Value::as_array)
        .map(|chains| chains.iter().filter_map(Value::as_str).collect());
    for (i, holding) in holdings.iter().enumerate() {
        let at = format!("/declared_holdings/{i}");
        rc::token_address(request, &format!("{at}/token"))?;
        rc::uint256(request, &format!("{at}/quantity_raw"))?;
        let chain = holding
            .get("chain")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if requested
            .as_ref()
            .is_some_and(|chains| !chains.contains(&chain))
        {
            return Err(ApiError::invalid_field(
                "declared_holding_chain_not_requested",
                format!("{at}/chain"),
                format!("{chain} is not in the requested chains"),
            ));
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
