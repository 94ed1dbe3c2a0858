//! What VM05 and VM11 share: their readiness, the request's fields and checks, and one
//! interpreted reading of the configured discovery provider for them.

pub(crate) mod model;

use std::ops::RangeInclusive;

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
        .map_err(|e| NotReady::new("machine_misconfigured", e.to_string()))?;
    match query_chars(machine) {
        Some(_) => Ok(()),
        None => Err(NotReady::new(
            "machine_misconfigured",
            format!(
                "{} manifest: no limits min_query_chars and max_query_chars",
                machine.machine
            ),
        )),
    }
}

/// How many characters one normalized query may hold: the manifest's `min_query_chars` to
/// `max_query_chars`. Without them the machine is not ready (above), and the pre-payment
/// check bounds no query's length.
fn query_chars(machine: &Machine) -> Option<RangeInclusive<usize>> {
    let bound = |name| machine.limit(name).and_then(|n| usize::try_from(n).ok());
    Some(bound("min_query_chars")?..=bound("max_query_chars")?)
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
    pub(crate) fn check(&self, machine: &Machine) -> Result<Vec<String>, CheckFailure> {
        rc::public_url(&self.resource, "/resource")?;
        rc::address(&self.pay_to, "/pay_to")?;
        let chars = query_chars(machine).unwrap_or(0..=usize::MAX);
        rc::normalized_queries(&self.queries, &chars)
    }

    /// The request's inputs, re-read after the pre-payment checks accepted them.
    fn inputs(&self, machine: &Machine) -> Result<Inputs, WorkError> {
        let unreadable = |what: &str| WorkError::unreadable(what);
        let chars = query_chars(machine)
            .ok_or_else(|| WorkError::manifest(&machine.machine, "no query length limits"))?;
        Ok(Inputs::new(
            rc::public_url(&self.resource, "/resource").map_err(|_| unreadable("resource"))?,
            rc::address(&self.pay_to, "/pay_to").map_err(|_| unreadable("pay_to"))?,
            rc::normalized_queries(&self.queries, &chars).map_err(|_| unreadable("queries"))?,
        ))
    }

    /// The paid read every listing machine makes: the request's inputs and one reading of
    /// the configured provider for them.
    pub(crate) async fn observe(
        &self,
        context: &WorkContext,
        machine: &Machine,
    ) -> Result<(Inputs, Observation), WorkError> {
        let inputs = self.inputs(machine)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::embedded::MANIFEST;

    fn request(queries: &[&str]) -> ListingRequest {
        ListingRequest {
            resource: "https://api.example.com/v1/quote".into(),
            pay_to: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913".into(),
            queries: queries.iter().map(|q| q.to_string()).collect(),
        }
    }

    #[test]
    fn a_query_is_bounded_by_the_manifests_limits() {
        for id in ["VM05", "VM11"] {
            let machine = MANIFEST.machine(id).expect("listed");
            let max = machine.limit("max_query_chars").expect("declared");
            let longest = "q".repeat(usize::try_from(max).expect("small"));
            assert!(request(&[&longest]).check(machine).is_ok(), "{id}");
            let too_long = format!("{longest}q");
            let refused = request(&[&too_long]).check(machine).expect_err("too long");
            assert_eq!(refused.code, "invalid_query");

            let mut tighter = machine.clone();
            tighter.limits.insert("max_query_chars".into(), 5.into());
            let refused = request(&["six ch"]).check(&tighter).expect_err("over 5");
            assert!(
                refused.message.contains("to 5 characters"),
                "{}",
                refused.message
            );
            assert!(request(&["five "]).check(&tighter).is_ok(), "trimmed to 4");

            let mut without = machine.clone();
            without.limits.remove("min_query_chars");
            assert_eq!(query_chars(&without), None, "{id}: not ready without them");
        }
    }
}
