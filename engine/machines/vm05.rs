//! VM05 discovery visibility snapshot: whether one x402 resource is listed in the discovery
//! provider's merchant index, and its position in the first 20 search results per query.
//! The resource is an identifier only: it is compared with listed URLs and never fetched.
//! Rules: docs/vm05-vm11-discovery.md.

use serde_json::{Value, json};

use super::{WorkContext, WorkError};
use crate::catalog::manifest::Machine;
use crate::config::Config;
use crate::http::error::ApiError;
use crate::machines::checks as rc;
use crate::providers::discovery::{self, now_iso};

pub fn check(_machine: &Machine, request: &Value) -> Result<(), ApiError> {
    rc::public_url(request, "/resource")?;
    rc::address(request, "/pay_to")?;
    rc::normalized_queries(request)?;
    Ok(())
}

pub fn readiness(machine: &Machine, config: &Config) -> Result<(), ApiError> {
    discovery::readiness(machine, config)
}

pub async fn observe(
    context: &WorkContext,
    machine: &Machine,
    request: &Value,
) -> Result<Value, WorkError> {
    let (_, observation) = discovery::observe_request(context, machine, request).await?;
    Ok(json!({
        "status": observation.status(),
        "machine": machine.machine,
        "methodology_version": machine.methodology_version,
        "checked_at": now_iso(),
        "resource": request["resource"],
        "pay_to": request["pay_to"],
        "merchant": observation.merchant_json(),
        "searches": observation.searches_json(),
        "evidence": observation.evidence_json(),
        "limitations": observation.limitations(),
    }))
}
