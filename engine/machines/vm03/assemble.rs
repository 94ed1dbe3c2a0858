//! VM03's answer from what was read: holdings with their observations and confidence,
//! valuation over priced holdings only, concentration, chain results, sources, evidence,
//! status, confidence and readiness. Every rule is in docs/vm03-portfolio-preflight.md.

use alloy::primitives::U256;
use serde_json::{Value, json};

use super::collect::{ChainOutcome, Holding, Origin, Timed};
use super::{Parsed, Settings};
use crate::catalog::manifest::Machine;
use crate::providers::dexscreener::{Batch, Pricing, Quote, Side};
use crate::providers::erc20;
use crate::providers::inventory::Inventory;
use crate::support::decimal::Decimal;
use crate::support::timestamp;
use crate::support::timestamp::now_millis as now;
use crate::support::units::format_units;

/// Every holding observation code, in the order they are listed.
const OBSERVATIONS: [&str; 16] = [
    "DECLARED_HOLDING",
    "DECLARED_NOT_IN_INVENTORY",
    "DECLARED_NOT_OBSERVED",
    "DECLARED_QUANTITY_DIFFERS",
    "ZERO_BALANCE_AT_BLOCK",
    "BALANCE_FROM_INVENTORY",
    "BALANCE_UNAVAILABLE",
    "METADATA_UNAVAILABLE",
    "NO_DEX_MARKET",
    "DEX_ANSWER_POSSIBLY_CUT",
    "LOW_DEX_LIQUIDITY",
    "LIQUIDITY_UNKNOWN",
    "PRICE_UNAVAILABLE",
    "PRICING_UNAVAILABLE",
    "PRICED_VIA_WRAPPED_NATIVE",
    "PRICED_FROM_QUOTE_SIDE",
];

/// Observations that describe how a holding was found or priced rather than a fact about
/// it; they are not repeated as readiness factual flags.
const DESCRIPTIVE: [&str; 3] = [
    "DECLARED_HOLDING",
    "PRICED_VIA_WRAPPED_NATIVE",
    "PRICED_FROM_QUOTE_SIDE",
];

struct Described {
    json: Value,
    value: Option<Decimal>,
    observations: Vec<&'static str>,
    confidence: &'static str,
}

fn usd(value: &Option<Decimal>) -> Value {
    value.map_or(Value::Null, |v| json!(v.to_fixed(2)))
}

fn created_at(ms: Option<i64>) -> Value {
    ms.and_then(chrono::DateTime::from_timestamp_millis)
        .map_or(Value::Null, |t| json!(timestamp::seconds(t)))
}

fn origin_observations(holding: &Holding, observations: &mut Vec<&'static str>) {
    match &holding.origin {
        Origin::Native => {}
        Origin::Declared { quantity, listed } => {
            observations.push("DECLARED_HOLDING");
            if !listed {
                observations.push("DECLARED_NOT_IN_INVENTORY");
            }
            match holding.balance {
                Some(balance) if balance.is_zero() => observations.push("DECLARED_NOT_OBSERVED"),
                Some(balance) if balance != *quantity => {
                    observations.push("DECLARED_QUANTITY_DIFFERS")
                }
                _ => {}
            }
        }
        Origin::Discovered => {
            if holding.same_block && holding.balance == Some(U256::ZERO) {
                observations.push("ZERO_BALANCE_AT_BLOCK");
            }
        }
    }
    match holding.balance {
        None => observations.push("BALANCE_UNAVAILABLE"),
        Some(_) if holding.token.is_some() && !holding.same_block => {
            observations.push("BALANCE_FROM_INVENTORY")
        }
        Some(_) => {}
    }
    if holding.token.is_some() && (holding.decimals.is_none() || holding.symbol.is_none()) {
        observations.push("METADATA_UNAVAILABLE");
    }
}

