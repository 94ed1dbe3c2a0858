//! VM03 portfolio preflight: a bounded holdings snapshot (at most 40) of one address on
//! eip155:1 and/or eip155:8453, with partial DEX pricing and an evidence-readiness summary.
//!
//! Per chain, concurrently: `eth_blockNumber` fixes block N; the native balance is read at N;
//! the inventory provider (`alchemy_getTokenBalances`, paginated, within the inventory budget)
//! discovers ERC-20s. The 40-holding cap is shared fairly between chains. The kept tokens'
//! `balanceOf`, `decimals` and `symbol` are then read at the same block N in one Multicall3
//! call, and priced from DEX pairs. docs/vm03-portfolio-preflight.md states every rule.

mod assemble;
mod collect;

use std::collections::BTreeMap;
use std::time::Duration;

use alloy::primitives::{Address, U256};
use serde::Deserialize;
use serde_json::Value;

use super::{Call, CheckFailure, Need, WorkError, limit, limit_ms};
use crate::catalog::manifest::Machine;
use crate::chain::networks::{self, Chain};
use crate::machines::checks as rc;
use crate::net::upstream::Bounds;
use crate::support::decimal::Decimal;
use crate::support::evm::{self, AddressText};

/// VM03 portfolio preflight.
pub(crate) struct Vm03;

/// A VM03 request.
#[derive(Debug, Deserialize)]
pub(crate) struct Request {
    /// The address whose holdings are discovered (parsed once, when the request is read).
    pub address: AddressText,
    /// The chains to read (default both).
    pub chains: Option<Vec<String>>,
    /// Caller-declared ERC-20 holdings: hints only.
    #[serde(default)]
    pub declared_holdings: Vec<DeclaredHolding>,
}

/// One caller-declared holding as written.
#[derive(Debug, Deserialize)]
pub(crate) struct DeclaredHolding {
    /// Its chain (CAIP-2).
    pub chain: String,
    /// The ERC-20 contract.
    pub token: AddressText,
    /// The declared raw quantity (uint256 decimal string).
    pub quantity_raw: String,
}

impl super::Machine for Vm03 {
    const ID: &'static str = "VM03";
    type Request = Request;
    type Answer = Value;
    /// Every provider VM03 reads must be configured: both chains' RPC and inventory endpoints
    /// (the inventory URL usually carries the credential) and the pricing API.
    const NEEDS: &'static [Need] = &[
        Need::Inventory("eip155:1"),
        Need::Inventory("eip155:8453"),
        Need::Rpc("eip155:1"),
        Need::Rpc("eip155:8453"),
        Need::Pricing,
    ];

    fn check(machine: &Machine, request: &Request) -> Result<(), CheckFailure> {
        rc::address_field(&request.address, "/address")?;
        let holdings = &request.declared_holdings;
        if let Some(max) = machine.limit("max_declared_holdings")
            && holdings.len() as u64 > max
        {
            return Err(CheckFailure::field(
                "too_many_declared_holdings",
                "/declared_holdings",
                format!("at most {max} declared holdings"),
            ));
        }
        for (i, holding) in holdings.iter().enumerate() {
            let at = format!("/declared_holdings/{i}");
            rc::token_address_field(&holding.token, &format!("{at}/token"))?;
            rc::uint256(&holding.quantity_raw, &format!("{at}/quantity_raw"))?;
            if request
                .chains
                .as_ref()
                .is_some_and(|chains| !chains.contains(&holding.chain))
            {
                return Err(CheckFailure::field(
                    "declared_holding_chain_not_requested",
                    format!("{at}/chain"),
                    format!("{} is not in the requested chains", holding.chain),
                ));
            }
        }
        Ok(())
    }

    async fn observe(call: Call<'_, Request>) -> Result<Value, WorkError> {
        let (context, machine, request) = call.parts();
        let settings = Settings::from(machine)?;
        let request = parse_request(request)?;
        let outcomes = collect::run(context, &settings, &request).await?;
        Ok(assemble::respond(machine, &settings, &request, &outcomes))
    }
}

/// The native asset of a chain, from the manifest.
#[derive(Debug, Clone, Deserialize)]
struct NativeAsset {
    symbol: String,
    decimals: u8,
    /// The wrapped token whose DEX pairs price the native asset.
    #[serde(deserialize_with = "checked_address")]
    price_reference: Address,
}

/// An address the manifest writes as text, checked as a request's would be.
fn checked_address<'de, D: serde::Deserializer<'de>>(text: D) -> Result<Address, D::Error> {
    let text = String::deserialize(text)?;
    evm::parse_address(&text).map_err(serde::de::Error::custom)
}

/// Everything VM03 takes from the manifest.
struct Settings {
    /// The manifest entry's name for this machine, for manifest errors.
    machine: String,
    cap: usize,
    /// The inventory pagination's whole budget and each page's answer size limit.
    inventory: Bounds,
    max_pages: u32,
    rpc_timeout: Duration,
    pricing: Bounds,
    batch_size: usize,
    /// A pricing answer with at least this many pairs may have been cut.
    pair_cap: usize,
    liquidity_floor: Decimal,
    floor_text: String,
    threshold: Decimal,
    threshold_text: String,
    multicall: Address,
    dex_chain_ids: BTreeMap<String, String>,
    natives: BTreeMap<String, NativeAsset>,
}

