//! The warp server: free documents prepared once at start-up, and the paid paths' fixed
//! order — body size → JSON → schema → semantic checks → (pay_to configured?) → 402.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use http::header::{ALLOW, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};
use tracing::Instrument;
use warp::Filter;

use crate::catalog::challenge::{self, Challenge};
use crate::catalog::embedded::{self, MANIFEST};
use crate::catalog::manifest::{Machine, Manifest};
use crate::catalog::render::{self, BASE_URL_TOKEN};
use crate::catalog::storefront;
use crate::chain::authorization::AuthorizationReader;
use crate::config::Config;
use crate::http::body::{self, RequestValidator};
use crate::http::connections::{self, ConnectionCounters};
use crate::http::error::ApiError;
use crate::http::free_docs::FreeDoc;
use crate::http::{admin, request_id};
use crate::machines::{self, Entry, NotReady, Work, WorkContext};
use crate::net::gateway::Gateway;
use crate::pay::facilitator::{Authorizer, FacilitatorClient};
use crate::pay::gate::{self, PaidOutcome, PaymentRail};
use crate::pay::ledger;
use crate::pay::local_check;
use crate::support::metrics::metrics;

/// RPC answer timeout of the chain check after a failed settle: the buyer is waiting.
const SETTLE_CHECK_RPC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
const JSON: &str = "application/json";
const CORS_EXPOSE: &str = "PAYMENT-REQUIRED, PAYMENT-RESPONSE, X-Request-Id";
const CORS_ALLOW_HEADERS: &str = "Content-Type, PAYMENT-SIGNATURE, X-Request-Id";

/// Everything a paid path needs, prepared at start-up.
struct PaidRoute {
    machine: &'static Machine,
    validator: RequestValidator,
    entry: &'static dyn Entry,
    max_body: usize,
    /// None when no pay_to is configured: valid requests answer 503 service_disabled.
    challenge: Option<Challenge>,
    /// The PaymentRequirements a payment's `accepted` must equal.
    requirement: Option<Value>,
    /// Whether this deployment configures what the machine needs: a configuration fact, so
    /// it is settled at start-up and a machine that cannot serve never asks for a payment.
    readiness: Result<(), NotReady>,
}

/// Shared, immutable state of a running server.
pub struct AppState {
    /// Paid calls between their start and their ledger record, for the shutdown drain.
    in_flight: InFlight,
    /// The configuration the server runs with.
    pub config: Config,
    /// The base URL the published documents carry.
    pub base_url: String,
    /// The counted outbound gateway (tests read its count).
    pub gateway: Gateway,
    /// Connection events (cap, deadlines, hang-ups), counted.
    pub connections: Arc<ConnectionCounters>,
    pub(crate) rail: Option<PaymentRail>,
    work: WorkContext,
    free: HashMap<String, FreeDoc>,
    paid: HashMap<String, PaidRoute>,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The listen address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Something prepared at start-up failed (ledger, TLS, renders).
    #[error("start-up preparation failed: {0}")]
    Prepare(String),
}

/// A server running in the background, for the binary and for tests.
pub struct RunningServer {
    /// The bound address.
    pub addr: SocketAddr,
    /// The admin listener's address when `admin_listen` is set.
    pub admin_addr: Option<SocketAddr>,
    /// The server's shared state.
    pub state: Arc<AppState>,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningServer {
    /// Stops accepting, lets in-flight requests finish, and waits.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
    }

    /// Graceful shutdown: stops accepting, then waits up to `drain` for open requests and for
    /// paid calls to finish through settle and ledger record. False when the drain timed out:
    /// the calls still open stay `reserved` in the ledger for `factomat ledger reconcile`.
    pub async fn drain(mut self, drain: std::time::Duration) -> bool {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let in_flight = self.state.in_flight.clone();
        let finished = async {
            let _ = (&mut self.task).await;
            in_flight.idle().await;
        };
        if tokio::time::timeout(drain, finished).await.is_ok() {
            tracing::info!("drained: every paid call finished and was recorded");
            return true;
        }
        tracing::warn!(
            open_paid_calls = self.state.in_flight.count(),
            drain_timeout_ms = drain.as_millis() as u64,
            "drain timeout: paid calls still open are left reserved in the ledger; run `factomat ledger reconcile` once their validBefore has passed"
        );
        false
    }

