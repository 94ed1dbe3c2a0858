//! VM06 transaction gas preflight: the node's gas estimate for one unsigned transaction and
//! the fee history of the latest blocks, on eip155:1 or eip155:8453.
//!
//! Exactly two RPC methods run, concurrently: `eth_estimateGas` (against `latest`) and
//! `eth_feeHistory(5, latest, [10, 50, 90])`. Status rules:
//! - OK: both answered.
//! - UNESTIMABLE: the node says the call reverts (whatever the fee history did); the node's
//!   message, decoded reason and revert data are in `limitations`.
//! - PARTIAL: exactly one of the two failed for another reason.
//! - HOLD: neither could be read.
//!
//! Illustrative fees need both the estimate and the history: per percentile p of the fee
//! history, `gas_units × (base fee of the next block + newest block's reward at p)`. They are
//! observations, not a recommendation, a final cost or (on Base) the layer-1 fee.

use alloy::eips::{BlockId, BlockNumberOrTag};
use alloy::network::TransactionBuilder;
use alloy::primitives::{Address, Bytes, U256};
use alloy::providers::{Provider, RootProvider};
use alloy::rpc::types::{FeeHistory, TransactionRequest};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Call, CheckFailure, Need, WorkError, limit, limit_ms};
use crate::catalog::manifest::Machine;
use crate::chain::endpoints::FailoverRpc;
use crate::chain::networks::{self, Chain};
use crate::chain::rpc::{self, CallFailure};
use crate::machines::checks as rc;
use crate::support::evm::{self, AddressText};
use crate::support::timestamp::now;
use crate::support::units::format_units;

/// Revert data quoted in limitations at most (bytes); longer data is cut and says so.
const MAX_QUOTED_REVERT_BYTES: usize = 256;

/// VM06 transaction gas preflight.
pub(crate) struct Vm06;

/// A VM06 request: one unsigned transaction as the caller wrote it.
#[derive(Debug, Deserialize)]
pub(crate) struct Request {
    /// The analysis chain (CAIP-2).
    pub chain: String,
    /// The destination address (parsed once, when the request is read).
    pub to: AddressText,
    /// The optional sender.
    pub from: Option<AddressText>,
    /// Calldata as even-length hex (default `0x`).
    pub data: Option<String>,
    /// Value in wei as a decimal string (default 0).
    pub value_wei: Option<String>,
}

impl super::Machine for Vm06 {
    const ID: &'static str = "VM06";
    type Request = Request;
    type Answer = Value;
    /// Both analysis chains must be readable: the machine offers both, and a caller must not pay
    /// for a chain this deployment cannot read.
    const NEEDS: &'static [Need] = &[Need::Rpc("eip155:1"), Need::Rpc("eip155:8453")];

    fn check(machine: &Machine, request: &Request) -> Result<(), CheckFailure> {
        rc::address_field(&request.to, "/to")?;
        if let Some(from) = &request.from {
            rc::address_field(from, "/from")?;
        }
        if let Some(value) = &request.value_wei {
            rc::uint256(value, "/value_wei")?;
        }
        let data = request.data.as_deref().unwrap_or("0x");
        let calldata_bytes = (data.len().saturating_sub(2) / 2) as u64;
        if let Some(max) = machine.limit("max_calldata_bytes")
            && calldata_bytes > max
        {
            return Err(CheckFailure::field(
                "calldata_too_large",
                "/data",
                format!("calldata holds {calldata_bytes} bytes; at most {max}"),
            ));
        }
        Ok(())
    }

