//! VM02 allowance exposure.

use serde_json::Value;

use crate::api_error::ApiError;
use crate::manifest::Machine;
use crate::request_checks as rc;

pub fn check(_machine: &Machine, request: &Value) -> Result<(), ApiError> {
    rc::address(request, "/owner")?;
    rc::token_address(request, "/token")?;
    rc::address(request, "/spender")?;
    Ok(())
}
