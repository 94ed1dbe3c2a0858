//! What the index said about each machine's listing: the `bazaar` entry of the
//! `EXTENSION-RESPONSES` sidechannel a facilitator sends on `/verify` and `/settle`
//! (`{"bazaar": {"status": "success" | "processing" | "rejected", "rejectedReason"}}`).
//! Counted in the metrics, logged once per change, and shown on the admin listener's
//! `/health`; never in a public answer.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::{Value, json};

use crate::support::metrics::metrics;

/// Longest rejection reason kept; a facilitator's reason is a sentence, not a document.
const MAX_REASON_CHARS: usize = 300;

/// One machine's last reported listing outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listing {
    status: &'static str,
    rejected_reason: Option<String>,
    at: String,
}

/// The last listing outcome per machine.
#[derive(Debug, Default)]
pub(crate) struct ListingBoard {
    last: Mutex<BTreeMap<String, Listing>>,
}

impl ListingBoard {
    /// Records the bazaar outcome in a facilitator's `EXTENSION-RESPONSES`, if it has one:
    /// counted always, logged when it differs from the machine's last one.
    pub(crate) fn record(&self, machine: &str, step: &'static str, responses: Option<&Value>) {
        let Some(bazaar) = responses.and_then(|r| r.get("bazaar")) else {
            return;
        };
        let status = match bazaar.get("status").and_then(Value::as_str) {
            Some("success") => "success",
            Some("processing") => "processing",
            Some("rejected") => "rejected",
            _ => "other",
        };
        let rejected_reason = bazaar
            .get("rejectedReason")
            .and_then(Value::as_str)
            .map(|reason| reason.chars().take(MAX_REASON_CHARS).collect::<String>());
        metrics().listing(machine, status);
        let listing = Listing {
            status,
            rejected_reason,
            at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        };
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        let changed = last.get(machine).is_none_or(|previous| {
            (previous.status, &previous.rejected_reason) != (status, &listing.rejected_reason)
        });
        if changed {
            let reason = listing.rejected_reason.as_deref().unwrap_or("");
            if status == "rejected" {
                tracing::warn!(
                    machine,
                    step,
                    status,
                    rejected_reason = reason,
                    "the bazaar rejected this machine's listing"
                );
            } else {
                tracing::info!(machine, step, status, "bazaar listing status");
            }
        }
        last.insert(machine.to_string(), listing);
    }

    /// The last outcome per machine, for the operator view.
    pub(crate) fn to_json(&self) -> Value {
        let Ok(last) = self.last.lock() else {
            return json!({});
        };
        let entries = last
            .iter()
            .map(|(machine, listing)| {
                let mut entry = json!({"status": listing.status, "at": listing.at});
                if let Some(reason) = &listing.rejected_reason {
                    entry["rejectedReason"] = json!(reason);
                }
                (machine.clone(), entry)
            })
            .collect();
        Value::Object(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_outcome_per_machine_is_kept_and_odd_ones_are_other() {
        let board = ListingBoard::default();
        board.record(
            "VM01",
            "settle",
            Some(&json!({"bazaar": {"status": "success"}})),
        );
        board.record("VM01", "settle", None);
        board.record(
            "VM02",
            "verify",
            Some(&json!({"bazaar": {"status": "rejected", "rejectedReason": "bad schema"}})),
        );
        board.record("VM03", "settle", Some(&json!({"bazaar": {"status": 7}})));
        board.record("VM04", "settle", Some(&json!({"other": {}})));
        let view = board.to_json();
        assert_eq!(view["VM01"]["status"], "success");
        assert_eq!(view["VM02"]["rejectedReason"], "bad schema");
        assert_eq!(view["VM03"]["status"], "other");
        assert!(view.get("VM04").is_none());
    }
}