    /// Waits until the server ends (it ends only when stopped).
    pub async fn wait(mut self) {
        let _ = (&mut self.task).await;
    }

    /// A sender that stops the server, for signal handlers.
    pub fn take_shutdown(&mut self) -> Option<oneshot::Sender<()>> {
        self.shutdown.take()
    }
}

/// Binds the configured address and serves until stopped.
pub async fn start(config: Config) -> Result<RunningServer, StartError> {
    config.warn_about_unsafe_test_seams();
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: config.listen,
        source,
    })?;
    let base_url = config
        .base_url
        .clone()
        .unwrap_or_else(|| format!("http://{addr}"));
    let state = Arc::new(AppState::prepare(config, base_url)?);
    state.report_unfinished_attempts().await;
    state.check_facilitator_in_background();
    let (tx, rx) = oneshot::channel::<()>();
    let (admin_tx, admin_rx) = oneshot::channel::<()>();
    let admin_addr = match state.config.admin_listen {
        Some(admin) => Some(admin::start(admin, state.clone(), admin_rx).await.map_err(
            |source| StartError::Bind {
                addr: admin,
                source,
            },
        )?),
        None => None,
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        // A dropped sender stops the server too, as warp's graceful signal did.
        let _ = rx.await;
        let _ = stop_tx.send(true);
        let _ = admin_tx.send(());
    });
    let service = warp::service(routes(state.clone()));
    let task = tokio::spawn(connections::serve(
        listener,
        service,
        state.config.connections,
        state.connections.clone(),
        stop_rx,
    ));
    tracing::info!(%addr, base_url = %state.base_url, pay_to_configured = state.config.pay_to.is_some(), "factomat listening");
    Ok(RunningServer {
        addr,
        admin_addr,
        state,
        shutdown: Some(tx),
        task,
    })
}