    async fn observe(call: Call<'_, Request>) -> Result<Value, WorkError> {
        let (context, machine, request) = call.parts();
        let intent = intent(request)?;
        let url = context.rpc_url(intent.chain.caip2).ok_or_else(|| {
            WorkError::NotConfigured(format!("{} RPC endpoint", intent.chain.caip2))
        })?;
        let timeout = limit_ms(machine, "response_timeout_ms")?;
        let transport =
            FailoverRpc::for_chain(&context.gateway, &context.config, intent.chain, timeout)
                .ok_or_else(|| {
                    WorkError::NotConfigured(format!("{} RPC endpoint", intent.chain.caip2))
                })?;
        let query = history_query(machine)?;
        let (estimate, history) = read(&transport.provider(), &intent, &query).await;
        // The endpoint that answered, when failover moved the reads off the first one.
        let endpoint = transport
            .answered_by()
            .unwrap_or_else(|| rpc::public_endpoint(url));
        let mut answer = respond(machine, &intent, &query, estimate, history, &endpoint);
        // A read that needed a second attempt says so.
        if let Some(limitations) = answer["limitations"].as_array_mut() {
            limitations.extend(transport.retries().into_iter().map(Value::from));
        }
        Ok(answer)
    }
}

/// The unsigned transaction of a validated request.
struct Intent {
    chain: Chain,
    to: Address,
    from: Option<Address>,
    data: Bytes,
    value: U256,
}

fn intent(request: &Request) -> Result<Intent, WorkError> {
    let invalid = |what: &str| WorkError::unreadable(what);
    let chain = networks::by_caip2(&request.chain).ok_or_else(|| invalid("chain"))?;
    let to = request.to.parsed().map_err(|_| invalid("to"))?;
    let from = match &request.from {
        Some(text) => Some(text.parsed().map_err(|_| invalid("from"))?),
        None => None,
    };
    let data_text = request.data.as_deref().unwrap_or("0x");
    let data = alloy::primitives::hex::decode(data_text)
        .map(Bytes::from)
        .map_err(|_| invalid("data"))?;
    let value = match &request.value_wei {
        Some(text) => evm::parse_uint256(text).map_err(|_| invalid("value_wei"))?,
        None => U256::ZERO,
    };
    Ok(Intent {
        chain,
        to,
        from,
        data,
        value,
    })
}

/// The fee-history parameters, from the manifest's limits.
struct HistoryQuery {
    block_count: u64,
    /// The newest block asked for (`fee_history_newest_block`), and its text as the
    /// manifest writes it.
    newest_block: (BlockNumberOrTag, String),
    percentiles: Vec<u64>,
}

fn history_query(machine: &Machine) -> Result<HistoryQuery, WorkError> {
    let percentiles = machine
        .limits
        .get("fee_history_reward_percentiles")
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_u64).collect())
        .ok_or_else(|| {
            WorkError::manifest(&machine.machine, "no limit fee_history_reward_percentiles")
        })?;
    let newest_block = machine
        .limits
        .get("fee_history_newest_block")
        .and_then(Value::as_str)
        .and_then(|text| Some((text.parse().ok()?, text.to_string())))
        .ok_or_else(|| {
            WorkError::manifest(&machine.machine, "no block tag fee_history_newest_block")
        })?;
    Ok(HistoryQuery {
        block_count: limit(machine, "fee_history_block_count")?,
        newest_block,
        percentiles,
    })
}

async fn read(
    provider: &RootProvider,
    intent: &Intent,
    query: &HistoryQuery,
) -> (
    Result<u64, CallFailure>,
    Result<FeeHistory, rpc::ReadFailure>,
) {
    let mut tx = TransactionRequest::default()
        .with_to(intent.to)
        .with_input(intent.data.clone())
        .with_value(intent.value);
    if let Some(from) = intent.from {
        tx = tx.with_from(from);
    }
    let percentiles: Vec<f64> = query.percentiles.iter().map(|p| *p as f64).collect();
    let (estimate, history) = tokio::join!(
        provider.estimate_gas(tx).block(BlockId::latest()),
        provider.get_fee_history(query.block_count, query.newest_block.0, &percentiles),
    );
    (
        estimate.map_err(|e| rpc::classify_call_error(&e)),
        history.map_err(|e| rpc::ReadFailure::from(&e)),
    )
}

fn status(
    estimate: &Result<u64, CallFailure>,
    history: &Result<FeeHistory, rpc::ReadFailure>,
) -> &'static str {
    match (estimate, history) {
        (Err(CallFailure::Reverted { .. }), _) => "UNESTIMABLE",
        (Ok(_), Ok(_)) => "OK",
        (Err(_), Err(_)) => "HOLD",
        _ => "PARTIAL",
    }
}

