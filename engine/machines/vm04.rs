//! VM04 productive venue snapshot: observed supply/staking rates of one asset from the frozen
//! venue set in machines.yaml (Aave v3 reserves read on chain at one block; Lido's stETH APR
//! from the Lido API). Accepts the V1 form (chain_id + native asset) beside V2 (symbols,
//! filters, sort, limit).
//!
//! Rules (docs/vm04-productive-venue-snapshot.md states them in full):
//! - Candidates are the frozen venues of the chain that serve the resolved asset, after the
//!   venue_types and protocols filters. Only candidates' providers are read.
//! - `primary_apr` is an APR as an exact decimal fraction, never converted to APY.
//! - Sort, then limit; rate sorts put null rates last; ties break on venue_id.
//! - Classification over all candidates: none → OBSERVED_EMPTY_SUPPORTED_SET; all observed →
//!   OBSERVED_COMPLETE; some → OBSERVED_PARTIAL; none observed → HOLD_OUTPUT_REFUSED when
//!   every failure was our plausibility refusal, else HOLD_UPSTREAM.
//! - Successful reads are cached in-process for `cache_ttl_ms`; `cached` and
//!   `observation_age_ms` say when a response used the cache.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::time::Duration;

use alloy::primitives::Address;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{CheckFailure, NotReady, WorkContext, WorkError};
use crate::catalog::manifest::Machine;
use crate::chain::networks::{self, Chain};
use crate::chain::rpc::CountedRpc;
use crate::config::Config;
use crate::machines::checks as rc;
use crate::net::upstream::{Bounds, UpstreamError};
use crate::providers::aave::{self, AaveError, ReserveObservation};
use crate::providers::lido::{self, SmaObservation};
use crate::support::decimal::Decimal;
use crate::support::evm;

/// VM04 productive venue snapshot.
pub struct Vm04;

/// A VM04 request.
#[derive(Debug, Deserialize)]
pub struct Request {
    /// EVM chain id (1 or 8453).
    pub chain_id: u64,
    /// The asset object, echoed as the caller wrote it; read through [`Request::asset_text`].
    pub asset: Value,
    /// Optional venue type filter.
    pub venue_types: Option<Vec<String>>,
    /// Optional protocol filter.
    pub protocols: Option<Vec<String>>,
    /// The sort order (default `protocol`).
    pub sort: Option<String>,
    /// At most this many venues (default from the manifest).
    pub limit: Option<u64>,
}

impl Request {
    /// A string field of the asset object.
    fn asset_text(&self, name: &str) -> Option<&str> {
        self.asset.get(name).and_then(Value::as_str)
    }
}

impl super::Machine for Vm04 {
    const ID: &'static str = "VM04";
    type Request = Request;

    fn check(machine: &Machine, request: &Request) -> Result<(), CheckFailure> {
        check(machine, request)
    }

    fn readiness(machine: &Machine, config: &Config) -> Result<(), NotReady> {
        readiness(machine, config)
    }

    async fn observe(
        context: &WorkContext,
        machine: &'static Machine,
        request: &Request,
    ) -> Result<Value, WorkError> {
        observe(context, machine, request).await
    }
}

fn check(machine: &Machine, request: &Request) -> Result<(), CheckFailure> {
    let kind = request.asset_text("kind").unwrap_or_default();
    let has = |name: &str| request.asset.get(name).is_some();
    match kind {
        "native" => {
            for extra in ["address", "symbol"] {
                if has(extra) {
                    return Err(CheckFailure::field(
                        "asset_field_not_allowed",
                        format!("/asset/{extra}"),
                        format!("asset kind native takes no {extra}"),
                    ));
                }
            }
        }
        "erc20" => {
            if !has("address") {
                return Err(CheckFailure::field(
                    "missing_field",
                    "/asset/address",
                    "asset kind erc20 requires address",
                ));
            }
            if has("symbol") {
                return Err(CheckFailure::field(
                    "asset_field_not_allowed",
                    "/asset/symbol",
                    "asset kind erc20 is identified by address only",
                ));
            }
            rc::token_address(
                request.asset_text("address").unwrap_or_default(),
                "/asset/address",
            )?;
        }
        "symbol" => {
            let Some(symbol) = request.asset_text("symbol") else {
                return Err(CheckFailure::field(
                    "missing_field",
                    "/asset/symbol",
                    "asset kind symbol requires symbol",
                ));
            };
            if has("address") {
                return Err(CheckFailure::field(
                    "asset_field_not_allowed",
                    "/asset/address",
                    "asset kind symbol is identified by symbol only",
                ));
            }
            check_symbol_on_chain(machine, request, symbol)?;
        }
        _ => {}
    }
    Ok(())
}