impl AppState {
    /// The `machine` label of a path: its machine id, `free` or `none`.
    fn metrics_label(&self, path: &str) -> &'static str {
        match self.paid.get(path) {
            Some(route) => route.machine.machine.as_str(),
            None if self.free.contains_key(path) => "free",
            None => "none",
        }
    }

    fn prepare(config: Config, base_url: String) -> Result<AppState, StartError> {
        let manifest: &'static Manifest = &MANIFEST;
        let gateway = Gateway::new().map_err(|e| StartError::Prepare(e.to_string()))?;
        let rail = payment_rail(&config, &gateway)?;
        let free = free_documents(manifest, &base_url, &config)?;
        let mut paid = HashMap::new();
        for machine in &manifest.machines {
            let route = PaidRoute::prepare(manifest, machine, &base_url, &config)?;
            paid.insert(machine.path.clone(), route);
        }
        let work = WorkContext {
            gateway: gateway.clone(),
            config: config.clone(),
            cache: Default::default(),
        };
        Ok(AppState {
            in_flight: InFlight::default(),
            config,
            base_url,
            gateway,
            connections: Default::default(),
            rail,
            work,
            free,
            paid,
        })
    }

    /// Payments refused by the local check before any facilitator call.
    pub fn payments_refused_locally(&self) -> u64 {
        self.rail.as_ref().map_or(0, |rail| {
            rail.refused_locally
                .load(std::sync::atomic::Ordering::Relaxed)
        })
    }

    /// Migrates the ledger (a PostgreSQL that is down now is migrated by the first paid call
    /// that reaches it), then reports rows left `reserved` by an earlier process: paid work
    /// whose end is unknown. They are reported, never dropped.
    async fn report_unfinished_attempts(&self) {
        let Some(rail) = &self.rail else { return };
        if let Err(error) = rail.ledger.migrate().await {
            tracing::error!(%error, "the ledger is unavailable at start-up; paid calls answer 503 ledger_unavailable until it is reachable");
            return;
        }
        match rail.ledger.reserved().await {
            Ok(rows) if rows.is_empty() => {}
            Ok(rows) => {
                for row in &rows {
                    tracing::warn!(
                        attempt = row.id, machine = %row.machine, payer = %row.payer,
                        amount_atomic = %row.amount_atomic, created_at = %row.created_at,
                        nonce = row.nonce.as_deref().unwrap_or("unknown"),
                        valid_before = row.valid_before.as_deref().unwrap_or("unknown"),
                        request_id = row.request_id.as_deref().unwrap_or("unknown"),
                        "ledger row left reserved by an earlier run: settlement outcome unknown; `factomat ledger reconcile` asks the chain (authorizationState(payer, nonce) on the asset)"
                    );
                }
                tracing::warn!(
                    count = rows.len(),
                    "unfinished paid attempts found at start-up"
                );
            }
            Err(error) => tracing::error!(%error, "could not read unfinished ledger rows"),
        }
    }

    /// `GET /supported` once; a facilitator without exact on our network gets a warning.
    fn check_facilitator_in_background(&self) {
        let Some(rail) = &self.rail else { return };
        let facilitator = rail.facilitator.clone();
        let (scheme, network) = (
            MANIFEST.payment.scheme.clone(),
            MANIFEST.payment.network.clone(),
        );
        tokio::spawn(async move {
            match facilitator.supports(&scheme, &network).await {
                Ok(true) => {
                    tracing::info!(%scheme, %network, "facilitator supports our payment kind")
                }
                Ok(false) => {
                    tracing::warn!(%scheme, %network, "facilitator /supported does not list our payment kind; payments may fail")
                }
                Err(error) => tracing::warn!(%error, "facilitator /supported check failed"),
            }
        });
    }
}

fn payment_rail(config: &Config, gateway: &Gateway) -> Result<Option<PaymentRail>, StartError> {
    // Checked even without a facilitator URL: a bad key is a configuration error either way.
    let auth = Authorizer::from_config(&config.facilitator_auth)
        .map_err(|e| StartError::Prepare(format!("facilitator_api_key_secret: {e}")))?;
    let Some(url) = &config.facilitator_url else {
        return Ok(None);
    };
    let database_url = config.database_url.expose();
    let ledger =
        ledger::open(database_url, ledger::PoolOptions::from_config(config)).map_err(|e| {
            StartError::Prepare(format!("ledger {}: {e}", ledger::redacted(database_url)))
        })?;
    tracing::info!(facilitator_auth = auth.mode(), "facilitator authentication");
    let facilitator = FacilitatorClient::new(
        gateway.clone(),
        url.clone(),
        auth,
        std::time::Duration::from_millis(config.facilitator_verify_timeout_ms),
        std::time::Duration::from_millis(config.facilitator_settle_timeout_ms),
    );
    let chain = config
        .rpc_url_eip155_8453
        .as_ref()
        .map(|url| AuthorizationReader::new(gateway.clone(), url, SETTLE_CHECK_RPC_TIMEOUT));
    let domain = local_check::payment_domain(&MANIFEST.payment)
        .map_err(|e| StartError::Prepare(e.to_string()))?;
    Ok(Some(PaymentRail {
        facilitator,
        ledger: Arc::new(ledger),
        chain,
        domain,
        refused_locally: Default::default(),
        signatures_deferred: Default::default(),
    }))
}