fn respond(
    machine: &Machine,
    intent: &Intent,
    query: &HistoryQuery,
    estimate: Result<u64, CallFailure>,
    history: Result<FeeHistory, rpc::ReadFailure>,
    endpoint: &rpc::PublicEndpoint,
) -> Value {
    let chain = intent.chain;
    let mut limitations = Vec::new();
    let status = status(&estimate, &history);
    match &estimate {
        Ok(_) => {}
        Err(failure) => limitations.push(estimate_limitation(chain, failure)),
    }
    if let Err(why) = &history {
        limitations.push(format!(
            "eth_feeHistory on {} could not be read ({why}); no fee history or illustrative fees are given.",
            chain.caip2
        ));
    }
    let fee_history = history.as_ref().ok().map(|h| fee_history_json(h, query));
    let fees = match (&estimate, &history) {
        (Ok(gas), Ok(h)) => illustrative_fees(chain, *gas, h, query, &mut limitations),
        _ => Value::Null,
    };
    limitations.push(scope_limitation(chain));
    if endpoint.origin.is_none() {
        limitations.push(
            "The configured RPC URL carries credentials; provider.url is withheld and only its host is named."
                .to_string(),
        );
    }
    json!({
        "status": status,
        "machine": machine.machine,
        "methodology_version": machine.methodology_version,
        "checked_at": now(),
        "chain": {"caip2": chain.caip2, "chain_id": chain.chain_id, "name": chain.name},
        "request_shape": {
            "has_from": intent.from.is_some(),
            "calldata_bytes": intent.data.len(),
            "value_nonzero": !intent.value.is_zero(),
        },
        "gas_estimate": estimate.as_ref().ok().map(|gas| json!({"gas_units": gas.to_string()})),
        "fee_history": fee_history,
        "illustrative_execution_fees": fees,
        "provider": {
            "name": format!("{}-rpc", chain.slug),
            "host": endpoint.host,
            "methods": ["eth_estimateGas", "eth_feeHistory"],
            "url": endpoint.origin.clone().unwrap_or_else(|| "withheld".to_string()),
            "credential_material": false,
        },
        "limitations": limitations,
    })
}

fn estimate_limitation(chain: Chain, failure: &CallFailure) -> String {
    match failure {
        CallFailure::Reverted {
            message,
            reason,
            data,
        } => {
            let reason = match reason {
                Some(reason) => format!("revert reason: {reason:?}"),
                None => "no decodable revert reason".to_string(),
            };
            let data = match data {
                Some(data) if !data.is_empty() => {
                    let shown = &data[..data.len().min(MAX_QUOTED_REVERT_BYTES)];
                    let cut = if data.len() > shown.len() {
                        format!(" (first {} of {} bytes)", shown.len(), data.len())
                    } else {
                        String::new()
                    };
                    format!(
                        "revert data 0x{}{cut}",
                        alloy::primitives::hex::encode(shown)
                    )
                }
                _ => "no revert data".to_string(),
            };
            format!(
                "The node reports that the call reverts on {} (node message: {message:?}; {reason}; {data}); no gas estimate exists for it.",
                chain.caip2
            )
        }
        CallFailure::Unavailable(why) => format!(
            "eth_estimateGas on {} could not be read ({why}); no gas estimate is given.",
            chain.caip2
        ),
    }
}

fn scope_limitation(chain: Chain) -> String {
    if chain.chain_id == networks::BASE.chain_id {
        "On eip155:8453 the figures cover only the layer-2 execution fee, not the separate layer-1 security/data fee, and are not a total transaction cost.".to_string()
    } else {
        "The figures are illustrative execution fees from recent fee history, not a recommendation, a fee setting or a guaranteed final cost.".to_string()
    }
}

