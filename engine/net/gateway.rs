//! The one door every outbound request of the engine passes through.
//!
//! It counts requests so tests (and operators) can prove that nothing left the process
//! before a payment was verified: every 400 and 402 must leave the count unchanged. It also
//! records every call in the process's metrics under the [`Upstream`] the caller names, so
//! each provider (facilitator, RPC endpoints, data APIs, the page fetcher) is measured in
//! this one place.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::metrics::{CallResult, metrics};

/// Which upstream a request goes to: the `provider` and `endpoint` labels of its metrics.
/// Both are names fixed in code, never a URL, host, port or key, so the labels stay
/// low-cardinality and free of secrets whatever the configuration holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upstream {
    provider: &'static str,
    endpoint: &'static str,
}

impl Upstream {
    /// An upstream named by a provider (`dexscreener`, `rpc_base`, …) and one of its
    /// endpoints (`tokens`, `json_rpc`, …).
    pub const fn new(provider: &'static str, endpoint: &'static str) -> Upstream {
        Upstream { provider, endpoint }
    }

    /// The endpoint's name (a fixed word, safe to quote in a response).
    pub const fn endpoint(&self) -> &'static str {
        self.endpoint
    }
}

/// One call's metrics: recorded when its answer (or failure) arrives, or as an error when
/// the caller abandons it first (a deadline dropped the future).
struct CallRecord {
    upstream: Upstream,
    started: Instant,
    recorded: bool,
}

impl CallRecord {
    fn start(upstream: Upstream) -> CallRecord {
        CallRecord {
            upstream,
            started: Instant::now(),
            recorded: false,
        }
    }

    fn finish(
        mut self,
        answer: reqwest::Result<reqwest::Response>,
    ) -> reqwest::Result<reqwest::Response> {
        self.record(result_of(&answer));
        answer
    }

    /// The upstream closed the connection unread and the request goes out again.
    fn resent(mut self) {
        self.record(CallResult::Resent);
    }

    fn record(&mut self, result: CallResult) {
        self.recorded = true;
        metrics().call(
            self.upstream.provider,
            self.upstream.endpoint,
            result,
            self.started.elapsed(),
        );
    }
}

impl Drop for CallRecord {
    fn drop(&mut self) {
        if !self.recorded {
            self.record(CallResult::Error);
        }
    }
}

/// An error is no HTTP answer at all, or a status saying the upstream would not or could
/// not serve us (5xx, 429, and 401/403: our credentials were refused). Other statuses are
/// answers the caller interprets (a 404 may mean "nothing listed", a 402 is a probe's aim).
fn result_of(answer: &reqwest::Result<reqwest::Response>) -> CallResult {
    match answer {
        Err(_) => CallResult::Error,
        Ok(response) => {
            let status = response.status();
            let refused = matches!(status.as_u16(), 401 | 403 | 429);
            if status.is_server_error() || refused {
                CallResult::Error
            } else {
                CallResult::Ok
            }
        }
    }
}

/// Whether a request failed because its connection closed before any answer began: an
/// HTTP/1 server closes a kept-alive connection when its idle timer fires (Node's
/// `keepAliveTimeout` is 5 s, uvicorn's 5 s, gunicorn's 2 s), and a request written on it in
/// that instant gets an end of stream or a reset. The server did not read it, so it is sent
/// again. A timeout or a failed connect is not this: those are the upstream's own answer.
fn closed_before_answer(error: &reqwest::Error) -> bool {
    if error.is_timeout() || error.is_connect() {
        return false;
    }
    std::iter::successors(std::error::Error::source(error), |cause| cause.source())
        .any(ends_unanswered)
}

/// One cause in a failed request's chain: hyper's "connection closed before message
/// completed", or a reset, aborted or broken connection.
fn ends_unanswered(cause: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
    if let Some(hyper_error) = cause.downcast_ref::<hyper::Error>() {
        return hyper_error.is_incomplete_message();
    }
    cause
        .downcast_ref::<std::io::Error>()
        .is_some_and(|io| matches!(io.kind(), BrokenPipe | ConnectionAborted | ConnectionReset))
}

/// Set on a response that answers the second sending of a request (see [`Gateway::send`]):
/// the upstream may have read and acted on the first one before its connection closed, so a
/// caller whose request is not idempotent (`/settle`) cannot take this answer as the whole
/// story.
#[derive(Clone, Copy, Debug)]
pub struct Resent;

/// Marks `response` as [`Resent`].
fn mark_resent(mut response: reqwest::Response) -> reqwest::Response {
    response.extensions_mut().insert(Resent);
    response
}

