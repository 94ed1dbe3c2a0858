//! What the chain says about one EIP-3009 payment authorization, read only.
//!
//! EIP-3009 keeps one used-flag per `(authorizer, nonce)`, and `AuthorizationUsed` is emitted
//! by *whichever* authorization with that nonce runs first, whatever its `to` and `value`. So
//! the flag and the event prove only that the nonce is spent. A payment to us is proven by the
//! receipt: our `AuthorizationUsed(payer, nonce)` log **immediately followed** (log index + 1)
//! by `Transfer(payer → pay_to, value)`, both emitted by the asset ([`judge_logs`]).
//!
//! Reads stay within what common providers allow: a transaction's receipt when we know its
//! hash; `authorizationState` at a pinned block number (a node that lags errors rather than
//! answering about another block); and only when the flag reads used, an `eth_getLogs` search
//! bounded by time, in windows of at most `max_log_blocks`, halved when a provider refuses a
//! range. An empty search while the flag reads used is "not found yet", never "absent". A
//! settle refused for the payer's funds also searches where the payer's funds went meanwhile.
//!
//! Nothing here signs or sends a transaction.

use std::ops::ControlFlow;
use std::time::Duration;

use alloy::eips::{BlockId, BlockNumberOrTag};
use alloy::network::Ethereum;
use alloy::primitives::{Address, B256, U256};
use alloy::providers::{Provider, RootProvider};
use alloy::rpc::types::{Filter, Log};
use alloy::sol;
use alloy::sol_types::SolEvent;
use alloy::transports::TransportError;

use crate::chain::endpoints::{Endpoint, EndpointSet, FailoverRpc};
use crate::chain::networks::BASE;
use crate::chain::rpc::{describe_contract_error, describe_error, refuses_range};
use crate::config::{Config, Secret};
use crate::net::gateway::Gateway;

sol! {
    #[sol(rpc)]
    interface IEip3009State {
        function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);
        event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);
        event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce);
        event Transfer(address indexed from, address indexed to, uint256 value);
        function balanceOf(address account) external view returns (uint256);
    }
}

/// The terms one payment row promised: what a transfer must match to prove it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentTerms {
    /// The asset contract (emits every log we accept).
    pub asset: Address,
    /// The authorizer (`authorization.from`).
    pub payer: Address,
    /// Who must receive the value: the row's payTo, never today's configuration.
    pub pay_to: Address,
    /// The value the authorization moves.
    pub value: U256,
    /// The EIP-3009 nonce.
    pub nonce: B256,
}

/// What one transaction's receipt says about a payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiptVerdict {
    /// Our authorization ran and moved exactly the terms: paid.
    Paid {
        /// The transaction.
        transaction: String,
        /// The log index of the proving `Transfer` (unique per transaction).
        transfer_log_index: u64,
    },
    /// The nonce was spent by another authorization (another `to` or `value`), or cancelled:
    /// nothing was paid to us, and nothing ever will be with this authorization.
    Burned {
        /// The transaction that spent the nonce.
        transaction: String,
        /// What the receipt showed.
        how: String,
    },
    /// The receipt does not touch this authorization (reverted, or about something else).
    Unrelated,
}

/// Where a search of a payer's transfers starts: its first block, and the payer's balance
/// just before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowStart {
    /// The first block searched.
    pub block: u64,
    /// The payer's balance at the end of the block before it.
    pub balance: U256,
}

/// What moved a payer's balance over a block range, as the node's log index shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flows {
    /// The payer's balance just before the range.
    pub before: U256,
    /// Everything the payer sent to others.
    pub sent: U256,
    /// Everything the payer received from others.
    pub received: U256,
    /// Of what was sent, what went to the payment's `pay_to`.
    pub to_us: U256,
}

