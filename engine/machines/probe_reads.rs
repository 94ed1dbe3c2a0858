//! The probe → select → read steps VM09 and VM10 share: one unpaid probe of the caller's
//! resource, the shared requirement selection (engine/web/x402_probe.rs), and the payer's token
//! reads for the selected asset. Each machine decides which selections are read and with
//! which spender; the decision rules stay in the machine modules.

use alloy::primitives::Address;
use serde_json::Value;

use super::{WorkContext, WorkError};
use crate::catalog::manifest::Machine;
use crate::chain::token_reads::{self, TokenReads};
use crate::config::Config;
use crate::http::error::ApiError;
use crate::support::evm;
use crate::web::x402_probe::{self, Probe, ProbeTarget, Requirement, Selection};

/// Ready when the probe can run and the eip155:8453 RPC endpoint for the reads is configured.
pub fn readiness(machine: &Machine, config: &Config) -> Result<(), ApiError> {
    x402_probe::ready(machine, config)?;
    match config.rpc_url_eip155_8453 {
        Some(_) => Ok(()),
        None => super::provider_missing(machine, "the eip155:8453 RPC endpoint"),
    }
}

/// Probes the request's resource once and selects a requirement from the answer.
pub async fn probe_and_select(
    context: &WorkContext,
    machine: &Machine,
    request: &Value,
) -> Result<(Probe, Selection), WorkError> {
    let target = ProbeTarget::from_request(request)?;
    let probe = x402_probe::probe(context, machine, target).await?;
    let selection = x402_probe::select(machine, &probe);
    Ok((probe, selection))
}

/// The request's payer's reads of `requirement`'s asset, with the allowance of the spender
/// `spender(requirement)` names. None when nothing is to be read or the asset is not an
/// address (the machines report that as a HOLD, not as our error). The payer address was
/// checked before payment, so failing to parse it here is our bug.
pub async fn read_payer(
    context: &WorkContext,
    machine: &Machine,
    request: &Value,
    requirement: Option<&Requirement>,
    spender: impl Fn(&Requirement) -> Option<Address>,
) -> Result<Option<TokenReads>, WorkError> {
    let Some(requirement) = requirement else {
        return Ok(None);
    };
    let payer = payer(request)?;
    let Some(Ok(asset)) = requirement.asset.as_deref().map(evm::parse_address) else {
        return Ok(None);
    };
    let reads = token_reads::read(context, machine, asset, payer, spender(requirement)).await?;
    Ok(Some(reads))
}

fn payer(request: &Value) -> Result<Address, WorkError> {
    let text = request
        .get("payer_address")
        .and_then(Value::as_str)
        .unwrap_or_default();
    evm::parse_address(text).map_err(|e| WorkError::Internal(format!("payer_address: {e}")))
}