/// The manifest's per-chain symbol allowlist (`allowlists.symbols.<chain_id>`).
fn check_symbol_on_chain(
    machine: &Machine,
    request: &Request,
    symbol: &str,
) -> Result<(), CheckFailure> {
    let chain_id = request.chain_id;
    let allowed: Vec<&str> = machine
        .allowlists
        .get("symbols")
        .and_then(|s| s.get(chain_id.to_string()))
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if allowed.contains(&symbol) {
        Ok(())
    } else {
        Err(CheckFailure::field(
            "unsupported_symbol",
            "/asset/symbol",
            format!(
                "{symbol} is not supported on chain {chain_id}; supported: {}",
                allowed.join(", ")
            ),
        ))
    }
}

/// Both chains' RPC endpoints and the Lido API must be configured: the frozen set spans them,
/// and a caller must not pay for venues this deployment cannot read.
fn readiness(machine: &Machine, config: &Config) -> Result<(), NotReady> {
    if config.rpc_url_eip155_1.is_none() {
        return super::provider_missing(machine, "the eip155:1 RPC endpoint");
    }
    if config.rpc_url_eip155_8453.is_none() {
        return super::provider_missing(machine, "the eip155:8453 RPC endpoint");
    }
    if config.lido_api_url.is_none() {
        return super::provider_missing(machine, "the Lido API URL");
    }
    Ok(())
}

// ---------------------------------------------------------------- the frozen venue set

#[derive(Debug, Clone, Deserialize)]
struct VenueSpec {
    venue_id: String,
    protocol: String,
    venue_type: String,
    chain_id: u64,
    reserve: String,
    serves: Vec<String>,
    #[serde(default)]
    contracts: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
struct VenueSetSpec {
    protocol_set_version: String,
    venues: Vec<VenueSpec>,
}

/// The manifest's frozen set: venues, per-chain asset addresses, Aave providers.
struct Frozen {
    set: VenueSetSpec,
    /// chain id → symbol → token address (None: the native asset).
    assets: BTreeMap<String, BTreeMap<String, Option<String>>>,
    aave_providers: BTreeMap<String, String>,
}

fn allowlist<T: serde::de::DeserializeOwned>(
    machine: &Machine,
    name: &str,
) -> Result<T, WorkError> {
    let value = machine.allowlists.get(name).cloned().unwrap_or(Value::Null);
    serde_json::from_value(value)
        .map_err(|e| WorkError::Internal(format!("VM04 allowlists.{name} is unreadable: {e}")))
}

fn frozen(machine: &Machine) -> Result<Frozen, WorkError> {
    Ok(Frozen {
        set: allowlist(machine, "venue_set")?,
        assets: allowlist(machine, "assets")?,
        aave_providers: allowlist(machine, "aave_v3_pool_addresses_providers")?,
    })
}

impl Frozen {
    fn asset_address(&self, chain: Chain, symbol: &str) -> Option<String> {
        self.assets
            .get(&chain.chain_id.to_string())
            .and_then(|assets| assets.get(symbol))
            .cloned()
            .flatten()
    }

