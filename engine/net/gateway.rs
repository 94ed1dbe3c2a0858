//! The one door every outbound request of the engine passes through.
//!
//! It counts requests so tests (and operators) can prove that nothing left the process
//! before a payment was verified: every 400 and 402 must leave the count unchanged.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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

    /// Sends a request built with [`Gateway::request`]; the count rises before any I/O.
    pub async fn send(&self, request: reqwest::Request) -> reqwest::Result<reqwest::Response> {
        self.sent.fetch_add(1, Ordering::SeqCst);
        self.client.execute(request).await
    }

    /// Sends a request on a client built for one request by a caller that must control the
    /// connection (the page fetcher pins each hop to its vetted addresses). Counted like
    /// [`Gateway::send`], before any I/O, so every outbound request stays visible.
    pub async fn send_on(
        &self,
        client: &reqwest::Client,
        request: reqwest::Request,
    ) -> reqwest::Result<reqwest::Response> {
        self.sent.fetch_add(1, Ordering::SeqCst);
        client.execute(request).await
    }

    /// Starts building a request; it goes out only through [`Gateway::send`].
    pub fn request(&self, method: reqwest::Method, url: reqwest::Url) -> reqwest::RequestBuilder {
        self.client.request(method, url)
    }
}
