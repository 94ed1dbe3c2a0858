//! Bounded reads from HTTP data providers (Lido API, DexScreener, the discovery index),
//! through the counted gateway: one time budget, one size cap, and failures described
//! without the URL. [`get`] (and [`post`] for JSON-RPC inventory pages) is the one
//! mechanism; [`get_json`] is its Lido/DexScreener use, [`post_json`] VM03's inventory use,
//! engine/providers/discovery.rs its discovery use (with engine/net/bounded_json.rs for the JSON bounds).

use std::time::Duration;

use serde_json::Value;

use crate::net::gateway::{Gateway, Upstream};

/// Why a provider answer could not be used. The text never contains the URL, which is
/// configuration and may identify an account.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UpstreamError {
    #[error("the provider did not answer within {0} ms")]
    Timeout(u64),
    #[error("the provider could not be reached")]
    Connect,
    #[error("the provider rate-limited the request (HTTP 429)")]
    RateLimited,
    #[error("the provider answered HTTP {0}")]
    Status(u16),
    #[error("the provider's answer exceeds {0} bytes")]
    TooLarge(usize),
    #[error("the provider's answer is not valid JSON")]
    Malformed,
    #[error("the provider's answer does not have the expected shape: {0}")]
    Shape(String),
    #[error("the request to the provider failed")]
    Failed,
}

impl UpstreamError {
    /// A stable code for `errors[]` entries.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            UpstreamError::Timeout(_) => "upstream_timeout",
            UpstreamError::Connect => "upstream_unreachable",
            UpstreamError::RateLimited => "upstream_rate_limited",
            UpstreamError::Status(_) => "upstream_http_status",
            UpstreamError::TooLarge(_) => "upstream_answer_too_large",
            UpstreamError::Malformed | UpstreamError::Shape(_) => "upstream_malformed",
            UpstreamError::Failed => "upstream_failed",
        }
    }
}

/// Limits of one provider read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub timeout: Duration,
    pub max_bytes: usize,
}

impl Bounds {
    /// The same bounds with the timeout cut to what the gateway's deadline leaves (a paid
    /// call's work budget; see [`Gateway::ending_by`]).
    fn within(self, gateway: &Gateway) -> Bounds {
        let timeout = gateway
            .time_left()
            .map_or(self.timeout, |left| left.min(self.timeout));
        Bounds { timeout, ..self }
    }
}

/// Appends path segments to a configured base URL, which may carry its own path prefix and
/// query (kept: a provider may expect a key there).
pub(crate) fn join(base: &url::Url, segments: &[&str]) -> Option<url::Url> {
    let mut url = base.clone();
    url.set_fragment(None);
    {
        let mut path = url.path_segments_mut().ok()?;
        path.pop_if_empty();
        path.extend(segments);
    }
    Some(url)
}

/// What one bounded GET got.
#[derive(Debug)]
pub(crate) enum Got {
    /// The caller accepted the status; the whole body, within the size cap.
    Body(Vec<u8>),
    /// The caller did not accept this status; the body was not read.
    Refused(Refusal),
}

/// A status the caller did not accept, with the provider's `Retry-After` when it sent one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The HTTP status.
    pub status: reqwest::StatusCode,
    /// The `Retry-After` header as the provider wrote it (delay seconds or an HTTP date),
    /// made printable and short; never parsed into a promise of ours.
    pub retry_after: Option<String>,
}

/// The longest `Retry-After` text quoted back: an HTTP date is 29 characters.
const MAX_RETRY_AFTER_CHARS: usize = 40;

/// The `Retry-After` header of an answer, printable and bounded.
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<String> {
    headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .map(|text| printable(text.trim(), MAX_RETRY_AFTER_CHARS))
        .filter(|text| !text.is_empty())
}

