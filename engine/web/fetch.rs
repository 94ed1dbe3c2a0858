//! The one SSRF-safe fetcher for every machine that reads a caller's URL (VM01, VM07; later
//! the x402 probes of VM08–VM10). Rules (docs/fetch-policy.md):
//!
//! * every hop (the caller's URL and each redirect target) passes the full structural policy
//!   of [`url_policy::check_public_https_url`];
//! * the host is resolved once per hop; every answer must be public ([`url_policy::ip_is_public`],
//!   one non-public answer refuses the hop) and the connection is pinned to those vetted
//!   addresses, so a second lookup (DNS rebinding) cannot happen;
//! * TLS verifies against the webpki roots with SNI = the host name;
//! * redirects are followed by hand up to a limit, requests are capped per call, the body is
//!   read after decompression up to a byte limit (then reading stops), and each request and
//!   the whole call have deadlines;
//! * no cookies, no credentials, no caller headers, a fixed honest User-Agent;
//! * every request goes through the counted [`Gateway`].
//!
//! Failures are typed ([`FetchRefusal`]) and carry messages that are safe to show a caller:
//! they name what was refused, never an internal address.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::{Instant, timeout_at};
use url::{Host, Url};

use crate::catalog::manifest::Machine;
use crate::config::Config;
use crate::net::gateway::{Gateway, Upstream};
use crate::net::url_policy::{self, UrlPolicyError};

/// The User-Agent of every fetch: who we are and that this is one bounded read.
pub const USER_AGENT: &str = concat!(
    "factomat/",
    env!("CARGO_PKG_VERSION"),
    " (one bounded fetch per paid call; no crawling)"
);

/// What we ask for: HTML first, anything else accepted (and reported as such).
const ACCEPT: &str = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.5";

/// Response headers we keep (lowercase). Never Set-Cookie or anything credential-like.
pub const HEADER_ALLOWLIST: &[&str] = &[
    "age",
    "cache-control",
    "content-encoding",
    "content-language",
    "content-length",
    "content-type",
    "date",
    "etag",
    "expires",
    "last-modified",
    "location",
    "payment-required",
    "vary",
    "x-robots-tag",
];

/// Longest header value we keep; longer values are dropped (and noted by callers).
const MAX_HEADER_VALUE_BYTES: usize = 8192;

/// The header whose cap a machine may raise: x402 v2 challenges with several accepts and a
/// Bazaar declaration pass 8 KiB (x402-foundation/x402 #2993 reports some over 16 KiB).
const PAYMENT_REQUIRED_HEADER: &str = "payment-required";

/// Room for every other response header in an HTTP/2 header list: hyper's own client
/// default (16 KiB), which before this cap also had to hold `PAYMENT-REQUIRED`.
const H2_OTHER_HEADERS_BYTES: usize = 16 * 1024;

/// The bounds of one fetch. Built from a machine's manifest limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchLimits {
    /// Redirects followed; one more redirect is a refusal.
    pub max_redirects: u32,
    /// Outbound requests per call, redirects included.
    pub max_requests: u32,
    /// Body bytes kept after decompression; reading stops there.
    pub max_body_bytes: usize,
    /// Budget of one request.
    pub per_request: Duration,
    /// Budget of the whole fetch, redirects included.
    pub overall: Duration,
    /// Longest `PAYMENT-REQUIRED` value kept; every other header keeps the 8 KiB cap.
    pub max_payment_required_bytes: usize,
}

/// Why a fetcher cannot be set up for a machine: a manifest or configuration bug of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchSetupError {
    /// The manifest lacks a fetch limit.
    #[error("{machine} has no limit {name}")]
    MissingLimit {
        /// The machine id.
        machine: String,
        /// The limit's name.
        name: &'static str,
    },
    /// A limit does not fit the fetcher's counters.
    #[error("limit {0} is too large")]
    TooLarge(&'static str),
    /// The HTTP client (TLS roots, gateway) could not be built.
    #[error("{0}")]
    Client(String),
}