impl PaidRoute {
    fn prepare(
        manifest: &'static Manifest,
        machine: &'static Machine,
        base_url: &str,
        config: &Config,
    ) -> Result<PaidRoute, StartError> {
        let pay_to = config.pay_to.as_deref();
        let validator =
            RequestValidator::new(machine).map_err(|e| StartError::Prepare(e.to_string()))?;
        let entry = machines::find(&machine.machine)
            .ok_or_else(|| StartError::Prepare(format!("{} has no module", machine.machine)))?;
        let requirement = pay_to.map(|pay_to| render::requirement(manifest, machine, Some(pay_to)));
        let challenge = pay_to
            .map(|pay_to| Challenge::for_machine(manifest, machine, base_url, pay_to, None))
            .transpose()
            .map_err(|e| {
                StartError::Prepare(format!("{}: challenge header: {e}", machine.machine))
            })?;
        if let Some(challenge) = &challenge
            && challenge.header.len() > challenge::HEADER_BUDGET
        {
            tracing::warn!(
                machine = %machine.machine,
                header_bytes = challenge.header.len(),
                budget = challenge::HEADER_BUDGET,
                "PAYMENT-REQUIRED header exceeds the budget of a default proxy buffer; shorten base_url"
            );
        }
        let max_body = usize::try_from(manifest.max_request_bytes(machine)).unwrap_or(usize::MAX);
        Ok(PaidRoute {
            machine,
            validator,
            entry,
            max_body,
            challenge,
            requirement,
            readiness: entry.readiness(machine, config),
        })
    }
}

fn with_base_url(render_path: &str, base_url: &str) -> Result<Bytes, StartError> {
    let text = embedded::render(render_path)
        .ok_or_else(|| StartError::Prepare(format!("render {render_path} missing")))?;
    Ok(Bytes::from(text.replace(BASE_URL_TOKEN, base_url)))
}

fn free_documents(
    manifest: &Manifest,
    base_url: &str,
    config: &Config,
) -> Result<HashMap<String, FreeDoc>, StartError> {
    let mut docs = HashMap::new();
    let max_age = manifest.service.free_document_max_age_seconds;
    let mut add = |path: String, content_type: &'static str, body: Bytes| {
        let doc = FreeDoc::prepare(content_type, body, max_age)
            .map_err(|e| StartError::Prepare(format!("{path}: {e}")))?;
        docs.insert(path, doc);
        Ok::<(), StartError>(())
    };
    for (path, render_path, content_type) in render::FREE_DOCUMENTS {
        add(
            path.into(),
            content_type,
            with_base_url(render_path, base_url)?,
        )?;
    }
    for (path, render_path, content_type) in storefront::documents(manifest) {
        add(path, content_type, with_base_url(&render_path, base_url)?)?;
    }
    if let Some(captured) = captured_sample(manifest, &config.sample_path) {
        let text = captured.to_string().replace(BASE_URL_TOKEN, base_url);
        add(render::SAMPLE_PATH.into(), JSON, Bytes::from(text))?;
    }
    for machine in &manifest.machines {
        add(
            format!("{}{}.md", render::DOCS_PREFIX, machine.machine),
            "text/markdown; charset=utf-8",
            with_base_url(&render::machine_doc_path(machine), base_url)?,
        )?;
    }
    add(
        render::HEALTH_PATH.into(),
        JSON,
        health_document(manifest, config),
    )?;
    Ok(docs)
}

/// The served document of a stored VM04 capture, read once at start-up; None (the
/// illustrative example is served) when there is none or it is unusable, which is logged.
fn captured_sample(manifest: &Manifest, path: &std::path::Path) -> Option<serde_json::Value> {
    let machine = manifest.machine(render::SAMPLE_MACHINE)?;
    match crate::catalog::sample::load(machine, path) {
        Ok(Some(stored)) => {
            tracing::info!(path = %path.display(), captured_at = %stored["captured_at"], "serving the captured VM04 sample");
            Some(crate::catalog::sample::captured_document(machine, &stored))
        }
        Ok(None) => None,
        Err(error) => {
            tracing::warn!(%error, "captured sample not served; serving the illustrative example");
            None
        }
    }
}

