//! VM03's reads: per chain the block, the native balance, the inventory; then the shared
//! holding cap; then per chain the same-block token reads and the DEX pricing.

use std::collections::HashMap;

use alloy::eips::BlockId;
use alloy::primitives::{Address, U256};
use alloy::providers::{Provider, RootProvider};
use futures_util::future::join_all;

use super::{Declared, Parsed, Settings};
use crate::chain::endpoints::FailoverRpc;
use crate::chain::networks::Chain;
use crate::chain::rpc::ReadFailure;
use crate::machines::{WorkContext, WorkError};
use crate::providers::dexscreener::{self, Batch, Pricing};
use crate::providers::erc20::{self, TokenRead};
use crate::providers::inventory::{self, Inventory};
use crate::support::timestamp::now_millis as now;

/// Why a holding is in the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Origin {
    Native,
    /// Declared by the caller; `listed` when the inventory also discovered it.
    Declared {
        quantity: U256,
        listed: bool,
    },
    Discovered,
}

/// One returned holding, before it is described.
#[derive(Debug, Clone)]
pub(super) struct Holding {
    pub chain: Chain,
    /// None: the native asset.
    pub token: Option<Address>,
    pub origin: Origin,
    pub symbol: Option<String>,
    pub decimals: Option<u8>,
    pub balance: Option<U256>,
    /// The balance was read at the chain's block (false: the inventory's figure, or none).
    pub same_block: bool,
    pub pricing: Option<Pricing>,
}

/// A read and when it was made.
#[derive(Debug, Clone)]
pub(super) struct Timed<T> {
    pub value: T,
    pub retrieved_at: String,
}

/// Everything read on one chain.
pub(super) struct ChainOutcome {
    pub chain: Chain,
    pub block: Result<u64, ReadFailure>,
    pub native: Option<Timed<Result<U256, ReadFailure>>>,
    /// None when the chain is HOLD: its inventory read is discarded.
    pub inventory: Option<Timed<Inventory>>,
    /// Inventory pages whose answer was read, on a HOLD chain too (`chain_results[].pages_read`).
    pub pages_read: u32,
    /// Holdings this chain offered to the cap (native, declared, discovered).
    pub offered: usize,
    pub holdings: Vec<Holding>,
    /// The same-block token read: Ok(tokens read) or why it failed; None when no ERC-20 kept.
    pub metadata: Option<Timed<Result<usize, erc20::ReadError>>>,
    /// The pricing batches; None when nothing needed a price.
    pub pricing: Option<Timed<Vec<Batch>>>,
    /// The chain's RPC transport: both phases read through it, so the block-pinned reads of
    /// phase 2 go to the endpoint that told phase 1 the block, and its retries are noted.
    pub rpc: FailoverRpc,
}

impl ChainOutcome {
    pub(super) fn discovery_capped(&self) -> bool {
        self.holdings.len() < self.offered
    }

    pub(super) fn readable(&self) -> bool {
        self.block.is_ok()
    }
}

fn no_endpoint(chain: Chain) -> WorkError {
    WorkError::NotConfigured(format!("endpoint for {} (readiness passed)", chain.caip2))
}

fn rpc(context: &WorkContext, settings: &Settings, chain: Chain) -> Result<FailoverRpc, WorkError> {
    FailoverRpc::for_chain(
        &context.gateway,
        &context.config,
        chain,
        settings.rpc_timeout,
    )
    .ok_or_else(|| no_endpoint(chain))
}

