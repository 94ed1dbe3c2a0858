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

use super::{WorkContext, WorkError};
use crate::catalog::manifest::Machine;
use crate::chain::networks::{self, Chain};
use crate::config::Config;
use crate::http::error::ApiError;
use crate::machines::checks as rc;
use crate::net::upstream::Bounds;
use crate::support::decimal::Decimal;
use crate::support::evm;

pub fn check(machine: &Machine, request: &Value) -> Result<(), ApiError> {
    rc::address(request, "/address")?;
    let holdings = request
        .get("declared_holdings")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    if let Some(max) = machine.limit("max_declared_holdings")
        && holdings.len() as u64 > max
    {
        return Err(ApiError::invalid_field(
            "too_many_declared_holdings",
            "/declared_holdings",
            format!("at most {max} declared holdings"),
        ));
    }
    let requested: Option<Vec<&str>> = request
        .get("chains")
        .and_then(Value::as_array)
        .map(|chains| chains.iter().filter_map(Value::as_str).collect());
    for (i, holding) in holdings.iter().enumerate() {
        let at = format!("/declared_holdings/{i}");
        rc::token_address(request, &format!("{at}/token"))?;
        rc::uint256(request, &format!("{at}/quantity_raw"))?;
        let chain = holding
            .get("chain")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if requested
            .as_ref()
            .is_some_and(|chains| !chains.contains(&chain))
        {
            return Err(ApiError::invalid_field(
                "declared_holding_chain_not_requested",
                format!("{at}/chain"),
                format!("{chain} is not in the requested chains"),
            ));
        }
    }
    Ok(())
}

/// Every provider VM03 reads must be configured: both chains' RPC and inventory endpoints
/// (the inventory URL usually carries the credential) and the pricing API.
pub fn readiness(machine: &Machine, config: &Config) -> Result<(), ApiError> {
    let missing = [
        (
            config.inventory_url_eip155_1.is_none(),
            "the eip155:1 inventory provider (credential)",
        ),
        (
            config.inventory_url_eip155_8453.is_none(),
            "the eip155:8453 inventory provider (credential)",
        ),
        (
            config.rpc_url_eip155_1.is_none(),
            "the eip155:1 RPC endpoint",
        ),
        (
            config.rpc_url_eip155_8453.is_none(),
            "the eip155:8453 RPC endpoint",
        ),
        (config.dexscreener_url.is_none(), "the DEX pricing API URL"),
    ];
    match missing.iter().find(|(absent, _)| *absent) {
        Some((_, what)) => super::provider_missing(machine, what),
        None => Ok(()),
    }
}

/// The native asset of a chain, from the manifest.
#[derive(Debug, Clone, Deserialize)]
struct NativeAsset {
    symbol: String,
    decimals: u8,
    /// The wrapped token whose DEX pairs price the native asset.
    price_reference: String,
}

/// Everything VM03 takes from the manifest.
struct Settings {
    cap: usize,
    /// The inventory pagination's whole budget and each page's answer size limit.
    inventory: Bounds,
    max_pages: u32,
    rpc_timeout: Duration,
    pricing: Bounds,
    batch_size: usize,
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
    serde_json::from_value(value)
        .map_err(|e| WorkError::Internal(format!("VM03 allowlists.{name} is unreadable: {e}")))
}

impl Settings {
    fn from(machine: &Machine) -> Result<Settings, WorkError> {
        let millis = |name: &str, default: u64| {
            Duration::from_millis(machine.limit(name).unwrap_or(default))
        };
        let threshold_text = machine
            .limits
            .get("concentration_threshold")
            .and_then(Value::as_str)
            .unwrap_or("0.40")
            .to_string();
        let floor = machine.limit("min_pair_liquidity_usd").unwrap_or(10_000);
        // Both provider adapters read their answers within this limit; it is required, not
        // defaulted, so the manifest stays its only source.
        let max_bytes = machine
            .limit("max_provider_response_bytes")
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
            .ok_or_else(|| {
                WorkError::Internal("VM03 has no limit max_provider_response_bytes".into())
            })?;
        let multicall: String = allowlist(machine, "multicall3")?;
        Ok(Settings {
            cap: machine.limit("max_returned_holdings").unwrap_or(40) as usize,
            inventory: Bounds {
                timeout: millis("inventory_budget_ms", 8000),
                max_bytes,
            },
            max_pages: machine.limit("max_inventory_pages").unwrap_or(20) as u32,
            rpc_timeout: millis("response_timeout_ms", 8000),
            pricing: Bounds {
                timeout: millis("response_timeout_ms", 8000),
                max_bytes,
            },
            batch_size: machine.limit("pricing_batch_size").unwrap_or(30) as usize,
            liquidity_floor: Decimal::from_units(U256::from(floor), 0).unwrap_or(Decimal::ZERO),
            floor_text: floor.to_string(),
            threshold: Decimal::parse(&threshold_text).ok_or_else(|| {
                WorkError::Internal("VM03 concentration_threshold is not a decimal".into())
            })?,
            threshold_text,
            multicall: evm::parse_address(&multicall)
                .map_err(|e| WorkError::Internal(format!("VM03 multicall3: {e}")))?,
            dex_chain_ids: allowlist(machine, "dexscreener_chain_ids")?,
            natives: allowlist(machine, "native_assets")?,
        })
    }

    fn native(&self, chain: Chain) -> Result<&NativeAsset, WorkError> {
        self.natives.get(chain.caip2).ok_or_else(|| {
            WorkError::Internal(format!("VM03 has no native asset for {}", chain.caip2))
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

struct Request {
    address: Address,
    address_text: String,
    chains: Vec<Chain>,
    declared: Vec<Declared>,
}

fn parse_request(request: &Value) -> Result<Request, WorkError> {
    let invalid =
        |what: &str| WorkError::Internal(format!("{what} passed validation but is unreadable"));
    let address_text = rc::text(request, "/address").ok_or_else(|| invalid("address"))?;
    let address = evm::parse_address(address_text).map_err(|_| invalid("address"))?;
    let chains = match request.get("chains").and_then(Value::as_array) {
        Some(list) => list
            .iter()
            .map(|c| {
                c.as_str()
                    .and_then(networks::by_caip2)
                    .ok_or_else(|| invalid("chains"))
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => vec![networks::ETHEREUM, networks::BASE],
    };
    let mut declared: Vec<Declared> = Vec::new();
    for entry in request
        .get("declared_holdings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let chain = entry["chain"]
            .as_str()
            .and_then(networks::by_caip2)
            .ok_or_else(|| invalid("declared chain"))?;
        let token = entry["token"]
            .as_str()
            .and_then(|t| evm::parse_address(t).ok())
            .ok_or_else(|| invalid("declared token"))?;
        let quantity = entry["quantity_raw"]
            .as_str()
            .and_then(|q| evm::parse_uint256(q).ok())
            .ok_or_else(|| invalid("quantity_raw"))?;
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
    Ok(Request {
        address,
        address_text: address_text.to_string(),
        chains,
        declared,
    })
}

pub async fn observe(
    context: &WorkContext,
    machine: &Machine,
    request: &Value,
) -> Result<Value, WorkError> {
    let settings = Settings::from(machine)?;
    let request = parse_request(request)?;
    let outcomes = collect::run(context, &settings, &request).await?;
    Ok(assemble::respond(machine, &settings, &request, &outcomes))
}