/// The pair to show and the price to use (None: not usable, with the observation saying why).
fn usable_price<'a>(
    holding: &'a Holding,
    settings: &Settings,
    observations: &mut Vec<&'static str>,
) -> (Option<&'a Quote>, Option<Decimal>) {
    match &holding.pricing {
        None | Some(Pricing::Unavailable(_)) => {
            observations.push("PRICING_UNAVAILABLE");
            (None, None)
        }
        Some(Pricing::NoMarket) => {
            observations.push("NO_DEX_MARKET");
            (None, None)
        }
        Some(Pricing::NotInCutAnswer) => {
            observations.push("DEX_ANSWER_POSSIBLY_CUT");
            (None, None)
        }
        Some(Pricing::Pair(quote)) => {
            if quote.liquidity_usd.is_none() {
                observations.push("LIQUIDITY_UNKNOWN");
                (Some(quote), None)
            } else if quote
                .liquidity_usd
                .is_some_and(|l| l < settings.liquidity_floor)
            {
                observations.push("LOW_DEX_LIQUIDITY");
                (Some(quote), None)
            } else if quote.price_usd.is_none() {
                observations.push("PRICE_UNAVAILABLE");
                (Some(quote), None)
            } else {
                if holding.token.is_none() {
                    observations.push("PRICED_VIA_WRAPPED_NATIVE");
                }
                if matches!(quote.side, Side::Quote { .. }) {
                    observations.push("PRICED_FROM_QUOTE_SIDE");
                }
                (Some(quote), quote.price_usd)
            }
        }
    }
}

fn evidence_ids(holding: &Holding, outcome: &ChainOutcome) -> Vec<String> {
    let slug = outcome.chain.slug;
    let mut ids = Vec::new();
    match &holding.origin {
        Origin::Native => ids.push(format!("src-{slug}-native")),
        Origin::Discovered | Origin::Declared { listed: true, .. } => {
            ids.push(format!("src-{slug}-inventory"))
        }
        Origin::Declared { listed: false, .. } => {}
    }
    if holding.token.is_some() && outcome.metadata.is_some() {
        ids.push(format!("src-{slug}-metadata"));
    }
    if outcome.pricing.is_some() {
        ids.push(format!("src-{slug}-dex"));
    }
    ids
}

fn describe(holding: &Holding, outcome: &ChainOutcome, settings: &Settings) -> Described {
    let mut observations = Vec::new();
    origin_observations(holding, &mut observations);
    let (quote, price) = usable_price(holding, settings, &mut observations);
    let adjusted = holding
        .balance
        .zip(holding.decimals)
        .and_then(|(raw, decimals)| Decimal::from_units(raw, u32::from(decimals)));
    let value = price.zip(adjusted).and_then(|(p, a)| a.checked_mul(p));
    let confidence =
        if holding.balance.is_none() || !holding.same_block || holding.decimals.is_none() {
            "LOW"
        } else if value.is_some() && holding.symbol.is_some() {
            "HIGH"
        } else {
            "MEDIUM"
        };
    observations.sort_by_key(|code| OBSERVATIONS.iter().position(|c| c == code));
    let json = json!({
        "chain": holding.chain.caip2,
        "asset_kind": if holding.token.is_some() { "erc20" } else { "native" },
        "token": holding.token.map(|t| t.to_checksum(None)),
        "symbol": holding.symbol,
        "decimals": holding.decimals,
        "balance_raw": holding.balance.map(|b| b.to_string()),
        "balance_adjusted": holding.balance.zip(holding.decimals).map(|(b, d)| format_units(b, u32::from(d))),
        "price_usd": price.map(|p| p.to_plain()),
        "priced_usd": usd(&value),
        "liquidity_usd": usd(&quote.and_then(|q| q.liquidity_usd)),
        "volume_h24_usd": usd(&quote.and_then(|q| q.volume_h24_usd)),
        "pair_address": quote.and_then(|q| q.pair_address.clone()),
        "pair_url": quote.and_then(|q| q.pair_url.clone()),
        "pair_created_at": created_at(quote.and_then(|q| q.pair_created_at_ms)),
        "pair_side": quote.map(Quote::side_name),
        "price_derivation": quote.map(Quote::derivation),
        "observations": observations,
        "confidence": confidence,
        "evidence_ids": evidence_ids(holding, outcome),
    });
    Described {
        json,
        value,
        observations,
        confidence,
    }
}

// ---------------------------------------------------------------- per chain

fn inventory_complete(outcome: &ChainOutcome) -> bool {
    outcome
        .inventory
        .as_ref()
        .is_some_and(|i| i.value.pagination_complete() && i.value.provider_response_complete())
}

fn inventory_status(outcome: &ChainOutcome) -> &'static str {
    match (
        outcome.readable(),
        inventory_complete(outcome) && !outcome.discovery_capped(),
    ) {
        (false, _) => "HOLD",
        (true, true) => "COMPLETE",
        (true, false) => "PARTIAL",
    }
}