fn allowlist<T: serde::de::DeserializeOwned>(
    machine: &Machine,
    name: &str,
) -> Result<T, WorkError> {
    let value = machine.allowlists.get(name).cloned().unwrap_or(Value::Null);
    serde_json::from_value(value).map_err(|e| {
        WorkError::manifest(
            &machine.machine,
            format!("allowlists.{name} is unreadable: {e}"),
        )
    })
}

impl Settings {
    fn from(machine: &Machine) -> Result<Settings, WorkError> {
        let id = machine.machine.as_str();
        let count =
            |name: &str| limit(machine, name).map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        let threshold_text = machine
            .limits
            .get("concentration_threshold")
            .and_then(Value::as_str)
            .ok_or_else(|| WorkError::manifest(id, "no limit concentration_threshold"))?
            .to_string();
        let floor = limit(machine, "min_pair_liquidity_usd")?;
        let max_bytes = count("max_provider_response_bytes")?;
        let multicall: String = allowlist(machine, "multicall3")?;
        let response_timeout = limit_ms(machine, "response_timeout_ms")?;
        Ok(Settings {
            machine: id.to_string(),
            cap: count("max_returned_holdings")?,
            inventory: Bounds {
                timeout: limit_ms(machine, "inventory_budget_ms")?,
                max_bytes,
            },
            max_pages: u32::try_from(limit(machine, "max_inventory_pages")?).unwrap_or(u32::MAX),
            rpc_timeout: response_timeout,
            pricing: Bounds {
                timeout: response_timeout,
                max_bytes,
            },
            batch_size: count("pricing_batch_size")?,
            pair_cap: count("pricing_answer_pair_cap")?,
            liquidity_floor: Decimal::from_units(U256::from(floor), 0).unwrap_or(Decimal::ZERO),
            floor_text: floor.to_string(),
            threshold: Decimal::parse(&threshold_text).ok_or_else(|| {
                WorkError::manifest(id, "concentration_threshold is not a decimal")
            })?,
            threshold_text,
            multicall: evm::parse_address(&multicall)
                .map_err(|e| WorkError::manifest(id, format!("multicall3: {e}")))?,
            dex_chain_ids: allowlist(machine, "dexscreener_chain_ids")?,
            natives: allowlist(machine, "native_assets")?,
        })
    }

    fn native(&self, chain: Chain) -> Result<&NativeAsset, WorkError> {
        self.natives.get(chain.caip2).ok_or_else(|| {
            WorkError::manifest(
                &self.machine,
                format!("no native asset for {}", chain.caip2),
            )
        })
    }
}

/// A caller-declared holding: a hint whose balance is read on chain, never trusted.
#[derive(Debug, Clone)]
struct Declared {
    chain: Chain,
    token: Address,
    quantity: U256,
}

struct Parsed {
    address: Address,
    address_text: String,
    chains: Vec<Chain>,
    declared: Vec<Declared>,
}

fn parse_request(request: &Request) -> Result<Parsed, WorkError> {
    let invalid = |what: &str| WorkError::unreadable(what);
    let address = request.address.parsed().map_err(|_| invalid("address"))?;
    let chains = match &request.chains {
        Some(list) => list
            .iter()
            .map(|c| networks::by_caip2(c).ok_or_else(|| invalid("chains")))
            .collect::<Result<Vec<_>, _>>()?,
        None => vec![networks::ETHEREUM, networks::BASE],
    };
    let mut declared: Vec<Declared> = Vec::new();
    for entry in &request.declared_holdings {
        let chain = networks::by_caip2(&entry.chain).ok_or_else(|| invalid("declared chain"))?;
        let token = entry
            .token
            .parsed()
            .map_err(|_| invalid("declared token"))?;
        let quantity =
            evm::parse_uint256(&entry.quantity_raw).map_err(|_| invalid("quantity_raw"))?;
        if !declared
            .iter()
            .any(|d| d.chain == chain && d.token == token)
        {
            declared.push(Declared {
                chain,
                token,
                quantity,
            });
        }
    }
    Ok(Parsed {
        address,
        address_text: request.address.as_str().to_owned(),
        chains,
        declared,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_declares_every_setting_vm03_runs_with() {
        let spec = crate::catalog::embedded::MANIFEST
            .machine("VM03")
            .expect("VM03");
        Settings::from(spec).expect("settings");
    }

    #[test]
    fn a_price_reference_that_is_not_an_address_is_a_manifest_error_at_settings() {
        let mut spec = crate::catalog::embedded::MANIFEST
            .machine("VM03")
            .expect("VM03")
            .clone();
        spec.allowlists["native_assets"]["eip155:1"]["price_reference"] = "0xnot".into();
        let Err(WorkError::Manifest { machine, what }) = Settings::from(&spec) else {
            panic!("a bad price_reference was accepted");
        };
        assert_eq!(machine, "VM03");
        assert!(
            what.starts_with("allowlists.native_assets is unreadable"),
            "{what}"
        );
    }
}