    /// The allowlisted symbol whose contract is `address` on `chain`.
    fn symbol_of(&self, chain: Chain, address: Address) -> Option<(String, String)> {
        self.assets
            .get(&chain.chain_id.to_string())?
            .iter()
            .find_map(|(symbol, known)| {
                let known = known.as_deref()?;
                (evm::parse_address(known).ok()? == address)
                    .then(|| (symbol.clone(), known.to_string()))
            })
    }
}

// ---------------------------------------------------------------- the request

/// The asset a request names, resolved against the frozen set.
struct Resolved {
    /// None: an ERC-20 outside the frozen set's assets.
    symbol: Option<String>,
    kind: &'static str,
    address: Option<String>,
}

struct Query {
    chain: Chain,
    resolved: Resolved,
    venue_types: Option<Vec<String>>,
    protocols: Option<Vec<String>>,
    sort: String,
    limit: usize,
}

fn query(machine: &Machine, frozen: &Frozen, request: &Request) -> Result<Query, WorkError> {
    let chain = networks::by_id(request.chain_id)
        .ok_or_else(|| WorkError::Internal("chain_id passed validation but is unknown".into()))?;
    let resolved = match request.asset_text("kind").unwrap_or_default() {
        "native" => Resolved {
            symbol: Some("ETH".into()),
            kind: "native",
            address: None,
        },
        "symbol" => {
            let symbol = request.asset_text("symbol").unwrap_or_default().to_string();
            let address = frozen.asset_address(chain, &symbol);
            Resolved {
                kind: if address.is_some() { "erc20" } else { "native" },
                symbol: Some(symbol),
                address,
            }
        }
        _ => {
            let text = request.asset_text("address").unwrap_or_default();
            let address = evm::parse_address(text)
                .map_err(|_| WorkError::Internal("asset.address passed validation".into()))?;
            match frozen.symbol_of(chain, address) {
                Some((symbol, known)) => Resolved {
                    symbol: Some(symbol),
                    kind: "erc20",
                    address: Some(known),
                },
                None => Resolved {
                    symbol: None,
                    kind: "erc20",
                    address: Some(address.to_checksum(None)),
                },
            }
        }
    };
    let default_limit = machine.limit("limit_default").unwrap_or(20);
    Ok(Query {
        chain,
        resolved,
        venue_types: request.venue_types.clone(),
        protocols: request.protocols.clone(),
        sort: request.sort.as_deref().unwrap_or("protocol").to_string(),
        limit: request.limit.unwrap_or(default_limit) as usize,
    })
}

// ---------------------------------------------------------------- selection

/// The candidate venues and the omissions (venues or protocols not returned, and why).
fn select<'a>(frozen: &'a Frozen, query: &Query) -> (Vec<&'a VenueSpec>, Vec<String>) {
    let chain_id = query.chain.chain_id;
    let mut omissions = Vec::new();
    let Some(symbol) = query.resolved.symbol.as_deref() else {
        omissions.push(format!(
            "{} is not an asset of the frozen venue set ({}) on chain {chain_id}; no venue serves it.",
            query.resolved.address.as_deref().unwrap_or_default(),
            frozen.set.protocol_set_version
        ));
        return (Vec::new(), omissions);
    };
    let serving: Vec<&VenueSpec> = frozen
        .set
        .venues
        .iter()
        .filter(|v| v.chain_id == chain_id && v.serves.iter().any(|s| s == symbol))
        .collect();
    let mut protocols: Vec<&str> = frozen
        .set
        .venues
        .iter()
        .map(|v| v.protocol.as_str())
        .collect();
    protocols.sort_unstable();
    protocols.dedup();
    for protocol in protocols {
        if !serving.iter().any(|v| v.protocol == protocol) {
            omissions.push(format!(
                "{protocol} has no venue for {symbol} on chain {chain_id} in the frozen set."
            ));
        }
    }
    let mut candidates = Vec::new();
    for venue in serving {
        let excluded_by = |filter: &Option<Vec<String>>, value: &str| {
            filter
                .as_ref()
                .is_some_and(|allowed| !allowed.iter().any(|a| a == value))
        };
        if excluded_by(&query.venue_types, &venue.venue_type) {
            omissions.push(format!(
                "{} excluded by the venue_types filter.",
                venue.venue_id
            ));
        } else if excluded_by(&query.protocols, &venue.protocol) {
            omissions.push(format!(
                "{} excluded by the protocols filter.",
                venue.venue_id
            ));
        } else {
            candidates.push(venue);
        }
    }
    (candidates, omissions)
}

// ---------------------------------------------------------------- reads (cached)

/// An observation and whether it came from the in-process cache.
struct Served<T> {
    value: T,
    age_ms: u64,
    cached: bool,
}

fn cache_ttl(machine: &Machine) -> Duration {
    Duration::from_millis(machine.limit("cache_ttl_ms").unwrap_or(60_000))
}

fn bounds(machine: &Machine) -> Bounds {
    Bounds {
        timeout: Duration::from_millis(machine.limit("response_timeout_ms").unwrap_or(8000)),
        max_bytes: machine
            .limit("max_provider_response_bytes")
            .unwrap_or(65_536) as usize,
    }
}

fn from_cache<T: serde::de::DeserializeOwned>(
    context: &WorkContext,
    key: &str,
    ttl: Duration,
) -> Option<Served<T>> {
    let hit = context.cache.get(key, ttl)?;
    let value = serde_json::from_value(hit.value).ok()?;
    Some(Served {
        value,
        age_ms: hit.age.as_millis() as u64,
        cached: true,
    })
}

fn store<T: serde::Serialize>(context: &WorkContext, key: &str, value: &T, ttl: Duration) {
    if let Ok(json) = serde_json::to_value(value) {
        context.cache.put(key, json, ttl);
    }
}

