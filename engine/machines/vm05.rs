//! VM05 discovery visibility snapshot. The resource is an identifier only: never fetched.

use serde_json::Value;

use crate::api_error::ApiError;
use crate::manifest::Machine;
use crate::request_checks as rc;

pub fn check(_machine: &Machine, request: &Value) -> Result<(), ApiError> {
    rc::public_url(request, "/resource")?;
    rc::address(request, "/pay_to")?;
    rc::normalized_queries(request)?;
    Ok(())
}