fn block_text(outcome: &ChainOutcome) -> Value {
    outcome
        .block
        .as_ref()
        .ok()
        .map_or(Value::Null, |b| json!(b.to_string()))
}

fn chain_result(outcome: &ChainOutcome) -> Value {
    let inventory = outcome.inventory.as_ref();
    json!({
        "chain": outcome.chain.caip2,
        "inventory_status": inventory_status(outcome),
        "block_number_observed": block_text(outcome),
        "inventory_complete": inventory_complete(outcome),
        "provider_response_complete": inventory.is_some_and(|i| i.value.provider_response_complete()),
        "discovery_capped": outcome.discovery_capped(),
        "pages_read": outcome.pages_read,
    })
}

fn native_ok(outcome: &ChainOutcome) -> bool {
    matches!(&outcome.native, Some(Timed { value: Ok(_), .. }))
}

fn metadata_failed(outcome: &ChainOutcome) -> Option<&crate::providers::erc20::ReadError> {
    match &outcome.metadata {
        Some(Timed {
            value: Err(why), ..
        }) => Some(why),
        _ => None,
    }
}

fn pricing_failures(outcome: &ChainOutcome) -> Vec<String> {
    outcome
        .pricing
        .iter()
        .flat_map(|p| p.value.iter())
        .filter_map(|batch| batch.error.as_ref().map(|e| (batch.tokens, e)))
        .map(|(tokens, error)| {
            format!(
                "A pricing request for {tokens} tokens on {} failed ({error}); those holdings are unpriced.",
                outcome.chain.caip2
            )
        })
        .collect()
}

/// Batch answers that may have been cut by a per-response pair cap: a token absent from
/// one is not claimed to have no market.
fn possibly_cut(outcome: &ChainOutcome, settings: &Settings) -> Vec<String> {
    outcome
        .pricing
        .iter()
        .flat_map(|p| p.value.iter())
        .filter(|batch| batch.error.is_none() && batch.possibly_cut)
        .map(|batch| {
            format!(
                "A pricing answer for {} tokens on {} held {} pairs, at least pricing_answer_pair_cap {}, so it may have been cut; a token absent from it is DEX_ANSWER_POSSIBLY_CUT, not NO_DEX_MARKET.",
                batch.tokens, outcome.chain.caip2, batch.pairs, settings.pair_cap
            )
        })
        .collect()
}

fn chain_limitations(outcome: &ChainOutcome) -> Vec<String> {
    let chain = outcome.chain.caip2;
    // A read that needed a second attempt says so (values are still one block's).
    let mut out = outcome.rpc.retries();
    if let Err(why) = &outcome.block {
        out.push(format!(
            "{chain} could not be read ({why}); no block was observed and no holdings are reported for it."
        ));
        return out;
    }
    if let Some(Timed {
        value: Err(why), ..
    }) = &outcome.native
    {
        out.push(format!(
            "The native balance on {chain} could not be read ({why})."
        ));
    }
    if let Some(inventory) = &outcome.inventory {
        if let Some(stop) = &inventory.value.stop {
            out.push(format!("Inventory on {chain}: {}.", stop.describe()));
        }
        if inventory.value.unreadable_entries > 0 {
            out.push(format!(
                "Inventory on {chain}: {} entries carried an error or an unreadable balance and were dropped.",
                inventory.value.unreadable_entries
            ));
        }
    }
    if let Some(why) = metadata_failed(outcome) {
        out.push(format!(
            "The same-block token read on {chain} failed ({why}); ERC-20 balances are the inventory provider's and decimals and symbols are unknown."
        ));
    }
    out.extend(pricing_failures(outcome));
    out
}

// ---------------------------------------------------------------- sources and evidence

fn source(
    id: String,
    role: &str,
    provider: String,
    outcome: &ChainOutcome,
    retrieved_at: &str,
) -> Value {
    json!({
        "id": id,
        "role": role,
        "provider": provider,
        "chain": outcome.chain.caip2,
        "retrieved_at": retrieved_at,
        "block_number": block_text(outcome),
        "request_scope": "",
        "pagination_complete": true,
        "provider_response_complete": true,
        "discovery_capped": false,
        "limitations": [],
    })
}