/// The health object (schema `Health`): static facts of this process, no upstream work.
fn health_document(manifest: &Manifest, config: &Config) -> Bytes {
    let pay_to_configured = config.pay_to.is_some();
    let ready = pay_to_configured && config.facilitator_url.is_some();
    let body = json!({
        "status": if ready { "ok" } else { "degraded" },
        "service": manifest.service.name,
        "catalog_version": manifest.service.catalog_version,
        "api_version": manifest.service.api_version,
        "version": env!("CARGO_PKG_VERSION"),
        "machines": manifest.machines.len(),
        "machine_readiness": machine_readiness(manifest, config),
        "payment": {
            "network": manifest.payment.network,
            "scheme": manifest.payment.scheme,
            "asset": manifest.payment.asset,
            "pay_to_configured": pay_to_configured,
            "facilitator_configured": config.facilitator_url.is_some(),
            "rail": if config.facilitator_url.is_some() { "configured" } else { "not_configured" },
        },
    });
    Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
}

/// Each machine's readiness from configuration: whether this deployment sells it, and if
/// not, the 503 its requests answer (never a secret: messages name what is missing).
fn machine_readiness(manifest: &Manifest, config: &Config) -> Vec<Value> {
    manifest
        .machines
        .iter()
        .map(|machine| {
            let mut entry = json!({"machine": machine.machine, "path": machine.path});
            let readiness = machines::find(&machine.machine)
                .map(|registered| registered.readiness(machine, config));
            match readiness.unwrap_or(Ok(())) {
                Ok(()) => entry["ready"] = json!(true),
                Err(error) => {
                    entry["ready"] = json!(false);
                    entry["code"] = json!(error.code);
                    entry["message"] = json!(error.message);
                }
            }
            entry
        })
        .collect()
}

fn routes(
    state: Arc<AppState>,
) -> impl Filter<Extract = (Response<Bytes>,), Error = warp::Rejection> + Clone + Send + Sync + 'static
{
    warp::any()
        .map(move || state.clone())
        .and(warp::method())
        .and(warp::path::full())
        .and(warp::header::headers_cloned())
        .and(warp::body::stream())
        .then(
            |state: Arc<AppState>,
             method: Method,
             path: warp::path::FullPath,
             headers: HeaderMap,
             body| {
                // Boxed: the handler's state machine (the whole paid path) is large, and an
                // unboxed future would be stored in every connection task, idle ones too.
                let request_id = request_id::for_request(&headers);
                let span = tracing::info_span!(
                    "request",
                    request_id = request_id.to_str().unwrap_or_default()
                );
                Box::pin(
                    async move {
                        let started = Instant::now();
                        let id = request_id.to_str().unwrap_or_default();
                        let request = Incoming {
                            method: &method,
                            path: path.as_str(),
                            headers: &headers,
                            request_id: id,
                        };
                        let mut response = dispatch(&state, &request, body).await;
                        metrics().request(
                            state.metrics_label(request.path),
                            response.status().as_u16(),
                        );
                        log_request(&method, path.as_str(), &response, started);
                        response
                            .headers_mut()
                            .insert(HeaderName::from_static(request_id::HEADER), request_id);
                        response
                    }
                    .instrument(span),
                )
            },
        )
}

fn log_request(method: &Method, path: &str, response: &Response<Bytes>, started: Instant) {
    let status = response.status().as_u16();
    let micros = started.elapsed().as_micros() as u64;
    if status >= 500 {
        tracing::warn!(%method, path, status, micros, "request");
    } else {
        tracing::debug!(%method, path, status, micros, "request");
    }
}

/// The parts of a request the handlers read.
struct Incoming<'a> {
    method: &'a Method,
    path: &'a str,
    headers: &'a HeaderMap,
    request_id: &'a str,
}

