//! The process's Prometheus metrics (the `prometheus-client` crate's registry and text
//! encoder), served only on the admin listener. Labels are low-cardinality by construction:
//! machine ids, HTTP status codes, payment outcomes and reasons, provider and endpoint names
//! fixed in code (the gateway's `Upstream`) — never a URL, a host, a key, a payer or a
//! request id.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    machine: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PaymentLabels {
    outcome: &'static str,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    provider: &'static str,
    endpoint: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LatencyLabels {
    provider: &'static str,
    endpoint: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListingLabels {
    status: &'static str,
    machine: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcAttemptLabels {
    /// The endpoint's position label (`eip155:8453#1`), never its URL.
    rpc_endpoint: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RetainedLabels {
    event: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconciledLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// Every metric of the process.
pub(crate) struct Metrics {
    requests: Family<RequestLabels, Counter>,
    payments: Family<PaymentLabels, Counter>,
    calls: Family<CallLabels, Counter>,
    latency: Family<LatencyLabels, Histogram>,
    rpc_attempts: Family<RpcAttemptLabels, Counter>,
    in_flight: Gauge,
    build: Family<BuildLabels, Gauge>,
    listings: Family<ListingLabels, Counter>,
    retained: Family<RetainedLabels, Counter>,
    reconciled: Family<ReconciledLabels, Counter>,
    /// `payments{outcome="challenged"}`, resolved once: every unpaid valid request counts it.
    challenged: Counter,
    /// The `reason` labels given out so far.
    reasons: ReasonLabels,
}

/// Distinct reported `reason` labels at most: a facilitator's `invalidReason` is an open
/// string, so the series it can open are capped; later new reasons count as `other`. Our own
/// codes are a fixed set and always keep their label.
const MAX_REASON_LABELS: usize = 64;
/// The longest reason taken as a code.
const MAX_REASON_CHARS: usize = 80;

/// The `reason` label of a payment event: the reason itself when it is shaped like an x402
/// code (lower-case letters, digits and `_`, at most 80) and one of the first
/// [`MAX_REASON_LABELS`] seen, else `other`.
#[derive(Default)]
struct ReasonLabels(std::sync::Mutex<std::collections::HashSet<String>>);

impl ReasonLabels {
    fn label(&self, reason: &str) -> String {
        if reason.is_empty() {
            return String::new();
        }
        let code_shaped = reason.len() <= MAX_REASON_CHARS
            && reason
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !code_shaped {
            return "other".into();
        }
        let mut seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !seen.contains(reason) {
            if seen.len() >= MAX_REASON_LABELS {
                return "other".into();
            }
            seen.insert(reason.to_string());
        }
        reason.to_string()
    }
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ])
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let payments: Family<PaymentLabels, Counter> = Family::default();
    let challenged = payments
        .get_or_create(&PaymentLabels {
            outcome: "challenged",
            reason: String::new(),
        })
        .clone();
    let metrics = Metrics {
        requests: Family::default(),
        payments,
        calls: Family::default(),
        latency: Family::new_with_constructor(latency_histogram),
        rpc_attempts: Family::default(),
        in_flight: Gauge::default(),
        build: Family::default(),
        listings: Family::default(),
        retained: Family::default(),
        reconciled: Family::default(),
        challenged,
        reasons: ReasonLabels::default(),
    };
    metrics
        .build
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
        })
        .set(1);
    metrics
});

/// The process's metrics.
pub(crate) fn metrics() -> &'static Metrics {
    &METRICS
}

/// The result label of an outbound call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallResult {
    Ok,
    Error,
    /// The upstream closed a kept-alive connection as the request was written; it was sent
    /// again on a new one (that attempt is counted on its own).
    Resent,
}

impl Metrics {
    /// One answered HTTP request; `machine` is a machine id, `free` or `none`.
    pub(crate) fn request(&self, machine: &'static str, status: u16) {
        self.requests
            .get_or_create(&RequestLabels { machine, status })
            .inc();
    }