/// Why the native source's pagination_complete is not an observation of pagination.
const NATIVE_NOT_PAGINATED: &str = "A single eth_getBalance read is not paginated: pagination_complete here only states whether that read completed.";

/// The factual flag of a concentration that could not be assessed (nothing priced): the
/// schema forces `concentrated` to a bool, so its false is not an observation then.
const CONCENTRATION_NOT_ASSESSABLE: &str = "CONCENTRATION_NOT_ASSESSABLE";

/// Whether any holding was priced at a nonzero total, so concentration could be assessed.
fn concentration_assessable(concentration: &Value) -> bool {
    !concentration["largest_priced_share"].is_null()
}

/// One chain's sources and, for each, its evidence entry: the native read always, then the
/// inventory, the token metadata and the DEX pricing when they were read.
fn sources_and_evidence(
    outcome: &ChainOutcome,
    settings: &Settings,
    priced: usize,
) -> (Vec<Value>, Vec<Value>) {
    let at_block = outcome
        .block
        .as_ref()
        .map_or("no block".to_string(), |b| format!("block {b}"));
    let mut read = vec![native_source(outcome, &at_block)];
    if let Some(found) = &outcome.inventory {
        read.push(inventory_source(outcome, found));
        if let Some(metadata) = &outcome.metadata {
            read.push(metadata_source(outcome, metadata, &at_block));
        }
        if let Some(pricing) = &outcome.pricing {
            read.push(dex_source(outcome, pricing, settings, priced));
        }
    }
    read.into_iter().unzip()
}

/// A source's evidence entry.
fn evidence_of(source: &Value, kind: &str, summary: String) -> Value {
    json!({"id": source["id"], "kind": kind, "summary": summary})
}

fn native_source(outcome: &ChainOutcome, at_block: &str) -> (Value, Value) {
    let slug = outcome.chain.slug;
    let native_at = outcome
        .native
        .as_ref()
        .map_or_else(now, |n| n.retrieved_at.clone());
    let mut native = source(
        format!("src-{slug}-native"),
        "native_balance",
        format!("{slug}-rpc"),
        outcome,
        &native_at,
    );
    native["request_scope"] = json!(format!(
        "eth_blockNumber, then eth_getBalance at {at_block}"
    ));
    native["provider_response_complete"] = json!(native_ok(outcome));
    // One eth_getBalance has no pages: the flag only states whether that read completed,
    // and the source says so rather than passing a default off as an observation.
    native["pagination_complete"] = json!(native_ok(outcome));
    let mut native_limitations = match (&outcome.block, &outcome.native) {
        (Err(why), _) => vec![format!("The RPC endpoint could not be read ({why}).")],
        (
            _,
            Some(Timed {
                value: Err(why), ..
            }),
        ) => vec![format!("eth_getBalance failed ({why}).")],
        _ => Vec::new(),
    };
    native_limitations.push(NATIVE_NOT_PAGINATED.to_string());
    native["limitations"] = json!(native_limitations);
    let summary = match (&outcome.native, outcome.block.as_ref().ok()) {
        (
            Some(Timed {
                value: Ok(balance), ..
            }),
            Some(b),
        ) => format!("Native balance {balance} wei read at block {b}."),
        _ => "The native balance was not observed.".to_string(),
    };
    let evidence = evidence_of(&native, "rpc_read", summary);
    (native, evidence)
}

fn inventory_source(outcome: &ChainOutcome, found: &Timed<Inventory>) -> (Value, Value) {
    let slug = outcome.chain.slug;
    let mut inventory = source(
        format!("src-{slug}-inventory"),
        "token_inventory",
        format!("{slug}-inventory"),
        outcome,
        &found.retrieved_at,
    );
    inventory["block_number"] = Value::Null;
    inventory["request_scope"] = json!(
        "alchemy_getTokenBalances(address, \"erc20\") with pageKey pagination, at the provider's latest block; non-zero balances only"
    );
    inventory["pagination_complete"] = json!(found.value.pagination_complete());
    inventory["provider_response_complete"] = json!(found.value.provider_response_complete());
    inventory["discovery_capped"] = json!(outcome.discovery_capped());
    inventory["limitations"] = json!(
        found
            .value
            .stop
            .iter()
            .map(|s| s.describe())
            .collect::<Vec<_>>()
    );
    let summary = format!(
        "{} inventory page(s) read; pagination {}; {} non-zero ERC-20 balances discovered; {} of {} offered holdings returned.",
        found.value.pages_read,
        if found.value.pagination_complete() {
            "complete"
        } else {
            "incomplete"
        },
        found.value.tokens.len(),
        outcome.holdings.len(),
        outcome.offered,
    );
    let evidence = evidence_of(&inventory, "inventory_read", summary);
    (inventory, evidence)
}

