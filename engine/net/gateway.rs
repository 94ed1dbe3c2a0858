//! The one door every outbound request of the engine passes through.
//!
//! It counts requests so tests (and operators) can prove that nothing left the process
//! before a payment was verified: every 400 and 402 must leave the count unchanged. It also
//! records every call in the process's metrics under the [`Upstream`] the caller names, so
//! each provider (facilitator, RPC endpoints, data APIs, the page fetcher) is measured in
//! this one place.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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

    fn finish(mut self, answer: &reqwest::Result<reqwest::Response>) {
        self.record(result_of(answer));
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

/// A shared, counted HTTP client.
#[derive(Debug, Clone)]
pub struct Gateway {
    client: reqwest::Client,
    connect_timeout: Duration,
    sent: Arc<AtomicU64>,
}

/// The connect timeout of the default client; machines with a manifest connect limit of
/// their own get a derived client ([`Gateway::with_connect_timeout`]).
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(5000);

fn build_client(connect_timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .timeout(Duration::from_millis(20_000))
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("factomat/", env!("CARGO_PKG_VERSION")))
        .build()
}

impl Gateway {
    /// A gateway with its own HTTP client and a zero count.
    pub fn new() -> Result<Gateway, reqwest::Error> {
        Ok(Gateway {
            client: build_client(DEFAULT_CONNECT_TIMEOUT)?,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            sent: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The same counted gateway with another connect timeout. reqwest fixes the connect
    /// timeout per client, so a different value needs its own client; the count is shared.
    pub fn with_connect_timeout(
        &self,
        connect_timeout: Duration,
    ) -> Result<Gateway, reqwest::Error> {
        if connect_timeout == self.connect_timeout {
            return Ok(self.clone());
        }
        Ok(Gateway {
            client: build_client(connect_timeout)?,
            connect_timeout,
            sent: self.sent.clone(),
        })
    }

    /// How many outbound requests this gateway has started since start-up.
    pub fn outbound_requests(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }

    /// Sends a request built with [`Gateway::request`] to `upstream`; the count rises before
    /// any I/O, and the call's result and time to its answer go to the metrics.
    pub async fn send(
        &self,
        upstream: Upstream,
        request: reqwest::Request,
    ) -> reqwest::Result<reqwest::Response> {
        self.sent.fetch_add(1, Ordering::SeqCst);
        let record = CallRecord::start(upstream);
        let answer = self.client.execute(request).await;
        record.finish(&answer);
        answer
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
        self.sent.fetch_add(1, Ordering::SeqCst);
        let record = CallRecord::start(upstream);
        let answer = client.execute(request).await;
        record.finish(&answer);
        answer
    }

    /// Starts building a request; it goes out only through [`Gateway::send`].
    pub fn request(&self, method: reqwest::Method, url: reqwest::Url) -> reqwest::RequestBuilder {
        self.client.request(method, url)
    }
}
