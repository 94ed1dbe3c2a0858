//! The admin listener, off by default and on its own socket so nothing on it is sold or
//! exposed by accident: `GET /metrics` (Prometheus text), `GET /livez` (the process answers),
//! `GET /health` (the operator view: readiness details and each machine's bazaar listing)
//! and `GET /readyz` (the facilitator's `/supported` answered and the ledger takes a write,
//! checked at most once per [`READY_CACHE`] however many probes arrive).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::{Mutex, oneshot};
use warp::Filter;

use crate::catalog::embedded::MANIFEST;
use crate::http::state::AppState;
use crate::pay::ledger::STATES;
use crate::support::metrics::metrics;

/// How long a readiness verdict is reused.
pub const READY_CACHE: Duration = Duration::from_secs(2);
/// The facilitator check's own deadline: a probe must answer quickly.
const FACILITATOR_CHECK_TIMEOUT: Duration = Duration::from_secs(3);
const PROMETHEUS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The last readiness verdict and when it was reached.
#[derive(Default)]
pub(crate) struct ReadyCache {
    last: Mutex<Option<(Instant, bool, Value)>>,
}

/// Binds the admin address and serves until `shutdown` fires.
pub(crate) async fn start(
    addr: SocketAddr,
    state: Arc<AppState>,
    shutdown: oneshot::Receiver<()>,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let cache = Arc::new(ReadyCache::default());
    let routes = warp::get()
        .and(warp::path::full())
        .then(move |path: warp::path::FullPath| {
            let (state, cache) = (state.clone(), cache.clone());
            async move { answer(&state, &cache, path.as_str()).await }
        });
    let server = warp::serve(routes).incoming(listener).graceful(async move {
        let _ = shutdown.await;
    });
    tokio::spawn(server.run());
    tracing::info!(addr = %bound, "admin listener (metrics, livez, readyz)");
    Ok(bound)
}

async fn answer(state: &AppState, cache: &ReadyCache, path: &str) -> Response<Bytes> {
    match path {
        "/metrics" => {
            let rows = match &state.rail {
                Some(rail) => every_state(rail.ledger.counts_by_state().await.ok()),
                None => Vec::new(),
            };
            respond(StatusCode::OK, PROMETHEUS_TEXT, metrics().encode(&rows))
        }
        "/livez" => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => {
            let (ready, body) = readiness(state, cache).await;
            let status = if ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            respond(status, "application/json", body.to_string())
        }
        "/health" => {
            let (_, readiness) = readiness(state, cache).await;
            respond(
                StatusCode::OK,
                "application/json",
                operator_view(state, readiness).to_string(),
            )
        }
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

/// Every ledger state with its count (0 when it has no row), so `reserved` is a series from
/// the first scrape on; nothing when the ledger cannot be read (an absent series, not a
/// false zero).
fn every_state(counts: Option<Vec<(String, i64)>>) -> Vec<(String, i64)> {
    let Some(counts) = counts else {
        return Vec::new();
    };
    STATES
        .iter()
        .map(|state| {
            let count = counts
                .iter()
                .find(|(counted, _)| counted == state)
                .map_or(0, |(_, count)| *count);
            (state.to_string(), count)
        })
        .collect()
}

/// The operator view: readiness details, how unpaid probes are answered, and each machine's
/// last bazaar listing outcome (`EXTENSION-RESPONSES`), which no public answer carries.
fn operator_view(state: &AppState, readiness: Value) -> Value {
    let listing = state
        .rail
        .as_ref()
        .map_or_else(|| json!({}), |rail| rail.listing.to_json());
    let machines: serde_json::Map<String, Value> = MANIFEST
        .machines
        .iter()
        .map(|machine| {
            let last = listing.get(&machine.machine).cloned();
            let entry = last.unwrap_or_else(|| json!({"status": "unknown"}));
            (machine.machine.clone(), json!({"listing": entry}))
        })
        .collect();
    json!({
        "readiness": readiness,
        "unpaid_empty_body": state.config.unpaid_empty_body.as_str(),
        "machines": machines,
    })
}

fn respond(status: StatusCode, content_type: &'static str, body: String) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    response
}

/// The cached verdict, or a fresh one. The lock is held during the check, so a probe storm
/// waits for one check instead of starting many.
async fn readiness(state: &AppState, cache: &ReadyCache) -> (bool, Value) {
    let mut last = cache.last.lock().await;
    if let Some((at, ready, body)) = last.as_ref()
        && at.elapsed() < READY_CACHE
    {
        return (*ready, body.clone());
    }
    let (ready, body) = check(state).await;
    *last = Some((Instant::now(), ready, body.clone()));
    (ready, body)
}

async fn check(state: &AppState) -> (bool, Value) {
    let Some(rail) = &state.rail else {
        return (
            false,
            json!({"ready": false, "facilitator": "not_configured", "ledger": "not_configured"}),
        );
    };
    let payment = &MANIFEST.payment;
    let supported = tokio::time::timeout(
        FACILITATOR_CHECK_TIMEOUT,
        rail.facilitator.supports(&payment.scheme, &payment.network),
    )
    .await;
    let facilitator = match supported {
        Ok(Ok(true)) => "ok",
        Ok(Ok(false)) => "payment_kind_not_supported",
        Ok(Err(_)) | Err(_) => "unreachable",
    };
    let ledger = match rail.ledger.check_writable().await {
        Ok(()) => "ok",
        Err(error) if error.is_refusal() => {
            tracing::error!(%error, tls = %crate::pay::ledger::tls::described(state.config.database_url.expose()), "readiness: the ledger database refuses these settings");
            "refused"
        }
        Err(error) => {
            tracing::warn!(%error, "readiness: the ledger does not take a write");
            "not_writable"
        }
    };
    // The readiness loop re-checks which chain each RPC endpoint serves; machines read the
    // verdicts at request time. It does not decide this process's readiness: other
    // machines still serve.
    if let Ok(gateway) = crate::net::gateway::Gateway::new() {
        crate::chain::endpoints::verify_all(
            &gateway,
            &state.config,
            crate::chain::endpoints::IDENTITY_CHECK_TIMEOUT,
        )
        .await;
    }
    let ready = facilitator == "ok" && ledger == "ok";
    (
        ready,
        json!({"ready": ready, "facilitator": facilitator, "ledger": ledger}),
    )
}