impl FetchLimits {
    /// The limits a machine declares in machines.yaml (`max_redirects`,
    /// `max_outbound_requests`, `max_response_bytes`, `per_request_timeout_ms`,
    /// `overall_timeout_ms`). A missing limit is a manifest bug, reported as such.
    /// `max_payment_required_header_bytes` is declared by the x402 probes only; a machine
    /// without it keeps the general header cap for `PAYMENT-REQUIRED` too.
    pub fn from_machine(machine: &Machine) -> Result<FetchLimits, FetchSetupError> {
        let get = |name: &'static str| {
            machine
                .limit(name)
                .ok_or_else(|| FetchSetupError::MissingLimit {
                    machine: machine.machine.clone(),
                    name,
                })
        };
        let small = |name: &'static str| -> Result<u32, FetchSetupError> {
            u32::try_from(get(name)?).map_err(|_| FetchSetupError::TooLarge(name))
        };
        Ok(FetchLimits {
            max_redirects: small("max_redirects")?,
            max_requests: small("max_outbound_requests")?,
            max_body_bytes: usize::try_from(get("max_response_bytes")?)
                .map_err(|_| FetchSetupError::TooLarge("max_response_bytes"))?,
            per_request: Duration::from_millis(get("per_request_timeout_ms")?),
            overall: Duration::from_millis(get("overall_timeout_ms")?),
            max_payment_required_bytes: match machine.limit("max_payment_required_header_bytes") {
                Some(bytes) => usize::try_from(bytes)
                    .map_err(|_| FetchSetupError::TooLarge("max_payment_required_header_bytes"))?,
                None => MAX_HEADER_VALUE_BYTES,
            },
        })
    }
}

/// The method of the one logical request. No caller headers exist in this API on purpose.
#[derive(Debug, Clone, PartialEq)]
pub enum FetchMethod {
    /// GET.
    Get,
    /// POST with a JSON body (sent with `content-type: application/json`).
    PostJson(Value),
}

/// Whether 3xx answers are followed or handed back as the final response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirects {
    /// Follow up to the limit.
    Follow,
    /// The first response is final, 3xx included (for probes whose rules fail closed).
    Return,
}

/// One logical fetch.
#[derive(Debug, Clone)]
pub struct FetchRequest {
    /// Where to start.
    pub url: Url,
    /// GET or POST JSON.
    pub method: FetchMethod,
    /// Whether redirects are followed.
    pub redirects: Redirects,
    /// The machine's limits.
    pub limits: FetchLimits,
}

/// Why the body stopped where it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEnd {
    /// The whole body was read.
    Complete,
    /// `max_body_bytes` was reached; the rest was not read.
    LimitReached,
    /// The request or overall deadline passed while reading.
    TimedOut,
    /// The connection failed while reading (or a compressed stream was corrupt).
    Interrupted,
}

/// The final response of a fetch.
#[derive(Debug, Clone)]
pub struct FetchedResponse {
    /// The URL that answered last.
    pub final_url: Url,
    /// Its HTTP status.
    pub status: u16,
    /// Allowlisted headers, lowercase names; repeated headers joined with ", ".
    pub headers: BTreeMap<String, String>,
    /// Header names that were allowlisted but dropped (value too long or not text).
    pub dropped_headers: Vec<String>,
    /// Decompressed body bytes, at most `max_body_bytes`.
    pub body: Vec<u8>,
    /// How reading the body ended.
    pub body_end: BodyEnd,
}

impl FetchedResponse {
    /// The answer's Content-Type, if any.
    pub fn content_type(&self) -> Option<&str> {
        self.headers.get("content-type").map(String::as_str)
    }

    /// True when the body was cut (limit, deadline or broken connection).
    pub fn truncated(&self) -> bool {
        self.body_end != BodyEnd::Complete
    }
}