fn metadata_source(
    outcome: &ChainOutcome,
    metadata: &Timed<Result<usize, erc20::ReadError>>,
    at_block: &str,
) -> (Value, Value) {
    let slug = outcome.chain.slug;
    let tokens = outcome
        .holdings
        .iter()
        .filter(|h| h.token.is_some())
        .count();
    let mut read = source(
        format!("src-{slug}-metadata"),
        "token_metadata",
        format!("{slug}-rpc"),
        outcome,
        &metadata.retrieved_at,
    );
    read["request_scope"] = json!(format!(
        "Multicall3.aggregate3 eth_call at {at_block}: balanceOf, decimals, symbol of {tokens} tokens"
    ));
    read["provider_response_complete"] = json!(metadata.value.is_ok());
    read["limitations"] = json!(
        metadata_failed(outcome)
            .map(|w| vec![w.to_string()])
            .unwrap_or_default()
    );
    let summary = match &metadata.value {
        Ok(n) => format!(
            "balanceOf, decimals and symbol of {n} tokens read in one eth_call at {at_block}."
        ),
        Err(why) => format!("The same-block token read failed: {why}."),
    };
    let evidence = evidence_of(&read, "rpc_read", summary);
    (read, evidence)
}

fn dex_source(
    outcome: &ChainOutcome,
    pricing: &Timed<Vec<Batch>>,
    settings: &Settings,
    priced: usize,
) -> (Value, Value) {
    let tokens: usize = pricing.value.iter().map(|b| b.tokens).sum();
    let dex_chain = settings
        .dex_chain_ids
        .get(outcome.chain.caip2)
        .cloned()
        .unwrap_or_default();
    let mut dex = source(
        format!("src-{}-dex", outcome.chain.slug),
        "dex_pricing",
        "dexscreener".to_string(),
        outcome,
        &pricing.retrieved_at,
    );
    dex["block_number"] = Value::Null;
    dex["request_scope"] = json!(format!(
        "GET /tokens/v1/{dex_chain}/... for {tokens} tokens in {} batch(es) of at most {}; per token the base-token pair with the largest liquidity.usd, or for a token only on the quote side its quote-side pair with the largest liquidity.usd (price = priceUsd / priceNative); pairs under ${} liquidity are not used",
        pricing.value.len(),
        settings.batch_size,
        settings.floor_text
    ));
    dex["provider_response_complete"] = json!(
        pricing
            .value
            .iter()
            .all(|b| b.error.is_none() && !b.possibly_cut)
    );
    let mut notes = vec![
        "DEX prices are observed pair prices, not oracle or exchange-wide prices.".to_string(),
    ];
    notes.extend(pricing_failures(outcome));
    notes.extend(possibly_cut(outcome, settings));
    dex["limitations"] = json!(notes);
    let summary = format!(
        "{priced} of {} holdings on {} have a usable DEX price.",
        outcome.holdings.len(),
        outcome.chain.caip2
    );
    let evidence = evidence_of(&dex, "dex_quote", summary);
    (dex, evidence)
}

// ---------------------------------------------------------------- totals and verdicts

fn valuation(described: &[(&ChainOutcome, Described)]) -> (Option<Decimal>, Value) {
    let priced: Vec<Decimal> = described.iter().filter_map(|(_, d)| d.value).collect();
    let total = priced
        .iter()
        .try_fold(Decimal::ZERO, |sum, v| sum.checked_add(*v));
    let total = if priced.is_empty() { None } else { total };
    let as_of = described
        .iter()
        .filter_map(|(o, _)| o.pricing.as_ref())
        .filter(|p| p.value.iter().any(|b| b.error.is_none()))
        .map(|p| p.retrieved_at.clone())
        .min();
    let json = json!({
        "quote_basis": "PARTIAL_DEX_QUOTED_COMPOSITION",
        "priced_usd": usd(&total),
        "priced_holding_count": priced.len(),
        "unpriced_holding_count": described.len() - priced.len(),
        "as_of": as_of,
    });
    (total, json)
}