async fn read_aave(
    context: &WorkContext,
    machine: &Machine,
    frozen: &Frozen,
    chain: Chain,
    reserve: &str,
) -> Result<Served<ReserveObservation>, AaveError> {
    let internal = |what: &str| AaveError::Rpc(format!("{what} is not configured correctly"));
    let provider_address = frozen
        .aave_providers
        .get(&chain.chain_id.to_string())
        .and_then(|a| evm::parse_address(a).ok())
        .ok_or_else(|| internal("the PoolAddressesProvider"))?;
    let asset = frozen
        .asset_address(chain, reserve)
        .and_then(|a| evm::parse_address(&a).ok())
        .ok_or_else(|| internal("the reserve asset"))?;
    let key = format!("vm04:aave_v3:{}:{asset:#x}", chain.chain_id);
    let ttl = cache_ttl(machine);
    if let Some(served) = from_cache(context, &key, ttl) {
        return Ok(served);
    }
    let url = context
        .rpc_url(chain.caip2)
        .ok_or_else(|| internal("the RPC endpoint"))?;
    let rpc = CountedRpc::new(context.gateway.clone(), url, bounds(machine).timeout).provider();
    let observation = aave::read_reserve(&rpc, provider_address, asset).await?;
    store(context, &key, &observation, ttl);
    Ok(Served {
        value: observation,
        age_ms: 0,
        cached: false,
    })
}

async fn read_lido(
    context: &WorkContext,
    machine: &Machine,
) -> Result<Served<SmaObservation>, UpstreamError> {
    let key = "vm04:lido:steth_apr_sma";
    let ttl = cache_ttl(machine);
    if let Some(served) = from_cache(context, key, ttl) {
        return Ok(served);
    }
    let base = context
        .config
        .lido_api_url
        .as_ref()
        .ok_or_else(|| UpstreamError::Shape("no Lido API URL is configured".into()))?;
    let observation = lido::read_sma(&context.gateway, base, bounds(machine)).await?;
    store(context, key, &observation, ttl);
    Ok(Served {
        value: observation,
        age_ms: 0,
        cached: false,
    })
}

/// The reads the candidates need, run concurrently; a protocol with no candidate is not read.
struct Reads {
    /// The Aave reserve read (symbol), when an Aave venue is a candidate.
    aave_reserve: Option<String>,
    aave: Option<Result<Served<ReserveObservation>, AaveError>>,
    lido: Option<Result<Served<SmaObservation>, UpstreamError>>,
}

async fn read(
    context: &WorkContext,
    machine: &Machine,
    frozen: &Frozen,
    chain: Chain,
    candidates: &[&VenueSpec],
) -> Reads {
    let aave_reserve = candidates
        .iter()
        .find(|v| v.protocol == "aave_v3")
        .map(|v| v.reserve.clone());
    let wants_lido = candidates.iter().any(|v| v.protocol == "lido");
    let aave = async {
        match &aave_reserve {
            Some(reserve) => Some(read_aave(context, machine, frozen, chain, reserve).await),
            None => None,
        }
    };
    let lido = async {
        match wants_lido {
            true => Some(read_lido(context, machine).await),
            false => None,
        }
    };
    let (aave, lido) = tokio::join!(aave, lido);
    Reads {
        aave_reserve,
        aave,
        lido,
    }
}

// ---------------------------------------------------------------- venue items

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Observed,
    Failed,
    Refused,
}

struct VenueResult {
    venue_id: String,
    protocol: String,
    apr: Option<Decimal>,
    outcome: Outcome,
    item: Value,
    errors: Vec<Value>,
}

/// An APR we state, or the reason we refuse to: above the manifest's plausibility ceiling.
fn plausible(apr: Decimal, ceiling: Decimal) -> Result<Decimal, String> {
    if apr > ceiling {
        Err(format!(
            "the observed APR {} exceeds the plausibility ceiling {}; it is withheld",
            apr.to_plain(),
            ceiling.to_plain()
        ))
    } else {
        Ok(apr)
    }
}

fn venue_base(spec: &VenueSpec, frozen: &Frozen, chain: Chain) -> Value {
    json!({
        "venue_id": spec.venue_id,
        "protocol": spec.protocol,
        "venue_type": spec.venue_type,
        "chain_id": chain.chain_id,
        "asset": {"symbol": spec.reserve, "address": frozen.asset_address(chain, &spec.reserve)},
        "contracts": spec.contracts,
        "primary_apr": null,
        "primary_rate_basis": "APR",
        "unit": "decimal_fraction",
        "secondary_rates": [],
        "source": "",
        "block_number": null,
        "observed_at": crate::providers::now(),
        "evidence_ids": [],
    })
}

