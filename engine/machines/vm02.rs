//! VM02 allowance exposure: one ERC-20 allowance against the owner's balance, both read at
//! one block on eip155:8453.
//!
//! Reads (at most 6 RPC methods in 2 HTTP requests): eth_blockNumber, then at that block one
//! JSON-RPC batch of eth_call allowance, balanceOf, decimals, symbol, and eth_getCode. A
//! failing or slow RPC gives a truthful HOLD.

use alloy::eips::BlockId;
use alloy::primitives::{Address, Bytes, U256};
use alloy::providers::{Provider, RootProvider};
use alloy::rpc::client::BatchRequest;
use alloy::rpc::types::TransactionRequest;
use alloy::sol;
use alloy::sol_types::SolCall;
use alloy::transports::TransportError;
use serde::{Deserialize, Serialize};

use super::{Call, CheckFailure, Need, WorkError, limit_ms};
use crate::catalog::manifest::Machine;
use crate::chain::endpoints::FailoverRpc;
use crate::chain::networks::BASE;
use crate::chain::rpc::{ReadFailure, describe_error};
use crate::machines::checks as rc;
use crate::support::evm::AddressText;
use crate::support::units::format_units;

const CHAIN: &str = "eip155:8453";

sol! {
    interface IERC20Metadata {
        function allowance(address owner, address spender) external view returns (uint256);
        function balanceOf(address account) external view returns (uint256);
        function decimals() external view returns (uint8);
        function symbol() external view returns (string);
    }
}

/// VM02 allowance exposure.
pub(crate) struct Vm02;

/// A VM02 request: three EVM addresses as the caller wrote them, each parsed once when the
/// request is read.
#[derive(Debug, Deserialize)]
pub(crate) struct Request {
    /// The token owner.
    pub owner: AddressText,
    /// The ERC-20 contract.
    pub token: AddressText,
    /// The approved spender.
    pub spender: AddressText,
}

impl super::Machine for Vm02 {
    const ID: &'static str = "VM02";
    type Request = Request;
    type Answer = Answer;
    const NEEDS: &'static [Need] = &[Need::Rpc(CHAIN)];

    fn check(_machine: &Machine, request: &Request) -> Result<(), CheckFailure> {
        rc::address_field(&request.owner, "/owner")?;
        rc::token_address_field(&request.token, "/token")?;
        rc::address_field(&request.spender, "/spender")?;
        Ok(())
    }

    async fn observe(call: Call<'_, Request>) -> Result<Answer, WorkError> {
        let (context, machine, request) = call.parts();
        let owner = address_field(&request.owner, "owner")?;
        let token = address_field(&request.token, "token")?;
        let spender = address_field(&request.spender, "spender")?;
        let timeout = limit_ms(machine, "response_timeout_ms")?;
        let rpc = FailoverRpc::for_chain(&context.gateway, &context.config, BASE, timeout)
            .ok_or_else(|| WorkError::NotConfigured("eip155:8453 RPC endpoint".into()))?;
        let mut reads = read_at_one_block(&rpc.provider(), owner, token, spender).await;
        // A read that needed a second attempt says so; its values are still one block's.
        reads.limitations.extend(rpc.retries());
        Ok(respond(machine, request, reads))
    }
}

/// An allowance at or above 2^96-1 (the largest balance a uint96 token can hold) cannot be
/// exhausted by any realistic balance; wallets commonly approve 2^256-1, 2^255 or 2^96-1.
fn effectively_unlimited(allowance: U256) -> bool {
    allowance >= (U256::from(1u8) << 96) - U256::from(1u8)
}

#[derive(Default)]
struct Reads {
    block: Option<u64>,
    allowance: Option<U256>,
    balance: Option<U256>,
    decimals: Option<u8>,
    symbol: Option<String>,
    code_present: Option<bool>,
    limitations: Vec<String>,
}

fn address_field(text: &AddressText, field: &str) -> Result<Address, WorkError> {
    text.parsed().map_err(|_| WorkError::unreadable(field))
}

