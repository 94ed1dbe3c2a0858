//! Same-block ERC-20 reads for the x402 machines (VM09 balance; VM10 balance and the
//! canonical spender allowance): the block number first, then every call pinned to it.

use std::time::Duration;

use alloy::eips::BlockId;
use alloy::primitives::{Address, U256};
use alloy::providers::Provider;
use alloy::sol;

use crate::catalog::manifest::Machine;
use crate::chain::endpoints::FailoverRpc;
use crate::chain::networks::BASE;
use crate::chain::rpc::{describe_contract_error, describe_error};
use crate::config::Config;
use crate::net::gateway::Gateway;

sol! {
    #[sol(rpc)]
    interface IERC20Reads {
        function allowance(address owner, address spender) external view returns (uint256);
        function balanceOf(address account) external view returns (uint256);
    }
}

/// What was read; a failed read is None with a limitation.
#[derive(Debug, Clone, Default)]
pub(crate) struct TokenReads {
    pub block: Option<u64>,
    pub balance: Option<U256>,
    pub allowance: Option<U256>,
    pub limitations: Vec<String>,
}

/// A failure of ours before any read: configuration or manifest.
#[derive(Debug, thiserror::Error)]
pub enum TokenReadError {
    /// No eip155:8453 RPC endpoint is configured.
    #[error("no eip155:8453 RPC endpoint")]
    NoEndpoint,
    /// The machine's manifest entry lacks the RPC timeout.
    #[error("{0} has no rpc_response_timeout_ms")]
    NoTimeout(String),
}

/// Reads `balanceOf(owner)` and, when a spender is given, `allowance(owner, spender)` of
/// `token` at one block.
pub(crate) async fn read(
    gateway: &Gateway,
    config: &Config,
    machine: &Machine,
    token: Address,
    owner: Address,
    spender: Option<Address>,
) -> Result<TokenReads, TokenReadError> {
    let timeout = machine
        .limit("rpc_response_timeout_ms")
        .map(Duration::from_millis)
        .ok_or_else(|| TokenReadError::NoTimeout(machine.machine.clone()))?;
    let rpc =
        FailoverRpc::for_chain(gateway, config, BASE, timeout).ok_or(TokenReadError::NoEndpoint)?;
    let provider = rpc.provider();
    let mut reads = TokenReads::default();
    let block = match provider.get_block_number().await {
        Ok(block) => block,
        Err(error) => {
            reads.limitations.push(format!(
                "The eip155:8453 RPC endpoint could not be read ({}); no balance was observed.",
                describe_error(&error)
            ));
            reads.limitations.extend(rpc.retries());
            return Ok(reads);
        }
    };
    reads.block = Some(block);
    let at = BlockId::number(block);
    let erc20 = IERC20Reads::new(token, &provider);
    match erc20.balanceOf(owner).block(at).call().await {
        Ok(v) => reads.balance = Some(v),
        Err(e) => reads.limitations.push(format!(
            "balanceOf(payer) could not be read at block {block}: {}.",
            describe_contract_error(&e)
        )),
    }
    if let Some(spender) = spender {
        match erc20.allowance(owner, spender).block(at).call().await {
            Ok(v) => reads.allowance = Some(v),
            Err(e) => reads.limitations.push(format!(
                "allowance(payer, spender) could not be read at block {block}: {}.",
                describe_contract_error(&e)
            )),
        }
    }
    // A read that needed a second attempt says so.
    reads.limitations.extend(rpc.retries());
    Ok(reads)
}