fn error_entry(spec: &VenueSpec, code: &str, message: String) -> Value {
    json!({"source": spec.venue_id, "code": code, "message": message})
}

fn aave_evidence_id(chain: Chain, reserve: &str) -> String {
    format!(
        "ev-aave-{}-{}",
        chain.chain_id,
        reserve.to_ascii_lowercase()
    )
}

const LIDO_EVIDENCE_ID: &str = "ev-lido-sma";
const AAVE_SOURCE: &str = "Pool.getReserveData currentLiquidityRate / 1e27";
const LIDO_SOURCE: &str = "Lido API /v1/protocol/steth/apr/sma smaApr / 100 (7-day simple moving average of the stETH APR, percent)";

fn aave_venue(
    spec: &VenueSpec,
    frozen: &Frozen,
    chain: Chain,
    read: &Result<Served<ReserveObservation>, AaveError>,
    ceiling: Decimal,
) -> VenueResult {
    let mut item = venue_base(spec, frozen, chain);
    item["source"] = json!(AAVE_SOURCE);
    if let Some(provider) = frozen.aave_providers.get(&chain.chain_id.to_string()) {
        item["contracts"]["pool_addresses_provider"] = json!(provider);
    }
    let mut result = VenueResult {
        venue_id: spec.venue_id.clone(),
        protocol: spec.protocol.clone(),
        apr: None,
        outcome: Outcome::Failed,
        item,
        errors: Vec::new(),
    };
    let served = match read {
        Ok(served) => served,
        Err(error) => {
            result
                .errors
                .push(error_entry(spec, error.code(), error.to_string()));
            return result;
        }
    };
    let observation = &served.value;
    let ray = |v| Decimal::from_units(v, 27).unwrap_or(Decimal::ZERO);
    let item = &mut result.item;
    item["contracts"]["pool"] = json!(observation.pool.to_checksum(None));
    item["contracts"]["a_token"] = json!(observation.a_token.to_checksum(None));
    item["block_number"] = json!(observation.block_number.to_string());
    item["observed_at"] = json!(observation.retrieved_at);
    item["evidence_ids"] = json!([aave_evidence_id(chain, &spec.reserve)]);
    let borrow = plausible(ray(observation.variable_borrow_rate_ray), ceiling).ok();
    item["secondary_rates"] = json!([{
        "name": "variable_borrow_apr",
        "apr": borrow.map(|b| b.to_plain()),
        "basis": "APR",
    }]);
    match plausible(ray(observation.liquidity_rate_ray), ceiling) {
        Ok(apr) => {
            item["primary_apr"] = json!(apr.to_plain());
            result.apr = Some(apr);
            result.outcome = Outcome::Observed;
        }
        Err(why) => {
            result.outcome = Outcome::Refused;
            result.errors.push(error_entry(
                spec,
                "rate_refused_implausible",
                format!("currentLiquidityRate: {why}."),
            ));
        }
    }
    result
}

fn percent(value: f64) -> Option<Decimal> {
    Decimal::from_f64(value)?.shift_down(2)
}

fn lido_venue(
    spec: &VenueSpec,
    frozen: &Frozen,
    chain: Chain,
    read: &Result<Served<SmaObservation>, UpstreamError>,
    ceiling: Decimal,
) -> VenueResult {
    let mut item = venue_base(spec, frozen, chain);
    item["source"] = json!(LIDO_SOURCE);
    let mut result = VenueResult {
        venue_id: spec.venue_id.clone(),
        protocol: spec.protocol.clone(),
        apr: None,
        outcome: Outcome::Failed,
        item,
        errors: Vec::new(),
    };
    let served = match read {
        Ok(served) => served,
        Err(error) => {
            result.errors.push(error_entry(
                spec,
                error.code(),
                format!("Lido API: {error}"),
            ));
            return result;
        }
    };
    let observation = &served.value;
    let item = &mut result.item;
    item["observed_at"] = json!(observation.retrieved_at);
    item["evidence_ids"] = json!([LIDO_EVIDENCE_ID]);
    let latest = observation
        .latest_apr_percent
        .and_then(percent)
        .and_then(|apr| plausible(apr, ceiling).ok());
    item["secondary_rates"] = json!([{
        "name": "latest_daily_apr_in_sma_window",
        "apr": latest.map(|l| l.to_plain()),
        "basis": "APR",
    }]);
    let primary = percent(observation.sma_apr_percent)
        .ok_or_else(|| {
            format!(
                "the API's smaApr {} is negative",
                observation.sma_apr_percent
            )
        })
        .and_then(|apr| plausible(apr, ceiling));
    match primary {
        Ok(apr) => {
            item["primary_apr"] = json!(apr.to_plain());
            result.apr = Some(apr);
            result.outcome = Outcome::Observed;
        }
        Err(why) => {
            result.outcome = Outcome::Refused;
            result.errors.push(error_entry(
                spec,
                "rate_refused_implausible",
                format!("smaApr: {why}."),
            ));
        }
    }
    result
}

