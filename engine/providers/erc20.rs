//! Same-block ERC-20 reads for many tokens in one `eth_call`: `balanceOf(owner)`, `decimals()`
//! and `symbol()` of each token through Multicall3 `aggregate3` (failures allowed per call),
//! pinned to an explicit block so every balance and every piece of metadata describes that
//! block.

use alloy::eips::BlockId;
use alloy::primitives::{Address, Bytes, U256};
use alloy::providers::RootProvider;
use alloy::sol;
use alloy::sol_types::SolCall;

use crate::chain::rpc::describe_contract_error;

sol! {
    #[sol(rpc)]
    interface IMulticall3 {
        struct Call3 {
            address target;
            bool allowFailure;
            bytes callData;
        }

        struct Result {
            bool success;
            bytes returnData;
        }

        function aggregate3(Call3[] calldata calls) external payable returns (Result[] memory returnData);
    }

    interface IERC20Read {
        function balanceOf(address account) external view returns (uint256);
        function decimals() external view returns (uint8);
        function symbol() external view returns (string);
    }
}

/// What one token answered at the block; None where its call failed or returned nothing
/// decodable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TokenRead {
    pub balance: Option<U256>,
    pub decimals: Option<u8>,
    pub symbol: Option<String>,
}

/// Why the token reads failed as a whole (never naming the URL).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReadError {
    /// The Multicall3 `eth_call` failed.
    #[error("{0}")]
    Call(String),
    /// Multicall3 answered another number of results than calls were made.
    #[error("Multicall3 answered {answered} results for {asked} calls")]
    Count { answered: usize, asked: usize },
}

/// Reads every token at `block` in one `eth_call`.
pub(crate) async fn read_at_block(
    rpc: &RootProvider,
    multicall: Address,
    owner: Address,
    tokens: &[Address],
    block: u64,
) -> Result<Vec<TokenRead>, ReadError> {
    if tokens.is_empty() {
        return Ok(Vec::new());
    }
    let call = |target: Address, data: Vec<u8>| IMulticall3::Call3 {
        target,
        allowFailure: true,
        callData: Bytes::from(data),
    };
    let calls: Vec<IMulticall3::Call3> = tokens
        .iter()
        .flat_map(|token| {
            [
                call(
                    *token,
                    IERC20Read::balanceOfCall { account: owner }.abi_encode(),
                ),
                call(*token, IERC20Read::decimalsCall {}.abi_encode()),
                call(*token, IERC20Read::symbolCall {}.abi_encode()),
            ]
        })
        .collect();
    let results = IMulticall3::new(multicall, rpc)
        .aggregate3(calls)
        .block(BlockId::number(block))
        .call()
        .await
        .map_err(|e| ReadError::Call(describe_contract_error(&e)))?;
    if results.len() != tokens.len() * 3 {
        return Err(ReadError::Count {
            answered: results.len(),
            asked: tokens.len() * 3,
        });
    }
    Ok(results.chunks(3).map(decode_token).collect())
}

fn returned(result: &IMulticall3::Result) -> Option<&[u8]> {
    (result.success && !result.returnData.is_empty()).then_some(result.returnData.as_ref())
}

fn decode_token(results: &[IMulticall3::Result]) -> TokenRead {
    let balance =
        returned(&results[0]).and_then(|d| IERC20Read::balanceOfCall::abi_decode_returns(d).ok());
    let decimals =
        returned(&results[1]).and_then(|d| IERC20Read::decimalsCall::abi_decode_returns(d).ok());
    let symbol = returned(&results[2]).and_then(decode_symbol);
    TokenRead {
        balance,
        decimals,
        symbol,
    }
}

/// `symbol()` as a string, or as the bytes32 some early tokens return.
fn decode_symbol(data: &[u8]) -> Option<String> {
    let text = match IERC20Read::symbolCall::abi_decode_returns(data) {
        Ok(text) => text,
        Err(_) if data.len() == 32 => {
            let end = data.iter().position(|b| *b == 0).unwrap_or(32);
            String::from_utf8(data[..end].to_vec()).ok()?
        }
        Err(_) => return None,
    };
    let clean = crate::net::upstream::printable(&text, 32);
    (!clean.is_empty()).then_some(clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_decode_as_string_or_bytes32() {
        let encoded = <alloy::sol_types::sol_data::String as alloy::sol_types::SolType>::abi_encode(
            &"USDC".to_string(),
        );
        assert_eq!(decode_symbol(&encoded), Some("USDC".into()));
        let mut word = [0u8; 32];
        word[..3].copy_from_slice(b"MKR");
        assert_eq!(decode_symbol(&word), Some("MKR".into()));
        assert_eq!(decode_symbol(&[0u8; 32]), None);
        assert_eq!(decode_symbol(&[1, 2, 3]), None);
    }
}