impl Flows {
    /// Whether these logs account for `balance` at the range's end to the unit: a token's
    /// balance moves only by its `Transfer`s (mints and burns included), so a log index that
    /// misses any of the range's transfers (one behind a load balancer answers `[]` for the
    /// blocks it has not indexed) does not.
    pub fn account_for(&self, balance: U256) -> bool {
        let came = self.before.checked_add(self.received);
        matches!((came, balance.checked_add(self.sent)), (Some(came), Some(went)) if came == went)
    }
}

/// The used-flag of an authorization at one pinned block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateReading {
    /// The block read at.
    pub block: u64,
    /// That block's timestamp (unix seconds): the chain's "now".
    pub timestamp: u64,
    /// `authorizationState(payer, nonce)`: true once used *or* cancelled.
    pub used: bool,
}

/// A chain read that failed; the message never holds the RPC URL.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ChainReadError(String);

impl ChainReadError {
    fn rpc(error: &TransportError) -> Self {
        ChainReadError(describe_error(error))
    }
}

/// How far behind ours the facilitator's view of the chain may be when it checks a balance
/// at `/verify`: a few Base blocks.
const VERIFY_LAG_SECONDS: u64 = 6;

/// The most `Transfer` logs that move funds (a value, between the payer and another) one
/// search of a payer's transfers reads: a wallet that moves funds more often than this within
/// seconds is not a buyer we can judge, and is not struck. Zero-value logs, which anyone can
/// emit to any address, do not count.
const MAX_FLOW_LOGS: usize = 10_000;

/// The smallest log window we shrink to before calling a refusal an error.
const MIN_LOG_WINDOW: u64 = 1;
/// How far before the reserve time the search starts: the nonce may be spent between
/// `/verify` and the reserve, and the facilitator's view of the chain may lag ours.
const SEARCH_MARGIN_SECONDS: u64 = 60;

/// Reads authorizations through the configured eip155:8453 RPC endpoints (failing over one
/// at a time, only through endpoints that have answered `eth_chainId` 8453).
#[derive(Debug, Clone)]
pub struct AuthorizationReader {
    provider: RootProvider<Ethereum>,
    rpc: FailoverRpc,
    max_log_blocks: u64,
}

impl AuthorizationReader {
    /// A reader of one endpoint (`rpc_url_eip155_8453`) over the counted gateway; each RPC
    /// answer is bounded by `response_timeout`, and no `eth_getLogs` spans more than
    /// `max_log_blocks` blocks.
    pub fn new(
        gateway: Gateway,
        rpc_url: &Secret,
        response_timeout: Duration,
        max_log_blocks: u64,
    ) -> Self {
        let set = std::sync::Arc::new(EndpointSet {
            chain: BASE,
            endpoints: vec![Endpoint::configured(
                "rpc_url_eip155_8453",
                "eip155:8453#1",
                rpc_url,
            )],
        });
        Self::over(
            FailoverRpc::verified_only(gateway, set, response_timeout),
            max_log_blocks,
        )
    }

    /// A reader of every configured eip155:8453 endpoint; None when none is configured.
    pub fn from_config(
        gateway: Gateway,
        config: &Config,
        response_timeout: Duration,
    ) -> Option<Self> {
        let set = EndpointSet::rpc(config, BASE);
        if set.is_empty() {
            return None;
        }
        let rpc = FailoverRpc::verified_only(gateway, set, response_timeout);
        Some(Self::over(rpc, config.rpc_max_log_blocks))
    }

    fn over(rpc: FailoverRpc, max_log_blocks: u64) -> Self {
        AuthorizationReader {
            provider: rpc.provider(),
            rpc,
            max_log_blocks: max_log_blocks.max(MIN_LOG_WINDOW),
        }
    }

    /// Whether this reader's answers can be trusted: some endpoint has answered
    /// `eth_chainId` 8453 (start-up or readiness check). Without a trusted reader nothing
    /// may be concluded "unpaid" from the chain.
    pub fn trusted(&self) -> bool {
        self.rpc.endpoints().verified()
    }

