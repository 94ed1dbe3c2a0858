//! The warp server: free documents prepared once at start-up, and the paid paths' fixed
//! order — body size → JSON → schema → semantic checks → (pay_to configured?) → 402.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::header::{CACHE_CONTROL, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use tokio::sync::{oneshot, watch};
use tracing::Instrument;

use crate::catalog::challenge::{self, Challenge};
use crate::catalog::embedded::MANIFEST;
use crate::catalog::manifest::Machine;
use crate::catalog::storefront;
use crate::chain::endpoints;
use crate::config::{Config, UnpaidEmptyBody};
use crate::evidence::SEAL_HEADER;
use crate::http::body;
use crate::http::connections;
use crate::http::error::ApiError;
use crate::http::free_docs::FreeDoc;
use crate::http::response::{
    JSON, NO_STORE, PreparedChallenge, base_response, error_response, method_not_allowed,
    payment_required, preflight,
};
use crate::http::state::PaidRoute;
pub use crate::http::state::{AppState, StartError};
use crate::http::{admin, request_id, sealed};
use crate::machines::Work;
use crate::pay::call::{self, PaidOutcome};
use crate::pay::echo::Declared;
use crate::pay::gate;
use crate::pay::retained::{Answer, Finisher};
use crate::support::json_doc::Doc;
use crate::support::metrics::{RouteCounters, metrics};

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
    /// the calls still open stay `reserved` in the ledger for the reconcile pass or `factomat ledger reconcile`.
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
            "drain timeout: paid calls still open are left reserved in the ledger; their buyers' resends decide them from the chain, else the reconcile pass a day after validBefore (or `factomat ledger reconcile`, at once)"
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

/// The drain must outlast the longest paid call: its authorization's deadline, at most
/// `maxTimeoutSeconds` after it arrives, plus the margin for the ledger record.
fn drain_needed_ms() -> u64 {
    MANIFEST.payment.max_timeout_seconds * 1000 + crate::config::DRAIN_MARGIN_MS
}

/// Warns at start-up about a configured drain shorter than [`drain_needed_ms`].
fn warn_about_a_short_drain(config: &Config) {
    let needed = drain_needed_ms();
    if config.shutdown_drain_timeout_ms < needed {
        tracing::warn!(
            shutdown_drain_timeout_ms = config.shutdown_drain_timeout_ms,
            needed_ms = needed,
            "shutdown_drain_timeout_ms is shorter than a paid call may take (maxTimeoutSeconds plus a margin): a SIGTERM can drop a call mid-settle"
        );
    }
}

/// Binds the configured address and serves until stopped.
pub async fn start(config: Config) -> Result<RunningServer, StartError> {
    config.warn_about_unsafe_test_seams();
    warn_about_a_short_drain(&config);
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
    // Which chain each RPC endpoint serves is known before readiness is settled, so a
    // mismatched endpoint's machines never ask for a payment. The check has its own
    // gateway: it is configuration work, not a caller's outbound request.
    let check_gateway =
        crate::net::gateway::Gateway::new().map_err(|e| StartError::Prepare(e.to_string()))?;
    endpoints::verify_all(&check_gateway, &config, endpoints::IDENTITY_CHECK_TIMEOUT).await;
    let state = Arc::new(AppState::prepare(config, base_url)?);
    state.report_unfinished_attempts().await?;
    state.check_facilitator_in_background();
    state.sweep_retained_in_background();
    state.reconcile_in_background();
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
    let routes_state = state.clone();
    let routes = move |request| handle(routes_state.clone(), request);
    let task = tokio::spawn(connections::serve(
        listener,
        routes,
        state.config.connections,
        state.connections.clone(),
        stop_rx,
    ));
    tracing::info!(%addr, base_url = %state.base_url, pay_to_configured = state.config.pay_to.is_some(), "factomat listening");
    if state.config.unpaid_empty_body == UnpaidEmptyBody::Reject {
        tracing::info!(
            unpaid_empty_body = "reject",
            "the CDP Bazaar will not list this deployment: its crawler's body-less and {{}} probes get 400; set unpaid_empty_body = \"challenge\" (FACTOMAT_UNPAID_EMPTY_BODY) to answer them with the 402"
        );
    }
    Ok(RunningServer {
        addr,
        admin_addr,
        state,
        shutdown: Some(tx),
        task,
    })
}

