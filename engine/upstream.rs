//! Bounded JSON reads from HTTP data providers (Lido API, DexScreener), through the counted
//! gateway: one timeout, one size cap, and failures described without the URL.

use std::time::Duration;

use serde_json::Value;

use crate::gateway::Gateway;

/// Why a provider answer could not be used. The text never contains the URL, which is
/// configuration and may identify an account.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
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
    pub fn code(&self) -> &'static str {
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
pub struct Bounds {
    pub timeout: Duration,
    pub max_bytes: usize,
}

/// Appends path segments to a configured base URL, which may carry its own path prefix and
/// query (kept: a provider may expect a key there).
pub fn join(base: &url::Url, segments: &[&str]) -> Option<url::Url> {
    let mut url = base.clone();
    url.set_fragment(None);
    {
        let mut path = url.path_segments_mut().ok()?;
        path.pop_if_empty();
        path.extend(segments);
    }
    Some(url)
}

/// GETs a JSON document.
pub async fn get_json(
    gateway: &Gateway,
    url: url::Url,
    bounds: Bounds,
) -> Result<Value, UpstreamError> {
    let request = gateway
        .request(reqwest::Method::GET, url)
        .timeout(bounds.timeout)
        .header(reqwest::header::ACCEPT, "application/json")
        .build()
        .map_err(|_| UpstreamError::Failed)?;
    exchange(gateway, request, bounds).await
}

/// POSTs a JSON body and reads a JSON answer within the same bounds as [`get_json`]. For
/// JSON-RPC providers whose answers must stay within a machine's own size limit rather than
/// the RPC transport's general one.
pub async fn post_json<T: serde::Serialize + ?Sized>(
    gateway: &Gateway,
    url: url::Url,
    body: &T,
    bounds: Bounds,
) -> Result<Value, UpstreamError> {
    let request = gateway
        .request(reqwest::Method::POST, url)
        .timeout(bounds.timeout)
        .header(reqwest::header::ACCEPT, "application/json")
        .json(body)
        .build()
        .map_err(|_| UpstreamError::Failed)?;
    exchange(gateway, request, bounds).await
}

/// Sends a built request and reads its JSON answer: status first, then the capped body.
async fn exchange(
    gateway: &Gateway,
    request: reqwest::Request,
    bounds: Bounds,
) -> Result<Value, UpstreamError> {
    let response = gateway
        .send(request)
        .await
        .map_err(|e| describe(&e, bounds))?;
    let status = response.status();
    if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
        return Err(UpstreamError::RateLimited);
    }
    if !status.is_success() {
        return Err(UpstreamError::Status(status.as_u16()));
    }
    let body = read_capped(response, bounds).await?;
    serde_json::from_slice(&body).map_err(|_| UpstreamError::Malformed)
}

async fn read_capped(
    mut response: reqwest::Response,
    bounds: Bounds,
) -> Result<Vec<u8>, UpstreamError> {
    if response
        .content_length()
        .is_some_and(|n| n > bounds.max_bytes as u64)
    {
        return Err(UpstreamError::TooLarge(bounds.max_bytes));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| describe(&e, bounds))? {
        if body.len() + chunk.len() > bounds.max_bytes {
            return Err(UpstreamError::TooLarge(bounds.max_bytes));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn describe(error: &reqwest::Error, bounds: Bounds) -> UpstreamError {
    if error.is_timeout() {
        UpstreamError::Timeout(bounds.timeout.as_millis() as u64)
    } else if error.is_connect() {
        UpstreamError::Connect
    } else {
        UpstreamError::Failed
    }
}

/// Provider-supplied text made safe to quote in a response: control characters dropped,
/// at most `max_chars` characters.
pub fn printable(text: &str, max_chars: usize) -> String {
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
