//! VM04 productive venue snapshot. Accepts the V1 form (chain_id + native asset) beside V2.

use serde_json::Value;

use super::{WorkContext, WorkError};
use crate::api_error::ApiError;
use crate::config::Config;
use crate::manifest::Machine;
use crate::request_checks as rc;

pub fn check(machine: &Machine, request: &Value) -> Result<(), ApiError> {
    let kind = rc::text(request, "/asset/kind").unwrap_or_default();
    let has = |name: &str| request.pointer(&format!("/asset/{name}")).is_some();
    match kind {
        "native" => {
            for extra in ["address", "symbol"] {
                if has(extra) {
                    return Err(ApiError::invalid_field(
                        "asset_field_not_allowed",
                        format!("/asset/{extra}"),
                        format!("asset kind native takes no {extra}"),
                    ));
                }
            }
        }
        "erc20" => {
            if !has("address") {
                return Err(ApiError::invalid_field(
                    "missing_field",
                    "/asset/address",
                    "asset kind erc20 requires address",
                ));
            }
            if has("symbol") {
                return Err(ApiError::invalid_field(
                    "asset_field_not_allowed",
                    "/asset/symbol",
                    "asset kind erc20 is identified by address only",
                ));
            }
            rc::token_address(request, "/asset/address")?;
        }
        "symbol" => {
            let Some(symbol) = rc::text(request, "/asset/symbol") else {
                return Err(ApiError::invalid_field(
                    "missing_field",
                    "/asset/symbol",
                    "asset kind symbol requires symbol",
                ));
            };
            if has("address") {
                return Err(ApiError::invalid_field(
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
fn check_symbol_on_chain(machine: &Machine, request: &Value, symbol: &str) -> Result<(), ApiError> {
    let chain_id = request
        .get("chain_id")
        .and_then(Value::as_u64)
        .unwrap_or_default();
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
        Err(ApiError::invalid_field(
            "unsupported_symbol",
            "/asset/symbol",
            format!(
                "{symbol} is not supported on chain {chain_id}; supported: {}",
                allowed.join(", ")
            ),
        ))
    }
}

pub fn readiness(machine: &Machine, _config: &Config) -> Result<(), ApiError> {
    super::not_implemented(machine)
}

pub async fn observe(
    _context: &WorkContext,
    machine: &Machine,
    _request: &Value,
) -> Result<Value, WorkError> {
    Err(WorkError::NotImplemented(machine.machine.clone()))
}