/// Every request's answer: the response, its request id, its counters and its log line.
async fn handle(
    state: Arc<AppState>,
    request: http::Request<RequestBody>,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let request_id = request_id::for_request(&parts.headers);
    let request = Incoming {
        method: &parts.method,
        path: parts.uri.path(),
        headers: &parts.headers,
        request_id: request_id.as_str(),
    };
    let (mut response, counters) = dispatch(&state, &request, body).await;
    counters.request(response.status().as_u16());
    log_request(&request, &response, started);
    request_id::write(response.headers_mut(), request_id.into_header());
    response.map(Full::new)
}

/// The request line: a warning for a 5xx, a debug line otherwise; it names the request id
/// as a field (the unpaid paths have no span: it costs more than their whole check).
fn log_request(request: &Incoming<'_>, response: &Response<Bytes>, started: Instant) {
    let (method, path, request_id) = (request.method, request.path, request.request_id);
    let status = response.status().as_u16();
    // The elapsed time is read inside the macros: only when the line is written.
    if status >= 500 {
        tracing::warn!(%method, path, status, micros = micros_since(started), request_id, "request");
    } else {
        tracing::debug!(%method, path, status, micros = micros_since(started), request_id, "request");
    }
}

fn micros_since(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// A request's body as hyper hands it over.
type RequestBody = hyper::body::Incoming;

/// The parts of a request the handlers read.
struct Incoming<'a> {
    method: &'a Method,
    path: &'a str,
    headers: &'a HeaderMap,
    request_id: &'a str,
}

/// The response, and the counters of the route that answered it.
async fn dispatch<'s>(
    state: &'s Arc<AppState>,
    request: &Incoming<'_>,
    body: RequestBody,
) -> (Response<Bytes>, &'s RouteCounters) {
    let (method, path) = (request.method, request.path);
    if let Some(route) = state.paid.get(path) {
        let probes_challenged = state.config.unpaid_empty_body == UnpaidEmptyBody::Challenge;
        let response = match *method {
            Method::POST => paid(state, route, request, body).await,
            Method::OPTIONS => preflight("POST, OPTIONS"),
            Method::GET | Method::HEAD if probes_challenged => {
                probed(state, route, request, *method == Method::HEAD)
            }
            _ => method_not_allowed("POST, OPTIONS"),
        };
        return (response, &route.counters);
    }
    if let Some(doc) = state.free.get(path) {
        let response = match *method {
            Method::GET => document(doc, false, request.headers),
            Method::HEAD => document(doc, true, request.headers),
            Method::OPTIONS => preflight("GET, HEAD, OPTIONS"),
            _ => method_not_allowed("GET, HEAD, OPTIONS"),
        };
        return (response, &state.free_counters);
    }
    let response = error_response(&ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no resource at {path}; see /v1/catalog"),
    ));
    (response, &state.unknown_counters)
}

async fn paid(
    state: &Arc<AppState>,
    route: &PaidRoute,
    incoming: &Incoming<'_>,
    body: RequestBody,
) -> Response<Bytes> {
    let headers = incoming.headers;
    let body_deadline = Duration::from_millis(state.config.connections.body_read_timeout_ms);
    let mut signatures = headers
        .get_all(const { HeaderName::from_static(challenge::PAYMENT_SIGNATURE) })
        .iter();
    let signature = signatures.next();
    let another_signature = signatures.next().is_some();
    let bytes = match read_paid_body(route, headers, body, body_deadline).await {
        Ok(bytes) => bytes,
        Err(error) => return refused_body(state, route, incoming, &error),
    };
    let (request, work) = match accepted_request(state, route, signature.is_some(), &bytes) {
        Checked::Accepted(request, work) => (request, work),
        Checked::Answered(answer) => return answer,
    };
    let (challenge, requirement, declared, pay_to) = match sellable(state, route) {
        Ok(terms) => terms,
        Err(error) => return error_response(&error),
    };
    if another_signature {
        // Which of two payments the buyer meant is theirs to say, not ours to guess.
        return error_response(&ApiError::bad_request(
            "duplicate_payment_header",
            "send one PAYMENT-SIGNATURE header; nothing was verified or charged",
        ));
    }
    let Some(signature) = signature else {
        metrics().challenged();
        return challenge.response();
    };
    if state.rail.is_none() {
        return error_response(&ApiError::unavailable(
            "service_disabled",
            "no payment facilitator is configured on this deployment; nothing was charged",
        ));
    }
    // The ledger row, the retained answer's key and the seal all name the request by this.
    let request_sha256 = crate::support::canonical::canonical_sha256(&request.to_value());
    // The parsed body is not carried through the paid call.
    drop(request);
    let call = PaidCall {
        state: Arc::clone(state),
        machine: route.machine,
        requirement: Arc::clone(requirement),
        declared: Arc::clone(declared),
        pay_to: pay_to.to_string(),
        request_sha256,
        work,
        signature: signature.as_bytes().to_vec(),
        request_id: incoming.request_id.to_string(),
    };
    run_paid_call(state, route, incoming, pay_to, call).await
}