/// Phase 1 of one chain: block, native balance at the block, inventory (concurrently).
async fn discover(
    context: &WorkContext,
    settings: &Settings,
    request: &Parsed,
    chain: Chain,
) -> Result<ChainOutcome, WorkError> {
    let transport = rpc(context, settings, chain)?;
    let node = transport.provider();
    let endpoint = inventory::Endpoint {
        gateway: &context.gateway,
        upstream: chain.inventory,
        url: context
            .inventory_url(chain.caip2)
            .ok_or_else(|| no_endpoint(chain))?,
        bounds: settings.inventory,
    };
    let chain_reads = async {
        let block = node
            .get_block_number()
            .await
            .map_err(|e| ReadFailure::from(&e))?;
        let native = node
            .get_balance(request.address)
            .block_id(BlockId::number(block))
            .await
            .map_err(|e| ReadFailure::from(&e));
        Ok::<_, ReadFailure>((
            block,
            Timed {
                value: native,
                retrieved_at: now(),
            },
        ))
    };
    let discovery = async {
        let found = inventory::discover(&endpoint, request.address, settings.max_pages).await;
        Timed {
            value: found,
            retrieved_at: now(),
        }
    };
    let (chain_reads, found) = tokio::join!(chain_reads, discovery);
    // Pages read are counted even when the chain turns out HOLD: they were read (and paid
    // for in provider quota) although their holdings cannot be reported.
    let pages_read = found.value.pages_read;
    let (block, native, inventory) = match chain_reads {
        Ok((block, native)) => (Ok(block), Some(native), Some(found)),
        // Without a block nothing can be read at one block: the chain is HOLD.
        Err(why) => (Err(why), None, None),
    };
    Ok(ChainOutcome {
        chain,
        block,
        native,
        inventory,
        pages_read,
        offered: 0,
        holdings: Vec::new(),
        metadata: None,
        pricing: None,
        rpc: transport,
    })
}

/// The holdings a chain offers to the cap, in order: the native asset (non-zero balance),
/// declared holdings (request order), discovered ERC-20s (provider order).
fn offered(outcome: &ChainOutcome, declared: &[Declared]) -> Vec<Holding> {
    let chain = outcome.chain;
    let holding = |token, origin, balance| Holding {
        chain,
        token,
        origin,
        symbol: None,
        decimals: None,
        balance,
        same_block: false,
        pricing: None,
    };
    let mut list = Vec::new();
    if let Some(Timed {
        value: Ok(balance), ..
    }) = &outcome.native
        && !balance.is_zero()
    {
        let mut native = holding(None, Origin::Native, Some(*balance));
        native.same_block = true;
        list.push(native);
    }
    let Some(found) = &outcome.inventory else {
        return list;
    };
    let listed: HashMap<Address, U256> = found.value.tokens.iter().copied().collect();
    for hint in declared.iter().filter(|d| d.chain == chain) {
        let origin = Origin::Declared {
            quantity: hint.quantity,
            listed: listed.contains_key(&hint.token),
        };
        list.push(holding(
            Some(hint.token),
            origin,
            listed.get(&hint.token).copied(),
        ));
    }
    for (token, balance) in &found.value.tokens {
        if !declared
            .iter()
            .any(|d| d.chain == chain && d.token == *token)
        {
            list.push(holding(Some(*token), Origin::Discovered, Some(*balance)));
        }
    }
    list
}

/// Splits `cap` between chains: each gets an equal share of what is left, a chain needing
/// less than its share gives the rest to the others (smallest need served first).
pub(super) fn allocate(needs: &[usize], cap: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..needs.len()).collect();
    order.sort_by_key(|i| needs[*i]);
    let mut given = vec![0; needs.len()];
    let mut left = cap;
    for (served, index) in order.iter().enumerate() {
        let share = left / (needs.len() - served);
        given[*index] = needs[*index].min(share);
        left -= given[*index];
    }
    given
}

/// Phase 2 of one chain: same-block token reads and pricing (concurrently).
async fn complete(
    context: &WorkContext,
    settings: &Settings,
    request: &Parsed,
    outcome: &mut ChainOutcome,
) -> Result<(), WorkError> {
    let Ok(block) = outcome.block else {
        return Ok(());
    };
    let chain = outcome.chain;
    let native = settings.native(chain)?;
    let tokens: Vec<Address> = outcome.holdings.iter().filter_map(|h| h.token).collect();
    let reference = native.price_reference;
    let mut to_price = tokens.clone();
    if outcome.holdings.iter().any(|h| h.token.is_none()) && !to_price.contains(&reference) {
        to_price.push(reference);
    }
    let node = outcome.rpc.provider();
    let (metadata, pricing) = tokio::join!(
        read_tokens(&node, settings, request, &tokens, block),
        read_prices(context, settings, chain, &to_price),
    );
    if let Some(read) = &metadata {
        apply_token_reads(&mut outcome.holdings, &tokens, &read.value);
    }
    outcome.metadata = metadata.map(|read| Timed {
        value: read.value.map(|reads| reads.len()),
        retrieved_at: read.retrieved_at,
    });
    for holding in outcome.holdings.iter_mut() {
        if holding.token.is_none() {
            holding.symbol = Some(native.symbol.clone());
            holding.decimals = Some(native.decimals);
        }
    }
    if let Some((prices, batches)) = pricing {
        for holding in outcome.holdings.iter_mut() {
            let key = holding.token.unwrap_or(reference);
            holding.pricing = prices.get(&key).cloned();
        }
        outcome.pricing = Some(batches);
    }
    Ok(())
}

