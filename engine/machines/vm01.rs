//! VM01 URL context.

use serde_json::Value;

use crate::api_error::ApiError;
use crate::manifest::Machine;
use crate::request_checks as rc;

pub fn check(_machine: &Machine, request: &Value) -> Result<(), ApiError> {
    rc::public_url(request, "/url")?;
    Ok(())
}
