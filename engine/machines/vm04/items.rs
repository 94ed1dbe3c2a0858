//! One venue item per candidate, its plausibility and outcome; classification and sort.

use std::cmp::Reverse;

use serde_json::{Value, json};

use super::reads::Served;
use super::venues::{Frozen, VenueSpec};
use crate::chain::networks::Chain;
use crate::net::upstream::UpstreamError;
use crate::providers::aave::{AaveError, ReserveObservation};
use crate::providers::lido::SmaObservation;
use crate::support::decimal::Decimal;

// ---------------------------------------------------------------- venue items

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Observed,
    Failed,
    Refused,
}

pub(super) struct VenueResult {
    pub(super) venue_id: String,
    pub(super) protocol: String,
    pub(super) apr: Option<Decimal>,
    pub(super) outcome: Outcome,
    pub(super) item: Value,
    pub(super) errors: Vec<Value>,
}

/// An APR we state, or the reason we refuse to: above the manifest's plausibility ceiling.
impl VenueResult {
    /// A venue not read yet: failed until a reading says otherwise.
    fn unread(spec: &VenueSpec, item: Value) -> VenueResult {
        VenueResult {
            venue_id: spec.venue_id.clone(),
            protocol: spec.protocol.clone(),
            apr: None,
            outcome: Outcome::Failed,
            item,
            errors: Vec::new(),
        }
    }

    /// The venue's primary rate, or its refusal as implausible (`field` names the upstream's
    /// field in the error).
    fn set_primary(&mut self, spec: &VenueSpec, rate: Result<Decimal, Implausible>, field: &str) {
        match rate {
            Ok(apr) => {
                self.item["primary_apr"] = json!(apr.to_plain());
                self.apr = Some(apr);
                self.outcome = Outcome::Observed;
            }
            Err(why) => {
                self.outcome = Outcome::Refused;
                self.errors.push(error_entry(
                    spec,
                    "rate_refused_implausible",
                    format!("{field}: {why}."),
                ));
            }
        }
    }
}

/// Why an observed rate is withheld.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum Implausible {
    #[error("the observed APR {apr} exceeds the plausibility ceiling {ceiling}; it is withheld")]
    AboveCeiling { apr: String, ceiling: String },
    #[error("the API's smaApr {0} is negative")]
    Negative(String),
}

pub(super) fn plausible(apr: Decimal, ceiling: Decimal) -> Result<Decimal, Implausible> {
    if apr > ceiling {
        Err(Implausible::AboveCeiling {
            apr: apr.to_plain(),
            ceiling: ceiling.to_plain(),
        })
    } else {
        Ok(apr)
    }
}

pub(super) fn venue_base(spec: &VenueSpec, frozen: &Frozen, chain: Chain) -> Value {
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
        // Set only from a read that succeeded; a failed read says when it was attempted.
        "observed_at": null,
        "attempted_at": null,
        "read_failed": true,
        "evidence_ids": [],
    })
}

pub(super) fn error_entry(spec: &VenueSpec, code: &str, message: String) -> Value {
    json!({"source": spec.venue_id, "code": code, "message": message})
}

pub(super) fn aave_evidence_id(chain: Chain, reserve: &str) -> String {
    format!(
        "ev-aave-{}-{}",
        chain.chain_id,
        reserve.to_ascii_lowercase()
    )
}

pub(super) const LIDO_EVIDENCE_ID: &str = "ev-lido-sma";
pub(super) const AAVE_SOURCE: &str = "Pool.getReserveData currentLiquidityRate / 1e27";
pub(super) const LIDO_SOURCE: &str = "Lido API /v1/protocol/steth/apr/sma smaApr / 100 (7-day simple moving average of the stETH APR, percent)";

pub(super) fn aave_venue(
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
    let mut result = VenueResult::unread(spec, item);
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
    item["read_failed"] = json!(false);
    item["evidence_ids"] = json!([aave_evidence_id(chain, &spec.reserve)]);
    let borrow = plausible(ray(observation.variable_borrow_rate_ray), ceiling).ok();
    item["secondary_rates"] = json!([{
        "name": "variable_borrow_apr",
        "apr": borrow.map(|b| b.to_plain()),
        "basis": "APR",
    }]);
    let primary = plausible(ray(observation.liquidity_rate_ray), ceiling);
    result.set_primary(spec, primary, "currentLiquidityRate");
    result
}

pub(super) fn percent(value: f64) -> Option<Decimal> {
    Decimal::from_f64(value)?.shift_down(2)
}

pub(super) fn lido_venue(
    spec: &VenueSpec,
    frozen: &Frozen,
    chain: Chain,
    read: &Result<Served<SmaObservation>, UpstreamError>,
    ceiling: Decimal,
) -> VenueResult {
    let mut item = venue_base(spec, frozen, chain);
    item["source"] = json!(LIDO_SOURCE);
    let mut result = VenueResult::unread(spec, item);
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
    item["read_failed"] = json!(false);
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
        .ok_or_else(|| Implausible::Negative(observation.sma_apr_percent.to_string()))
        .and_then(|apr| plausible(apr, ceiling));
    result.set_primary(spec, primary, "smaApr");
    result
}

// ---------------------------------------------------------------- classification and sort

pub(super) fn classify(results: &[VenueResult]) -> (&'static str, &'static str) {
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
pub(super) fn sort(results: &mut [VenueResult], order: &str) {
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

pub(super) fn sort_json(order: &str) -> Value {
    let (direction, field) = match order {
        "rate_desc" => ("desc", "primary_apr"),
        "rate_asc" => ("asc", "primary_apr"),
        _ => ("asc", "protocol"),
    };
    json!({"order": direction, "field": field, "label": "objective_sort_not_a_recommendation"})
}
