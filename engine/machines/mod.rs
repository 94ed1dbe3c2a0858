//! One module per machine. Each has `check` (semantic, structural, pre-payment; no I/O) and,
//! once implemented, one `observe` entry that does the paid work.

use serde_json::Value;

use crate::catalog::manifest::Machine;
use crate::config::{Config, Secret};
use crate::http::error::ApiError;
use crate::net::gateway::Gateway;
use crate::support::ttl_cache::TtlCache;

pub mod checks;
pub mod probe_reads;
pub mod vm01;
pub mod vm02;
pub mod vm03;
pub mod vm04;
pub mod vm05;
pub mod vm06;
pub mod vm07;
pub mod vm08;
pub mod vm09;
pub mod vm10;
pub mod vm11;

/// A machine's pre-payment semantic check.
pub type Check = fn(&Machine, &Value) -> Result<(), ApiError>;

/// The semantic check of a machine id; None for an id that is not a machine.
pub fn check_for(id: &str) -> Option<Check> {
    let check: Check = match id {
        "VM01" => vm01::check,
        "VM02" => vm02::check,
        "VM03" => vm03::check,
        "VM04" => vm04::check,
        "VM05" => vm05::check,
        "VM06" => vm06::check,
        "VM07" => vm07::check,
        "VM08" => vm08::check,
        "VM09" => vm09::check,
        "VM10" => vm10::check,
        "VM11" => vm11::check,
        _ => return None,
    };
    Some(check)
}

/// What a machine's paid work may use: the counted gateway and the configured providers.
#[derive(Clone)]
pub struct WorkContext {
    pub gateway: Gateway,
    pub config: Config,
    /// In-process cache of upstream observations (VM04's optional cache).
    pub cache: TtlCache,
}

impl WorkContext {
    /// The configured JSON-RPC URL of a CAIP-2 chain.
    pub fn rpc_url(&self, chain: &str) -> Option<&Secret> {
        match chain {
            "eip155:8453" => self.config.rpc_url_eip155_8453.as_ref(),
            "eip155:1" => self.config.rpc_url_eip155_1.as_ref(),
            _ => None,
        }
    }

    /// The configured inventory provider (alchemy_getTokenBalances) of a CAIP-2 chain.
    pub fn inventory_url(&self, chain: &str) -> Option<&Secret> {
        match chain {
            "eip155:8453" => self.config.inventory_url_eip155_8453.as_ref(),
            "eip155:1" => self.config.inventory_url_eip155_1.as_ref(),
            _ => None,
        }
    }
}

/// A failure of our own while producing an observation (upstream failures are not errors:
/// they are truthful HOLD/PARTIAL results).
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    #[error("{0} is not implemented yet")]
    NotImplemented(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<crate::providers::discovery::DiscoveryError> for WorkError {
    fn from(error: crate::providers::discovery::DiscoveryError) -> Self {
        WorkError::Internal(error.to_string())
    }
}

/// Whether a machine can take paid calls with this configuration. Checked before any
/// payment is verified, so nobody is charged for a machine that cannot run.
pub fn readiness(machine: &Machine, config: &Config) -> Result<(), ApiError> {
    match machine.machine.as_str() {
        "VM01" => vm01::readiness(machine, config),
        "VM02" => vm02::readiness(machine, config),
        "VM03" => vm03::readiness(machine, config),
        "VM04" => vm04::readiness(machine, config),
        "VM05" => vm05::readiness(machine, config),
        "VM06" => vm06::readiness(machine, config),
        "VM07" => vm07::readiness(machine, config),
        "VM08" => vm08::readiness(machine, config),
        "VM09" => vm09::readiness(machine, config),
        "VM10" => vm10::readiness(machine, config),
        "VM11" => vm11::readiness(machine, config),
        _ => not_implemented(machine),
    }
}

/// Runs a machine's paid work. Upstream failures are truthful HOLD/PARTIAL results, not errors.
pub async fn observe(
    id: &str,
    context: &WorkContext,
    machine: &Machine,
    request: &Value,
) -> Result<Value, WorkError> {
    match id {
        "VM01" => vm01::observe(context, machine, request).await,
        "VM02" => vm02::observe(context, machine, request).await,
        "VM03" => vm03::observe(context, machine, request).await,
        "VM04" => vm04::observe(context, machine, request).await,
        "VM05" => vm05::observe(context, machine, request).await,
        "VM06" => vm06::observe(context, machine, request).await,
        "VM07" => vm07::observe(context, machine, request).await,
        "VM08" => vm08::observe(context, machine, request).await,
        "VM09" => vm09::observe(context, machine, request).await,
        "VM10" => vm10::observe(context, machine, request).await,
        "VM11" => vm11::observe(context, machine, request).await,
        other => Err(WorkError::NotImplemented(other.to_string())),
    }
}

/// The readiness answer of a machine whose work has not landed yet.
pub fn not_implemented(machine: &Machine) -> Result<(), ApiError> {
    Err(ApiError::unavailable(
        "machine_not_implemented",
        format!(
            "{} is not available yet; no payment was verified and nothing was charged",
            machine.machine
        ),
    ))
}

/// The readiness answer of a machine whose provider is not configured.
pub fn provider_missing(machine: &Machine, what: &str) -> Result<(), ApiError> {
    Err(ApiError::unavailable(
        "provider_not_configured",
        format!(
            "{} is not available on this deployment: {what} is not configured",
            machine.machine
        ),
    ))
}