/// How long a `Retry-After` value asks to wait from `now`: delay-seconds, or an HTTP date
/// (RFC 9110 §10.2.3; a date already past asks for no wait). None when it is neither.
pub(crate) fn retry_after_delay(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Why one bounded GET got nothing. No variant carries the URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum GetError {
    #[error("the request could not be built")]
    Build,
    /// The time budget of [`Bounds::timeout`], or what the gateway's deadline left of it,
    /// ran out (send and body read together).
    #[error("no complete answer within the time budget")]
    Deadline,
    /// The transport reported a timeout of its own (e.g. the client's connect timeout).
    #[error("the transport timed out")]
    Timeout,
    #[error("the provider could not be reached")]
    Connect,
    #[error("the request or its answer failed")]
    Failed,
    #[error("the answer exceeds {0} bytes")]
    TooLarge(usize),
}

/// The one bounded GET to a data provider, through the counted gateway: `Accept:
/// application/json`, the whole exchange within `bounds.timeout`, the body read only when
/// `accept(status)` holds and refused beyond `bounds.max_bytes`. Parsing is the caller's:
/// the JSON bounds differ per provider.
pub(crate) async fn get(
    gateway: &Gateway,
    upstream: Upstream,
    url: url::Url,
    bounds: Bounds,
    accept: impl Fn(reqwest::StatusCode) -> bool,
) -> Result<Got, GetError> {
    let build = || {
        gateway
            .request(reqwest::Method::GET, url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .build()
    };
    exchange(gateway, upstream, build, bounds, accept).await
}

/// The same bounded exchange for a JSON POST: JSON-RPC providers whose answers must stay
/// within a machine's own size limit rather than the RPC transport's general one.
pub(crate) async fn post<T: serde::Serialize + ?Sized>(
    gateway: &Gateway,
    upstream: Upstream,
    url: url::Url,
    body: &T,
    bounds: Bounds,
    accept: impl Fn(reqwest::StatusCode) -> bool,
) -> Result<Got, GetError> {
    let build = || {
        gateway
            .request(reqwest::Method::POST, url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .json(body)
            .build()
    };
    exchange(gateway, upstream, build, bounds, accept).await
}

async fn exchange(
    gateway: &Gateway,
    upstream: Upstream,
    build: impl Fn() -> reqwest::Result<reqwest::Request>,
    bounds: Bounds,
    accept: impl Fn(reqwest::StatusCode) -> bool,
) -> Result<Got, GetError> {
    let bounds = bounds.within(gateway);
    if bounds.timeout.is_zero() {
        return Err(GetError::Deadline);
    }
    let exchange = async {
        let response = gateway.send(upstream, build).await.map_err(describe)?;
        let status = response.status();
        if !accept(status) {
            return Ok(Got::Refused(Refusal {
                status,
                retry_after: retry_after(response.headers()),
            }));
        }
        read_capped(response, bounds.max_bytes).await.map(Got::Body)
    };
    tokio::time::timeout(bounds.timeout, exchange)
        .await
        .unwrap_or(Err(GetError::Deadline))
}

/// GETs a JSON document (any 2xx; HTTP 429 told apart).
pub(crate) async fn get_json(
    gateway: &Gateway,
    upstream: Upstream,
    url: url::Url,
    bounds: Bounds,
) -> Result<Value, UpstreamError> {
    let bounds = bounds.within(gateway);
    json_answer(
        get(gateway, upstream, url, bounds, |status| status.is_success()).await,
        bounds,
    )
}

/// POSTs a JSON body and reads a JSON answer within the same bounds as [`get_json`].
pub(crate) async fn post_json<T: serde::Serialize + ?Sized>(
    gateway: &Gateway,
    upstream: Upstream,
    url: url::Url,
    body: &T,
    bounds: Bounds,
) -> Result<Value, UpstreamError> {
    let bounds = bounds.within(gateway);
    json_answer(
        post(gateway, upstream, url, body, bounds, |status| {
            status.is_success()
        })
        .await,
        bounds,
    )
}

fn json_answer(got: Result<Got, GetError>, bounds: Bounds) -> Result<Value, UpstreamError> {
    let got = got.map_err(|error| match error {
        GetError::Deadline | GetError::Timeout => {
            UpstreamError::Timeout(bounds.timeout.as_millis() as u64)
        }
        GetError::Connect => UpstreamError::Connect,
        GetError::TooLarge(max) => UpstreamError::TooLarge(max),
        GetError::Build | GetError::Failed => UpstreamError::Failed,
    })?;
    match got {
        Got::Body(body) => serde_json::from_slice(&body).map_err(|_| UpstreamError::Malformed),
        Got::Refused(refusal) if refusal.status == reqwest::StatusCode::TOO_MANY_REQUESTS => {
            Err(UpstreamError::RateLimited)
        }
        Got::Refused(refusal) => Err(UpstreamError::Status(refusal.status.as_u16())),
    }
}

async fn read_capped(mut response: reqwest::Response, max: usize) -> Result<Vec<u8>, GetError> {
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err(GetError::TooLarge(max));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(describe)? {
        if body.len() + chunk.len() > max {
            return Err(GetError::TooLarge(max));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn describe(error: reqwest::Error) -> GetError {
    if error.is_builder() {
        GetError::Build
    } else if error.is_timeout() {
        GetError::Timeout
    } else if error.is_connect() {
        GetError::Connect
    } else {
        GetError::Failed
    }
}

/// Provider-supplied text made safe to quote in a response: control characters dropped,
/// at most `max_chars` characters.
pub(crate) fn printable(text: &str, max_chars: usize) -> String {
    let clean: String = text.chars().filter(|c| !c.is_control()).collect();
    if clean.chars().count() <= max_chars {
        return clean;
    }
    let mut short: String = clean.chars().take(max_chars).collect();
    short.push('…');
    short
}

#[cfg(test)]
mod tests {

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        assert_eq!(retry_after_delay(" 7 ", now), Some(Duration::from_secs(7)));
        // 2015-10-21 07:28:00 GMT is 1_445_412_480.
        let in_two_minutes = "Wed, 21 Oct 2015 07:30:00 GMT";
        assert_eq!(
            retry_after_delay(in_two_minutes, now),
            Some(Duration::from_secs(120))
        );
        let past = "Wed, 21 Oct 2015 07:00:00 GMT";
        assert_eq!(retry_after_delay(past, now), Some(Duration::ZERO));
        assert_eq!(retry_after_delay("soon", now), None);
        assert_eq!(retry_after_delay("-3", now), None);
    }

    use super::*;

    #[test]
    fn join_keeps_a_base_path_and_query() {
        let base = url::Url::parse("https://api.example/prefix/?k=1").expect("url");
        let url = join(&base, &["tokens", "v1", "base", "0xab,0xcd"]).expect("join");
        assert_eq!(
            url.as_str(),
            "https://api.example/prefix/tokens/v1/base/0xab,0xcd?k=1"
        );
        let bare = url::Url::parse("http://127.0.0.1:9").expect("url");
        assert_eq!(
            join(&bare, &["v1", "protocol"]).expect("join").as_str(),
            "http://127.0.0.1:9/v1/protocol"
        );
    }

    #[test]
    fn printable_strips_controls_and_caps_length() {
        assert_eq!(printable("a\u{0}b\nc", 10), "abc");
        assert_eq!(printable("abcdef", 3), "abc…");
    }
}
