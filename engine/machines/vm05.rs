//! VM05 discovery visibility snapshot: whether one x402 resource is listed in the discovery
//! provider's merchant index, and its position in the first 20 search results per query.
//! The resource is an identifier only: it is compared with listed URLs and never fetched.
//! Rules: docs/vm05-vm11-discovery.md.

use serde_json::{Value, json};

use super::listing::ListingRequest;
use super::{Call, CheckFailure, Need, WorkError};
use crate::catalog::manifest::Machine;
use crate::support::timestamp;

/// VM05 discovery visibility snapshot.
pub(crate) struct Vm05;

impl super::Machine for Vm05 {
    const ID: &'static str = "VM05";
    type Request = ListingRequest;
    type Answer = Value;
    const NEEDS: &'static [Need] = &[Need::Discovery];

    fn check(machine: &Machine, request: &ListingRequest) -> Result<(), CheckFailure> {
        request.check(machine).map(|_| ())
    }

    async fn observe(call: Call<'_, ListingRequest>) -> Result<Value, WorkError> {
        let (context, machine, request) = call.parts();
        let (_, observation) = request.observe(context, machine).await?;
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