    /// Asks each endpoint for `eth_chainId` now (a command that did not start the server).
    pub async fn verify_identity(&self, gateway: &Gateway, timeout: Duration) {
        self.rpc.endpoints().verify_identity(gateway, timeout).await;
    }

    /// The latest block's number and timestamp.
    pub async fn latest(&self) -> Result<(u64, u64), ChainReadError> {
        self.block(BlockNumberOrTag::Latest).await
    }

    async fn block(&self, at: BlockNumberOrTag) -> Result<(u64, u64), ChainReadError> {
        let block = self
            .provider
            .get_block(BlockId::Number(at))
            .await
            .map_err(|e| ChainReadError::rpc(&e))?
            .ok_or_else(|| ChainReadError(format!("the RPC endpoint has no block {at}")))?;
        Ok((block.header.number, block.header.timestamp))
    }

    /// `authorizationState(payer, nonce)` at the latest block, pinned by number.
    pub async fn state(&self, terms: &PaymentTerms) -> Result<StateReading, ChainReadError> {
        let (block, timestamp) = self.latest().await?;
        let used = IEip3009State::new(terms.asset, &self.provider)
            .authorizationState(terms.payer, terms.nonce)
            .block(BlockId::number(block))
            .call()
            .await
            .map_err(|e| {
                let why = describe_contract_error(&e);
                ChainReadError(format!("authorizationState could not be read: {why}"))
            })?;
        Ok(StateReading {
            block,
            timestamp,
            used,
        })
    }

    /// The payer's balance of the asset at `block`: whether the node read at that block has
    /// seen the funds a facilitator says are gone.
    pub async fn payer_balance(
        &self,
        terms: &PaymentTerms,
        block: u64,
    ) -> Result<U256, ChainReadError> {
        IEip3009State::new(terms.asset, &self.provider)
            .balanceOf(terms.payer)
            .block(BlockId::number(block))
            .call()
            .await
            .map_err(|e| {
                let why = describe_contract_error(&e);
                ChainReadError(format!("balanceOf could not be read: {why}"))
            })
    }

    /// What a transaction's receipt says about the payment; None while it has no receipt
    /// (not mined yet, dropped, or replaced).
    pub async fn receipt(
        &self,
        transaction: B256,
        terms: &PaymentTerms,
    ) -> Result<Option<ReceiptVerdict>, ChainReadError> {
        let receipt = self
            .provider
            .get_transaction_receipt(transaction)
            .await
            .map_err(|e| ChainReadError::rpc(&e))?;
        Ok(receipt.map(|receipt| {
            let logs = receipt.inner.logs();
            judge_logs(logs, terms, &transaction.to_string())
        }))
    }

    /// Searches the event that spent the nonce, from just before `since` (unix seconds, the
    /// reserve time) to `until_block`, and judges that transaction's receipt. None when no
    /// event was found: with the flag used, that means "not found yet", never "absent".
    pub async fn find_spender(
        &self,
        terms: &PaymentTerms,
        since: u64,
        until_block: u64,
    ) -> Result<Option<ReceiptVerdict>, ChainReadError> {
        let events = vec![
            IEip3009State::AuthorizationUsed::SIGNATURE_HASH,
            IEip3009State::AuthorizationCanceled::SIGNATURE_HASH,
        ];
        let filter = Filter::new()
            .address(terms.asset)
            .event_signature(events)
            .topic1(terms.payer.into_word())
            .topic2(terms.nonce);
        let time = since.saturating_sub(SEARCH_MARGIN_SECONDS);
        let start = self.block_at_or_before(time, until_block).await?;
        let mut first = Vec::new();
        self.each_window(&filter, start, until_block, |logs| {
            first = logs;
            if first.is_empty() {
                ControlFlow::Continue(())
            } else {
                ControlFlow::Break(())
            }
        })
        .await?;
        let Some(hash) = first.first().and_then(|log| log.transaction_hash) else {
            return Ok(None);
        };
        self.receipt(hash, terms).await
    }

