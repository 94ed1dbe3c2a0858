//! VM05 discovery visibility snapshot: whether one x402 resource is listed in the discovery
//! provider's merchant index, and its position in the first 20 search results per query.
//! The resource is an identifier only: it is compared with listed URLs and never fetched.
//! Rules: docs/vm05-vm11-discovery.md.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Call, CheckFailure, Need, WorkError, listing};
use crate::catalog::manifest::Machine;
use crate::machines::checks as rc;
use crate::support::timestamp;

/// VM05 discovery visibility snapshot.
pub(crate) struct Vm05;

/// A VM05 request.
#[derive(Debug, Deserialize)]
pub(crate) struct Request {
    /// The x402 resource URL: an identifier, never fetched.
    pub resource: String,
    /// The seller's payTo address.
    pub pay_to: String,
    /// The search queries.
    pub queries: Vec<String>,
}

impl super::Machine for Vm05 {
    const ID: &'static str = "VM05";
    type Request = Request;
    type Answer = Value;
    const NEEDS: &'static [Need] = &[Need::Discovery];

    fn check(_machine: &Machine, request: &Request) -> Result<(), CheckFailure> {
        rc::public_url(&request.resource, "/resource")?;
        rc::address(&request.pay_to, "/pay_to")?;
        rc::normalized_queries(&request.queries)?;
        Ok(())
    }

    async fn observe(call: Call<'_, Request>) -> Result<Value, WorkError> {
        let (context, machine, request) = call.parts();
        let (_, observation) = listing::observe(
            context,
            machine,
            &request.resource,
            &request.pay_to,
            &request.queries,
        )
        .await?;
        Ok(json!({
            "status": observation.status(),
            "machine": machine.machine,
            "methodology_version": machine.methodology_version,
            "checked_at": timestamp::now(),
            "resource": request.resource,
            "pay_to": request.pay_to,
            "merchant": observation.merchant_json(),
            "searches": observation.searches_json(),
            "evidence": observation.evidence_json(),
            "limitations": observation.limitations(),
        }))
    }
}
