//! ERC-20 holdings discovery through an inventory provider speaking Alchemy's
//! `alchemy_getTokenBalances(address, "erc20", {pageKey})` over JSON-RPC.
//!
//! The provider lists every ERC-20 the address ever touched, with hex balances; zero balances
//! and per-token errors are dropped here. Pages are followed through `pageKey` until the last
//! page (no `pageKey`), the page cap, or the time budget, whichever comes first; the result
//! says which.
//!
//! Each page is one JSON-RPC POST through the counted gateway read within the machine's own
//! answer size limit (`max_provider_response_bytes`), not the general RPC transport's larger
//! cap: an inventory answer is the one provider answer that grows with the address.

use std::collections::HashSet;
use std::time::Instant;

use alloy::primitives::{Address, U256};
use alloy::rpc::json_rpc::{Id, Request, Response, ResponsePayload};
use serde_json::{Value, json};

use crate::config::Secret;
use crate::net::gateway::{Gateway, Upstream};
use crate::net::upstream::{self, Bounds, UpstreamError};

pub(crate) const METHOD: &str = "alchemy_getTokenBalances";

/// How a pagination run ended early, if it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The time budget ran out while page `page` was awaited.
    Budget { budget_ms: u64, page: u32 },
    /// Page `page` failed (transport, HTTP, JSON-RPC error or unreadable shape).
    Failed { page: u32, why: String },
    /// The provider repeated a pageKey: following it would loop.
    RepeatedPageKey { page: u32 },
    /// We stopped after `max_pages` pages with a pageKey still pending.
    PageCap { max_pages: u32 },
}

impl Stop {
    pub(crate) fn describe(&self) -> String {
        match self {
            Stop::Budget { budget_ms, page } => format!(
                "the inventory budget of {budget_ms} ms ran out while page {page} was awaited; holdings on later pages are missing"
            ),
            Stop::Failed { page, why } => format!(
                "inventory page {page} could not be read ({why}); holdings on it and on later pages are missing"
            ),
            Stop::RepeatedPageKey { page } => format!(
                "the provider repeated a pageKey at page {page}; pagination was stopped and later holdings may be missing"
            ),
            Stop::PageCap { max_pages } => format!(
                "pagination stopped at the cap of {max_pages} pages with more pages pending; later holdings are missing"
            ),
        }
    }

    /// Whether every answer we asked for arrived complete (a cap is our choice, not a gap in
    /// the provider's answers).
    pub(crate) fn provider_response_complete(&self) -> bool {
        matches!(self, Stop::PageCap { .. })
    }
}

/// One discovery run.
#[derive(Debug, Clone, Default)]
pub(crate) struct Inventory {
    /// Non-zero balances in the provider's order, first occurrence of each token only.
    pub tokens: Vec<(Address, U256)>,
    pub pages_read: u32,
    /// Entries dropped because the provider gave an error or an unreadable balance for them.
    pub unreadable_entries: u32,
    /// None: the last page was reached.
    pub stop: Option<Stop>,
}

impl Inventory {
    pub(crate) fn pagination_complete(&self) -> bool {
        self.stop.is_none()
    }

    pub(crate) fn provider_response_complete(&self) -> bool {
        self.unreadable_entries == 0
            && self
                .stop
                .as_ref()
                .is_none_or(Stop::provider_response_complete)
    }
}

/// Where and within which bounds the pages are read. `bounds.timeout` is the budget of the
/// whole pagination; `bounds.max_bytes` caps each page's answer.
pub(crate) struct Endpoint<'a> {
    pub gateway: &'a Gateway,
    /// The chain's inventory label in the metrics.
    pub upstream: Upstream,
    /// Usually carries the provider key: never quoted.
    pub url: &'a Secret,
    pub bounds: Bounds,
}

/// How one page request failed.
enum PageError {
    /// The budget ran out (our timeout or the request's own, which is the remaining budget).
    Budget,
    Failed(String),
}

/// Follows the pages within the endpoint's budget.
pub(crate) async fn discover(endpoint: &Endpoint<'_>, owner: Address, max_pages: u32) -> Inventory {
    let budget = endpoint.bounds.timeout;
    let deadline = Instant::now() + budget;
    let mut inventory = Inventory::default();
    let Ok(url) = url::Url::parse(endpoint.url.expose()) else {
        inventory.stop = Some(Stop::Failed {
            page: 1,
            why: "the configured inventory URL is invalid".into(),
        });
        return inventory;
    };
    let mut seen_tokens = HashSet::new();
    let mut seen_keys = HashSet::new();
    let mut page_key: Option<String> = None;
    loop {
        let page = inventory.pages_read + 1;
        if page > max_pages {
            inventory.stop = Some(Stop::PageCap { max_pages });
            return inventory;
        }
        let params = match &page_key {
            None => json!([owner, "erc20"]),
            Some(key) => json!([owner, "erc20", {"pageKey": key}]),
        };
        let result = match read_page(endpoint, &url, page, params, deadline).await {
            Ok(result) => result,
            Err(PageError::Budget) => {
                inventory.stop = Some(Stop::Budget {
                    budget_ms: budget.as_millis() as u64,
                    page,
                });
                return inventory;
            }
            Err(PageError::Failed(why)) => {
                inventory.stop = Some(Stop::Failed { page, why });
                return inventory;
            }
        };
        let Some(entries) = result.get("tokenBalances").and_then(Value::as_array) else {
            inventory.stop = Some(Stop::Failed {
                page,
                why: "the answer has no tokenBalances array".into(),
            });
            return inventory;
        };
        inventory.pages_read = page;
        for entry in entries {
            match read_entry(entry) {
                Some((token, balance)) if !balance.is_zero() && seen_tokens.insert(token) => {
                    inventory.tokens.push((token, balance));
                }
                Some(_) => {}
                None => inventory.unreadable_entries += 1,
            }
        }
        match result
            .get("pageKey")
            .and_then(Value::as_str)
            .filter(|k| !k.is_empty())
        {
            None => return inventory,
            Some(key) if !seen_keys.insert(key.to_string()) => {
                inventory.stop = Some(Stop::RepeatedPageKey { page });
                return inventory;
            }
            Some(key) => page_key = Some(key.to_string()),
        }
    }
}