// ---------------------------------------------------------------- classification and sort

fn classify(results: &[VenueResult]) -> (&'static str, &'static str) {
    let observed = results
        .iter()
        .filter(|r| r.outcome == Outcome::Observed)
        .count();
    let refused = results
        .iter()
        .filter(|r| r.outcome == Outcome::Refused)
        .count();
    match (results.len(), observed) {
        (0, _) => ("OK", "OBSERVED_EMPTY_SUPPORTED_SET"),
        (all, seen) if seen == all => ("OK", "OBSERVED_COMPLETE"),
        (_, seen) if seen > 0 => ("PARTIAL", "OBSERVED_PARTIAL"),
        (all, _) if refused == all => ("HOLD", "HOLD_OUTPUT_REFUSED"),
        _ => ("HOLD", "HOLD_UPSTREAM"),
    }
}

/// Objective order, not a recommendation. Rate sorts put null rates last; ties break on
/// venue_id so the order is total.
fn sort(results: &mut [VenueResult], order: &str) {
    match order {
        "rate_desc" => results.sort_by(|a, b| {
            (a.apr.is_none(), Reverse(a.apr), &a.venue_id).cmp(&(
                b.apr.is_none(),
                Reverse(b.apr),
                &b.venue_id,
            ))
        }),
        "rate_asc" => results.sort_by(|a, b| {
            (a.apr.is_none(), a.apr, &a.venue_id).cmp(&(b.apr.is_none(), b.apr, &b.venue_id))
        }),
        _ => results.sort_by(|a, b| (&a.protocol, &a.venue_id).cmp(&(&b.protocol, &b.venue_id))),
    }
}

fn sort_json(order: &str) -> Value {
    let (direction, field) = match order {
        "rate_desc" => ("desc", "primary_apr"),
        "rate_asc" => ("asc", "primary_apr"),
        _ => ("asc", "protocol"),
    };
    json!({"order": direction, "field": field, "label": "objective_sort_not_a_recommendation"})
}

// ---------------------------------------------------------------- observe

async fn observe(
    context: &WorkContext,
    machine: &Machine,
    request: &Request,
) -> Result<Value, WorkError> {
    let frozen = frozen(machine)?;
    let query = query(machine, &frozen, request)?;
    let (candidates, mut omissions) = select(&frozen, &query);
    let reads = read(context, machine, &frozen, query.chain, &candidates).await;
    let ceiling = Decimal::from_units(
        alloy::primitives::U256::from(machine.limit("max_plausible_apr_percent").unwrap_or(1000)),
        2,
    )
    .unwrap_or(Decimal::ZERO);
    let mut results: Vec<VenueResult> = candidates
        .iter()
        .filter_map(
            |spec| match (spec.protocol.as_str(), &reads.aave, &reads.lido) {
                ("aave_v3", Some(read), _) => {
                    Some(aave_venue(spec, &frozen, query.chain, read, ceiling))
                }
                ("lido", _, Some(read)) => {
                    Some(lido_venue(spec, &frozen, query.chain, read, ceiling))
                }
                _ => None,
            },
        )
        .collect();
    let (status, classification) = classify(&results);
    sort(&mut results, &query.sort);
    let truncated = results.len() > query.limit;
    for cut in results.iter().skip(query.limit) {
        omissions.push(format!(
            "{} omitted by limit {}.",
            cut.venue_id, query.limit
        ));
    }
    let errors: Vec<Value> = results.iter().flat_map(|r| r.errors.clone()).collect();
    let venues: Vec<Value> = results
        .into_iter()
        .take(query.limit)
        .map(|r| r.item)
        .collect();
    Ok(respond(
        machine,
        &frozen,
        request,
        &query,
        &reads,
        Decision {
            status,
            classification,
            truncated,
            omissions,
            errors,
            venues,
        },
    ))
}