/// The answer to a body that could not be read: its error, and a closed connection when the
/// body missed its deadline.
fn refused_body(
    state: &AppState,
    route: &PaidRoute,
    incoming: &Incoming<'_>,
    error: &ApiError,
) -> Response<Bytes> {
    let mut response = error_response(error);
    if error.status == StatusCode::REQUEST_TIMEOUT {
        state.connections.body_timed_out();
        tracing::debug!(machine = %route.machine.machine, request_id = incoming.request_id, "request body missed its deadline");
        // The rest of the body may still be on its way: never read it, close instead.
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// A paid route's body once parsed and checked.
enum Checked<'b> {
    /// The request and the machine's work it asks for.
    Accepted(Doc<'b>, Work),
    /// The answer already due: the crawler's probe gets the quote, a bad request its 400.
    Answered(Response<Bytes>),
}

/// Parses and checks a paid route's body.
fn accepted_request<'b>(
    state: &AppState,
    route: &PaidRoute,
    signed: bool,
    bytes: &'b [u8],
) -> Checked<'b> {
    let parsed = body::parse_json(bytes);
    if !signed
        && state.config.unpaid_empty_body == UnpaidEmptyBody::Challenge
        && is_probe(bytes, &parsed)
    {
        // The crawler's probe: the quote, and nothing else computed.
        return Checked::Answered(unpaid_challenge(state, route));
    }
    match parsed.and_then(|request| validate_paid_request(route, request)) {
        Ok((request, work)) => Checked::Accepted(request, work),
        Err(error) => Checked::Answered(error_response(&error)),
    }
}

/// Runs the paid call to its end in a task of its own and answers its outcome.
async fn run_paid_call(
    state: &Arc<AppState>,
    route: &PaidRoute,
    incoming: &Incoming<'_>,
    pay_to: &str,
    call: PaidCall,
) -> Response<Bytes> {
    // hyper drops a request's future when its client disconnects, and a call cut between
    // /settle and the ledger record would leave a payment that may have moved with no record
    // of its outcome. Every log line of the paid call (gate, facilitator, ledger, the
    // machine's work) is in this span, so it carries the request id.
    let span = tracing::info_span!("request", request_id = incoming.request_id);
    match tokio::spawn(call.run().instrument(span)).await {
        Ok(Ok(outcome)) => paid_response(state, route, pay_to, outcome),
        Ok(Err(error)) => error_response(&error),
        Err(error) => {
            tracing::error!(%error, machine = %route.machine.machine, request_id = incoming.request_id, "paid call task failed");
            error_response(&ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "work_failed",
                "the paid call failed inside the server; see the ledger for its outcome",
            ))
        }
    }
}

/// What a sellable route asks of a payment: its challenge, requirement, declaration, payee.
type Terms<'r> = (
    &'r PreparedChallenge,
    &'r Arc<Value>,
    &'r Arc<Declared>,
    &'r str,
);

/// The machine's challenge, requirement and payee when this deployment sells it; otherwise
/// the 503 its requests answer.
fn sellable<'r>(state: &'r AppState, route: &'r PaidRoute) -> Result<Terms<'r>, ApiError> {
    let (Some(challenge), Some(requirement), Some(declared), Some(pay_to)) = (
        &route.challenge,
        &route.requirement,
        &route.declared,
        state.config.pay_to.as_deref(),
    ) else {
        return Err(ApiError::unavailable(
            "service_disabled",
            "payments are not configured on this deployment (no pay_to); no payment is requested",
        ));
    };
    if let Err(not_ready) = &route.readiness {
        return Err(not_ready.clone().into());
    }
    // An endpoint's chain is re-checked by the readiness loop: a mismatch found after
    // start-up stops the machine before a payment is asked for.
    route.chain_checks.check(route.machine)?;
    Ok((challenge, requirement, declared, pay_to))
}

