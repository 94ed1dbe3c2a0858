//! ERC-20 holdings discovery through an inventory provider speaking Alchemy's
//! `alchemy_getTokenBalances(address, "erc20", {pageKey})` over JSON-RPC.
//!
//! The provider lists every ERC-20 the address ever touched, with hex balances; zero balances
//! and per-token errors are dropped here. Pages are followed through `pageKey` until the last
//! page (no `pageKey`), the page cap, or the time budget, whichever comes first; the result
//! says which.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use alloy::primitives::{Address, U256};
use alloy::providers::{Provider, RootProvider};
use serde_json::{Value, json};

use crate::rpc::describe_error;

pub const METHOD: &str = "alchemy_getTokenBalances";

/// How a pagination run ended early, if it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
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
    pub fn describe(&self) -> String {
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
    pub fn provider_response_complete(&self) -> bool {
        matches!(self, Stop::PageCap { .. })
    }
}

/// One discovery run.
#[derive(Debug, Clone, Default)]
pub struct Inventory {
    /// Non-zero balances in the provider's order, first occurrence of each token only.
    pub tokens: Vec<(Address, U256)>,
    pub pages_read: u32,
    /// Entries dropped because the provider gave an error or an unreadable balance for them.
    pub unreadable_entries: u32,
    /// None: the last page was reached.
    pub stop: Option<Stop>,
}

impl Inventory {
    pub fn pagination_complete(&self) -> bool {
        self.stop.is_none()
    }

    pub fn provider_response_complete(&self) -> bool {
        self.unreadable_entries == 0
            && self
                .stop
                .as_ref()
                .is_none_or(Stop::provider_response_complete)
    }
}

/// Follows the pages within `budget`.
pub async fn discover(
    rpc: &RootProvider,
    owner: Address,
    budget: Duration,
    max_pages: u32,
) -> Inventory {
    let deadline = Instant::now() + budget;
    let mut inventory = Inventory::default();
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
        let remaining = deadline.saturating_duration_since(Instant::now());
        let answer = tokio::time::timeout(
            remaining,
            rpc.raw_request::<_, Value>(METHOD.into(), params),
        )
        .await;
        // A failure that lands after the deadline is the budget's doing: a late-woken task can
        // see the transport's own timeout before `timeout` checks the clock.
        let answer = match answer {
            Ok(Err(_)) if Instant::now() >= deadline => Err(()),
            Ok(result) => Ok(result),
            Err(_) => Err(()),
        };
        let result = match answer {
            Err(_) => {
                inventory.stop = Some(Stop::Budget {
                    budget_ms: budget.as_millis() as u64,
                    page,
                });
                return inventory;
            }
            Ok(Err(error)) => {
                inventory.stop = Some(Stop::Failed {
                    page,
                    why: describe_error(&error),
                });
                return inventory;
            }
            Ok(Ok(result)) => result,
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