fn concentration(
    described: &[(&ChainOutcome, Described)],
    total: Option<Decimal>,
    settings: &Settings,
) -> Value {
    let largest = described
        .iter()
        .filter_map(|(_, d)| d.value.map(|v| (v, d)))
        .reduce(|best, next| if next.0 > best.0 { next } else { best });
    let (share, concentrated, holding) = match (largest, total) {
        (Some((value, d)), Some(total)) if !total.is_zero() => {
            let exact = value.ratio(total, 18);
            let concentrated = total
                .checked_mul(settings.threshold)
                .is_some_and(|limit| value >= limit);
            let holding = json!({
                "chain": d.json["chain"], "token": d.json["token"], "symbol": d.json["symbol"],
                "priced_usd": value.to_fixed(2),
            });
            (exact.map(|s| s.to_fixed(4)), concentrated, holding)
        }
        _ => (None, false, Value::Null),
    };
    json!({
        "concentrated": concentrated,
        "basis": "PRICED_HOLDINGS_ONLY",
        "threshold": settings.threshold_text,
        "largest_priced_share": share,
        "largest_priced_holding": holding,
    })
}

/// OK, PARTIAL or HOLD for the whole answer.
fn status(outcomes: &[ChainOutcome]) -> &'static str {
    if outcomes.iter().all(|o| !o.readable()) {
        return "HOLD";
    }
    let degraded = outcomes.iter().any(|o| {
        inventory_status(o) != "COMPLETE"
            || !native_ok(o)
            || metadata_failed(o).is_some()
            || !pricing_failures(o).is_empty()
            || o.pricing
                .as_ref()
                .is_some_and(|p| p.value.iter().any(|b| b.possibly_cut))
    });
    if degraded { "PARTIAL" } else { "OK" }
}

fn ordered(codes: &[&'static str], order: &[&'static str]) -> Vec<&'static str> {
    order
        .iter()
        .copied()
        .filter(|c| codes.contains(c))
        .collect()
}

fn evidence_gaps(
    outcomes: &[ChainOutcome],
    overflow: usize,
    unpriced: usize,
    described: &[(&ChainOutcome, Described)],
) -> Vec<&'static str> {
    let mut gaps = Vec::new();
    if outcomes.iter().any(|o| !o.readable()) {
        gaps.push("CHAIN_UNREADABLE");
    }
    if outcomes
        .iter()
        .any(|o| o.readable() && !inventory_complete(o))
    {
        gaps.push("INCOMPLETE_INVENTORY");
    }
    if overflow > 0 {
        gaps.push("HOLDINGS_OMITTED");
    }
    if outcomes.iter().any(|o| o.readable() && !native_ok(o)) {
        gaps.push("NATIVE_BALANCE_UNAVAILABLE");
    }
    let metadata_gap = described
        .iter()
        .any(|(_, d)| d.observations.contains(&"METADATA_UNAVAILABLE"));
    if outcomes.iter().any(|o| metadata_failed(o).is_some()) || metadata_gap {
        gaps.push("METADATA_UNAVAILABLE");
    }
    if outcomes.iter().any(|o| !pricing_failures(o).is_empty()) {
        gaps.push("PRICING_PROVIDER_UNAVAILABLE");
    }
    if unpriced > 0 {
        gaps.push("INCOMPLETE_PRICING_COVERAGE");
        gaps.push("UNPRICED_HOLDINGS");
    }
    gaps
}

fn factual_flags(
    outcomes: &[ChainOutcome],
    described: &[(&ChainOutcome, Described)],
) -> Vec<&'static str> {
    let mut flags = Vec::new();
    if outcomes.iter().any(ChainOutcome::discovery_capped) {
        flags.push("HOLDINGS_CAP_REACHED");
    }
    let seen: Vec<&'static str> = described
        .iter()
        .flat_map(|(_, d)| d.observations.iter().copied())
        .filter(|c| !DESCRIPTIVE.contains(c))
        .collect();
    flags.extend(ordered(&seen, &OBSERVATIONS));
    flags
}