/// A refusal or failure of a fetch. Messages are safe to show a caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchRefusal {
    /// The URL policy refuses the URL.
    #[error("{0}")]
    UrlPolicy(UrlPolicyError),
    /// A redirect target is refused by the policy.
    #[error("a redirect pointed to a URL the policy refuses: {0}")]
    RedirectRefused(UrlPolicyError),
    /// A redirect's Location is not a URL.
    #[error("a redirect carried a Location that is not a valid URL")]
    RedirectInvalid,
    /// Too many redirects.
    #[error("more than {0} redirects")]
    TooManyRedirects(u32),
    /// A redirect loop.
    #[error("the redirects form a loop")]
    RedirectLoop,
    /// The request budget is used up.
    #[error("the per-call budget of {0} outbound requests is used up")]
    RequestBudget(u32),
    /// DNS failed.
    #[error("the host name could not be resolved")]
    DnsFailed,
    /// DNS gave a non-public address.
    #[error("the host name resolved to a non-public address; nothing was requested")]
    DnsNotPublic,
    /// The test seam maps no address for the host.
    #[error("the host is not mapped by the test connect-to or DNS seam (system DNS is off)")]
    TestSeamUnmapped,
    /// TLS failed.
    #[error("the TLS handshake failed: {0}")]
    Tls(String),
    /// The connection failed.
    #[error("the connection failed")]
    Connect,
    /// No response in time.
    #[error("no response before the deadline")]
    Timeout,
    /// The HTTP exchange failed.
    #[error("the HTTP exchange failed")]
    Protocol,
    /// The fetcher could not be built.
    #[error("the fetcher could not be set up: {0}")]
    Setup(String),
}

impl FetchRefusal {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UrlPolicy(e) => e.code(),
            Self::RedirectRefused(_) => "redirect_refused",
            Self::RedirectInvalid => "redirect_invalid",
            Self::TooManyRedirects(_) => "too_many_redirects",
            Self::RedirectLoop => "redirect_loop",
            Self::RequestBudget(_) => "request_budget_exhausted",
            Self::DnsFailed => "dns_failed",
            Self::DnsNotPublic => "dns_not_public",
            Self::TestSeamUnmapped => "test_seam_unmapped",
            Self::Tls(_) => "tls_failed",
            Self::Connect => "connect_failed",
            Self::Timeout => "timeout",
            Self::Protocol => "http_failed",
            Self::Setup(_) => "fetch_setup_failed",
        }
    }
}

/// Everything one fetch did.
#[derive(Debug, Clone)]
pub struct FetchOutcome {
    /// The URL asked for.
    pub requested_url: Url,
    /// Outbound requests sent (redirect hops included).
    pub requests_sent: u32,
    /// Redirects followed (a refused redirect is not counted).
    pub redirect_count: u32,
    /// The final response, or why there is none.
    pub result: Result<FetchedResponse, FetchRefusal>,
}

/// Where a host's addresses come from.
#[derive(Debug, Clone)]
enum Resolver {
    /// The system resolver (getaddrinfo via tokio).
    System,
    /// TESTS ONLY: connect-to sockets (trusted, loopback) and fixed DNS answers (vetted).
    Test {
        connect_to: HashMap<String, SocketAddr>,
        dns: HashMap<String, Vec<IpAddr>>,
    },
}

/// The resolved, vetted target of one hop.
struct Pinned {
    addrs: Vec<SocketAddr>,
}

/// The fetcher. Cheap to build; holds the TLS configuration and the resolver.
#[derive(Clone)]
pub struct Fetcher {
    gateway: Gateway,
    tls: Arc<rustls::ClientConfig>,
    resolver: Resolver,
}

