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

use serde::Deserialize;
use serde_json::Value;

use super::{Call, CheckFailure, Need, WorkError, limit};
use crate::catalog::manifest::Machine;
use crate::chain::networks::{self, Chain};
use crate::machines::checks as rc;
use crate::support::decimal::Decimal;
use crate::support::evm;
use crate::support::json_value::str_items;

/// VM04 productive venue snapshot.
pub(crate) struct Vm04;

/// A VM04 request.
#[derive(Debug, Deserialize)]
pub(crate) struct Request {
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
    type Answer = Value;
    /// Both chains' RPC endpoints and the Lido API must be configured: the frozen set spans them,
    /// and a caller must not pay for venues this deployment cannot read.
    const NEEDS: &'static [Need] = &[Need::Rpc("eip155:1"), Need::Rpc("eip155:8453"), Need::Lido];

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

    async fn observe(call: Call<'_, Request>) -> Result<Value, WorkError> {
        let (context, machine, request) = call.parts();
        let frozen = frozen(machine)?;
        let query = query(machine, &frozen, request)?;
        let (candidates, mut omissions) = select(&frozen, &query);
        let limits = ReadLimits::of(machine)?;
        let ceiling_percent = limit(machine, "max_plausible_apr_percent")?;
        let reads = read(context, &limits, &frozen, query.chain, &candidates).await;
        let ceiling = Decimal::from_units(alloy::primitives::U256::from(ceiling_percent), 2)
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
        for result in &mut results {
            result.item["attempted_at"] = Value::String(reads.attempted_at.clone());
        }
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
}

/// The manifest's per-chain symbol allowlist (`allowlists.symbols.<chain_id>`).
fn check_symbol_on_chain(
    machine: &Machine,
    request: &Request,
    symbol: &str,
) -> Result<(), CheckFailure> {
    let chain_id = request.chain_id;
    let allowed: Vec<&str> = str_items(
        machine
            .allowlists
            .get("symbols")
            .and_then(|s| s.get(chain_id.to_string())),
    )
    .collect();
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

mod items;
mod reads;
mod respond;
mod venues;

use items::{VenueResult, aave_venue, classify, lido_venue, sort};
use reads::{ReadLimits, read};
use respond::{Decision, respond};
use venues::{Frozen, frozen, select};

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
    let chain =
        networks::by_id(request.chain_id).ok_or_else(|| WorkError::unreadable("chain_id"))?;
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
            let address =
                evm::parse_address(text).map_err(|_| WorkError::unreadable("asset.address"))?;
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
    let default_limit = limit(machine, "limit_default")?;
    Ok(Query {
        chain,
        resolved,
        venue_types: request.venue_types.clone(),
        protocols: request.protocols.clone(),
        sort: request.sort.as_deref().unwrap_or("protocol").to_string(),
        limit: request.limit.unwrap_or(default_limit) as usize,
    })
}

// ---------------------------------------------------------------- observe

/// What `observe` decided, handed to `respond`.
#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::items::Outcome;
    use super::venues::allowlist;
    use super::*;
    use crate::catalog::embedded::MANIFEST;

    #[test]
    fn the_manifest_declares_every_limit_the_reads_run_with() {
        ReadLimits::of(vm04()).expect("read limits");
        limit(vm04(), "max_plausible_apr_percent").expect("APR ceiling");
        limit(vm04(), "limit_default").expect("default limit");
    }

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
