//! DEX pair prices from a DexScreener-style API: `GET {base}/tokens/v1/{chainId}/{a,b,...}`
//! (at most 30 addresses per request) answers a JSON array of pairs `{chainId, dexId, url,
//! pairAddress, baseToken{address,symbol}, quoteToken{...}, priceUsd (string), volume{h24},
//! liquidity{usd}, pairCreatedAt (ms)}`.
//!
//! Per token the pair used is the one on the requested chain where the token is the **base**
//! token, with the largest `liquidity.usd`: its `priceUsd` is DexScreener's own figure for
//! the token. A token that appears only as a **quote** token (stablecoins and WETH usually
//! do) is priced from its deepest quote-side pair by the relation DexScreener publishes:
//! `priceUsd` is the base token's USD price and `priceNative` the base token's price in
//! quote-token units, so one quote token is worth `priceUsd / priceNative` USD. A pair below
//! the liquidity floor is reported but its price is not used: tiny pools quote absurd prices.
//!
//! DexScreener documents at most 30 addresses per request and no cap on the pairs of an
//! answer; a batch answer holding at least `pair_cap` pairs is still read as possibly cut,
//! so a token absent from it is "unknown", never "no market".

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
    /// Which side of the pair the token is on, and how its price follows from the pair.
    pub side: Side,
}

/// The token's side in its pair.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Side {
    /// The token is the base token: `priceUsd` is its price as DexScreener gives it.
    Base,
    /// The token is the quote token: its price is `priceUsd / priceNative` of the pair.
    Quote {
        /// The base token's `priceUsd` as given (None when absent or not a plain decimal).
        base_price_usd: Option<Decimal>,
        /// The base token's `priceNative` as given (its price in quote-token units).
        price_native: Option<Decimal>,
        /// The base token's symbol, as the pair names it.
        base_symbol: Option<String>,
    },
}

impl Quote {
    /// `base` or `quote`.
    pub(crate) fn side_name(&self) -> &'static str {
        match self.side {
            Side::Base => "base",
            Side::Quote { .. } => "quote",
        }
    }

    /// How the price follows from the pair, in words (the evidence of a quote-side price).
    pub(crate) fn derivation(&self) -> String {
        match &self.side {
            Side::Base => "priceUsd of the pair, where the token is the base token".to_string(),
            Side::Quote {
                base_price_usd,
                price_native,
                base_symbol,
            } => format!(
                "the token is the quote token: priceUsd of the base token{} ({}) / priceNative ({}), the base token's price in quote-token units",
                base_symbol
                    .as_deref()
                    .map(|s| format!(" {}", upstream::printable(s, 16)))
                    .unwrap_or_default(),
                base_price_usd.map_or("unreadable".to_string(), |p| p.to_plain()),
                price_native.map_or("unreadable".to_string(), |p| p.to_plain()),
            ),
        }
    }
}

/// Significant digits kept of a derived (quote-side) price: DexScreener's own prices carry
/// fewer, so more would claim a precision the pair does not have.
const DERIVED_PRICE_DIGITS: u32 = 10;
/// Decimal places of the division before that rounding (prices of 10^-30 USD still count).
const DERIVED_PRICE_PLACES: u32 = 40;

/// What the API said about one token.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Pricing {
    /// The best base-token pair (its price may still be below the floor or unreadable).
    Pair(Box<Quote>),
    /// No pair on this chain has the token as its base or quote token.
    NoMarket,
    /// The token is absent from a batch answer that may have been cut (see `pair_cap`).
    NotInCutAnswer,
    /// The request that carried this token failed.
    Unavailable(UpstreamError),
}

/// One batch request and how it went.
#[derive(Debug, Clone)]
pub(crate) struct Batch {
    pub tokens: usize,
    pub error: Option<UpstreamError>,
    /// Pairs in the answer (0 when it failed).
    pub pairs: usize,
    /// The answer held at least `pair_cap` pairs, so it may have been cut.
    pub possibly_cut: bool,
}

/// How one pricing read is cut into batches and when a batch answer may have been cut.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Batching {
    /// Addresses per request (DexScreener: at most 30).
    pub batch_size: usize,
    /// A batch answer with at least this many pairs may have been cut by the provider.
    pub pair_cap: usize,
}