/// The request with its timeout cut to what is left since `started`; `None` when nothing is.
/// A request without a timeout of its own keeps none (the client's applies).
fn within(mut request: reqwest::Request, started: Instant) -> Option<reqwest::Request> {
    if let Some(timeout) = request.timeout_mut() {
        *timeout = timeout
            .checked_sub(started.elapsed())
            .filter(|left| !left.is_zero())?;
    }
    Some(request)
}

/// A shared, counted HTTP client.
#[derive(Debug, Clone)]
pub struct Gateway {
    client: reqwest::Client,
    connect_timeout: Duration,
    /// The client of each connect timeout asked for, built once and shared by every clone (a
    /// client per call would lose its connection pool).
    derived: Arc<Mutex<HashMap<Duration, reqwest::Client>>>,
    sent: Arc<AtomicU64>,
    /// Of those, the second sendings of requests that met a closed kept-alive connection.
    resent: Arc<AtomicU64>,
    /// When every request through this gateway must have ended (a paid call's work budget,
    /// see [`Gateway::ending_by`]); None: each request's own timeout only.
    ends_by: Option<Instant>,
}

/// The connect timeout of the default client; machines with a manifest connect limit of
/// their own get a derived client ([`Gateway::with_connect_timeout`]).
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(5000);
/// The client's timeout for a request that sets none of its own.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(20_000);

fn build_client(connect_timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .timeout(CLIENT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("factomat/", env!("CARGO_PKG_VERSION")))
        .build()
}

impl Gateway {
    /// A gateway with its own HTTP client and a zero count.
    pub fn new() -> Result<Gateway, reqwest::Error> {
        let client = build_client(DEFAULT_CONNECT_TIMEOUT)?;
        let derived = HashMap::from([(DEFAULT_CONNECT_TIMEOUT, client.clone())]);
        Ok(Gateway {
            client,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            derived: Arc::new(Mutex::new(derived)),
            sent: Arc::new(AtomicU64::new(0)),
            resent: Arc::new(AtomicU64::new(0)),
            ends_by: None,
        })
    }

    /// The same counted gateway, with every request it sends cut short at `deadline`: a
    /// machine's reads, however many and however retried, end within its
    /// `overall_timeout_ms`, so a slow upstream becomes the machine's truthful HOLD rather
    /// than work the payment gate must cut.
    pub fn ending_by(&self, deadline: Instant) -> Gateway {
        Gateway {
            ends_by: Some(deadline),
            ..self.clone()
        }
    }

    /// What is left before [`Gateway::ending_by`]'s deadline (zero once it passed); None
    /// when the gateway has none. Callers that retry ask it before another attempt.
    pub fn time_left(&self) -> Option<Duration> {
        self.ends_by
            .map(|deadline| deadline.saturating_duration_since(Instant::now()))
    }

    /// The request with its timeout cut to the gateway's deadline. A request due now still
    /// goes out with the shortest timeout, so that it fails as a timeout like any other.
    fn bounded(&self, mut request: reqwest::Request) -> reqwest::Request {
        if let Some(left) = self.time_left() {
            let own = request.timeout().copied().unwrap_or(CLIENT_TIMEOUT);
            *request.timeout_mut() = Some(own.min(left).max(Duration::from_millis(1)));
        }
        request
    }

    /// The same counted gateway with another connect timeout. reqwest fixes the connect
    /// timeout per client, so a different value needs its own client: built on first use,
    /// then shared. The count is shared too.
    pub fn with_connect_timeout(
        &self,
        connect_timeout: Duration,
    ) -> Result<Gateway, reqwest::Error> {
        if connect_timeout == self.connect_timeout {
            return Ok(self.clone());
        }
        let client = {
            let mut derived = self
                .derived
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match derived.get(&connect_timeout) {
                Some(client) => client.clone(),
                None => {
                    let client = build_client(connect_timeout)?;
                    derived.insert(connect_timeout, client.clone());
                    client
                }
            }
        };
        Ok(Gateway {
            client,
            connect_timeout,
            ..self.clone()
        })
    }

    /// How long a request through this gateway may take to connect.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// How many outbound requests this gateway has started since start-up.
    pub fn outbound_requests(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }

    /// How many of [`Gateway::outbound_requests`] were a request sent once more because the
    /// upstream closed a kept-alive connection as we wrote (when depends on the upstream's
    /// idle timer, not on the call).
    pub fn resent_requests(&self) -> u64 {
        self.resent.load(Ordering::SeqCst)
    }

