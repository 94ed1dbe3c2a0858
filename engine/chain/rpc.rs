//! EVM JSON-RPC through the counted gateway: one attempt at one endpoint ([`post_packet`]),
//! under the failover transport of engine/chain/endpoints.rs, and how failures are described.
//!
//! The transport is ours rather than alloy's reqwest transport for two reasons: every request
//! must pass the one counted gateway, and an RPC URL may carry a provider key, so it must
//! never reach a log line, an error message or a response (alloy's transport records the URL
//! in a tracing span).

use std::time::Duration;

use alloy::rpc::json_rpc::{RequestPacket, ResponsePacket};
use alloy::transports::{RpcError, TransportError, TransportErrorKind};

use crate::config::Secret;
use crate::net::gateway::{Gateway, Upstream};
use crate::net::upstream::retry_after_delay;

/// Bytes of an RPC answer we read at most; a larger answer is an error.
const MAX_RPC_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// Why one attempt at an endpoint failed, with what failover needs to know.
pub(crate) struct Attempt {
    /// The failure, without the URL.
    pub error: TransportError,
    /// How long the endpoint's `Retry-After` asked us to wait, when it sent one.
    pub retry_after: Option<Duration>,
    /// The endpoint answered HTTP 429.
    pub rate_limited: bool,
}

impl From<TransportError> for Attempt {
    fn from(error: TransportError) -> Attempt {
        Attempt {
            error,
            retry_after: None,
            rate_limited: false,
        }
    }
}

/// Whether an error to a log search may be the provider refusing its range or the size of
/// its answer, which a narrower search fixes: any error except one whose message names
/// another cause (a rate limit or quota, a credential, an unknown method, a node that lags
/// or failed inside). Range refusals come in many spellings (Alchemy "…up to a 10 block
/// range", QuickNode "eth_getLogs is limited to a 10,000 range", Infura "range 20000 exceeds
/// limit of 10000", "query returned more than 10000 results" and "query timeout exceeded",
/// Tenderly "invalid params" with the range in `data`, erigon "limit exceeded", dRPC "ranges
/// over 10000 blocks are not supported on freetier"): a spelling we do not know must still
/// narrow, or a paid row whose spending event lies past it stays pending.
pub(crate) fn may_be_range_refusal(message: &str) -> bool {
    const OTHER_CAUSES: [&str; 17] = [
        "rate limit",
        "rate-limit",
        "ratelimit",
        "rate exceeded",
        "too many requests",
        "quota",
        "credits",
        "capacity",
        "unauthorized",
        "forbidden",
        "api key",
        "method not found",
        "does not exist",
        "out of range",
        "beyond current head",
        "header not found",
        "unknown block",
    ];
    let message = message.to_ascii_lowercase();
    !OTHER_CAUSES.iter().any(|cause| message.contains(cause))
}

/// Whether `body` is a JSON-RPC answer carrying an `error` object. The body is kept cut to
/// its first 512 bytes, so a longer one (an `error.data`) that no longer parses counts when
/// it begins as one.
pub(crate) fn is_json_rpc_error(body: &str) -> bool {
    match serde_json::from_str::<serde_json::Value>(body) {
        Ok(answer) => answer
            .get("error")
            .is_some_and(serde_json::Value::is_object),
        Err(_) => body.trim_start().starts_with('{') && body.contains("\"error\":{"),
    }
}

/// An HTTP error body that may be a range refusal: a JSON-RPC error answer naming no other
/// cause (Alchemy's HTTP 400). A body that is not JSON-RPC (a proxy's "Bad Request", an HTML
/// page) is no answer of the node's, and one cut before its `message` names no cause we
/// could read.
fn may_be_range_refusal_body(body: &str) -> bool {
    is_json_rpc_error(body) && body.contains("\"message\"") && may_be_range_refusal(body)
}

/// One JSON-RPC packet to one endpoint through the counted gateway. An HTTP error status is
/// a failed attempt that keeps the endpoint's `Retry-After` (delay seconds, or an HTTP date
/// read as the time until it).
pub(crate) async fn post_packet(
    gateway: &Gateway,
    upstream: Upstream,
    url: &reqwest::Url,
    timeout: Duration,
    packet: &RequestPacket,
) -> Result<ResponsePacket, Attempt> {
    let body = post(gateway, upstream, url, timeout, packet).await?;
    serde_json::from_slice(&body)
        .map_err(|e| TransportError::deser_err(e, "<RPC answer withheld>").into())
}

