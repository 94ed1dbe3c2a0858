//! VM01 URL context.

use serde_json::Value;

use super::{WorkContext, WorkError};
use crate::api_error::ApiError;
use crate::config::Config;
use crate::manifest::Machine;
use crate::request_checks as rc;

pub fn check(_machine: &Machine, request: &Value) -> Result<(), ApiError> {
    rc::public_url(request, "/url")?;
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