    /// Sends the request `build` makes (with [`Gateway::request`]) to `upstream`; the count
    /// rises before any I/O, and the call's result and time to its answer go to the metrics.
    /// A request that could not be built goes nowhere and is not counted.
    ///
    /// A request that meets a kept-alive connection the upstream closed as we wrote on it is
    /// built and sent once more, on a new connection, within what is left of its timeout (see
    /// [`closed_before_answer`]); its answer is marked [`Resent`]. Each attempt is counted and
    /// measured. `build` runs again only then, so the usual call pays for no copy of its
    /// request.
    pub async fn send(
        &self,
        upstream: Upstream,
        build: impl Fn() -> reqwest::Result<reqwest::Request>,
    ) -> reqwest::Result<reqwest::Response> {
        let started = Instant::now();
        let (answer, record) = self
            .attempt(&self.client, upstream, self.bounded(build()?))
            .await;
        let error = match answer {
            Err(error) if closed_before_answer(&error) => error,
            answer => return record.finish(answer),
        };
        let again = build().ok().and_then(|again| within(again, started));
        let Some(again) = again.map(|again| self.bounded(again)) else {
            return record.finish(Err(error));
        };
        record.resent();
        self.resent.fetch_add(1, Ordering::SeqCst);
        tracing::debug!(
            provider = upstream.provider,
            endpoint = upstream.endpoint,
            "the upstream closed a kept-alive connection as we wrote; sending once more"
        );
        let (answer, record) = self.attempt(&self.client, upstream, again).await;
        record.finish(answer).map(mark_resent)
    }

    /// One counted request; its record is the caller's to finish (a record dropped unfinished,
    /// as when the caller abandons the call, counts as an error).
    async fn attempt(
        &self,
        client: &reqwest::Client,
        upstream: Upstream,
        request: reqwest::Request,
    ) -> (reqwest::Result<reqwest::Response>, CallRecord) {
        self.sent.fetch_add(1, Ordering::SeqCst);
        let record = CallRecord::start(upstream);
        (client.execute(request).await, record)
    }

    /// Sends a request on a client built for one request by a caller that must control the
    /// connection (the page fetcher pins each hop to its vetted addresses). Counted like
    /// [`Gateway::send`], before any I/O, so every outbound request stays visible.
    pub async fn send_on(
        &self,
        client: &reqwest::Client,
        upstream: Upstream,
        request: reqwest::Request,
    ) -> reqwest::Result<reqwest::Response> {
        let (answer, record) = self.attempt(client, upstream, self.bounded(request)).await;
        record.finish(answer)
    }

