//! What the chain says about one EIP-3009 authorization: `authorizationState(authorizer,
//! nonce)` on the asset, read at one block whose timestamp is the chain's "now", and the
//! `AuthorizationUsed` event that names the transaction which used it.
//!
//! Read only: nothing here signs or sends a transaction.

use std::time::Duration;

use alloy::eips::BlockId;
use alloy::network::Ethereum;
use alloy::primitives::{Address, B256};
use alloy::providers::{Provider, RootProvider};
use alloy::rpc::types::Filter;
use alloy::sol;
use alloy::sol_types::SolEvent;

use crate::chain::endpoints::{Endpoint, EndpointSet, FailoverRpc};
use crate::chain::networks::BASE;
use crate::chain::rpc::describe_error;
use crate::config::{Config, Secret};
use crate::net::gateway::Gateway;

sol! {
    #[sol(rpc)]
    interface IEip3009State {
        function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);
        event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);
        event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce);
    }
}

/// How far back the `AuthorizationUsed` event is looked for (about 55 hours of Base blocks):
/// providers refuse unbounded log ranges.
const EVENT_LOOKBACK_BLOCKS: u64 = 100_000;

/// The chain's answer about one authorization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizationFacts {
    /// The block the state was read at, and its timestamp (unix seconds).
    pub block: u64,
    pub block_timestamp: u64,
    /// `authorizationState(authorizer, nonce)`: true once the authorization was used *or*
    /// cancelled by its signer; the events tell which.
    pub used: bool,
    /// The transaction whose `AuthorizationUsed` event names this authorization, when found:
    /// the payment moved.
    pub transaction: Option<String>,
    /// The transaction of an `AuthorizationCanceled` event, when found: nothing moved.
    pub canceled_in: Option<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ChainReadError(String);

/// Reads authorizations through the configured eip155:8453 RPC endpoints (failing over one
/// at a time, never through an endpoint that serves another chain).
#[derive(Debug, Clone)]
pub struct AuthorizationReader {
    provider: RootProvider<Ethereum>,
    rpc: FailoverRpc,
}

impl AuthorizationReader {
    /// A reader of one endpoint (`rpc_url_eip155_8453`) over the counted gateway; each RPC
    /// answer is bounded by `response_timeout`.
    pub fn new(gateway: Gateway, rpc_url: &Secret, response_timeout: Duration) -> Self {
        let set = EndpointSet {
            chain: BASE,
            endpoints: vec![Endpoint::configured(
                "rpc_url_eip155_8453",
                "eip155:8453#1",
                rpc_url,
            )],
        };
        Self::over(FailoverRpc::new(gateway, set, response_timeout))
    }

    /// A reader of every configured eip155:8453 endpoint; None when none is configured.
    pub fn from_config(
        gateway: Gateway,
        config: &Config,
        response_timeout: Duration,
    ) -> Option<Self> {
        FailoverRpc::for_chain(&gateway, config, BASE, response_timeout).map(Self::over)
    }

    fn over(rpc: FailoverRpc) -> Self {
        AuthorizationReader {
            provider: rpc.provider(),
            rpc,
        }
    }

    /// Whether this reader's answers can be trusted: some endpoint has answered
    /// `eth_chainId` 8453 (start-up or readiness check). Without a trusted reader nothing
    /// may be concluded "unpaid" from the chain.
    pub fn trusted(&self) -> bool {
        self.rpc.endpoints().verified()
    }

    /// The state of `(authorizer, nonce)` on `asset` at the latest block.
    pub async fn read(
        &self,
        asset: Address,
        authorizer: Address,
        nonce: B256,
    ) -> Result<AuthorizationFacts, ChainReadError> {
        let rpc = |e: alloy::transports::TransportError| ChainReadError(describe_error(&e));
        let latest = self
            .provider
            .get_block(BlockId::latest())
            .await
            .map_err(rpc)?
            .ok_or_else(|| ChainReadError("the RPC endpoint has no latest block".into()))?;
        let (block, block_timestamp) = (latest.header.number, latest.header.timestamp);
        let used = IEip3009State::new(asset, &self.provider)
            .authorizationState(authorizer, nonce)
            .block(BlockId::number(block))
            .call()
            .await
            .map_err(|e| ChainReadError(format!("authorizationState could not be read: {e}")))?;
        let (mut transaction, mut canceled_in) = (None, None);
        if used {
            let event = IEip3009State::AuthorizationUsed::SIGNATURE_HASH;
            transaction = self.event_in(event, asset, authorizer, nonce, block).await;
            if transaction.is_none() {
                let event = IEip3009State::AuthorizationCanceled::SIGNATURE_HASH;
                canceled_in = self.event_in(event, asset, authorizer, nonce, block).await;
            }
        }
        Ok(AuthorizationFacts {
            block,
            block_timestamp,
            used,
            transaction,
            canceled_in,
        })
    }

    /// The transaction of an `event(authorizer, nonce)` on `asset`, if found.
    async fn event_in(
        &self,
        event: B256,
        asset: Address,
        authorizer: Address,
        nonce: B256,
        latest: u64,
    ) -> Option<String> {
        let filter = Filter::new()
            .address(asset)
            .event_signature(event)
            .topic1(authorizer.into_word())
            .topic2(nonce)
            .from_block(latest.saturating_sub(EVENT_LOOKBACK_BLOCKS))
            .to_block(latest);
        match self.provider.get_logs(&filter).await {
            // An empty answer is trusted only from a node whose head has reached the range's
            // end: a lagging node behind a load balancer answers [] for blocks it lacks.
            Ok(logs) if logs.is_empty() && !self.head_reaches(latest).await => {
                tokio::time::sleep(crate::chain::endpoints::LAG_RETRY_DELAY).await;
                match self.provider.get_logs(&filter).await {
                    Ok(logs) => first_transaction(&logs),
                    Err(error) => {
                        tracing::warn!(error = %describe_error(&error), "authorization event lookup failed");
                        None
                    }
                }
            }
            Ok(logs) => first_transaction(&logs),
            Err(error) => {
                tracing::warn!(error = %describe_error(&error), "authorization event lookup failed");
                None
            }
        }
    }

    /// Whether the endpoint's head is at or past `block` (false when it cannot say).
    async fn head_reaches(&self, block: u64) -> bool {
        self.provider
            .get_block_number()
            .await
            .is_ok_and(|head| head >= block)
    }
}

fn first_transaction(logs: &[alloy::rpc::types::Log]) -> Option<String> {
    logs.iter()
        .find_map(|log| log.transaction_hash)
        .map(|hash| hash.to_string())
}