fn overall_limitations(
    outcomes: &[ChainOutcome],
    request: &Parsed,
    settings: &Settings,
    overflow: usize,
) -> Vec<String> {
    let mut out = vec![
        "priced_usd covers priced holdings only and is not a total portfolio value.".to_string(),
        format!(
            "DEX prices are observed pair prices (per token the base-token pair with the largest liquidity.usd, else its deepest quote-side pair), not oracle or exchange-wide prices; pairs under ${} liquidity are not used.",
            settings.floor_text
        ),
        "The inventory provider answers at its own latest block; every returned ERC-20 balance is re-read at the chain's observed block.".to_string(),
    ];
    if overflow > 0 {
        let per_chain: Vec<String> = outcomes
            .iter()
            .filter(|o| o.discovery_capped())
            .map(|o| format!("{}: {}", o.chain.caip2, o.offered - o.holdings.len()))
            .collect();
        out.push(format!(
            "The {}-holding cap omitted {overflow} discovered holdings ({}).",
            settings.cap,
            per_chain.join(", ")
        ));
    }
    if !request.declared.is_empty() {
        out.push("Declared holdings are hints: their balances are read on chain at the chain's block, never taken from the request.".to_string());
    }
    out.extend(outcomes.iter().flat_map(chain_limitations));
    out.extend(outcomes.iter().flat_map(|o| possibly_cut(o, settings)));
    if outcomes.iter().any(|o| {
        o.holdings
            .iter()
            .any(|h| matches!(&h.pricing, Some(Pricing::Pair(q)) if matches!(q.side, Side::Quote { .. })))
    }) {
        out.push("A holding marked PRICED_FROM_QUOTE_SIDE is the quote token of its pair: its price is the pair's priceUsd / priceNative (DexScreener: priceUsd is the base token's USD price, priceNative its price in quote-token units), stated in price_derivation.".to_string());
    }
    out
}

pub(super) fn respond(
    machine: &Machine,
    settings: &Settings,
    request: &Parsed,
    outcomes: &[ChainOutcome],
) -> Value {
    let described: Vec<(&ChainOutcome, Described)> = outcomes
        .iter()
        .flat_map(|o| {
            o.holdings
                .iter()
                .map(move |h| (o, describe(h, o, settings)))
        })
        .collect();
    let (total, valuation) = valuation(&described);
    let concentration = concentration(&described, total, settings);
    let returned = described.len();
    let priced = described.iter().filter(|(_, d)| d.value.is_some()).count();
    let unpriced = returned - priced;
    let overflow: usize = outcomes.iter().map(|o| o.offered - o.holdings.len()).sum();
    let all_complete = outcomes.iter().all(inventory_complete);
    let status = status(outcomes);
    let gaps = evidence_gaps(outcomes, overflow, unpriced, &described);
    let every_chain_complete = outcomes.iter().all(|o| inventory_status(o) == "COMPLETE");
    let confidence = confidence(status, outcomes, &described);
    let readiness_status = match status {
        "HOLD" => "HOLD",
        "OK" if gaps.is_empty() => "READY",
        _ => "PARTIAL",
    };
    let share = priced_share(priced, returned);
    let mut flags = factual_flags(outcomes, &described);
    let mut limitations = overall_limitations(outcomes, request, settings, overflow);
    if !concentration_assessable(&concentration) {
        flags.push(CONCENTRATION_NOT_ASSESSABLE);
        limitations.push("No holding was priced, so concentration could not be assessed: concentrated false and concentration_flag false are not observations (factual flag CONCENTRATION_NOT_ASSESSABLE).".into());
    }
    let (sources, evidence) = every_source_and_evidence(outcomes, &described, settings);
    json!({
        "status": status,
        "machine": machine.machine,
        "methodology_version": machine.methodology_version,
        "checked_at": timestamp::now(),
        "address": request.address_text,
        "requested_chains": request.chains.iter().map(|c| c.caip2).collect::<Vec<_>>(),
        "chains_run": outcomes.iter().filter(|o| o.readable()).map(|o| o.chain.caip2).collect::<Vec<_>>(),
        "chain_results": outcomes.iter().map(chain_result).collect::<Vec<_>>(),
        "valuation": valuation,
        "concentration": concentration.clone(),
        "holdings": described.iter().map(|(_, d)| d.json.clone()).collect::<Vec<_>>(),
        "returned_holding_count": returned,
        "overflow_holding_count": overflow,
        "overflow_count_complete": all_complete,
        "sources": sources,
        "evidence": evidence,
        "limitations": limitations,
        "confidence": confidence,
        "readiness": {
            "purpose": "PRE_ACTION_EVIDENCE_READINESS",
            "status": readiness_status,
            "evidence_sufficient_for_reasoning": status != "HOLD" && every_chain_complete && outcomes.iter().all(native_ok),
            "inventory_complete": all_complete,
            "pricing_coverage": {
                "priced_holding_count": priced,
                "unpriced_holding_count": unpriced,
                "priced_share_of_returned_holdings": share,
            },
            "concentration_flag": concentration["concentrated"],
            "factual_flags": flags,
            "evidence_gaps": gaps,
        },
    })
}