/// What `observe` decided, handed to `respond`.
struct Decision {
    status: &'static str,
    classification: &'static str,
    truncated: bool,
    omissions: Vec<String>,
    errors: Vec<Value>,
    venues: Vec<Value>,
}

/// Freshness over the reads used: (block, cached, oldest age, earliest retrieval).
fn freshness(reads: &Reads) -> (Option<String>, bool, u64, Option<String>) {
    let mut cached = false;
    let mut age = 0;
    let mut earliest: Option<String> = None;
    let mut note = |served_cached: bool, served_age: u64, at: &str| {
        cached |= served_cached;
        age = age.max(served_age);
        if earliest.as_deref().is_none_or(|e| at < e) {
            earliest = Some(at.to_string());
        }
    };
    let mut block = None;
    if let Some(Ok(served)) = &reads.aave {
        note(served.cached, served.age_ms, &served.value.retrieved_at);
        block = Some(served.value.block_number.to_string());
    }
    if let Some(Ok(served)) = &reads.lido {
        note(served.cached, served.age_ms, &served.value.retrieved_at);
    }
    (block, cached, age, earliest)
}

fn evidence(reads: &Reads, chain: Chain) -> Vec<Value> {
    let mut evidence = Vec::new();
    if let (Some(Ok(served)), Some(reserve)) = (&reads.aave, &reads.aave_reserve) {
        evidence.push(json!({
            "id": aave_evidence_id(chain, reserve),
            "kind": "eth_call",
            "source": "Pool.getReserveData (Pool from PoolAddressesProvider.getPool at the same block)",
            "block_number": served.value.block_number.to_string(),
            "retrieved_at": served.value.retrieved_at,
        }));
    }
    if let Some(Ok(served)) = &reads.lido {
        evidence.push(json!({
            "id": LIDO_EVIDENCE_ID,
            "kind": "http_get",
            "source": "Lido API /v1/protocol/steth/apr/sma",
            "block_number": null,
            "retrieved_at": served.value.retrieved_at,
        }));
    }
    evidence
}

fn limitations(query: &Query, reads: &Reads, age: u64, cached: bool, ttl: Duration) -> Vec<String> {
    let mut out = vec![
        "primary_apr is an APR as a decimal fraction (0.0412 = 4.12%); it is never converted to APY.".to_string(),
    ];
    if reads.aave.is_some() {
        out.push("Aave v3 APR values are observed at one block; they change with utilization and are not a forecast.".into());
        if query.resolved.kind == "native" {
            out.push("Native ETH is supplied to Aave v3 as WETH (through its WETH gateway); the Aave venue is the WETH reserve.".into());
        }
    }
    if reads.lido.is_some() {
        out.push("The Lido rate is the Lido API's 7-day simple moving average of the stETH APR; it is not read on chain and has no block number.".into());
        if query.chain.chain_id == networks::BASE.chain_id {
            out.push("wstETH on eip155:8453 is bridged and non-rebasing; its Lido rate is the Ethereum stETH APR, accrued through the wstETH exchange rate.".into());
        }
    }
    if cached {
        out.push(format!(
            "Served from the in-process cache: the oldest observation used is {age} ms old (cache TTL {} ms).",
            ttl.as_millis()
        ));
    }
    out
}