async fn dispatch<S, B>(state: &Arc<AppState>, request: &Incoming<'_>, body: S) -> Response<Bytes>
where
    S: Stream<Item = Result<B, warp::Error>> + Unpin,
    B: Buf,
{
    let (method, path) = (request.method, request.path);
    if let Some(route) = state.paid.get(path) {
        return match *method {
            Method::POST => paid(state, route, request, body).await,
            Method::OPTIONS => preflight("POST, OPTIONS"),
            _ => method_not_allowed("POST, OPTIONS"),
        };
    }
    if let Some(doc) = state.free.get(path) {
        return match *method {
            Method::GET => document(doc, false, request.headers),
            Method::HEAD => document(doc, true, request.headers),
            Method::OPTIONS => preflight("GET, HEAD, OPTIONS"),
            _ => method_not_allowed("GET, HEAD, OPTIONS"),
        };
    }
    error_response(&ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no resource at {path}; see /v1/catalog"),
    ))
}

async fn paid<S, B>(
    state: &Arc<AppState>,
    route: &PaidRoute,
    incoming: &Incoming<'_>,
    body: S,
) -> Response<Bytes>
where
    S: Stream<Item = Result<B, warp::Error>> + Unpin,
    B: Buf,
{
    let headers = incoming.headers;
    let body_deadline = Duration::from_millis(state.config.connections.body_read_timeout_ms);
    let (request, work) = match validate_paid_request(route, headers, body, body_deadline).await {
        Ok(accepted) => accepted,
        Err(error) if error.status == StatusCode::REQUEST_TIMEOUT => {
            state.connections.body_timed_out();
            tracing::debug!(machine = %route.machine.machine, "request body missed its deadline");
            let mut response = error_response(&error);
            // The rest of the body may still be on its way: never read it, close instead.
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
            return response;
        }
        Err(error) => return error_response(&error),
    };
    let (Some(challenge), Some(requirement), Some(pay_to)) = (
        &route.challenge,
        &route.requirement,
        state.config.pay_to.as_deref(),
    ) else {
        return error_response(&ApiError::unavailable(
            "service_disabled",
            "payments are not configured on this deployment (no pay_to); no payment is requested",
        ));
    };
    if let Err(not_ready) = &route.readiness {
        return error_response(&not_ready.clone().into());
    }
    let Some(signature) = headers.get(challenge::PAYMENT_SIGNATURE) else {
        metrics().payment("challenged", "");
        return payment_required(challenge);
    };
    if state.rail.is_none() {
        return error_response(&ApiError::unavailable(
            "service_disabled",
            "no payment facilitator is configured on this deployment; nothing was charged",
        ));
    }
    // The paid call runs to its end in a task of its own: hyper drops a request's future when
    // its client disconnects, and a call cut between /settle and the ledger record would leave
    // a payment that may have moved with no record of its outcome.
    let call = PaidCall {
        state: Arc::clone(state),
        machine: route.machine,
        requirement: requirement.clone(),
        pay_to: pay_to.to_string(),
        request,
        work,
        signature: signature.as_bytes().to_vec(),
        request_id: incoming.request_id.to_string(),
    };
    match tokio::spawn(call.run().instrument(tracing::Span::current())).await {
        Ok(Ok(outcome)) => paid_response(state, route, pay_to, outcome),
        Ok(Err(error)) => error_response(&error),
        Err(error) => {
            tracing::error!(%error, machine = %route.machine.machine, "paid call task failed");
            error_response(&ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "work_failed",
                "the paid call failed inside the server; see the ledger for its outcome",
            ))
        }
    }
}

/// Everything a paid call needs, owned, so it can outlive its request.
struct PaidCall {
    state: Arc<AppState>,
    machine: &'static Machine,
    requirement: Value,
    pay_to: String,
    request: Value,
    work: Work,
    signature: Vec<u8>,
    request_id: String,
}