impl Fetcher {
    /// A fetcher from the service configuration (test seams included when set).
    pub fn new(gateway: Gateway, config: &Config) -> Result<Fetcher, FetchRefusal> {
        let tls = tls_config(config)?;
        let resolver =
            if config.unsafe_test_connect_to.is_empty() && config.unsafe_test_dns.is_empty() {
                Resolver::System
            } else {
                let mut dns: HashMap<String, Vec<IpAddr>> = HashMap::new();
                for (host, ip) in &config.unsafe_test_dns {
                    dns.entry(host.clone()).or_default().push(*ip);
                }
                Resolver::Test {
                    connect_to: config.unsafe_test_connect_to.iter().cloned().collect(),
                    dns,
                }
            };
        Ok(Fetcher {
            gateway,
            tls: Arc::new(tls),
            resolver,
        })
    }

    /// Runs one fetch. Never panics on input; every failure is a typed refusal.
    pub async fn fetch(&self, request: FetchRequest) -> FetchOutcome {
        let mut run = Run {
            fetcher: self,
            limits: request.limits.clone(),
            deadline: Instant::now() + request.limits.overall,
            requests_sent: 0,
            redirect_count: 0,
        };
        let result = run.follow(&request).await;
        FetchOutcome {
            requested_url: request.url,
            requests_sent: run.requests_sent,
            redirect_count: run.redirect_count,
            result,
        }
    }
}

/// Whether a fetcher can be built with this configuration (the TLS setup and the test CA),
/// without building one: readiness runs on every paid request.
pub fn check_setup(config: &Config) -> Result<(), FetchRefusal> {
    tls_config(config).map(|_| ())
}

/// The rustls configuration: webpki roots (plus the test CA when configured), TLS 1.2/1.3,
/// ALPN h2 and http/1.1. SNI is on (rustls default).
fn tls_config(config: &Config) -> Result<rustls::ClientConfig, FetchRefusal> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(ca) = &config.unsafe_test_ca {
        for der in &ca.certificates_der {
            roots
                .add(rustls::pki_types::CertificateDer::from(der.clone()))
                .map_err(|e| FetchRefusal::Setup(format!("test CA: {e}")))?;
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| FetchRefusal::Setup(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tls)
}

/// The state of one fetch across its hops.
struct Run<'a> {
    fetcher: &'a Fetcher,
    limits: FetchLimits,
    deadline: Instant,
    requests_sent: u32,
    redirect_count: u32,
}

impl Run<'_> {
    async fn follow(&mut self, request: &FetchRequest) -> Result<FetchedResponse, FetchRefusal> {
        let mut url = url_policy::check_public_https_url(request.url.as_str())
            .map_err(FetchRefusal::UrlPolicy)?;
        let mut method = request.method.clone();
        let mut visited: HashSet<String> = HashSet::from([url.as_str().to_string()]);
        loop {
            if self.requests_sent >= self.limits.max_requests {
                return Err(FetchRefusal::RequestBudget(self.limits.max_requests));
            }
            let hop_deadline = self.deadline.min(Instant::now() + self.limits.per_request);
            let response = self.send(&url, &method, hop_deadline).await?;
            let status = response.status();
            let location = redirect_location(&response);
            if request.redirects == Redirects::Follow
                && matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308)
                && let Some(location) = location
            {
                let next = self.next_hop(&url, &location, &mut visited)?;
                method = method_after_redirect(status.as_u16(), method);
                url = next;
                continue;
            }
            return Ok(read_body(response, url, &self.limits, hop_deadline).await);
        }
    }

    /// Checks a redirect target in full before anything is sent to it.
    fn next_hop(
        &mut self,
        current: &Url,
        location: &str,
        visited: &mut HashSet<String>,
    ) -> Result<Url, FetchRefusal> {
        let joined = current
            .join(location)
            .map_err(|_| FetchRefusal::RedirectInvalid)?;
        if self.redirect_count >= self.limits.max_redirects {
            return Err(FetchRefusal::TooManyRedirects(self.limits.max_redirects));
        }
        let next = url_policy::check_public_https_url(joined.as_str())
            .map_err(FetchRefusal::RedirectRefused)?;
        if !visited.insert(next.as_str().to_string()) {
            return Err(FetchRefusal::RedirectLoop);
        }
        // Counted only once the target passed every check: this is a redirect we follow.
        self.redirect_count += 1;
        Ok(next)
    }

    /// One request to one vetted, pinned target.
    async fn send(
        &mut self,
        url: &Url,
        method: &FetchMethod,
        deadline: Instant,
    ) -> Result<reqwest::Response, FetchRefusal> {
        let pinned = timeout_at(deadline, self.fetcher.resolve(url))
            .await
            .map_err(|_| FetchRefusal::Timeout)??;
        let client = self.fetcher.pinned_client(url, &pinned, &self.limits)?;
        let (builder, upstream) = match method {
            FetchMethod::Get => (client.get(url.clone()), Upstream::new("web_fetch", "get")),
            FetchMethod::PostJson(body) => (
                client.post(url.clone()).json(body),
                Upstream::new("web_fetch", "post"),
            ),
        };
        let outgoing = builder
            .header(reqwest::header::ACCEPT, ACCEPT)
            .build()
            .map_err(|_| FetchRefusal::Protocol)?;
        self.requests_sent += 1;
        match timeout_at(
            deadline,
            self.fetcher.gateway.send_on(&client, upstream, outgoing),
        )
        .await
        {
            Err(_) => Err(FetchRefusal::Timeout),
            Ok(Err(error)) => Err(classify(&error)),
            Ok(Ok(response)) => Ok(response),
        }
    }
}