    /// The request counters of one route (`machine` is a machine id, `free` or `none`), with
    /// the statuses it answers most resolved now (their series start at 0).
    pub(crate) fn route(&self, machine: &'static str, common: &[u16]) -> RouteCounters {
        let common = common
            .iter()
            .map(|&status| {
                let labels = RequestLabels { machine, status };
                (status, self.requests.get_or_create(&labels).clone())
            })
            .collect();
        RouteCounters { machine, common }
    }

    /// One valid unpaid request answered with a challenge.
    pub(crate) fn challenged(&self) {
        self.challenged.inc();
    }

    /// One payment event: `challenged`, `verified`, `rejected` (with its reason),
    /// `settled`, `settle_failed` or `work_failed`.
    pub(crate) fn payment(&self, outcome: &'static str, reason: &'static str) {
        self.payments
            .get_or_create(&PaymentLabels {
                outcome,
                reason: reason.to_string(),
            })
            .inc();
    }

    /// One payment of unknown outcome the service's reconcile pass decided from the chain,
    /// by the state its row took. Its own family: the call that then delivers the result
    /// counts the payment in `payments` as it always did.
    pub(crate) fn reconciled(&self, state: &str) {
        let state = match state {
            "settled" => "settled",
            "settle_failed" => "settle_failed",
            "nonce_burned" => "nonce_burned",
            "expired" => "expired",
            _ => "other",
        };
        self.reconciled
            .get_or_create(&ReconciledLabels { state })
            .inc();
    }

    /// A payment event whose reason an upstream reported (an open string): labelled only as
    /// [`ReasonLabels`] allows, so such reasons cannot open unbounded series.
    pub(crate) fn payment_reported(&self, outcome: &'static str, reason: &str) {
        self.payments
            .get_or_create(&PaymentLabels {
                outcome,
                reason: self.reasons.label(reason),
            })
            .inc();
    }

    /// One bazaar outcome a facilitator reported in `EXTENSION-RESPONSES` for a machine:
    /// `success`, `processing`, `rejected` or `other`.
    pub(crate) fn listing(&self, machine: &str, status: &'static str) {
        self.listings
            .get_or_create(&ListingLabels {
                status,
                machine: machine.to_string(),
            })
            .inc();
    }

    /// One event of the retained paid answers: `retained`, `collected` (answered again from
    /// the store), `conflict` (a payment-identifier reused on another payment) or `expired`
    /// (swept, or refused past its window).
    pub(crate) fn retained(&self, event: &'static str) {
        self.retained.get_or_create(&RetainedLabels { event }).inc();
    }

    /// Counts several `expired` retained answers at once (a sweep).
    pub(crate) fn retained_expired(&self, swept: u64) {
        self.retained
            .get_or_create(&RetainedLabels { event: "expired" })
            .inc_by(swept);
    }

    /// One outbound call to a provider (`facilitator`, `rpc_base`, …) endpoint and how long
    /// it took to answer; recorded by the outbound gateway for every call.
    pub(crate) fn call(
        &self,
        provider: &'static str,
        endpoint: &'static str,
        result: CallResult,
        took: Duration,
    ) {
        let result = match result {
            CallResult::Ok => "ok",
            CallResult::Error => "error",
            CallResult::Resent => "resent",
        };
        self.calls
            .get_or_create(&CallLabels {
                provider,
                endpoint,
                result,
            })
            .inc();
        self.latency
            .get_or_create(&LatencyLabels { provider, endpoint })
            .observe(took.as_secs_f64());
    }

    /// One attempt at a JSON-RPC endpoint, by its position label: `ok`, `error`,
    /// `rate_limited`, `lagging` (the node did not know the block yet), `cut` (the call's
    /// budget ran out), `too_large` (HTTP 413, or 400 with a JSON-RPC error naming no
    /// other cause, to a log search: its range refused, not the endpoint), `wrong_chain` or
    /// `unproven` (a read of an endpoint whose chain was unconfirmed, batched with
    /// `eth_chainId`: another chain's id, or none, in the answer).
    pub(crate) fn rpc_attempt(&self, rpc_endpoint: &str, result: &'static str) {
        self.rpc_attempts
            .get_or_create(&RpcAttemptLabels {
                rpc_endpoint: rpc_endpoint.to_string(),
                result,
            })
            .inc();
    }