/// One JSON-RPC call for page `page`, within what is left of the budget: its `result`.
async fn read_page(
    endpoint: &Endpoint<'_>,
    url: &url::Url,
    page: u32,
    params: Value,
    deadline: Instant,
) -> Result<Value, PageError> {
    let remaining = deadline.saturating_duration_since(Instant::now());
    let bounds = Bounds {
        timeout: remaining,
        ..endpoint.bounds
    };
    let call = Request::new(METHOD, Id::Number(u64::from(page)), params);
    let answer = tokio::time::timeout(
        remaining,
        upstream::post_json(
            endpoint.gateway,
            endpoint.upstream,
            url.clone(),
            &call,
            bounds,
        ),
    )
    .await;
    let answer = match answer {
        Err(_) | Ok(Err(UpstreamError::Timeout(_))) => return Err(PageError::Budget),
        // A failure that lands after the deadline is the budget's doing: a late-woken task can
        // see the request's own timeout error before `timeout` checks the clock.
        Ok(Err(_)) if Instant::now() >= deadline => return Err(PageError::Budget),
        Ok(Err(error)) => return Err(PageError::Failed(describe(&error))),
        Ok(Ok(answer)) => answer,
    };
    let response: Response<Value, Value> = serde_json::from_value(answer)
        .map_err(|_| PageError::Failed("RPC answer was not valid JSON-RPC".into()))?;
    match response.payload {
        ResponsePayload::Success(result) => Ok(result),
        ResponsePayload::Failure(error) => Err(PageError::Failed(format!(
            "RPC error {}: {}",
            error.code,
            upstream::printable(&error.message, 240)
        ))),
    }
}

/// A page failure in the words the RPC adapters use, without the URL; a too-large answer
/// names the size limit.
fn describe(error: &UpstreamError) -> String {
    match error {
        UpstreamError::RateLimited => "RPC HTTP status 429".into(),
        UpstreamError::Status(code) => format!("RPC HTTP status {code}"),
        UpstreamError::Malformed | UpstreamError::Shape(_) => {
            "RPC answer was not valid JSON-RPC".into()
        }
        UpstreamError::Connect => "RPC connection failed".into(),
        UpstreamError::Timeout(_) => "RPC timed out".into(),
        UpstreamError::TooLarge(_) => error.to_string(),
        UpstreamError::Failed => "RPC request failed".into(),
    }
}

/// `{contractAddress, tokenBalance, error}`: a token and its balance, or None when the entry
/// carries an error or an unreadable balance. `"0x"` is a zero balance.
fn read_entry(entry: &Value) -> Option<(Address, U256)> {
    if entry.get("error").is_some_and(|e| !e.is_null()) {
        return None;
    }
    let token: Address = entry.get("contractAddress")?.as_str()?.parse().ok()?;
    let hex = entry.get("tokenBalance")?.as_str()?.strip_prefix("0x")?;
    if hex.is_empty() {
        return Some((token, U256::ZERO));
    }
    if hex.len() > 64 {
        return None;
    }
    Some((token, U256::from_str_radix(hex, 16).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_follow_the_documented_shape() {
        let token = "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48";
        let entry = |balance: Value, error: Value| json!({"contractAddress": token, "tokenBalance": balance, "error": error});
        let big = "0x0000000000000000000000000000000000000000000000056bc75e2d63100000";
        assert_eq!(
            read_entry(&entry(json!(big), Value::Null)).map(|(_, b)| b.to_string()),
            Some("100000000000000000000".into())
        );
        assert_eq!(
            read_entry(&entry(json!("0x"), Value::Null)).map(|(_, b)| b),
            Some(U256::ZERO)
        );
        assert_eq!(
            read_entry(&entry(Value::Null, json!("execution reverted"))),
            None
        );
        assert_eq!(read_entry(&entry(json!("12"), Value::Null)), None);
        assert_eq!(
            read_entry(&entry(json!(format!("0x1{}", "0".repeat(64))), Value::Null)),
            None
        );
    }
}