fn fee_history_json(history: &FeeHistory, query: &HistoryQuery) -> Value {
    let strings = |values: &[u128]| values.iter().map(u128::to_string).collect::<Vec<_>>();
    let rewards: Vec<Vec<String>> = history
        .reward
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|row| strings(row))
        .collect();
    json!({
        "block_count": query.block_count,
        "newest_block": query.newest_block.1,
        "reward_percentiles": query.percentiles,
        "oldest_block": format!("{:#x}", history.oldest_block),
        "base_fee_per_gas": strings(&history.base_fee_per_gas),
        "gas_used_ratio": history.gas_used_ratio.iter().map(|r| format!("{r}")).collect::<Vec<_>>(),
        "priority_fee_rewards": rewards,
    })
}

/// One scenario per reward percentile: the next block's base fee (the last entry of
/// `base_fee_per_gas`) plus the newest block's reward at that percentile, times the gas units.
fn illustrative_fees(
    chain: Chain,
    gas: u64,
    history: &FeeHistory,
    query: &HistoryQuery,
    limitations: &mut Vec<String>,
) -> Value {
    let Some(base_fee) = history.base_fee_per_gas.last().copied() else {
        limitations.push(
            "The fee history carries no base fee; no illustrative fees are given.".to_string(),
        );
        return Value::Null;
    };
    let newest_rewards = history
        .reward
        .as_ref()
        .and_then(|rows| rows.last())
        .cloned()
        .unwrap_or_default();
    let scenario = |label: String, priority: u128| {
        let wei = U256::from(gas) * (U256::from(base_fee) + U256::from(priority));
        json!({
            "label": label,
            "base_fee_per_gas_wei": base_fee.to_string(),
            "priority_fee_per_gas_wei": priority.to_string(),
            "execution_fee_wei": wei.to_string(),
            "execution_fee_eth": format_units(wei, 18),
        })
    };
    let scenarios: Vec<Value> = if newest_rewards.len() == query.percentiles.len() {
        query
            .percentiles
            .iter()
            .zip(&newest_rewards)
            .map(|(p, reward)| scenario(format!("p{p}_latest_reward"), *reward))
            .collect()
    } else {
        limitations.push(
            "The node returned no priority fee rewards for the newest block; the only scenario uses the base fee alone."
                .to_string(),
        );
        vec![scenario("next_base_fee_no_priority_fee".to_string(), 0)]
    };
    let covers = if chain.chain_id == networks::BASE.chain_id {
        "l2_execution_fee_only"
    } else {
        "execution_fee_only"
    };
    json!({
        "kind": "illustrative_execution_fee_observations",
        "recommendation": false,
        "guaranteed_final_cost": false,
        "covers": covers,
        "l1_security_or_data_fee_included": false,
        "labeled_as_total_transaction_cost": false,
        "scenarios": scenarios,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_declares_the_fee_history_query() {
        let spec = crate::catalog::embedded::MANIFEST
            .machine("VM06")
            .expect("VM06");
        let query = history_query(spec).expect("declared");
        assert!(query.block_count > 0 && !query.percentiles.is_empty());
        let declared = spec.limits.get("fee_history_newest_block");
        assert_eq!(
            declared.and_then(Value::as_str),
            Some(query.newest_block.1.as_str())
        );
        limit_ms(spec, "response_timeout_ms").expect("response timeout");
    }

    #[test]
    fn status_follows_the_stated_rules() {
        let reverted = || {
            Err(CallFailure::Reverted {
                message: "execution reverted".into(),
                reason: None,
                data: None,
            })
        };
        let history = || Ok(FeeHistory::default());
        let down = || Err::<FeeHistory, _>(rpc::ReadFailure::Rpc("RPC timed out".into()));
        assert_eq!(status(&Ok(21000), &history()), "OK");
        assert_eq!(status(&reverted(), &history()), "UNESTIMABLE");
        assert_eq!(status(&reverted(), &down()), "UNESTIMABLE");
        assert_eq!(status(&Ok(21000), &down()), "PARTIAL");
        let unavailable = || Err(CallFailure::Unavailable("RPC timed out".into()));
        assert_eq!(status(&unavailable(), &history()), "PARTIAL");
        assert_eq!(status(&unavailable(), &down()), "HOLD");
    }
}