    /// Counts one paid call in flight until the guard is dropped.
    pub(crate) fn paid_call_in_flight(&self) -> InFlight {
        self.in_flight.inc();
        InFlight
    }

    /// The text exposition, with `extra` gauges (such as ledger rows by state) read at scrape.
    pub(crate) fn encode(&self, ledger_rows: &[(String, i64)]) -> String {
        let mut registry = Registry::with_prefix("factomat");
        registry.register(
            "http_requests",
            "HTTP requests answered, by machine (or free/none) and status",
            self.requests.clone(),
        );
        registry.register(
            "payments",
            "Payment events: challenged, verified, rejected (by reason), settled, settle_failed, work_failed",
            self.payments.clone(),
        );
        registry.register(
            "provider_calls",
            "Outbound calls by provider, endpoint and result",
            self.calls.clone(),
        );
        registry.register(
            "provider_call_duration_seconds",
            "Outbound call latency by provider and endpoint",
            self.latency.clone(),
        );
        registry.register(
            "rpc_endpoint_attempts",
            "JSON-RPC attempts by endpoint position (eip155:8453#1) and result",
            self.rpc_attempts.clone(),
        );
        registry.register(
            "paid_calls_in_flight",
            "Paid calls between payment verification and their ledger record",
            self.in_flight.clone(),
        );
        registry.register(
            "discovery_listing",
            "Bazaar listing outcomes the facilitator reported (EXTENSION-RESPONSES), by status and machine",
            self.listings.clone(),
        );
        registry.register(
            "retained_answers",
            "Retained paid answers: retained, collected again, refused as conflicting, expired",
            self.retained.clone(),
        );
        registry.register(
            "reconciled",
            "Payments of unknown outcome the reconcile pass decided from the chain, by the state their row took",
            self.reconciled.clone(),
        );
        registry.register("build_info", "Build information", self.build.clone());
        let rows: Family<Vec<(String, String)>, Gauge> = Family::default();
        for (state, count) in ledger_rows {
            rows.get_or_create(&vec![("state".to_string(), state.clone())])
                .set(*count);
        }
        registry.register("ledger_rows", "Ledger rows by state", rows);
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
        text
    }
}

/// One route's request counters, resolved at start-up: its common statuses are counted
/// through their own handle (a label lookup per request cost more than the count), any other
/// status through the family.
pub(crate) struct RouteCounters {
    machine: &'static str,
    common: Vec<(u16, Counter)>,
}

impl RouteCounters {
    /// One answered request with this status.
    pub(crate) fn request(&self, status: u16) {
        match self.common.iter().find(|(common, _)| *common == status) {
            Some((_, counter)) => {
                counter.inc();
            }
            None => metrics().request(self.machine, status),
        }
    }
}

/// Decrements the in-flight gauge when dropped.
pub(crate) struct InFlight;

impl Drop for InFlight {
    fn drop(&mut self) {
        METRICS.in_flight.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_labels_are_code_shaped_and_capped() {
        let labels = ReasonLabels::default();
        assert_eq!(labels.label(""), "");
        assert_eq!(labels.label("insufficient_funds"), "insufficient_funds");
        assert_eq!(labels.label("Insufficient funds!"), "other");
        assert_eq!(labels.label(&"a".repeat(MAX_REASON_CHARS + 1)), "other");
        for n in 1..MAX_REASON_LABELS {
            assert_eq!(labels.label(&format!("reason_{n}")), format!("reason_{n}"));
        }
        assert_eq!(labels.label("one_too_many"), "other", "the cap is reached");
        assert_eq!(
            labels.label("insufficient_funds"),
            "insufficient_funds",
            "a reason already labelled keeps its label"
        );
    }
}