impl Fetcher {
    /// The vetted addresses of a URL's host (port 443, or the test seam's socket).
    async fn resolve(&self, url: &Url) -> Result<Pinned, FetchRefusal> {
        let ips: Vec<IpAddr> = match url.host() {
            Some(Host::Ipv4(ip)) => vec![IpAddr::V4(ip)],
            Some(Host::Ipv6(ip)) => vec![IpAddr::V6(ip)],
            Some(Host::Domain(name)) => {
                let name = name.to_ascii_lowercase();
                if let Resolver::Test { connect_to, .. } = &self.resolver
                    && let Some(socket) = connect_to.get(&name)
                {
                    // Trusted by construction: config accepts loopback sockets only.
                    return Ok(Pinned {
                        addrs: vec![*socket],
                    });
                }
                self.lookup(&name).await?
            }
            None => return Err(FetchRefusal::UrlPolicy(UrlPolicyError::Invalid("no host"))),
        };
        if ips.is_empty() {
            return Err(FetchRefusal::DnsFailed);
        }
        // One non-public answer refuses the hop: a mixed answer is a rebinding attempt.
        if ips.iter().any(|ip| !url_policy::ip_is_public(*ip)) {
            return Err(FetchRefusal::DnsNotPublic);
        }
        Ok(Pinned {
            addrs: ips.into_iter().map(|ip| SocketAddr::new(ip, 443)).collect(),
        })
    }

    async fn lookup(&self, name: &str) -> Result<Vec<IpAddr>, FetchRefusal> {
        match &self.resolver {
            Resolver::Test { dns, .. } => {
                dns.get(name).cloned().ok_or(FetchRefusal::TestSeamUnmapped)
            }
            Resolver::System => {
                let answers = tokio::net::lookup_host((name, 443))
                    .await
                    .map_err(|_| FetchRefusal::DnsFailed)?;
                let mut ips: Vec<IpAddr> = answers.map(|a| a.ip()).collect();
                ips.dedup();
                Ok(ips)
            }
        }
    }

