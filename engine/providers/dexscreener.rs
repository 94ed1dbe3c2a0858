//! DEX pair prices from a DexScreener-style API: `GET {base}/tokens/v1/{chainId}/{a,b,...}`
//! (at most 30 addresses per request) answers a JSON array of pairs `{chainId, dexId, url,
//! pairAddress, baseToken{address,symbol}, quoteToken{...}, priceUsd (string), volume{h24},
//! liquidity{usd}, pairCreatedAt (ms)}`.
//!
//! Per token the pair used is the one on the requested chain where the token is the **base**
//! token, with the largest `liquidity.usd`. A pair below the liquidity floor is reported but
//! its price is not used: tiny pools quote absurd prices.

use std::collections::HashMap;

use alloy::primitives::Address;
use futures_util::future::join_all;
use serde_json::Value;

use crate::net::gateway::{Gateway, Upstream};

/// The metrics label of DexScreener's token-pairs endpoint.
const UPSTREAM: Upstream = Upstream::new("dexscreener", "tokens");
use crate::net::upstream::{self, Bounds, UpstreamError};
use crate::support::decimal::Decimal;

/// The pair chosen for one token.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Quote {
    pub pair_address: Option<String>,
    pub pair_url: Option<String>,
    /// `priceUsd` as an exact decimal; None when absent or not a plain decimal.
    pub price_usd: Option<Decimal>,
    pub liquidity_usd: Option<Decimal>,
    pub volume_h24_usd: Option<Decimal>,
    /// `pairCreatedAt` in ms since the epoch.
    pub pair_created_at_ms: Option<i64>,
}

/// What the API said about one token.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Pricing {
    /// The best base-token pair (its price may still be below the floor or unreadable).
    Pair(Box<Quote>),
    /// No pair on this chain has the token as its base token.
    NoMarket,
    /// The request that carried this token failed.
    Unavailable(UpstreamError),
}

/// One batch request and how it went.
#[derive(Debug, Clone)]
pub(crate) struct Batch {
    pub tokens: usize,
    pub error: Option<UpstreamError>,
}

/// Prices `tokens` on `chain_id` (DexScreener's chain name), batches of `batch_size`, the
/// batches concurrently.
pub(crate) async fn price(
    gateway: &Gateway,
    base: &url::Url,
    chain_id: &str,
    tokens: &[Address],
    batch_size: usize,
    bounds: Bounds,
) -> (HashMap<Address, Pricing>, Vec<Batch>) {
    let batches: Vec<&[Address]> = tokens.chunks(batch_size.max(1)).collect();
    let answers = join_all(
        batches
            .iter()
            .map(|batch| fetch(gateway, base, chain_id, batch, bounds)),
    )
    .await;
    let mut pricing = HashMap::new();
    let mut report = Vec::new();
    for (batch, answer) in batches.iter().zip(answers) {
        report.push(Batch {
            tokens: batch.len(),
            error: answer.as_ref().err().cloned(),
        });
        for token in batch.iter() {
            let outcome = match &answer {
                Err(error) => Pricing::Unavailable(error.clone()),
                Ok(pairs) => best_pair(pairs, chain_id, *token)
                    .map(|quote| Pricing::Pair(Box::new(quote)))
                    .unwrap_or(Pricing::NoMarket),
            };
            pricing.insert(*token, outcome);
        }
    }
    (pricing, report)
}

async fn fetch(
    gateway: &Gateway,
    base: &url::Url,
    chain_id: &str,
    batch: &[Address],
    bounds: Bounds,
) -> Result<Vec<Value>, UpstreamError> {
    let list: Vec<String> = batch.iter().map(|a| format!("{a:#x}")).collect();
    let joined = list.join(",");
    let url = upstream::join(base, &["tokens", "v1", chain_id, &joined]).ok_or_else(|| {
        UpstreamError::Shape("the configured pricing URL cannot take a path".into())
    })?;
    match upstream::get_json(gateway, UPSTREAM, url, bounds).await? {
        Value::Array(pairs) => Ok(pairs),
        _ => Err(UpstreamError::Shape(
            "the answer is not an array of pairs".into(),
        )),
    }
}

fn text<'a>(pair: &'a Value, pointer: &str) -> Option<&'a str> {
    pair.pointer(pointer).and_then(Value::as_str)
}

fn usd(value: Option<&Value>) -> Option<Decimal> {
    match value? {
        Value::Number(n) => Decimal::from_f64(n.as_f64()?),
        Value::String(s) => Decimal::parse(s),
        _ => None,
    }
}

/// The base-token pair with the largest `liquidity.usd` (a pair without it counts as zero).
fn best_pair(pairs: &[Value], chain_id: &str, token: Address) -> Option<Quote> {
    pairs
        .iter()
        .filter(|pair| text(pair, "/chainId") == Some(chain_id))
        .filter(|pair| {
            text(pair, "/baseToken/address")
                .and_then(|a| a.parse::<Address>().ok())
                .is_some_and(|a| a == token)
        })
        .map(|pair| {
            (
                usd(pair.pointer("/liquidity/usd")).unwrap_or(Decimal::ZERO),
                pair,
            )
        })
        // Ties keep the pair listed first by the provider.
        .reduce(|best, next| if next.0 > best.0 { next } else { best })
        .map(|(liquidity, pair)| Quote {
            pair_address: text(pair, "/pairAddress").map(str::to_string),
            pair_url: text(pair, "/url").map(str::to_string),
            price_usd: text(pair, "/priceUsd").and_then(Decimal::parse),
            liquidity_usd: pair.pointer("/liquidity/usd").map(|_| liquidity),
            volume_h24_usd: usd(pair.pointer("/volume/h24")),
            pair_created_at_ms: pair.get("pairCreatedAt").and_then(Value::as_i64),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TOKEN: &str = "0x4200000000000000000000000000000000000006";

    fn pair(base: &str, quote: &str, liquidity: f64, price: &str) -> Value {
        json!({"chainId": "base", "dexId": "uniswap", "url": format!("https://dexscreener.com/base/{liquidity}"),
               "pairAddress": format!("0xpair{liquidity}"), "baseToken": {"address": base, "symbol": "B"},
               "quoteToken": {"address": quote, "symbol": "Q"}, "priceUsd": price,
               "volume": {"h24": 12.5}, "liquidity": {"usd": liquidity, "base": 1, "quote": 2},
               "pairCreatedAt": 1691582400000i64})
    }

    #[test]
    fn the_largest_base_token_pair_on_the_chain_wins() {
        let token: Address = TOKEN.parse().expect("address");
        let other = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
        let mut on_other_chain = pair(TOKEN, other, 9e9, "1");
        on_other_chain["chainId"] = json!("ethereum");
        let pairs = vec![
            pair(TOKEN, other, 41_250_000.0, "3000.02"),
            pair(
                &TOKEN.to_uppercase().replace("0X", "0x"),
                other,
                50_000.0,
                "2999",
            ),
            pair(other, TOKEN, 99e9, "0.0003"),
            on_other_chain,
        ];
        let quote = best_pair(&pairs, "base", token).expect("a pair");
        assert_eq!(
            quote.price_usd.map(|p| p.to_plain()),
            Some("3000.02".into())
        );
        assert_eq!(
            quote.liquidity_usd.map(|l| l.to_plain()),
            Some("41250000".into())
        );
        assert_eq!(quote.pair_created_at_ms, Some(1691582400000));
        let quote_only = vec![pair(other, TOKEN, 1e6, "1")];
        assert_eq!(best_pair(&quote_only, "base", token), None);
    }
}