impl PaidCall {
    async fn run(self) -> Result<PaidOutcome, ApiError> {
        let _in_flight = metrics().paid_call_in_flight();
        let _open = self.state.in_flight.enter();
        let Some(rail) = &self.state.rail else {
            return Err(ApiError::unavailable(
                "service_disabled",
                "no payment facilitator is configured on this deployment; nothing was charged",
            ));
        };
        let call = gate::PaidCall {
            machine: self.machine,
            requirement: &self.requirement,
            pay_to: &self.pay_to,
            request: &self.request,
            header: &self.signature,
            request_id: &self.request_id,
        };
        let work = self.work.observe(&self.state.work);
        Ok(gate::run(rail, &MANIFEST, call, work).await)
    }
}

fn paid_response(
    state: &AppState,
    route: &PaidRoute,
    pay_to: &str,
    outcome: PaidOutcome,
) -> Response<Bytes> {
    match outcome {
        PaidOutcome::Delivered {
            body,
            payment_response,
        } => {
            let bytes = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
            let mut response = base_response(StatusCode::OK, JSON, bytes);
            insert_header(
                &mut response,
                challenge::PAYMENT_RESPONSE,
                &payment_response,
            );
            response
        }
        PaidOutcome::Rejected { reason } => rejection(state, route, pay_to, &reason),
        PaidOutcome::SettleFailed {
            reason,
            payment_response,
        } => {
            let mut response = rejection(state, route, pay_to, &reason);
            insert_header(
                &mut response,
                challenge::PAYMENT_RESPONSE,
                &payment_response,
            );
            response
        }
        PaidOutcome::Failed(refusal) => error_response(&ApiError::from(&refusal)),
    }
}

/// A 402 with a fresh challenge whose `error` names why the payment was not accepted.
fn rejection(state: &AppState, route: &PaidRoute, pay_to: &str, reason: &str) -> Response<Bytes> {
    let challenge = Challenge::for_machine(
        &MANIFEST,
        route.machine,
        &state.base_url,
        pay_to,
        Some(reason),
    );
    match challenge {
        Ok(challenge) => payment_required(&challenge),
        Err(_) => error_response(&ApiError::new(
            StatusCode::PAYMENT_REQUIRED,
            "payment_rejected",
            reason,
        )),
    }
}

fn insert_header(response: &mut Response<Bytes>, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        response
            .headers_mut()
            .insert(HeaderName::from_static(name), value);
    }
}

/// Size limit → JSON → schema → typed request → semantic checks. Pure: no I/O beyond
/// reading the body. Returns the request as received (for the ledger's hash) and the
/// machine's paid work on its typed request, not yet started.
async fn validate_paid_request<S, B>(
    route: &PaidRoute,
    headers: &HeaderMap,
    body: S,
    body_deadline: Duration,
) -> Result<(Value, Work), ApiError>
where
    S: Stream<Item = Result<B, warp::Error>> + Unpin,
    B: Buf,
{
    check_content_type(headers)?;
    let bytes = tokio::time::timeout(body_deadline, read_limited(headers, body, route.max_body))
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!(
                    "the request body did not arrive within {} ms; nothing was charged",
                    body_deadline.as_millis()
                ),
            )
        })??;
    let request = body::parse_json(&bytes)?;
    let combined_rule = route.validator.validate(&request)?;
    let work = route.entry.accept(route.machine, &request)?;
    if let Some(error) = combined_rule {
        return Err(error);
    }
    Ok((request, work))
}

fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(CONTENT_TYPE) else {
        return Ok(());
    };
    let media = value
        .to_str()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if media == JSON || (media.starts_with("application/") && media.ends_with("+json")) {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "unsupported_content_type",
            format!("send the request as application/json, not {media:?}"),
        ))
    }
}