    /// Where a search of the payer's transfers up to `until_block` starts: a few blocks
    /// before `since` (unix seconds: when the call's `/verify` was sent), so that it holds
    /// every transfer from the moment the facilitator checked the balance.
    pub async fn flow_start(
        &self,
        terms: &PaymentTerms,
        since: u64,
        until_block: u64,
    ) -> Result<FlowStart, ChainReadError> {
        let time = since.saturating_sub(VERIFY_LAG_SECONDS);
        let block = self.block_at_or_before(time, until_block).await?;
        let balance = match block.checked_sub(1) {
            Some(before) => self.payer_balance(terms, before).await?,
            None => U256::ZERO,
        };
        Ok(FlowStart { block, balance })
    }

    /// What moved the payer's balance from `start` to `until_block`: the asset's `Transfer`
    /// logs from them and to them, summed (at most [`MAX_FLOW_LOGS`] of them). Transfers to
    /// themselves move nothing and count in neither sum.
    pub async fn flows(
        &self,
        terms: &PaymentTerms,
        start: &FlowStart,
        until_block: u64,
    ) -> Result<Flows, ChainReadError> {
        let transfers = Filter::new()
            .address(terms.asset)
            .event_signature(IEip3009State::Transfer::SIGNATURE_HASH);
        let mut flows = Flows {
            before: start.balance,
            ..Flows::default()
        };
        let mut left = MAX_FLOW_LOGS;
        let from_payer = transfers.clone().topic1(terms.payer.into_word());
        self.each_transfer(
            &from_payer,
            terms.asset,
            (start.block, until_block),
            &mut left,
            // A node's answer is held to the filter it was asked.
            |from, to, value| {
                if from == terms.payer {
                    flows.sent = flows.sent.saturating_add(value);
                }
                if from == terms.payer && to == terms.pay_to {
                    flows.to_us = flows.to_us.saturating_add(value);
                }
            },
        )
        .await?;
        let to_payer = transfers.topic2(terms.payer.into_word());
        self.each_transfer(
            &to_payer,
            terms.asset,
            (start.block, until_block),
            &mut left,
            |_, to, value| {
                if to == terms.payer {
                    flows.received = flows.received.saturating_add(value);
                }
            },
        )
        .await?;
        Ok(flows)
    }

    /// Hands `take` each `Transfer` of `asset` that `filter` matches in `blocks` and that moves
    /// funds (a value, between two addresses), at most `left` of them: more is an error.
    async fn each_transfer(
        &self,
        filter: &Filter,
        asset: Address,
        (from, to): (u64, u64),
        left: &mut usize,
        mut take: impl FnMut(Address, Address, U256),
    ) -> Result<(), ChainReadError> {
        let mut too_many = false;
        self.each_window(filter, from, to, |logs| {
            let moving = logs
                .iter()
                .filter_map(|log| transfer_of(log, asset))
                .filter(|(from, to, value, _)| from != to && !value.is_zero());
            for (from, to, value, _) in moving {
                if *left == 0 {
                    too_many = true;
                    return ControlFlow::Break(());
                }
                *left -= 1;
                take(from, to, value);
            }
            ControlFlow::Continue(())
        })
        .await?;
        if too_many {
            return Err(ChainReadError(format!(
                "more than {MAX_FLOW_LOGS} transfers moving the payer's funds in the search"
            )));
        }
        Ok(())
    }