/// One JSON-RPC body to one endpoint, read as plain JSON (the chain-id check).
pub(crate) async fn post_json(
    gateway: &Gateway,
    upstream: Upstream,
    url: &reqwest::Url,
    timeout: Duration,
    body: &serde_json::Value,
) -> Result<serde_json::Value, Attempt> {
    let body = post(gateway, upstream, url, timeout, body).await?;
    serde_json::from_slice(&body)
        .map_err(|e| TransportError::deser_err(e, "<RPC answer withheld>").into())
}

async fn post<T: serde::Serialize + ?Sized>(
    gateway: &Gateway,
    upstream: Upstream,
    url: &reqwest::Url,
    timeout: Duration,
    body: &T,
) -> Result<Vec<u8>, Attempt> {
    let build = || {
        gateway
            .request(reqwest::Method::POST, url.clone())
            .timeout(timeout)
            .json(body)
            .build()
    };
    let response = gateway
        .send(upstream, build)
        .await
        .map_err(|e| TransportErrorKind::custom_str(&redacted(&e)))?;
    let status = response.status();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| retry_after_delay(v, std::time::SystemTime::now()));
    let body = read_capped(response).await?;
    if !status.is_success() {
        return Err(Attempt {
            error: TransportErrorKind::http_error(
                status.as_u16(),
                String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned(),
            ),
            retry_after,
            rate_limited: status == reqwest::StatusCode::TOO_MANY_REQUESTS,
        });
    }
    Ok(body)
}

async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, TransportError> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| TransportErrorKind::custom_str(&redacted(&e)))?
    {
        if body.len() + chunk.len() > MAX_RPC_RESPONSE_BYTES {
            return Err(TransportErrorKind::custom_str(
                "RPC answer exceeds the size limit",
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A reqwest error without its URL (which may hold a key).
fn redacted(error: &reqwest::Error) -> String {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "connection failed"
    } else if error.is_body() || error.is_decode() {
        "answer could not be read"
    } else {
        "request failed"
    };
    format!("RPC {kind}")
}

/// Why one read failed, described without the endpoint's URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReadFailure {
    /// The node or the transport failed (`describe_error`'s words).
    #[error("{0}")]
    Rpc(String),
    /// The node answered, but not with a value of the call's return type.
    #[error("the call returned no decodable value")]
    Undecodable,
}

impl From<&TransportError> for ReadFailure {
    fn from(error: &TransportError) -> ReadFailure {
        ReadFailure::Rpc(describe_error(error))
    }
}

/// A contract call's failure in [`describe_error`]'s words: never the URL, nor an HTTP error's
/// body (a proxy's error page may echo the request path, and with it an API key).
pub(crate) fn describe_contract_error(error: &alloy::contract::Error) -> String {
    match error {
        alloy::contract::Error::TransportError(e) => describe_error(e),
        alloy::contract::Error::AbiError(_) | alloy::contract::Error::ZeroData(..) => {
            "the call returned no decodable value".to_string()
        }
        _ => "the call failed".to_string(),
    }
}

/// A transport failure described without the URL or an HTTP error's body.
pub(crate) fn describe_error(error: &TransportError) -> String {
    match error {
        TransportError::ErrorResp(payload) => {
            format!("RPC error {}: {}", payload.code, payload.message)
        }
        TransportError::Transport(kind) => match kind {
            TransportErrorKind::HttpError(http) => format!("RPC HTTP status {}", http.status),
            TransportErrorKind::Custom(custom) => custom.to_string(),
            _ => "RPC transport failure".to_string(),
        },
        TransportError::DeserError { .. } => "RPC answer was not valid JSON-RPC".to_string(),
        TransportError::NullResp => "RPC returned null".to_string(),
        _ => "RPC call failed".to_string(),
    }
}

/// What a response may say about a configured endpoint whose URL is a secret: its host and,
/// at most, its origin (scheme, host, port). Paths and queries often carry provider keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PublicEndpoint {
    pub host: String,
    /// None when even the origin is withheld: the configured URL carries userinfo, so the
    /// whole URL is treated as credential material beyond its host.
    pub origin: Option<String>,
}

/// What a response may say of a configured endpoint URL (see [`PublicEndpoint`]).
pub(crate) fn public_endpoint(url: &Secret) -> PublicEndpoint {
    match url::Url::parse(url.expose()) {
        Ok(parsed) => public_endpoint_of(&parsed),
        Err(_) => PublicEndpoint {
            host: String::new(),
            origin: None,
        },
    }
}

/// What a response may say of an endpoint's parsed URL.
pub(crate) fn public_endpoint_of(parsed: &url::Url) -> PublicEndpoint {
    let host = parsed.host_str().unwrap_or_default().to_string();
    let has_userinfo = !parsed.username().is_empty() || parsed.password().is_some();
    let origin = (!has_userinfo).then(|| parsed.origin().ascii_serialization());
    PublicEndpoint { host, origin }
}

/// How an `eth_call`/`eth_estimateGas` failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CallFailure {
    /// The node says the call reverts.
    Reverted {
        /// The node's own message, made printable.
        message: String,
        /// The decoded reason (`Error(string)`, `Panic(uint256)` or UTF-8 text), if any.
        reason: Option<String>,
        /// The raw revert data, if the node returned any.
        data: Option<alloy::primitives::Bytes>,
    },
    /// Anything else: transport failure, timeout, other RPC error.
    Unavailable(String),
}