/// The machine's prepared 402 for an unpaid probe (`unpaid_empty_body = "challenge"`).
fn unpaid_challenge(state: &AppState, route: &PaidRoute) -> Response<Bytes> {
    match sellable(state, route) {
        Ok((challenge, ..)) => {
            metrics().challenged();
            challenge.response()
        }
        Err(error) => error_response(&error),
    }
}

/// A GET or HEAD of a paid path in `challenge` mode: unpaid, the machine's 402 (HEAD without
/// its body); with a payment, 400: a paid call is a POST with a JSON body, and nothing is
/// verified or charged.
fn probed(
    state: &AppState,
    route: &PaidRoute,
    incoming: &Incoming<'_>,
    head: bool,
) -> Response<Bytes> {
    let paying = incoming
        .headers
        .contains_key(const { HeaderName::from_static(challenge::PAYMENT_SIGNATURE) });
    if paying {
        return error_response(&ApiError::bad_request(
            "empty_body",
            "a paid call is a POST with a JSON body; nothing was verified or charged",
        ));
    }
    let mut response = unpaid_challenge(state, route);
    if head {
        let length = response.body().len();
        *response.body_mut() = Bytes::new();
        response
            .headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from(length));
    }
    response
}

/// Whether a body is the Bazaar crawler's probe: no bytes at all, or exactly `{}`.
fn is_probe(bytes: &[u8], parsed: &Result<Doc<'_>, ApiError>) -> bool {
    bytes.is_empty() || matches!(parsed, Ok(Doc::Object(members)) if members.is_empty())
}