fn respond(
    machine: &Machine,
    frozen: &Frozen,
    request: &Request,
    query: &Query,
    reads: &Reads,
    outcome: Decision,
) -> Value {
    let (block, cached, age, earliest) = freshness(reads);
    let asset_echo = request.asset.clone();
    json!({
        "status": outcome.status,
        "classification": outcome.classification,
        "machine": machine.machine,
        "methodology_version": machine.methodology_version,
        "protocol_set_version": frozen.set.protocol_set_version,
        "chain_id": query.chain.chain_id,
        "asset": {
            "kind": asset_echo["kind"],
            "address": asset_echo.get("address").cloned().unwrap_or(Value::Null),
            "symbol": asset_echo.get("symbol").cloned().unwrap_or(Value::Null),
        },
        "request": {
            "chain_id": query.chain.chain_id,
            "asset": asset_echo,
            "venue_types": query.venue_types,
            "protocols": query.protocols,
            "sort": query.sort,
            "limit": query.limit,
        },
        "resolved": {
            "chain_id": query.chain.chain_id,
            "asset": {"kind": query.resolved.kind, "address": query.resolved.address},
            "symbol": query.resolved.symbol,
        },
        "sort": sort_json(&query.sort),
        "result_count": outcome.venues.len(),
        "truncated": outcome.truncated,
        "omissions": outcome.omissions,
        "retrieved_at": earliest.unwrap_or_else(crate::providers::now),
        "block_number": block,
        "cached": cached,
        "observation_age_ms": age,
        "venues": outcome.venues,
        "limitations": limitations(query, reads, age, cached, cache_ttl(machine)),
        "errors": outcome.errors,
        "evidence": evidence(reads, query.chain),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::embedded::MANIFEST;

    fn vm04() -> &'static Machine {
        MANIFEST
            .machines
            .iter()
            .find(|m| m.machine == "VM04")
            .expect("VM04")
    }

    #[test]
    fn the_frozen_set_is_consistent_with_the_symbol_allowlist() {
        let frozen = frozen(vm04()).expect("frozen set parses");
        let symbols: BTreeMap<String, Vec<String>> = allowlist(vm04(), "symbols").expect("symbols");
        for (chain, listed) in &symbols {
            let mut assets: Vec<&String> = frozen.assets[chain].keys().collect();
            let mut listed: Vec<&String> = listed.iter().collect();
            assets.sort();
            listed.sort();
            assert_eq!(assets, listed, "chain {chain}: assets and symbols differ");
            assert!(frozen.aave_providers.contains_key(chain));
        }
        for venue in &frozen.set.venues {
            let chain = venue.chain_id.to_string();
            assert!(
                frozen.assets[&chain].contains_key(&venue.reserve),
                "{}",
                venue.venue_id
            );
            for symbol in &venue.serves {
                assert!(
                    symbols[&chain].contains(symbol),
                    "{} serves {symbol}",
                    venue.venue_id
                );
            }
            for address in venue.contracts.values() {
                assert!(evm::parse_address(address).is_ok(), "{address}");
            }
            assert_eq!(
                venue.venue_id,
                format!("{}:{}:{}", venue.protocol, venue.chain_id, venue.reserve)
            );
        }
    }

    fn result(id: &str, protocol: &str, apr: Option<&str>, outcome: Outcome) -> VenueResult {
        VenueResult {
            venue_id: id.into(),
            protocol: protocol.into(),
            apr: apr.and_then(Decimal::parse),
            outcome,
            item: Value::Null,
            errors: Vec::new(),
        }
    }

    #[test]
    fn rate_sorts_put_null_rates_last_in_both_directions() {
        let mut results = vec![
            result("lido:1:stETH", "lido", None, Outcome::Failed),
            result("aave_v3:1:WETH", "aave_v3", Some("0.02"), Outcome::Observed),
            result("x:1:B", "x", Some("0.031"), Outcome::Observed),
            result("x:1:A", "x", Some("0.031"), Outcome::Observed),
        ];
        let ids = |r: &[VenueResult]| r.iter().map(|v| v.venue_id.clone()).collect::<Vec<_>>();
        sort(&mut results, "rate_desc");
        assert_eq!(
            ids(&results),
            ["x:1:A", "x:1:B", "aave_v3:1:WETH", "lido:1:stETH"]
        );
        sort(&mut results, "rate_asc");
        assert_eq!(
            ids(&results),
            ["aave_v3:1:WETH", "x:1:A", "x:1:B", "lido:1:stETH"]
        );
        sort(&mut results, "protocol");
        assert_eq!(
            ids(&results),
            ["aave_v3:1:WETH", "lido:1:stETH", "x:1:A", "x:1:B"]
        );
    }

    #[test]
    fn each_classification_has_its_rule() {
        let r = |outcome| result("v", "p", None, outcome);
        assert_eq!(classify(&[]), ("OK", "OBSERVED_EMPTY_SUPPORTED_SET"));
        assert_eq!(
            classify(&[r(Outcome::Observed)]),
            ("OK", "OBSERVED_COMPLETE")
        );
        assert_eq!(
            classify(&[r(Outcome::Observed), r(Outcome::Refused)]),
            ("PARTIAL", "OBSERVED_PARTIAL")
        );
        assert_eq!(
            classify(&[r(Outcome::Refused), r(Outcome::Refused)]),
            ("HOLD", "HOLD_OUTPUT_REFUSED")
        );
        assert_eq!(
            classify(&[r(Outcome::Refused), r(Outcome::Failed)]),
            ("HOLD", "HOLD_UPSTREAM")
        );
    }
}
