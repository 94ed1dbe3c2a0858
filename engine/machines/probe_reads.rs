//! The probe → select → read steps VM09 and VM10 share: one unpaid probe of the caller's
//! resource, the shared requirement selection (engine/web/x402_probe.rs), and the payer's token
//! reads for the selected asset. Each machine decides which selections are read and with
//! which spender; the decision rules stay in the machine modules.

use alloy::primitives::Address;
use serde_json::Value;

use super::{CheckFailure, NotReady, WorkContext, WorkError};
use crate::catalog::manifest::Machine;
use crate::chain::token_reads::{self, TokenReads};
use crate::config::Config;
use crate::machines::checks as rc;
use crate::support::evm;
use crate::web::x402_probe::{self, Probe, ProbeTarget, Requirement, Selection};

/// Ready when the probe's limits are in the manifest and a fetcher can be built.
pub(crate) fn probe_ready(machine: &Machine, config: &Config) -> Result<(), NotReady> {
    x402_probe::ready(machine, config)
        .map_err(|e| NotReady::new("fetch_setup_failed", e.to_string()))
}

/// The fields every probing machine's request carries: what to probe and how.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct ProbeRequest {
    /// The x402 resource to probe.
    pub resource_url: String,
    /// GET or POST.
    pub method: String,
    /// The JSON body of a POST probe.
    pub body: Option<Value>,
}

impl ProbeRequest {
    /// The pre-payment checks every probing machine runs: a public HTTPS URL, no body on GET.
    pub(crate) fn check(&self) -> Result<(), CheckFailure> {
        rc::public_url(&self.resource_url, "/resource_url")?;
        rc::no_body_for_get(&self.method, self.body.as_ref())
    }

    /// The probe target of a checked request.
    pub(crate) fn target(&self) -> Result<ProbeTarget, WorkError> {
        Ok(ProbeTarget::new(
            &self.resource_url,
            &self.method,
            self.body.as_ref(),
        )?)
    }
}

/// Sends the one unpaid probe of `target` with this machine's limits.
pub(crate) async fn probe(
    context: &WorkContext,
    machine: &Machine,
    target: ProbeTarget,
) -> Result<Probe, WorkError> {
    Ok(x402_probe::probe(&context.gateway, &context.config, machine, target).await?)
}

/// Probes the request's resource once and selects a requirement from the answer.
pub(crate) async fn probe_and_select(
    context: &WorkContext,
    machine: &Machine,
    request: &ProbeRequest,
) -> Result<(Probe, Selection), WorkError> {
    let probe = probe(context, machine, request.target()?).await?;
    let selection = x402_probe::select(machine, &probe);
    Ok((probe, selection))
}

/// The request's payer's reads of `requirement`'s asset, with the allowance of the spender
/// `spender(requirement)` names. None when nothing is to be read or the asset is not an
/// address (the machines report that as a HOLD, not as our error). The payer address was
/// checked before payment, so failing to parse it here is our bug.
pub(crate) async fn read_payer(
    context: &WorkContext,
    machine: &Machine,
    payer_address: &str,
    requirement: Option<&Requirement>,
    spender: impl Fn(&Requirement) -> Option<Address>,
) -> Result<Option<TokenReads>, WorkError> {
    let Some(requirement) = requirement else {
        return Ok(None);
    };
    let payer =
        evm::parse_address(payer_address).map_err(|_| WorkError::unreadable("payer_address"))?;
    let Some(Ok(asset)) = requirement.asset.as_deref().map(evm::parse_address) else {
        return Ok(None);
    };
    let reads = token_reads::read(
        &context.gateway,
        &context.config,
        machine,
        asset,
        payer,
        spender(requirement),
    )
    .await?;
    Ok(Some(reads))
}

/// The limitations a probe-and-read answer states, in order: `first` (what the answer is
/// not), the probe's own, `unsupported` of a requirement whose transfer method the machine
/// does not take, and the token reads'.
pub(crate) fn limitations(
    first: &str,
    probe: &Probe,
    selection: &Selection,
    reads: Option<&TokenReads>,
    unsupported: impl FnOnce(&Requirement) -> String,
) -> Vec<String> {
    let mut limitations = vec![first.to_string()];
    limitations.extend(probe.limitation());
    if let Selection::UnsupportedMethod(r) = selection {
        limitations.push(unsupported(r));
    }
    if let Some(reads) = reads {
        limitations.extend(reads.limitations.iter().cloned());
    }
    limitations
}