/// The tokens' balances, decimals and symbols at `block`, when there are tokens.
async fn read_tokens(
    node: &RootProvider,
    settings: &Settings,
    request: &Parsed,
    tokens: &[Address],
    block: u64,
) -> Option<Timed<Result<Vec<TokenRead>, erc20::ReadError>>> {
    if tokens.is_empty() {
        return None;
    }
    let read = erc20::read_at_block(node, settings.multicall, request.address, tokens, block).await;
    Some(Timed {
        value: read,
        retrieved_at: now(),
    })
}

/// The prices of `to_price` on the chain's DEX listing, when a price source is configured
/// for the chain and there is anything to price.
async fn read_prices(
    context: &WorkContext,
    settings: &Settings,
    chain: Chain,
    to_price: &[Address],
) -> Option<(HashMap<Address, Pricing>, Timed<Vec<Batch>>)> {
    let (Some(base), Some(dex_chain)) = (
        context.config.dexscreener_url.as_ref(),
        settings.dex_chain_ids.get(chain.caip2),
    ) else {
        return None;
    };
    if to_price.is_empty() {
        return None;
    }
    let batching = dexscreener::Batching {
        batch_size: settings.batch_size,
        pair_cap: settings.pair_cap,
    };
    let (prices, batches) = dexscreener::price(
        &context.gateway,
        base,
        dex_chain,
        to_price,
        batching,
        settings.pricing,
    )
    .await;
    Some((
        prices,
        Timed {
            value: batches,
            retrieved_at: now(),
        },
    ))
}

/// Same-block values replace the inventory's: balance, decimals, symbol per token.
fn apply_token_reads(
    holdings: &mut [Holding],
    tokens: &[Address],
    reads: &Result<Vec<TokenRead>, erc20::ReadError>,
) {
    let Ok(reads) = reads else {
        return;
    };
    let by_token: HashMap<&Address, &TokenRead> = tokens.iter().zip(reads).collect();
    for holding in holdings.iter_mut() {
        let Some(read) = holding.token.as_ref().and_then(|t| by_token.get(t)) else {
            continue;
        };
        if let Some(balance) = read.balance {
            holding.balance = Some(balance);
            holding.same_block = true;
        }
        holding.decimals = read.decimals;
        holding.symbol = read.symbol.clone();
    }
}

/// All reads of a request.
pub(super) async fn run(
    context: &WorkContext,
    settings: &Settings,
    request: &Parsed,
) -> Result<Vec<ChainOutcome>, WorkError> {
    let discovered = join_all(
        request
            .chains
            .iter()
            .map(|chain| discover(context, settings, request, *chain)),
    )
    .await;
    let mut outcomes = discovered.into_iter().collect::<Result<Vec<_>, _>>()?;
    let offers: Vec<Vec<Holding>> = outcomes
        .iter()
        .map(|o| offered(o, &request.declared))
        .collect();
    let needs: Vec<usize> = offers.iter().map(Vec::len).collect();
    let quotas = allocate(&needs, settings.cap);
    for ((outcome, offer), quota) in outcomes.iter_mut().zip(offers).zip(quotas) {
        outcome.offered = offer.len();
        outcome.holdings = offer.into_iter().take(quota).collect();
    }
    let completed = join_all(
        outcomes
            .iter_mut()
            .map(|o| complete(context, settings, request, o)),
    )
    .await;
    completed.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_shared_fairly() {
        assert_eq!(allocate(&[3, 55], 40), vec![3, 37]);
        assert_eq!(allocate(&[55, 3], 40), vec![37, 3]);
        assert_eq!(allocate(&[30, 30], 40), vec![20, 20]);
        assert_eq!(allocate(&[55], 40), vec![40]);
        assert_eq!(allocate(&[10, 12], 40), vec![10, 12]);
        assert_eq!(allocate(&[], 40), Vec::<usize>::new());
    }
}
