//! Same-block ERC-20 reads for the x402 machines (VM09 balance; VM10 balance and the
//! canonical spender allowance): the block number first, then every call pinned to it.

use std::time::Duration;

use alloy::eips::BlockId;
use alloy::primitives::{Address, U256};
use alloy::providers::Provider;
use alloy::sol;

use crate::catalog::manifest::Machine;
use crate::chain::rpc::{CountedRpc, describe_error};
use crate::machines::{WorkContext, WorkError};

/// The only chain the x402 machines read.
pub const CHAIN: &str = "eip155:8453";

sol! {
    #[sol(rpc)]
    interface IERC20Reads {
        function allowance(address owner, address spender) external view returns (uint256);
        function balanceOf(address account) external view returns (uint256);
    }
}

/// What was read; a failed read is None with a limitation.
#[derive(Debug, Clone, Default)]
pub struct TokenReads {
    pub block: Option<u64>,
    pub balance: Option<U256>,
    pub allowance: Option<U256>,
    pub limitations: Vec<String>,
}

/// Reads `balanceOf(owner)` and, when a spender is given, `allowance(owner, spender)` of
/// `token` at one block.
pub async fn read(
    context: &WorkContext,
    machine: &Machine,
    token: Address,
    owner: Address,
    spender: Option<Address>,
) -> Result<TokenReads, WorkError> {
    let url = context
        .rpc_url(CHAIN)
        .ok_or_else(|| WorkError::Internal("no eip155:8453 RPC endpoint".into()))?;
    let timeout = machine
        .limit("rpc_response_timeout_ms")
        .map(Duration::from_millis)
        .ok_or_else(|| {
            WorkError::Internal(format!(
                "{} has no rpc_response_timeout_ms",
                machine.machine
            ))
        })?;
    let provider = CountedRpc::new(context.gateway.clone(), url, timeout).provider();
    let mut reads = TokenReads::default();
    let block = match provider.get_block_number().await {
        Ok(block) => block,
        Err(error) => {
            reads.limitations.push(format!(
                "The eip155:8453 RPC endpoint could not be read ({}); no balance was observed.",
                describe_error(&error)
            ));
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
            contract_error(&e)
        )),
    }
    if let Some(spender) = spender {
        match erc20.allowance(owner, spender).block(at).call().await {
            Ok(v) => reads.allowance = Some(v),
            Err(e) => reads.limitations.push(format!(
                "allowance(payer, spender) could not be read at block {block}: {}.",
                contract_error(&e)
            )),
        }
    }
    Ok(reads)
}

fn contract_error(error: &alloy::contract::Error) -> String {
    match error {
        alloy::contract::Error::TransportError(e) => describe_error(e),
        alloy::contract::Error::AbiError(_) | alloy::contract::Error::ZeroData(..) => {
            "the call returned no decodable value".to_string()
        }
        _ => "the call failed".to_string(),
    }
}