    /// Starts building a request; it goes out only through [`Gateway::send`] (or
    /// [`Gateway::send_on`]).
    pub fn request(&self, method: reqwest::Method, url: reqwest::Url) -> reqwest::RequestBuilder {
        self.client.request(method, url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// Reads one request head (the tests send no body); `false` at end of stream.
    async fn read_head(socket: &mut TcpStream) -> bool {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match socket.read(&mut byte).await {
                Ok(1) => head.push(byte[0]),
                _ => return false,
            }
        }
        true
    }

    /// A server that answers the first request of each connection, keeps the connection,
    /// and closes it unanswered when the next request arrives, as an idle timer firing in
    /// that instant does. Counts the requests it dropped.
    async fn server_closing_kept_alive_connections() -> (String, Arc<AtomicU64>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/", listener.local_addr().expect("addr"));
        let dropped = Arc::new(AtomicU64::new(0));
        let count = dropped.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let count = count.clone();
                tokio::spawn(async move {
                    if !read_head(&mut socket).await {
                        return;
                    }
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if socket.write_all(answer).await.is_err() {
                        return;
                    }
                    if read_head(&mut socket).await {
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        (url, dropped)
    }

    async fn get(
        gateway: &Gateway,
        url: &str,
        endpoint: &'static str,
    ) -> reqwest::Result<reqwest::Response> {
        let url: reqwest::Url = url.parse().expect("url");
        let build = || {
            gateway
                .request(reqwest::Method::GET, url.clone())
                .timeout(Duration::from_secs(5))
                .build()
        };
        gateway.send(Upstream::new("test", endpoint), build).await
    }

    #[tokio::test]
    async fn a_kept_alive_connection_closed_as_we_write_costs_one_more_request_not_an_error() {
        let (url, dropped) = server_closing_kept_alive_connections().await;
        let gateway = Gateway::new().expect("gateway");
        for call in 0..2 {
            let answer = get(&gateway, &url, "kept_alive").await.expect("answered");
            assert_eq!(answer.status(), 200, "call {call}");
            assert_eq!(answer.text().await.expect("body"), "ok");
        }
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "the pooled connection was closed"
        );
        assert_eq!(gateway.outbound_requests(), 3, "the retry is counted");
        assert_eq!(gateway.resent_requests(), 1, "as a resend");
        let exposition = metrics().encode(&[]);
        for (result, count) in [("ok", 2), ("resent", 1)] {
            let series = format!(
                "factomat_provider_calls_total{{provider=\"test\",endpoint=\"kept_alive\",result=\"{result}\"}} {count}\n"
            );
            assert!(exposition.contains(&series), "{series} in:\n{exposition}");
        }
        assert!(!exposition.contains("endpoint=\"kept_alive\",result=\"error\""));
    }

    #[tokio::test]
    async fn a_gateway_ending_by_a_deadline_cuts_a_longer_request_short() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/", listener.local_addr().expect("addr"));
        // Accepts and reads, never answers.
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move { while read_head(&mut socket).await {} });
            }
        });
        let gateway = Gateway::new().expect("gateway");
        let bounded = gateway.ending_by(Instant::now() + Duration::from_millis(300));
        let bound = bounded.time_left().expect("a deadline");
        assert!(bound <= Duration::from_millis(300));
        assert_eq!(gateway.time_left(), None, "the original keeps no deadline");
        // The request's own timeout is 5 s; the gateway's deadline ends it long before.
        let answer = tokio::time::timeout(Duration::from_secs(3), get(&bounded, &url, "bounded"))
            .await
            .expect("ended by the gateway's deadline");
        assert!(answer.expect_err("no answer").is_timeout());
        assert_eq!(bounded.time_left(), Some(Duration::ZERO));
        assert_eq!(
            gateway.outbound_requests(),
            1,
            "counted by the shared count"
        );
    }

    /// A keep-alive server answering every request; counts the connections it accepted.
    async fn server_counting_connections() -> (String, Arc<AtomicU64>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/", listener.local_addr().expect("addr"));
        let accepted = Arc::new(AtomicU64::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    while read_head(&mut socket).await {
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if socket.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    #[tokio::test]
    async fn gateways_derived_for_one_connect_timeout_share_one_client_and_its_connections() {
        let (url, accepted) = server_counting_connections().await;
        let gateway = Gateway::new().expect("gateway");
        let three_seconds = Duration::from_secs(3);
        for _ in 0..2 {
            // Derived anew for each call, as each paid call derives its own.
            let derived = gateway
                .with_connect_timeout(three_seconds)
                .expect("derived");
            let answer = get(&derived, &url, "derived").await.expect("answered");
            assert_eq!(answer.text().await.expect("body"), "ok");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "one pooled connection");
        let other = gateway
            .with_connect_timeout(Duration::from_secs(4))
            .expect("derived");
        get(&other, &url, "derived").await.expect("answered");
        assert_eq!(accepted.load(Ordering::SeqCst), 2, "another client");
        let back = other
            .with_connect_timeout(DEFAULT_CONNECT_TIMEOUT)
            .expect("derived");
        get(&back, &url, "derived").await.expect("answered");
        get(&gateway, &url, "derived").await.expect("answered");
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            3,
            "the default client, once"
        );
        assert_eq!(gateway.outbound_requests(), 5, "one shared count");
    }

    #[tokio::test]
    async fn a_refused_connection_is_not_sent_again() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/", listener.local_addr().expect("addr"));
        drop(listener);
        let gateway = Gateway::new().expect("gateway");
        let error = get(&gateway, &url, "refused")
            .await
            .expect_err("nothing listens");
        assert!(error.is_connect(), "{error}");
        assert_eq!(gateway.outbound_requests(), 1);
    }

    #[test]
    fn a_spent_timeout_leaves_no_time_for_a_retry() {
        let gateway = Gateway::new().expect("gateway");
        let request = |timeout: Option<Duration>| {
            let builder = gateway.request(
                reqwest::Method::GET,
                "http://127.0.0.1/".parse().expect("url"),
            );
            match timeout {
                Some(timeout) => builder.timeout(timeout),
                None => builder,
            }
            .build()
            .expect("request")
        };
        let long_ago = Instant::now() - Duration::from_millis(50);
        assert!(within(request(Some(Duration::from_millis(10))), long_ago).is_none());
        let left = within(request(Some(Duration::from_secs(60))), long_ago).expect("time left");
        assert!(
            left.timeout()
                .is_some_and(|left| *left < Duration::from_secs(60))
        );
        let untimed = within(request(None), long_ago).expect("no timeout of its own");
        assert_eq!(untimed.timeout(), None);
    }
}
