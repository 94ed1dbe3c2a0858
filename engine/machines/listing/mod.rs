//! What VM05 and VM11 share: their readiness, the request's fields and checks, and one
//! interpreted reading of the configured discovery provider for them.

pub(crate) mod model;

use serde::Deserialize;

use super::{CheckFailure, NotReady, WorkContext, WorkError};
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

/// The fields every listing machine's request carries: which resource, paid to whom, found
/// by which searches.
#[derive(Debug, Deserialize)]
pub(crate) struct ListingRequest {
    /// The x402 resource URL: an identifier, never fetched.
    pub resource: String,
    /// The seller's payTo address.
    pub pay_to: String,
    /// The search queries.
    pub queries: Vec<String>,
}

impl ListingRequest {
    /// The pre-payment checks every listing machine runs: a public URL, an address and
    /// queries that normalize; the normalized queries.
    pub(crate) fn check(&self) -> Result<Vec<String>, CheckFailure> {
        rc::public_url(&self.resource, "/resource")?;
        rc::address(&self.pay_to, "/pay_to")?;
        rc::normalized_queries(&self.queries)
    }

    /// The request's inputs, re-read after the pre-payment checks accepted them.
    fn inputs(&self) -> Result<Inputs, WorkError> {
        let unreadable = |what: &str| WorkError::unreadable(what);
        Ok(Inputs::new(
            rc::public_url(&self.resource, "/resource").map_err(|_| unreadable("resource"))?,
            rc::address(&self.pay_to, "/pay_to").map_err(|_| unreadable("pay_to"))?,
            rc::normalized_queries(&self.queries).map_err(|_| unreadable("queries"))?,
        ))
    }

    /// The paid read every listing machine makes: the request's inputs and one reading of
    /// the configured provider for them.
    pub(crate) async fn observe(
        &self,
        context: &WorkContext,
        machine: &Machine,
    ) -> Result<(Inputs, Observation), WorkError> {
        let inputs = self.inputs()?;
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
}