async fn read_at_one_block(
    provider: &RootProvider,
    owner: Address,
    token: Address,
    spender: Address,
) -> Reads {
    let mut reads = Reads::default();
    let block = match provider.get_block_number().await {
        Ok(block) => block,
        Err(error) => {
            reads.limitations.push(format!(
                "The eip155:8453 RPC endpoint could not be read ({}); no allowance or balance was observed.",
                describe_error(&error)
            ));
            return reads;
        }
    };
    reads.block = Some(block);
    let answers = read_batch(provider, BlockId::number(block), owner, token, spender).await;
    let (allowance, balance, decimals, symbol, code) = match answers {
        Ok(answers) => answers,
        Err(error) => {
            let error = describe_error(&error);
            reads.limitations.push(format!(
                "The reads at block {block} could not be made ({error}); no allowance or balance was observed."
            ));
            return reads;
        }
    };
    if let (Err(first), Err(_), Err(_), Err(_), Err(_)) =
        (&allowance, &balance, &decimals, &symbol, &code)
    {
        // Typically an endpoint that refuses batches (one error object instead of an array):
        // one limitation, not five copies of it.
        reads.limitations.push(format!(
            "The endpoint answered none of the reads batched at block {block} ({first}); no allowance or balance was observed."
        ));
        return reads;
    }
    let mut note = |what: &str, error: ReadFailure| {
        reads.limitations.push(format!(
            "{what} could not be read at block {block}: {error}."
        ));
    };
    match code {
        Ok(present) => reads.code_present = Some(present),
        Err(e) => note("Token code presence", e),
    }
    match allowance {
        Ok(v) => reads.allowance = Some(v),
        Err(e) => note("allowance(owner, spender)", e),
    }
    match balance {
        Ok(v) => reads.balance = Some(v),
        Err(e) => note("balanceOf(owner)", e),
    }
    match decimals {
        Ok(v) => reads.decimals = Some(v),
        Err(e) => note("decimals()", e),
    }
    match symbol {
        Ok(v) => reads.symbol = Some(v),
        Err(e) => note("symbol()", e),
    }
    if reads.code_present == Some(false) {
        reads
            .limitations
            .push(format!("The token address holds no contract code at block {block}; it is not an ERC-20 contract there."));
    }
    reads
}

/// One read of the batch, or why it failed.
type ReadResult<T> = Result<T, ReadFailure>;

/// The five reads at one block, sent as one JSON-RPC batch: one HTTP request instead of five.
/// An `Err` is a failure of the whole batch; each read can still fail on its own.
async fn read_batch(
    provider: &RootProvider,
    at: BlockId,
    owner: Address,
    token: Address,
    spender: Address,
) -> Result<
    (
        ReadResult<U256>,
        ReadResult<U256>,
        ReadResult<u8>,
        ReadResult<String>,
        ReadResult<bool>,
    ),
    TransportError,
> {
    use IERC20Metadata::{allowanceCall, balanceOfCall, decimalsCall, symbolCall};
    let mut batch = BatchRequest::new(provider.client());
    let call = |data: Vec<u8>| {
        let request = TransactionRequest::default().to(token).input(data.into());
        (request, at)
    };
    let allowance = batch.add_call::<_, Bytes>(
        "eth_call",
        &call(allowanceCall { owner, spender }.abi_encode()),
    )?;
    let balance = batch.add_call::<_, Bytes>(
        "eth_call",
        &call(balanceOfCall { account: owner }.abi_encode()),
    )?;
    let decimals = batch.add_call::<_, Bytes>("eth_call", &call(decimalsCall {}.abi_encode()))?;
    let symbol = batch.add_call::<_, Bytes>("eth_call", &call(symbolCall {}.abi_encode()))?;
    let code = batch.add_call::<_, Bytes>("eth_getCode", &(token, at))?;
    batch.send().await?;
    Ok((
        decoded::<allowanceCall>(allowance.await),
        decoded::<balanceOfCall>(balance.await),
        decoded::<decimalsCall>(decimals.await),
        decoded::<symbolCall>(symbol.await),
        code.await
            .map(|code| !code.is_empty())
            .map_err(|e| ReadFailure::from(&e)),
    ))
}

/// One `eth_call` answer decoded as the call's return value, or why it could not be.
fn decoded<C: SolCall>(answer: Result<Bytes, TransportError>) -> ReadResult<C::Return> {
    let data = answer.map_err(|e| ReadFailure::from(&e))?;
    C::abi_decode_returns(&data).map_err(|_| ReadFailure::Undecodable)
}

fn adjusted(raw: Option<U256>, decimals: Option<u8>) -> Option<String> {
    match (raw, decimals) {
        (Some(raw), Some(decimals)) => Some(format_units(raw, u32::from(decimals))),
        _ => None,
    }
}

/// The limitation that says which forced booleans are defaults, not observations, because
/// the read they derive from did not happen (the schema forbids null for them).
fn unassessed_flags(reads: &Reads) -> Option<&'static str> {
    match (reads.allowance, reads.balance) {
        (None, _) => Some(
            "The allowance was not read, so allowance_covers_current_balance, max_uint256_approval and effectively_unlimited are false by default: not assessed, not observed.",
        ),
        (Some(_), None) => Some(
            "The balance was not read, so allowance_covers_current_balance is false by default: not assessed, not observed.",
        ),
        _ => None,
    }
}

