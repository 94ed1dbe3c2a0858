//! The frozen venue set of machines.yaml and the selection of candidate venues from it.

use std::collections::BTreeMap;

use alloy::primitives::Address;
use serde::Deserialize;
use serde_json::Value;

use super::Query;
use crate::catalog::manifest::Machine;
use crate::chain::networks::Chain;
use crate::machines::WorkError;
use crate::support::evm;

// ---------------------------------------------------------------- the frozen venue set

#[derive(Debug, Clone, Deserialize)]
pub(super) struct VenueSpec {
    pub(super) venue_id: String,
    pub(super) protocol: String,
    pub(super) venue_type: String,
    pub(super) chain_id: u64,
    pub(super) reserve: String,
    pub(super) serves: Vec<String>,
    #[serde(default)]
    pub(super) contracts: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
pub(super) struct VenueSetSpec {
    pub(super) protocol_set_version: String,
    pub(super) venues: Vec<VenueSpec>,
}

/// The manifest's frozen set: venues, per-chain asset addresses, Aave providers.
pub(super) struct Frozen {
    pub(super) set: VenueSetSpec,
    /// chain id → symbol → token address (None: the native asset).
    pub(super) assets: BTreeMap<String, BTreeMap<String, Option<String>>>,
    pub(super) aave_providers: BTreeMap<String, String>,
}

pub(super) fn allowlist<T: serde::de::DeserializeOwned>(
    machine: &Machine,
    name: &str,
) -> Result<T, WorkError> {
    let value = machine.allowlists.get(name).cloned().unwrap_or(Value::Null);
    serde_json::from_value(value)
        .map_err(|e| WorkError::manifest("VM04", format!("allowlists.{name} is unreadable: {e}")))
}

pub(super) fn frozen(machine: &Machine) -> Result<Frozen, WorkError> {
    Ok(Frozen {
        set: allowlist(machine, "venue_set")?,
        assets: allowlist(machine, "assets")?,
        aave_providers: allowlist(machine, "aave_v3_pool_addresses_providers")?,
    })
}

impl Frozen {
    pub(super) fn asset_address(&self, chain: Chain, symbol: &str) -> Option<String> {
        self.assets
            .get(&chain.chain_id.to_string())
            .and_then(|assets| assets.get(symbol))
            .cloned()
            .flatten()
    }

    /// The allowlisted symbol whose contract is `address` on `chain`.
    pub(super) fn symbol_of(&self, chain: Chain, address: Address) -> Option<(String, String)> {
        self.assets
            .get(&chain.chain_id.to_string())?
            .iter()
            .find_map(|(symbol, known)| {
                let known = known.as_deref()?;
                (evm::parse_address(known).ok()? == address)
                    .then(|| (symbol.clone(), known.to_string()))
            })
    }
}

// ---------------------------------------------------------------- selection

/// The candidate venues and the omissions (venues or protocols not returned, and why).
pub(super) fn select<'a>(frozen: &'a Frozen, query: &Query) -> (Vec<&'a VenueSpec>, Vec<String>) {
    let chain_id = query.chain.chain_id;
    let mut omissions = Vec::new();
    let Some(symbol) = query.resolved.symbol.as_deref() else {
        omissions.push(format!(
            "{} is not an asset of the frozen venue set ({}) on chain {chain_id}; no venue serves it.",
            query.resolved.address.as_deref().unwrap_or_default(),
            frozen.set.protocol_set_version
        ));
        return (Vec::new(), omissions);
    };
    let serving: Vec<&VenueSpec> = frozen
        .set
        .venues
        .iter()
        .filter(|v| v.chain_id == chain_id && v.serves.iter().any(|s| s == symbol))
        .collect();
    let mut protocols: Vec<&str> = frozen
        .set
        .venues
        .iter()
        .map(|v| v.protocol.as_str())
        .collect();
    protocols.sort_unstable();
    protocols.dedup();
    for protocol in protocols {
        if !serving.iter().any(|v| v.protocol == protocol) {
            omissions.push(format!(
                "{protocol} has no venue for {symbol} on chain {chain_id} in the frozen set."
            ));
        }
    }
    let mut candidates = Vec::new();
    for venue in serving {
        let excluded_by = |filter: &Option<Vec<String>>, value: &str| {
            filter
                .as_ref()
                .is_some_and(|allowed| !allowed.iter().any(|a| a == value))
        };
        if excluded_by(&query.venue_types, &venue.venue_type) {
            omissions.push(format!(
                "{} excluded by the venue_types filter.",
                venue.venue_id
            ));
        } else if excluded_by(&query.protocols, &venue.protocol) {
            omissions.push(format!(
                "{} excluded by the protocols filter.",
                venue.venue_id
            ));
        } else {
            candidates.push(venue);
        }
    }
    (candidates, omissions)
}