/// Reads at most `limit` bytes; a larger body is refused without reading the rest.
async fn read_limited<S, B>(
    headers: &HeaderMap,
    mut body: S,
    limit: usize,
) -> Result<Bytes, ApiError>
where
    S: Stream<Item = Result<B, warp::Error>> + Unpin,
    B: Buf,
{
    let too_large = || {
        ApiError::bad_request(
            "body_too_large",
            format!("the request body exceeds this machine's limit of {limit} bytes"),
        )
    };
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut buffer = BytesMut::new();
    while let Some(chunk) = body.next().await {
        let mut chunk = chunk.map_err(|e| {
            ApiError::bad_request(
                "invalid_body",
                format!("the request body could not be read: {e}"),
            )
        })?;
        if buffer.len() + chunk.remaining() > limit {
            return Err(too_large());
        }
        while chunk.has_remaining() {
            let part = chunk.chunk();
            let n = part.len();
            buffer.extend_from_slice(part);
            chunk.advance(n);
        }
    }
    Ok(buffer.freeze())
}

fn base_response(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Bytes> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        HeaderName::from_static("access-control-allow-origin"),
        HeaderValue::from_static("*"),
    );
    headers.insert(
        HeaderName::from_static("access-control-expose-headers"),
        HeaderValue::from_static(CORS_EXPOSE),
    );
    response
}

/// A free document in the representation the request prefers; 304 when its copy is current.
fn document(doc: &FreeDoc, head: bool, request: &HeaderMap) -> Response<Bytes> {
    let selection = doc.select(request);
    let chosen = selection.representation;
    let (status, body) = if selection.not_modified {
        (StatusCode::NOT_MODIFIED, Bytes::new())
    } else if head {
        (StatusCode::OK, Bytes::new())
    } else {
        (StatusCode::OK, chosen.body.clone())
    };
    let mut response = base_response(status, doc.content_type, body);
    doc.write_headers(response.headers_mut(), chosen);
    if doc.content_type.starts_with("text/html") {
        response.headers_mut().insert(
            http::header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(storefront::CONTENT_SECURITY_POLICY),
        );
    }
    if head && !selection.not_modified {
        response
            .headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from(chosen.body.len()));
    }
    response
}

fn payment_required(challenge: &Challenge) -> Response<Bytes> {
    let mut response = base_response(StatusCode::PAYMENT_REQUIRED, JSON, challenge.body.clone());
    response.headers_mut().insert(
        HeaderName::from_static(challenge::PAYMENT_REQUIRED),
        challenge.header.clone(),
    );
    response
}

pub(crate) fn error_response(error: &ApiError) -> Response<Bytes> {
    base_response(error.status, JSON, Bytes::from(error.body()))
}

fn method_not_allowed(allow: &'static str) -> Response<Bytes> {
    let mut response = error_response(&ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("this resource allows {allow}"),
    ));
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    response
}

fn preflight(allow: &'static str) -> Response<Bytes> {
    let mut response = base_response(StatusCode::NO_CONTENT, JSON, Bytes::new());
    let headers = response.headers_mut();
    headers.remove(CONTENT_TYPE);
    headers.insert(ALLOW, HeaderValue::from_static(allow));
    headers.insert(
        HeaderName::from_static("access-control-allow-methods"),
        HeaderValue::from_static(allow),
    );
    headers.insert(
        HeaderName::from_static("access-control-allow-headers"),
        HeaderValue::from_static(CORS_ALLOW_HEADERS),
    );
    headers.insert(
        HeaderName::from_static("access-control-max-age"),
        HeaderValue::from_static("600"),
    );
    response
}

/// A count of open paid calls that can be awaited until it reaches zero.
#[derive(Clone, Default)]
struct InFlight(Arc<(std::sync::atomic::AtomicUsize, tokio::sync::Notify)>);

/// Holds one paid call open until dropped.
struct InFlightGuard(InFlight);

impl InFlight {
    fn enter(&self) -> InFlightGuard {
        self.0.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        InFlightGuard(self.clone())
    }

    fn count(&self) -> usize {
        self.0.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn idle(&self) {
        loop {
            let notified = self.0.1.notified();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.0.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            self.0.0.1.notify_waiters();
        }
    }
}