/// Everything a paid call needs, owned, so it can outlive its request.
struct PaidCall {
    state: Arc<AppState>,
    machine: &'static Machine,
    requirement: Arc<Value>,
    declared: Arc<Declared>,
    pay_to: String,
    request_sha256: String,
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
        let finisher = PaidAnswer {
            state: &self.state,
            machine: self.machine,
            request_sha256: &self.request_sha256,
        };
        let call = call::PaidCall {
            machine: self.machine,
            requirement: &self.requirement,
            declared: &self.declared,
            pay_to: &self.pay_to,
            request_sha256: &self.request_sha256,
            header: &self.signature,
            request_id: &self.request_id,
            finisher: &finisher,
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
        PaidOutcome::Answered(answer) => answered(answer),
        PaidOutcome::Pending {
            transaction,
            retry_after_seconds,
            payment_response,
        } => settlement_pending(transaction, retry_after_seconds, &payment_response),
        PaidOutcome::Rejected { reason } => rejection(state, route, pay_to, reason.code()),
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

/// A paid answer exactly as built (and, when retained, exactly as first sent).
fn answered(answer: Answer) -> Response<Bytes> {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
    let mut response = base_response(status, JSON, Bytes::from(answer.body));
    for (name, value) in &answer.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// Builds the 200 of a settled paid call: PAYMENT-RESPONSE, and when signing is on the
/// receipt inside it, the evidence seal and Content-Digest over the body bytes.
struct PaidAnswer<'a> {
    state: &'a AppState,
    machine: &'static Machine,
    request_sha256: &'a str,
}

impl Finisher for PaidAnswer<'_> {
    fn finish(&self, body: Vec<u8>, payment_response: &str) -> Answer {
        let sealed = sealed_answer(
            self.state,
            self.machine,
            self.request_sha256,
            payment_response,
            &body,
        );
        let mut headers = Vec::with_capacity(4);
        let header = |name: &str, value: &str| (name.to_string(), value.to_string());
        match sealed {
            Some(sealed) => {
                headers.push(header(
                    challenge::PAYMENT_RESPONSE,
                    &sealed.payment_response,
                ));
                headers.push(header(
                    SEAL_HEADER,
                    sealed.seal.to_str().unwrap_or_default(),
                ));
                headers.push(header(
                    "content-digest",
                    sealed.content_digest.to_str().unwrap_or_default(),
                ));
                // No proxy may re-encode the bytes the seal and digest name.
                headers.push(header("cache-control", "private, no-transform"));
            }
            None => {
                headers.push(header(challenge::PAYMENT_RESPONSE, payment_response));
                // A paid answer is the buyer's alone: no shared cache keeps it.
                headers.push(header("cache-control", "private"));
            }
        }
        Answer {
            status: 200,
            body,
            headers,
        }
    }
}

/// The receipt, seal and Content-Digest of a settled answer when signing is on; a signing
/// failure is logged and the answer goes out unsealed (the buyer has paid for it).
fn sealed_answer(
    state: &AppState,
    machine: &Machine,
    request_sha256: &str,
    payment_response: &str,
    body: &[u8],
) -> Option<sealed::Sealed> {
    let identity = state.evidence.as_deref()?;
    let resource_url = challenge::resource_url(&state.base_url, machine);
    sealed::seal(identity, &resource_url, machine, request_sha256, payment_response, body)
        .map_err(|error| {
            tracing::error!(%error, machine = %machine.machine, "paid answer sent without its evidence seal");
        })
        .ok()
}

/// A 402 with a fresh challenge whose `error` names why the payment was not accepted.
fn rejection(state: &AppState, route: &PaidRoute, pay_to: &str, reason: &str) -> Response<Bytes> {
    let challenge = Challenge::for_machine(
        &MANIFEST,
        route.machine,
        &state.base_url,
        pay_to,
        Some(reason),
        route.offers.as_ref(),
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

/// 503 for a payment whose outcome is unknown: no fresh challenge (a client must not sign
/// again), `Retry-After` until the authorization's outcome must be decided, and the
/// PAYMENT-RESPONSE `settlement_pending` with the transaction when known.
fn settlement_pending(
    transaction: Option<String>,
    retry_after_seconds: u64,
    payment_response: &str,
) -> Response<Bytes> {
    let body = serde_json::json!({
        "error": {
            "code": "settlement_pending",
            "message": "the payment is being settled and its outcome is not known yet: do not sign a new payment for this request, this one may still be charged. After Retry-After, send the identical request again (the same PAYMENT-SIGNATURE and body) to collect the result once the payment is proven, or a definite refusal.",
        },
        "transaction": transaction,
        "retry_after_seconds": retry_after_seconds,
    });
    let bytes = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
    let mut response = base_response(StatusCode::SERVICE_UNAVAILABLE, JSON, bytes);
    insert_header(&mut response, challenge::PAYMENT_RESPONSE, payment_response);
    if let Ok(value) = HeaderValue::from_str(&retry_after_seconds.to_string()) {
        response.headers_mut().insert(RETRY_AFTER, value);
    }
    response.headers_mut().insert(CACHE_CONTROL, NO_STORE);
    response
}

fn insert_header(response: &mut Response<Bytes>, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        response
            .headers_mut()
            .insert(HeaderName::from_static(name), value);
    }
}

/// Content type → size limit: the body's bytes, read within the body deadline.
async fn read_paid_body(
    route: &PaidRoute,
    headers: &HeaderMap,
    body: RequestBody,
    body_deadline: Duration,
) -> Result<Bytes, ApiError> {
    check_content_type(headers)?;
    read_within(body_deadline, read_limited(body, route.max_body)).await
}

/// Schema → typed request → semantic checks of the parsed body. Pure: no I/O. Returns the
/// request as received (for the ledger's hash) and the machine's paid work on its typed
/// request, not yet started.
fn validate_paid_request<'a>(
    route: &PaidRoute,
    request: Doc<'a>,
) -> Result<(Doc<'a>, Work), ApiError> {
    let combined_rule = route.validator.validate(&request)?;
    let work = route.entry.accept(route.machine, &request)?;
    if let Some(error) = combined_rule {
        return Err(error);
    }
    Ok((request, work))
}

/// The body read, bounded by the body deadline. A body that has already arrived (the common
/// case: a small JSON body in the head's packet) is read without arming a timer, which cost
/// more than reading it.
async fn read_within<F>(deadline: Duration, read: F) -> Result<Bytes, ApiError>
where
    F: Future<Output = Result<Bytes, ApiError>>,
{
    let mut read = std::pin::pin!(read);
    let first = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
    match first {
        Poll::Ready(result) => result,
        Poll::Pending => tokio::time::timeout(deadline, read)
            .await
            .unwrap_or_else(|_| Err(body_timeout(deadline))),
    }
}

fn body_timeout(deadline: Duration) -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "body_timeout",
        format!(
            "the request body did not arrive within {} ms; nothing was charged",
            deadline.as_millis()
        ),
    )
}

fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let mut values = headers.get_all(CONTENT_TYPE).iter();
    let Some(value) = values.next() else {
        return Ok(());
    };
    if values.next().is_some() {
        // A singleton field (RFC 9110 §8.3): which one the body is in is not ours to guess.
        return Err(ApiError::bad_request(
            "duplicate_content_type",
            "send one Content-Type header (application/json); nothing was charged",
        ));
    }
    // What nearly every client sends, compared before any parsing.
    if value.as_bytes().eq_ignore_ascii_case(JSON.as_bytes()) {
        return Ok(());
    }
    let media = value
        .to_str()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim();
    if is_json_media_type(media) {
        return Ok(());
    }
    Err(ApiError::bad_request(
        "unsupported_content_type",
        format!(
            "send the request as application/json, not {:?}",
            media.to_ascii_lowercase()
        ),
    ))
}

/// `application/json` or `application/<anything>+json`, in any letter case.
fn is_json_media_type(media: &str) -> bool {
    const APPLICATION: &str = "application/";
    const SUFFIX: &str = "+json";
    media.eq_ignore_ascii_case(JSON)
        || (media.len() >= APPLICATION.len() + SUFFIX.len()
            && media
                .get(..APPLICATION.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(APPLICATION))
            && media
                .get(media.len() - SUFFIX.len()..)
                .is_some_and(|tail| tail.eq_ignore_ascii_case(SUFFIX)))
}

/// Reads at most `limit` bytes; a larger body is refused without reading the rest. A body
/// that comes in one frame (the common case) is kept as it came, not copied.
async fn read_limited(mut body: RequestBody, limit: usize) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::bad_request(
            "body_too_large",
            format!("the request body exceeds this machine's limit of {limit} bytes"),
        )
    };
    // hyper read the declared Content-Length into the body's size hint.
    if hyper::body::Body::size_hint(&body).lower() > limit as u64 {
        return Err(too_large());
    }
    let mut first: Option<Bytes> = None;
    let mut rest = BytesMut::new();
    // A body of declared length ends with its last byte: no poll waits for its end.
    while !hyper::body::Body::is_end_stream(&body)
        && let Some(frame) = body.frame().await
    {
        let frame = frame.map_err(|e| {
            ApiError::bad_request(
                "invalid_body",
                format!("the request body could not be read: {e}"),
            )
        })?;
        // Trailers carry nothing a machine reads.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let read = first.as_ref().map_or(0, Bytes::len) + rest.len();
        if read + data.len() > limit {
            return Err(too_large());
        }
        match first.take() {
            None if rest.is_empty() => first = Some(data),
            earlier => {
                rest.extend_from_slice(&earlier.unwrap_or_default());
                rest.extend_from_slice(&data);
            }
        }
    }
    Ok(first.unwrap_or_else(|| rest.freeze()))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// config cannot read the manifest (catalog is a sibling layer), so its default drain is
    /// a number, held here to the payment window it stands for.
    #[test]
    fn the_default_drain_is_the_payment_window_plus_the_margin() {
        assert_eq!(
            crate::config::DEFAULT_SHUTDOWN_DRAIN_TIMEOUT_MS,
            drain_needed_ms()
        );
    }

    /// Every paid call spawns this future, and `tokio::spawn` copies it whole: a step's
    /// large, rare future held inline once made it ten times larger and cost ≈ 93k
    /// instructions a call in copies (bench/README.md). Rare paths are boxed to keep it small.
    #[test]
    fn the_paid_call_task_stays_small() {
        fn future_size<F: std::future::Future>(_: fn(PaidCall) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        // 3,432 bytes in the dev profile at 3166fcc (a release build lays futures out a little
        // differently); the nonce-on-record answer held inline made it 7,280. What is spawned
        // is this future in the request's span (`Instrumented`), a few bytes more.
        let size = future_size(PaidCall::run);
        assert!(
            size <= 4096,
            "the paid call's future is {size} bytes: box the step that grew"
        );
    }

    #[test]
    fn json_media_types_are_recognised_in_any_letter_case() {
        for json in [
            "application/json",
            "Application/JSON",
            "application/problem+json",
            "APPLICATION/VND.API+JSON",
        ] {
            assert!(is_json_media_type(json), "{json}");
        }
        for other in [
            "text/plain",
            "application/jsonx",
            "text/x+json",
            "application/xml",
            "",
        ] {
            assert!(!is_json_media_type(other), "{other}");
        }
    }
}