/// The answer's confidence: LOW on HOLD or an incomplete inventory; HIGH when every chain's
/// inventory is complete and every holding's confidence is HIGH; otherwise MEDIUM.
fn confidence(
    status: &str,
    outcomes: &[ChainOutcome],
    described: &[(&ChainOutcome, Described)],
) -> &'static str {
    let all_complete = outcomes.iter().all(inventory_complete);
    let every_chain_complete = outcomes.iter().all(|o| inventory_status(o) == "COMPLETE");
    if status == "HOLD" || !all_complete {
        "LOW"
    } else if status == "OK"
        && every_chain_complete
        && described.iter().all(|(_, d)| d.confidence == "HIGH")
    {
        "HIGH"
    } else {
        "MEDIUM"
    }
}

/// The priced share of the returned holdings, to four decimals.
fn priced_share(priced: usize, returned: usize) -> String {
    Decimal::from_units(U256::from(priced), 0)
        .zip(Decimal::from_units(U256::from(returned), 0))
        .and_then(|(p, r)| p.ratio(r, 4))
        .map_or("0.0000".to_string(), |s| s.to_fixed(4))
}

/// Every chain's sources and evidence, chain by chain.
fn every_source_and_evidence(
    outcomes: &[ChainOutcome],
    described: &[(&ChainOutcome, Described)],
    settings: &Settings,
) -> (Vec<Value>, Vec<Value>) {
    let mut sources = Vec::new();
    let mut evidence = Vec::new();
    for outcome in outcomes {
        let chain_priced = described
            .iter()
            .filter(|(o, d)| std::ptr::eq(*o, outcome) && d.value.is_some())
            .count();
        let (s, e) = sources_and_evidence(outcome, settings, chain_priced);
        sources.extend(s);
        evidence.extend(e);
    }
    (sources, evidence)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::embedded::MANIFEST;

    /// A discovered token's holding priced by a base-side pair of this liquidity.
    fn priced(liquidity_usd: Option<&str>) -> Holding {
        let quote = Quote {
            pair_address: Some("0xpair".into()),
            pair_url: None,
            price_usd: Decimal::parse("2.50"),
            liquidity_usd: liquidity_usd.and_then(Decimal::parse),
            volume_h24_usd: None,
            pair_created_at_ms: None,
            side: Side::Base,
        };
        Holding {
            chain: crate::chain::networks::BASE,
            token: Some(alloy::primitives::Address::repeat_byte(7)),
            origin: Origin::Discovered,
            symbol: Some("TKN".into()),
            decimals: Some(18),
            balance: Some(U256::from(1u8)),
            same_block: true,
            pricing: Some(Pricing::Pair(Box::new(quote))),
        }
    }

    /// Unknown liquidity is not low liquidity: the pair is shown, its price is not used, and
    /// the observation says which of the two it was.
    #[test]
    fn an_unknown_liquidity_is_not_reported_as_low() {
        let machine = MANIFEST.machine("VM03").expect("VM03");
        let settings = Settings::from(machine).expect("settings");
        for (liquidity, said, used) in [
            (None, "LIQUIDITY_UNKNOWN", false),
            (Some("500"), "LOW_DEX_LIQUIDITY", false),
            (Some("20000000"), "", true),
        ] {
            let holding = priced(liquidity);
            let mut observations = Vec::new();
            let (shown, price) = usable_price(&holding, &settings, &mut observations);
            assert!(shown.is_some(), "{liquidity:?}: the pair is shown");
            assert_eq!(price.is_some(), used, "{liquidity:?}");
            assert_eq!(
                observations.first().copied().unwrap_or(""),
                said,
                "{liquidity:?}"
            );
        }
    }
}