    /// A client for one hop: its host resolves only to the vetted addresses, any other name
    /// fails, no proxy, no redirects, no retries, no cookies, no referer.
    fn pinned_client(
        &self,
        url: &Url,
        pinned: &Pinned,
        limits: &FetchLimits,
    ) -> Result<reqwest::Client, FetchRefusal> {
        let mut builder = reqwest::Client::builder()
            .tls_backend_preconfigured((*self.tls).clone())
            .dns_resolver(Arc::new(NoDns))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .referer(false)
            .https_only(true)
            .user_agent(USER_AGENT)
            .connect_timeout(limits.per_request)
            .timeout(limits.per_request)
            .http2_max_header_list_size(h2_header_list_cap(limits))
            .pool_max_idle_per_host(0);
        if let Some(Host::Domain(name)) = url.host() {
            builder = builder.resolve_to_addrs(name, &pinned.addrs);
        }
        builder
            .build()
            .map_err(|e| FetchRefusal::Setup(e.to_string()))
    }
}

/// The resolver of a pinned client: every name it was not told about fails.
struct NoDns;

impl reqwest::dns::Resolve for NoDns {
    fn resolve(&self, _name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        Box::pin(async {
            Err::<reqwest::dns::Addrs, _>("no DNS outside the vetted addresses".into())
        })
    }
}