/// VM02's answer, in the order of its output schema's example. Built as a struct: the answer
/// of every paid call, and a `Value` built key by key cost ≈ 45k instructions more to build,
/// serialize and drop.
#[derive(Debug, Serialize)]
pub(crate) struct Answer {
    status: &'static str,
    machine: &'static str,
    methodology_version: &'static str,
    network: &'static str,
    block_number: Option<String>,
    owner: AddressText,
    token: AddressText,
    spender: AddressText,
    token_metadata: TokenMetadata,
    allowance_raw: Option<String>,
    allowance_adjusted: Option<String>,
    balance_raw: Option<String>,
    balance_adjusted: Option<String>,
    allowance_balance_exposure_raw: Option<String>,
    allowance_balance_exposure_adjusted: Option<String>,
    allowance_covers_current_balance: bool,
    max_uint256_approval: bool,
    effectively_unlimited: bool,
    evidence: Evidence,
    limitations: Vec<String>,
}

/// The token's symbol and decimals, as read.
#[derive(Debug, Serialize)]
struct TokenMetadata {
    symbol: Option<String>,
    decimals: Option<u8>,
}

/// How the reads were made.
#[derive(Debug, Serialize)]
struct Evidence {
    block_number: Option<String>,
    same_block_reads: bool,
    token_code_present: Option<bool>,
}

fn respond(machine: &'static Machine, request: &Request, mut reads: Reads) -> Answer {
    if let Some(limitation) = unassessed_flags(&reads) {
        reads.limitations.push(limitation.to_string());
    }
    let both = reads.allowance.zip(reads.balance);
    let status = if both.is_some() && reads.code_present == Some(true) {
        "OK"
    } else {
        "HOLD"
    };
    let exposure = both.map(|(allowance, balance)| allowance.min(balance));
    let block = reads.block.map(|b| b.to_string());
    let raw = |v: Option<U256>| v.map(|v| v.to_string());
    Answer {
        status,
        machine: &machine.machine,
        methodology_version: &machine.methodology_version,
        network: CHAIN,
        block_number: block.clone(),
        owner: request.owner.clone(),
        token: request.token.clone(),
        spender: request.spender.clone(),
        allowance_raw: raw(reads.allowance),
        allowance_adjusted: adjusted(reads.allowance, reads.decimals),
        balance_raw: raw(reads.balance),
        balance_adjusted: adjusted(reads.balance, reads.decimals),
        allowance_balance_exposure_raw: raw(exposure),
        allowance_balance_exposure_adjusted: adjusted(exposure, reads.decimals),
        allowance_covers_current_balance: both.is_some_and(|(a, b)| a >= b),
        max_uint256_approval: reads.allowance == Some(U256::MAX),
        effectively_unlimited: reads.allowance.is_some_and(effectively_unlimited),
        token_metadata: TokenMetadata {
            symbol: reads.symbol,
            decimals: reads.decimals,
        },
        evidence: Evidence {
            block_number: block,
            same_block_reads: both.is_some(),
            token_code_present: reads.code_present,
        },
        limitations: reads.limitations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::embedded::MANIFEST;
    use crate::catalog::manifest::compile_schema;
    use serde_json::Value;

    fn keys(value: &Value) -> Vec<&String> {
        value
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default()
    }

    #[test]
    fn the_answer_keeps_the_output_examples_order_and_meets_its_schema() {
        let spec = MANIFEST.machine("VM02").expect("VM02");
        let request: Request =
            serde_json::from_value(spec.input_example.clone()).expect("the input example");
        let schema = compile_schema(&spec.output_schema).expect("the output schema");
        let read = Reads {
            block: Some(31_000_000),
            allowance: Some(U256::MAX),
            balance: Some(U256::from(2_500_000u64)),
            decimals: Some(6),
            symbol: Some("USDC".into()),
            code_present: Some(true),
            limitations: Vec::new(),
        };
        let unread = Reads {
            limitations: vec!["the RPC endpoint did not answer".into()],
            ..Reads::default()
        };
        for (reads, status) in [(read, "OK"), (unread, "HOLD")] {
            let answer = serde_json::to_value(respond(spec, &request, reads)).expect("serializes");
            assert_eq!(answer["status"], status);
            assert_eq!(keys(&answer), keys(&spec.output_example));
            for nested in ["token_metadata", "evidence"] {
                assert_eq!(keys(&answer[nested]), keys(&spec.output_example[nested]));
            }
            let errors: Vec<String> = schema.iter_errors(&answer).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{status}: {errors:?}");
        }
    }

    #[test]
    fn unlimited_threshold_is_uint96_max() {
        let uint96_max = (U256::from(1u8) << 96) - U256::from(1u8);
        assert!(effectively_unlimited(uint96_max));
        assert!(effectively_unlimited(U256::MAX));
        assert!(!effectively_unlimited(uint96_max - U256::from(1u8)));
    }
}
