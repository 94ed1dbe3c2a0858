//! The VM04 response: freshness, evidence, limitations and the JSON body.

use std::time::Duration;

use serde_json::{Value, json};

use super::items::{LIDO_EVIDENCE_ID, aave_evidence_id, sort_json};
use super::reads::Reads;
use super::venues::Frozen;
use super::{Query, Request};
use crate::catalog::manifest::Machine;
use crate::chain::networks::{self, Chain};

pub(super) struct Decision {
    pub(super) status: &'static str,
    pub(super) classification: &'static str,
    pub(super) truncated: bool,
    pub(super) omissions: Vec<String>,
    pub(super) errors: Vec<Value>,
    pub(super) venues: Vec<Value>,
}

/// Freshness over the reads used: (block, cached, oldest age, earliest retrieval).
pub(super) fn freshness(reads: &Reads) -> (Option<String>, bool, u64, Option<String>) {
    let mut cached = false;
    let mut age = 0;
    let mut earliest: Option<String> = None;
    let mut note = |served_cached: bool, served_age: u64, at: &str| {
        cached |= served_cached;
        age = age.max(served_age);
        if earliest.as_deref().is_none_or(|e| at < e) {
            earliest = Some(at.to_string());
        }
    };
    let mut block = None;
    if let Some(Ok(served)) = &reads.aave {
        note(served.cached, served.age_ms, &served.value.retrieved_at);
        block = Some(served.value.block_number.to_string());
    }
    if let Some(Ok(served)) = &reads.lido {
        note(served.cached, served.age_ms, &served.value.retrieved_at);
    }
    (block, cached, age, earliest)
}

pub(super) fn evidence(reads: &Reads, chain: Chain) -> Vec<Value> {
    let mut evidence = Vec::new();
    if let (Some(Ok(served)), Some(reserve)) = (&reads.aave, &reads.aave_reserve) {
        evidence.push(json!({
            "id": aave_evidence_id(chain, reserve),
            "kind": "eth_call",
            "source": "Pool.getReserveData (Pool from PoolAddressesProvider.getPool at the same block)",
            "block_number": served.value.block_number.to_string(),
            "retrieved_at": served.value.retrieved_at,
        }));
    }
    if let Some(Ok(served)) = &reads.lido {
        evidence.push(json!({
            "id": LIDO_EVIDENCE_ID,
            "kind": "http_get",
            "source": "Lido API /v1/protocol/steth/apr/sma",
            "block_number": null,
            "retrieved_at": served.value.retrieved_at,
        }));
    }
    evidence
}

pub(super) fn limitations(
    query: &Query,
    reads: &Reads,
    age: u64,
    cached: bool,
    ttl: Duration,
) -> Vec<String> {
    let mut out = vec![
        "primary_apr is an APR as a decimal fraction (0.0412 = 4.12%); it is never converted to APY.".to_string(),
    ];
    let read_something = matches!(reads.aave, Some(Ok(_))) || matches!(reads.lido, Some(Ok(_)));
    if !read_something {
        out.push("Nothing was read from any source, so retrieved_at is null: there is no observation to date.".into());
    }
    if reads.aave.is_some() {
        out.push("Aave v3 APR values are observed at one block; they change with utilization and are not a forecast.".into());
        if query.resolved.kind == "native" {
            out.push("Native ETH is supplied to Aave v3 as WETH (through its WETH gateway); the Aave venue is the WETH reserve.".into());
        }
    }
    if reads.lido.is_some() {
        out.push("The Lido rate is the Lido API's 7-day simple moving average of the stETH APR; it is not read on chain and has no block number.".into());
        if query.chain.chain_id == networks::BASE.chain_id {
            out.push("wstETH on eip155:8453 is bridged and non-rebasing; its Lido rate is the Ethereum stETH APR, accrued through the wstETH exchange rate.".into());
        }
    }
    out.extend(reads.rpc_retries.iter().cloned());
    if cached {
        out.push(format!(
            "Served from the in-process cache: the oldest observation used is {age} ms old (cache TTL {} ms).",
            ttl.as_millis()
        ));
    }
    out
}

pub(super) fn respond(
    machine: &Machine,
    frozen: &Frozen,
    request: &Request,
    query: &Query,
    reads: &Reads,
    outcome: Decision,
) -> Value {
    let (block, cached, age, earliest) = freshness(reads);
    let asset_echo = request.asset.clone();
    json!({
        "status": outcome.status,
        "classification": outcome.classification,
        "machine": machine.machine,
        "methodology_version": machine.methodology_version,
        "protocol_set_version": frozen.set.protocol_set_version,
        "chain_id": query.chain.chain_id,
        "asset": {
            "kind": asset_echo["kind"],
            "address": asset_echo.get("address").cloned().unwrap_or(Value::Null),
            "symbol": asset_echo.get("symbol").cloned().unwrap_or(Value::Null),
        },
        "request": {
            "chain_id": query.chain.chain_id,
            "asset": asset_echo,
            "venue_types": query.venue_types,
            "protocols": query.protocols,
            "sort": query.sort,
            "limit": query.limit,
        },
        "resolved": {
            "chain_id": query.chain.chain_id,
            "asset": {"kind": query.resolved.kind, "address": query.resolved.address},
            "symbol": query.resolved.symbol,
        },
        "sort": sort_json(&query.sort),
        "result_count": outcome.venues.len(),
        "truncated": outcome.truncated,
        "omissions": outcome.omissions,
        // Null when nothing was read: there is no observation to date.
        "retrieved_at": earliest,
        "block_number": block,
        "cached": cached,
        "observation_age_ms": age,
        "venues": outcome.venues,
        "limitations": limitations(query, reads, age, cached, reads.cache_ttl),
        "errors": outcome.errors,
        "evidence": evidence(reads, query.chain),
    })
}
