//! VM09 x402 pre-sign handoff packet.

use serde_json::Value;

use super::{WorkContext, WorkError};
use crate::api_error::ApiError;
use crate::config::Config;
use crate::manifest::Machine;
use crate::request_checks as rc;

pub fn check(_machine: &Machine, request: &Value) -> Result<(), ApiError> {
    rc::public_url(request, "/resource_url")?;
    rc::no_body_for_get(request)?;
    rc::address(request, "/payer_address")?;
    rc::uint256(request, "/max_amount_atomic")?;
    rc::address_list(request, "/allowed_pay_to")?;
    if request.get("baseline").is_some() {
        rc::public_url(request, "/baseline/resource_url")?;
        rc::address(request, "/baseline/pay_to")?;
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