    /// Hands the logs `filter` matches in `[from, to]` to `visit`, window by window, in
    /// windows the provider accepts, until `visit` breaks or the range ends.
    async fn each_window(
        &self,
        filter: &Filter,
        from: u64,
        to: u64,
        mut visit: impl FnMut(Vec<Log>) -> ControlFlow<()>,
    ) -> Result<(), ChainReadError> {
        let mut window = self.max_log_blocks;
        let mut start = from;
        while start <= to {
            let end = to.min(start.saturating_add(window - 1));
            let filter = filter.clone().from_block(start).to_block(end);
            match self.provider.get_logs(&filter).await {
                Ok(logs) => {
                    if visit(logs).is_break() {
                        break;
                    }
                    start = end + 1;
                }
                // A provider refuses a range it finds too wide (an error answer, or QuickNode's
                // HTTP 413): narrower.
                Err(error) if window > MIN_LOG_WINDOW && refuses_range(&error) => {
                    window = window.div_ceil(2);
                }
                Err(error) => return Err(ChainReadError::rpc(&error)),
            }
        }
        Ok(())
    }

    /// The last block whose timestamp is at or before `time`, at or below `latest`: a few
    /// block reads, stepping back exponentially, then bisecting.
    async fn block_at_or_before(&self, time: u64, latest: u64) -> Result<u64, ChainReadError> {
        let mut high = latest;
        let mut step = 16u64;
        let mut low = loop {
            let candidate = high.saturating_sub(step);
            let (_, timestamp) = self.block(BlockNumberOrTag::Number(candidate)).await?;
            if timestamp <= time || candidate == 0 {
                break candidate;
            }
            high = candidate;
            step = step.saturating_mul(4);
        };
        while high - low > 1 {
            let middle = low + (high - low) / 2;
            let (_, timestamp) = self.block(BlockNumberOrTag::Number(middle)).await?;
            if timestamp <= time {
                low = middle;
            } else {
                high = middle;
            }
        }
        Ok(low)
    }
}

/// The proof rule over one receipt's logs: our `AuthorizationUsed(payer, nonce)` must be
/// followed, at the next log index, by `Transfer(payer → pay_to, value)`, both from the
/// asset. Anything else that spent the nonce burned it.
pub(crate) fn judge_logs(logs: &[Log], terms: &PaymentTerms, transaction: &str) -> ReceiptVerdict {
    let ours = |log: &&Log| {
        log.inner.address == terms.asset
            && log.inner.data.topics().get(1) == Some(&terms.payer.into_word())
            && log.inner.data.topics().get(2) == Some(&terms.nonce)
    };
    let topic0 = |log: &Log| log.inner.data.topics().first().copied();
    let canceled = logs
        .iter()
        .filter(ours)
        .find(|log| topic0(log) == Some(IEip3009State::AuthorizationCanceled::SIGNATURE_HASH));
    if canceled.is_some() {
        return ReceiptVerdict::Burned {
            transaction: transaction.to_string(),
            how: "AuthorizationCanceled: the payer cancelled the authorization".into(),
        };
    }
    let Some(used) = logs
        .iter()
        .filter(ours)
        .find(|log| topic0(log) == Some(IEip3009State::AuthorizationUsed::SIGNATURE_HASH))
    else {
        return ReceiptVerdict::Unrelated;
    };
    let next = used
        .log_index
        .and_then(|index| logs.iter().find(|log| log.log_index == Some(index + 1)));
    match next.and_then(|log| transfer_of(log, terms.asset)) {
        Some((from, to, value, index))
            if from == terms.payer && to == terms.pay_to && value == terms.value =>
        {
            ReceiptVerdict::Paid {
                transaction: transaction.to_string(),
                transfer_log_index: index,
            }
        }
        Some((from, to, value, index)) => ReceiptVerdict::Burned {
            transaction: transaction.to_string(),
            how: format!(
                "AuthorizationUsed followed by Transfer {from} -> {to} of {value} (log {index}), not the payment's terms"
            ),
        },
        None => ReceiptVerdict::Burned {
            transaction: transaction.to_string(),
            how: "AuthorizationUsed without the Transfer of the payment at the next log index"
                .into(),
        },
    }
}

