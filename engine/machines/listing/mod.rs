//! What VM05 and VM11 share: their readiness, the request's inputs, and one interpreted
//! reading of the configured discovery provider for them.

pub(crate) mod model;

use super::{NotReady, WorkContext, WorkError};
use crate::catalog::manifest::Machine;
use crate::config::Config;
use crate::machines::checks as rc;
use crate::providers::discovery::{self, DiscoveryLimits};
use model::{Inputs, Observation};

/// A machine reading the provider can run: the provider is configured and every limit it
/// runs under is in the manifest.
pub(crate) fn readiness(machine: &Machine, config: &Config) -> Result<(), NotReady> {
    if config.discovery_url.is_none() {
        return super::provider_missing(machine, "the x402 discovery provider (discovery_url)");
    }
    DiscoveryLimits::from_machine(machine)
        .map(|_| ())
        .map_err(|e| NotReady::new("machine_misconfigured", e.to_string()))
}

/// The request's inputs, re-read after the pre-payment checks accepted them.
pub(crate) fn inputs(
    resource: &str,
    pay_to: &str,
    queries: &[String],
) -> Result<Inputs, WorkError> {
    let unreadable = |what: &str| WorkError::unreadable(what);
    Ok(Inputs::new(
        rc::public_url(resource, "/resource").map_err(|_| unreadable("resource"))?,
        rc::address(pay_to, "/pay_to").map_err(|_| unreadable("pay_to"))?,
        rc::normalized_queries(queries).map_err(|_| unreadable("queries"))?,
    ))
}

/// The paid read VM05 and VM11 share: the request's inputs and one reading of the
/// configured provider for them.
pub(crate) async fn observe(
    context: &WorkContext,
    machine: &Machine,
    resource: &str,
    pay_to: &str,
    queries: &[String],
) -> Result<(Inputs, Observation), WorkError> {
    let inputs = inputs(resource, pay_to, queries)?;
    let reading = discovery::read(
        &context.gateway,
        context.config.discovery_url.as_ref(),
        machine,
        inputs.pay_to,
        &inputs.queries,
    )
    .await?;
    let observation = model::interpret(reading, &inputs);
    Ok((inputs, observation))
}