fn redirect_location(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The HTTP/2 header-list cap of one hop: the `PAYMENT-REQUIRED` cap plus the room the
/// other headers had, so a challenge within the machine's cap is not refused by the
/// transport before [`select_headers`] sees it (hyper's default list is 16 KiB in all).
fn h2_header_list_cap(limits: &FetchLimits) -> u32 {
    u32::try_from(
        limits
            .max_payment_required_bytes
            .saturating_add(H2_OTHER_HEADERS_BYTES),
    )
    .unwrap_or(u32::MAX)
}

/// RFC 9110 15.4: 303 turns into GET; 301/302 after POST turn into GET as browsers do;
/// 307/308 keep the method and body.
fn method_after_redirect(status: u16, method: FetchMethod) -> FetchMethod {
    match (status, &method) {
        (303, _) | (301 | 302, FetchMethod::PostJson(_)) => FetchMethod::Get,
        _ => method,
    }
}

/// Reads the body up to the limit and the deadline; decompression happens inside reqwest,
/// so the limit counts decompressed bytes and a compression bomb stops at the limit.
async fn read_body(
    mut response: reqwest::Response,
    final_url: Url,
    limits: &FetchLimits,
    deadline: Instant,
) -> FetchedResponse {
    let status = response.status().as_u16();
    let (headers, dropped_headers) =
        select_headers(response.headers(), limits.max_payment_required_bytes);
    let mut body: Vec<u8> = Vec::new();
    let body_end = loop {
        match timeout_at(deadline, response.chunk()).await {
            Err(_) => break BodyEnd::TimedOut,
            Ok(Err(error)) if error.is_timeout() => break BodyEnd::TimedOut,
            Ok(Err(_)) => break BodyEnd::Interrupted,
            Ok(Ok(None)) => break BodyEnd::Complete,
            Ok(Ok(Some(chunk))) => {
                let room = limits.max_body_bytes.saturating_sub(body.len());
                if chunk.len() > room {
                    body.extend_from_slice(&chunk[..room]);
                    break BodyEnd::LimitReached;
                }
                body.extend_from_slice(&chunk);
            }
        }
    };
    FetchedResponse {
        final_url,
        status,
        headers,
        dropped_headers,
        body,
        body_end,
    }
}

/// The allowlisted headers as text; values that are too long or not visible ASCII are
/// dropped and named. `PAYMENT-REQUIRED` may be up to `payment_required_cap` bytes.
fn select_headers(
    headers: &reqwest::header::HeaderMap,
    payment_required_cap: usize,
) -> (BTreeMap<String, String>, Vec<String>) {
    let mut kept = BTreeMap::new();
    let mut dropped = Vec::new();
    for name in HEADER_ALLOWLIST {
        let values: Vec<&reqwest::header::HeaderValue> = headers.get_all(*name).iter().collect();
        if values.is_empty() {
            continue;
        }
        let texts: Option<Vec<&str>> = values.iter().map(|v| v.to_str().ok()).collect();
        let cap = if *name == PAYMENT_REQUIRED_HEADER {
            payment_required_cap
        } else {
            MAX_HEADER_VALUE_BYTES
        };
        match texts.map(|t| t.join(", ")) {
            Some(text) if text.len() <= cap => {
                kept.insert((*name).to_string(), text);
            }
            _ => dropped.push((*name).to_string()),
        }
    }
    (kept, dropped)
}

/// Maps a reqwest failure to a refusal, finding a TLS error in the source chain.
fn classify(error: &reqwest::Error) -> FetchRefusal {
    if error.is_timeout() {
        return FetchRefusal::Timeout;
    }
    if let Some(tls) = find_tls_error(error) {
        return FetchRefusal::Tls(tls);
    }
    if error.is_connect() {
        return FetchRefusal::Connect;
    }
    FetchRefusal::Protocol
}

/// Walks the source chain. `io::Error::source` skips the error it wraps, so io errors are
/// descended through `get_ref` (rustls errors arrive as io errors inside io errors).
fn find_tls_error(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(describe_tls(tls));
        }
        current = match e.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

fn describe_tls(error: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    match error {
        rustls::Error::InvalidCertificate(reason) => match reason {
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                "the server certificate is not valid for this host name".into()
            }
            C::UnknownIssuer => {
                "the server certificate is not issued by a trusted authority".into()
            }
            C::Expired | C::ExpiredContext { .. } => "the server certificate has expired".into(),
            C::NotValidYet | C::NotValidYetContext { .. } => {
                "the server certificate is not valid yet".into()
            }
            C::Revoked => "the server certificate is revoked".into(),
            other => format!("the server certificate was refused ({other:?})"),
        },
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_methods_follow_rfc_9110() {
        let post = FetchMethod::PostJson(serde_json::json!({}));
        assert_eq!(method_after_redirect(303, post.clone()), FetchMethod::Get);
        assert_eq!(method_after_redirect(302, post.clone()), FetchMethod::Get);
        assert_eq!(method_after_redirect(307, post.clone()), post);
        assert_eq!(method_after_redirect(308, post.clone()), post);
        assert_eq!(
            method_after_redirect(301, FetchMethod::Get),
            FetchMethod::Get
        );
    }

    #[test]
    fn set_cookie_is_never_kept() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("set-cookie", "session=secret".parse().expect("value"));
        headers.insert("content-type", "text/html".parse().expect("value"));
        headers.append("vary", "accept".parse().expect("value"));
        headers.append("vary", "accept-encoding".parse().expect("value"));
        let (kept, dropped) = select_headers(&headers, MAX_HEADER_VALUE_BYTES);
        assert_eq!(
            kept.get("content-type").map(String::as_str),
            Some("text/html")
        );
        assert_eq!(
            kept.get("vary").map(String::as_str),
            Some("accept, accept-encoding")
        );
        assert!(!kept.contains_key("set-cookie") && dropped.is_empty());
    }

    #[test]
    fn codes_are_distinct() {
        let all = [
            FetchRefusal::RedirectRefused(UrlPolicyError::SchemeNotHttps),
            FetchRefusal::RedirectInvalid,
            FetchRefusal::TooManyRedirects(3),
            FetchRefusal::RedirectLoop,
            FetchRefusal::RequestBudget(4),
            FetchRefusal::DnsFailed,
            FetchRefusal::DnsNotPublic,
            FetchRefusal::TestSeamUnmapped,
            FetchRefusal::Tls(String::new()),
            FetchRefusal::Connect,
            FetchRefusal::Timeout,
            FetchRefusal::Protocol,
            FetchRefusal::Setup(String::new()),
        ];
        let mut codes: Vec<&str> = all.iter().map(FetchRefusal::code).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), all.len());
    }
}