/// A `Transfer` log of `asset`, decoded: (from, to, value, log index).
fn transfer_of(log: &Log, asset: Address) -> Option<(Address, Address, U256, u64)> {
    if log.inner.address != asset {
        return None;
    }
    let decoded = IEip3009State::Transfer::decode_raw_log(
        log.inner.data.topics().iter().copied(),
        &log.inner.data.data,
    )
    .ok()?;
    Some((decoded.from, decoded.to, decoded.value, log.log_index?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::{LogData, address, b256};
    use alloy::transports::{RpcError, TransportErrorKind};

    const ASSET: Address = address!("833589fCD6eDb6E08f4c7C32D4f71b54bdA02913");
    const PAYER: Address = address!("70997970C51812dc3A010C7d01b50e0d17dc79C8");
    const PAY_TO: Address = address!("3C44CdDdB6a900fa2b585dd299e03d12FA4293BC");
    const NONCE: B256 = b256!("1111111111111111111111111111111111111111111111111111111111111111");
    const OTHER_NONCE: B256 =
        b256!("2222222222222222222222222222222222222222222222222222222222222222");

    #[test]
    fn flows_account_for_a_balance_only_to_the_unit() {
        let flows = |sent: u64, received: u64| Flows {
            before: U256::from(5u64),
            sent: U256::from(sent),
            received: U256::from(received),
            to_us: U256::ZERO,
        };
        // 5 held, 3 received, 8 sent: 0 left.
        assert!(flows(8, 3).account_for(U256::ZERO));
        // A transfer the log index has not shown yet: 1 is left unexplained.
        assert!(!flows(7, 3).account_for(U256::ZERO));
        assert!(!flows(8, 3).account_for(U256::from(1u64)));
        // Sums past the word's end account for nothing.
        let full = Flows {
            before: U256::MAX,
            received: U256::from(1u64),
            ..Flows::default()
        };
        assert!(!full.account_for(U256::MAX));
        let both = Flows {
            sent: U256::from(1u64),
            ..full
        };
        assert!(!both.account_for(U256::MAX));
    }

    #[test]
    fn only_a_refused_range_narrows_an_event_search() {
        let answer = |code: i64, message: &str| {
            RpcError::ErrorResp(alloy::rpc::json_rpc::ErrorPayload {
                code,
                message: message.to_string().into(),
                data: None,
            })
        };
        let http = |status: u16, body: &str| {
            RpcError::Transport(TransportErrorKind::HttpError(
                alloy::transports::HttpError {
                    status,
                    body: body.into(),
                },
            ))
        };
        let alchemy = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"You can make eth_getLogs requests with up to a 10 block range."}}"#;
        let refusals = [
            http(400, alchemy),
            http(413, ""),
            answer(-32614, "eth_getLogs is limited to a 10,000 range"),
            answer(-32602, "range 20000 exceeds limit of 10000"),
            answer(-32005, "query returned more than 10000 results"),
            answer(-32005, "query timeout exceeded"),
            answer(-32000, "limit exceeded"),
            // Tenderly: the range is in `data` only.
            answer(-32602, "invalid params"),
            // dRPC's free tier.
            answer(35, "ranges over 10000 blocks are not supported on freetier"),
        ];
        for refusal in &refusals {
            assert!(refuses_range(refusal), "{refusal}");
        }
        // An HTTP error body is kept to its first 512 bytes: this one's message is past them.
        let long = format!(
            r#"{{"jsonrpc":"2.0","id":1,"error":{{"code":-32000,"data":"{}","message":"rate limited"}}}}"#,
            "x".repeat(600)
        );
        let cut_before_its_message = long[..512].to_string();
        let failures = [
            answer(-32005, "daily request count exceeded, request rate limited"),
            answer(-32005, "rate limit: more than 100 requests per second"),
            answer(429, "Too Many Requests"),
            answer(
                -32601,
                "the method eth_getLogs does not exist/is not available",
            ),
            answer(
                -32000,
                "runtime error: index out of range [3] with length 3",
            ),
            answer(-32000, "block range extends beyond current head block"),
            answer(-32601, "Method not available"),
            answer(-32005, "project ID request rate exceeded"),
            answer(-32001, "Unauthorized: invalid API key"),
            http(
                400,
                r#"{"error":{"code":-32005,"message":"monthly capacity exceeded"}}"#,
            ),
            http(400, &cut_before_its_message),
            http(400, "Bad Request"),
            http(400, "<html><body>400 Bad Request</body></html>"),
            http(500, "{}"),
        ];
        for failure in &failures {
            assert!(!refuses_range(failure), "{failure}");
        }
    }

    fn terms(nonce: B256) -> PaymentTerms {
        PaymentTerms {
            asset: ASSET,
            payer: PAYER,
            pay_to: PAY_TO,
            value: U256::from(10_000u64),
            nonce,
        }
    }

    fn log(index: u64, topics: Vec<B256>, data: Vec<u8>) -> Log {
        Log {
            inner: alloy::primitives::Log {
                address: ASSET,
                data: LogData::new_unchecked(topics, data.into()),
            },
            log_index: Some(index),
            ..Default::default()
        }
    }

    fn used(index: u64, nonce: B256) -> Log {
        let event = IEip3009State::AuthorizationUsed::SIGNATURE_HASH;
        log(index, vec![event, PAYER.into_word(), nonce], vec![])
    }

    fn transfer(index: u64, to: Address, value: u64) -> Log {
        let event = IEip3009State::Transfer::SIGNATURE_HASH;
        let data = U256::from(value).to_be_bytes::<32>().to_vec();
        log(index, vec![event, PAYER.into_word(), to.into_word()], data)
    }

    #[test]
    fn the_transfer_right_after_our_authorization_proves_the_payment() {
        let logs = [used(4, NONCE), transfer(5, PAY_TO, 10_000)];
        assert_eq!(
            judge_logs(&logs, &terms(NONCE), "0xt"),
            ReceiptVerdict::Paid {
                transaction: "0xt".into(),
                transfer_log_index: 5
            }
        );
    }

    #[test]
    fn another_authorization_with_our_nonce_burns_it_even_beside_a_real_payment() {
        // One transaction: our nonce spent by a zero-value self-transfer, then another
        // authorization that does pay us. Only the second one's row is proven.
        let logs = [
            used(0, NONCE),
            transfer(1, PAYER, 0),
            used(2, OTHER_NONCE),
            transfer(3, PAY_TO, 10_000),
        ];
        assert!(matches!(
            judge_logs(&logs, &terms(NONCE), "0xt"),
            ReceiptVerdict::Burned { .. }
        ));
        assert_eq!(
            judge_logs(&logs, &terms(OTHER_NONCE), "0xt"),
            ReceiptVerdict::Paid {
                transaction: "0xt".into(),
                transfer_log_index: 3
            }
        );
    }

    #[test]
    fn a_wrong_value_a_missing_transfer_or_a_cancel_is_no_payment() {
        let short = [used(0, NONCE), transfer(1, PAY_TO, 9_999)];
        let alone = [used(0, NONCE), transfer(2, PAY_TO, 10_000)];
        let event = IEip3009State::AuthorizationCanceled::SIGNATURE_HASH;
        let cancel = [log(0, vec![event, PAYER.into_word(), NONCE], vec![])];
        for logs in [&short[..], &alone[..], &cancel[..]] {
            assert!(
                matches!(
                    judge_logs(logs, &terms(NONCE), "0xt"),
                    ReceiptVerdict::Burned { .. }
                ),
                "{logs:?}"
            );
        }
        assert_eq!(
            judge_logs(&[], &terms(NONCE), "0xt"),
            ReceiptVerdict::Unrelated
        );
    }
}