/// Prices `tokens` on `chain_id` (DexScreener's chain name), batches of `batch_size`, the
/// batches concurrently.
pub(crate) async fn price(
    gateway: &Gateway,
    base: &url::Url,
    chain_id: &str,
    tokens: &[Address],
    batching: Batching,
    bounds: Bounds,
) -> (HashMap<Address, Pricing>, Vec<Batch>) {
    let batch_size = batching.batch_size;
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
        let pairs = answer.as_ref().map_or(0, Vec::len);
        let possibly_cut = pairs >= batching.pair_cap.max(1);
        report.push(Batch {
            tokens: batch.len(),
            error: answer.as_ref().err().cloned(),
            pairs,
            possibly_cut,
        });
        for token in batch.iter() {
            let outcome = match &answer {
                Err(error) => Pricing::Unavailable(error.clone()),
                Ok(pairs) => match best_pair(pairs, chain_id, *token) {
                    Some(quote) => Pricing::Pair(Box::new(quote)),
                    None if possibly_cut => Pricing::NotInCutAnswer,
                    None => Pricing::NoMarket,
                },
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

/// The base-token pair with the largest `liquidity.usd` (a pair without it counts as zero);
/// when the token is nowhere a base token, its deepest quote-side pair.
fn best_pair(pairs: &[Value], chain_id: &str, token: Address) -> Option<Quote> {
    deepest(pairs, chain_id, token, "/baseToken/address")
        .map(|pair| quote(pair, Side::Base))
        .or_else(|| {
            deepest(pairs, chain_id, token, "/quoteToken/address").map(|pair| {
                let side = Side::Quote {
                    base_price_usd: text(pair, "/priceUsd").and_then(Decimal::parse),
                    price_native: text(pair, "/priceNative").and_then(Decimal::parse),
                    base_symbol: text(pair, "/baseToken/symbol").map(str::to_string),
                };
                quote(pair, side)
            })
        })
}

/// The pair on `chain_id` whose token at `side` is `token`, with the largest liquidity.
fn deepest<'a>(
    pairs: &'a [Value],
    chain_id: &str,
    token: Address,
    side: &str,
) -> Option<&'a Value> {
    pairs
        .iter()
        .filter(|pair| text(pair, "/chainId") == Some(chain_id))
        .filter(|pair| {
            text(pair, side)
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
        .map(|(_, pair)| pair)
}

fn quote(pair: &Value, side: Side) -> Quote {
    let price_usd = match &side {
        Side::Base => text(pair, "/priceUsd").and_then(Decimal::parse),
        Side::Quote {
            base_price_usd,
            price_native,
            ..
        } => base_price_usd
            .zip(*price_native)
            .and_then(|(usd, native)| usd.ratio(native, DERIVED_PRICE_PLACES))
            .map(|price| price.round_significant(DERIVED_PRICE_DIGITS))
            .filter(|price| !price.is_zero()),
    };
    Quote {
        pair_address: text(pair, "/pairAddress").map(str::to_string),
        pair_url: text(pair, "/url").map(str::to_string),
        price_usd,
        // Absent, null or unreadable stays unknown: never shown as a liquidity of zero.
        liquidity_usd: usd(pair.pointer("/liquidity/usd")),
        volume_h24_usd: usd(pair.pointer("/volume/h24")),
        pair_created_at_ms: pair.get("pairCreatedAt").and_then(Value::as_i64),
        side,
    }
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
        assert_eq!(quote.side, Side::Base);
    }

    #[test]
    fn a_liquidity_the_provider_leaves_null_or_out_is_unknown_not_zero() {
        let token: Address = TOKEN.parse().expect("address");
        let other = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
        let mut null = pair(TOKEN, other, 1.0, "3000.02");
        null["liquidity"]["usd"] = Value::Null;
        let mut absent = pair(TOKEN, other, 1.0, "3000.02");
        absent.as_object_mut().expect("pair").remove("liquidity");
        for unknown in [null, absent] {
            let quote = best_pair(&[unknown], "base", token).expect("a pair");
            assert_eq!(quote.liquidity_usd, None);
        }
    }

    #[test]
    fn a_quote_only_token_is_priced_from_its_deepest_quote_side_pair() {
        let token: Address = TOKEN.parse().expect("address");
        let other = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
        let mut deep = pair(other, TOKEN, 2e6, "3000.00");
        deep["priceNative"] = json!("1500");
        let mut thin = pair(other, TOKEN, 5e4, "1");
        thin["priceNative"] = json!("3");
        let quote = best_pair(&[thin, deep], "base", token).expect("a pair");
        assert_eq!(quote.side_name(), "quote");
        assert_eq!(quote.price_usd.map(|p| p.to_plain()), Some("2".into()));
        assert!(quote.derivation().contains("(3000) / priceNative (1500)"));
        let mut third = pair(other, TOKEN, 1e6, "1");
        third["priceNative"] = json!("3");
        let repeating = best_pair(&[third], "base", token).expect("a pair");
        assert_eq!(
            repeating.price_usd.map(|p| p.to_plain()),
            Some("0.3333333333".into()),
            "ten significant digits"
        );
        let mut unreadable = pair(other, TOKEN, 1e6, "1");
        unreadable["priceNative"] = json!("0");
        let none = best_pair(&[unreadable], "base", token).expect("a pair");
        assert_eq!(none.price_usd, None, "no division by zero");
    }
}
