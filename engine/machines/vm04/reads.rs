//! The venue reads (Aave v3 on chain, the Lido API), served from the in-process cache when
//! a fresh observation is there.

use std::time::Duration;

use super::venues::{Frozen, VenueSpec};
use crate::catalog::manifest::Machine;
use crate::chain::endpoints::FailoverRpc;
use crate::chain::networks::Chain;
use crate::machines::{WorkContext, WorkError, limit, limit_ms};
use crate::net::upstream::{Bounds, UpstreamError};
use crate::providers::aave::{self, AaveError, ReserveObservation};
use crate::providers::lido::{self, SmaObservation};
use crate::support::evm;

// ---------------------------------------------------------------- reads (cached)

/// An observation and whether it came from the in-process cache.
pub(super) struct Served<T> {
    pub(super) value: T,
    pub(super) age_ms: u64,
    pub(super) cached: bool,
}

/// The manifest limits VM04's provider reads run with.
pub(super) struct ReadLimits {
    /// How long an observation is served from the cache.
    ttl: Duration,
    /// Each provider read's time and size bounds.
    bounds: Bounds,
}

impl ReadLimits {
    /// The limits from the machine's manifest entry; each is required.
    pub(super) fn of(machine: &Machine) -> Result<ReadLimits, WorkError> {
        Ok(ReadLimits {
            ttl: limit_ms(machine, "cache_ttl_ms")?,
            bounds: Bounds {
                timeout: limit_ms(machine, "response_timeout_ms")?,
                max_bytes: usize::try_from(limit(machine, "max_provider_response_bytes")?)
                    .unwrap_or(usize::MAX),
            },
        })
    }
}

pub(super) fn from_cache<T: serde::de::DeserializeOwned>(
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

pub(super) fn store<T: serde::Serialize>(
    context: &WorkContext,
    key: &str,
    value: &T,
    ttl: Duration,
) {
    if let Ok(json) = serde_json::to_value(value) {
        context.cache.put(key, json, ttl);
    }
}

pub(super) async fn read_aave(
    context: &WorkContext,
    limits: &ReadLimits,
    frozen: &Frozen,
    chain: Chain,
    reserve: &str,
    rpc_retries: &mut Vec<String>,
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
    let ttl = limits.ttl;
    if let Some(served) = from_cache(context, &key, ttl) {
        return Ok(served);
    }
    let transport = FailoverRpc::for_chain(
        &context.gateway,
        &context.config,
        chain,
        limits.bounds.timeout,
    )
    .ok_or_else(|| internal("the RPC endpoint"))?;
    let observation = aave::read_reserve(&transport.provider(), provider_address, asset).await;
    rpc_retries.extend(transport.retries());
    let observation = observation?;
    store(context, &key, &observation, ttl);
    Ok(Served {
        value: observation,
        age_ms: 0,
        cached: false,
    })
}

pub(super) async fn read_lido(
    context: &WorkContext,
    limits: &ReadLimits,
) -> Result<Served<SmaObservation>, UpstreamError> {
    let key = "vm04:lido:steth_apr_sma";
    let ttl = limits.ttl;
    if let Some(served) = from_cache(context, key, ttl) {
        return Ok(served);
    }
    let base = context
        .config
        .lido_api_url
        .as_ref()
        .ok_or_else(|| UpstreamError::Shape("no Lido API URL is configured".into()))?;
    let observation = lido::read_sma(&context.gateway, base, limits.bounds).await?;
    store(context, key, &observation, ttl);
    Ok(Served {
        value: observation,
        age_ms: 0,
        cached: false,
    })
}

/// The reads the candidates need, run concurrently; a protocol with no candidate is not read.
pub(super) struct Reads {
    /// When the reads were started: the time an attempted read that failed carries.
    pub(super) attempted_at: String,
    /// The Aave reserve read (symbol), when an Aave venue is a candidate.
    pub(super) aave_reserve: Option<String>,
    pub(super) aave: Option<Result<Served<ReserveObservation>, AaveError>>,
    pub(super) lido: Option<Result<Served<SmaObservation>, UpstreamError>>,
    /// Reads that needed a second attempt, in words (empty: none).
    pub(super) rpc_retries: Vec<String>,
    /// How long an observation is served from the cache.
    pub(super) cache_ttl: Duration,
}

pub(super) async fn read(
    context: &WorkContext,
    limits: &ReadLimits,
    frozen: &Frozen,
    chain: Chain,
    candidates: &[&VenueSpec],
) -> Reads {
    let aave_reserve = candidates
        .iter()
        .find(|v| v.protocol == "aave_v3")
        .map(|v| v.reserve.clone());
    let wants_lido = candidates.iter().any(|v| v.protocol == "lido");
    let attempted_at = crate::support::timestamp::now_millis();
    let mut rpc_retries = Vec::new();
    let aave = async {
        match &aave_reserve {
            Some(reserve) => {
                Some(read_aave(context, limits, frozen, chain, reserve, &mut rpc_retries).await)
            }
            None => None,
        }
    };
    let lido = async {
        match wants_lido {
            true => Some(read_lido(context, limits).await),
            false => None,
        }
    };
    let (aave, lido) = tokio::join!(aave, lido);
    Reads {
        attempted_at,
        aave_reserve,
        aave,
        lido,
        rpc_retries,
        cache_ttl: limits.ttl,
    }
}