/// Classifies a call failure. A revert is JSON-RPC error code 3 (geth, anvil, reth) or a
/// message that names a revert (nodes that answer -32000 "execution reverted").
pub(crate) fn classify_call_error(error: &TransportError) -> CallFailure {
    let TransportError::ErrorResp(payload) = error else {
        return CallFailure::Unavailable(describe_error(error));
    };
    let names_revert = payload.message.to_ascii_lowercase().contains("revert");
    if payload.code != 3 && !names_revert {
        return CallFailure::Unavailable(describe_error(error));
    }
    let data = payload.as_revert_data().or_else(|| {
        let raw = payload.data.as_ref()?;
        let text: String = serde_json::from_str(raw.get()).ok()?;
        alloy::primitives::hex::decode(text).ok().map(Into::into)
    });
    let reason = data
        .as_ref()
        .filter(|d| !d.is_empty())
        .and_then(|d| revert_reason(d))
        .map(|r| crate::net::upstream::printable(&r, 240));
    CallFailure::Reverted {
        message: crate::net::upstream::printable(&payload.message, 240),
        reason,
        data,
    }
}

/// The reason a contract gave: the `Error(string)` text as is, a panic as `panic: <kind>`,
/// or the UTF-8 text some languages revert with. Custom errors have no reason text.
fn revert_reason(data: &[u8]) -> Option<String> {
    use alloy::sol_types::{ContractError, GenericRevertReason, RevertReason};
    match GenericRevertReason::decode(data)? {
        RevertReason::ContractError(ContractError::Revert(revert)) => Some(revert.reason),
        RevertReason::ContractError(ContractError::Panic(panic)) => Some(panic.to_string()),
        RevertReason::ContractError(ContractError::CustomError(never)) => match never {},
        RevertReason::RawString(text) => Some(text),
    }
}

/// JSON-RPC's "method not found".
const METHOD_NOT_FOUND: i64 = -32601;

/// An answer to a log search that may mean "range too wide" (the event search's rule, and the
/// failover transport's for an HTTP status): QuickNode's HTTP 413, or an error (a JSON-RPC
/// error answer, its `data` included, or Alchemy's HTTP 400 carrying one) that names no other
/// cause ([`may_be_range_refusal`]). A rate limit, a credential refused, an unknown method, a
/// lagging node, a 400 that is not JSON-RPC end the search at once: narrowing the window
/// would only ask again, about ten times.
pub(crate) fn refuses_range(error: &TransportError) -> bool {
    match error {
        RpcError::ErrorResp(payload) => {
            let data = payload.data.as_ref().map_or("", |data| data.get());
            payload.code != METHOD_NOT_FOUND
                && may_be_range_refusal(&payload.message)
                && may_be_range_refusal(data)
        }
        RpcError::Transport(TransportErrorKind::HttpError(http)) => {
            http.status == 413 || (http.status == 400 && may_be_range_refusal_body(&http.body))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_error_is_described_without_its_body() {
        let page = "Cannot POST /v2/SECRETKEY123".to_string();
        let error =
            alloy::contract::Error::TransportError(TransportErrorKind::http_error(404, page));
        assert!(
            error.to_string().contains("SECRETKEY123"),
            "alloy's own text has it"
        );
        let described = describe_contract_error(&error);
        assert_eq!(described, "RPC HTTP status 404");
    }
}
