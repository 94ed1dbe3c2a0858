//! EVM JSON-RPC through the counted gateway, with an alloy provider on top.
//!
//! The transport is ours rather than alloy's reqwest transport for two reasons: every request
//! must pass the one counted gateway, and an RPC URL may carry a provider key, so it must
//! never reach a log line, an error message or a response (alloy's transport records the URL
//! in a tracing span).

use std::fmt;
use std::task;
use std::time::Duration;

use alloy::network::Ethereum;
use alloy::providers::RootProvider;
use alloy::rpc::client::RpcClient;
use alloy::rpc::json_rpc::{RequestPacket, ResponsePacket};
use alloy::transports::{TransportError, TransportErrorKind, TransportFut};

use crate::config::Secret;
use crate::net::gateway::{Gateway, Upstream};

/// Bytes of an RPC answer we read at most; a larger answer is an error.
const MAX_RPC_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// A JSON-RPC endpoint whose URL is a secret.
#[derive(Clone, Debug)]
pub(crate) struct CountedRpc {
    gateway: Gateway,
    upstream: Upstream,
    url: SecretUrl,
    response_timeout: Duration,
}

/// The endpoint parsed once per provider rather than once per request (URL parsing showed
/// in the paid path's profile); `None` when the configured URL does not parse.
#[derive(Clone)]
struct SecretUrl(Option<reqwest::Url>);

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretUrl(<redacted>)")
    }
}

impl CountedRpc {
    /// An endpoint at `url`, measured under `upstream` (the chain's RPC label).
    pub(crate) fn new(
        gateway: Gateway,
        upstream: Upstream,
        url: &Secret,
        response_timeout: Duration,
    ) -> Self {
        CountedRpc {
            gateway,
            upstream,
            url: SecretUrl(reqwest::Url::parse(url.expose()).ok()),
            response_timeout,
        }
    }

    /// An alloy provider speaking through this transport.
    pub(crate) fn provider(self) -> RootProvider<Ethereum> {
        RootProvider::new(RpcClient::new(self, false))
    }

    async fn send(self, packet: RequestPacket) -> Result<ResponsePacket, TransportError> {
        let url =
            self.url.0.clone().ok_or_else(|| {
                TransportErrorKind::custom_str("the configured RPC URL is invalid")
            })?;
        let request = self
            .gateway
            .request(reqwest::Method::POST, url)
            .timeout(self.response_timeout)
            .json(&packet)
            .build()
            .map_err(|e| TransportErrorKind::custom_str(&redacted(&e)))?;
        let response = self
            .gateway
            .send(self.upstream, request)
            .await
            .map_err(|e| TransportErrorKind::custom_str(&redacted(&e)))?;
        let status = response.status();
        let body = read_capped(response).await?;
        if !status.is_success() {
            return Err(TransportErrorKind::http_error(
                status.as_u16(),
                String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned(),
            ));
        }
        serde_json::from_slice(&body)
            .map_err(|e| TransportError::deser_err(e, "<RPC answer withheld>"))
    }
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

impl tower::Service<RequestPacket> for CountedRpc {
    type Response = ResponsePacket;
    type Error = TransportError;
    type Future = TransportFut<'static>;

    fn poll_ready(&mut self, _cx: &mut task::Context<'_>) -> task::Poll<Result<(), Self::Error>> {
        task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, packet: RequestPacket) -> Self::Future {
        Box::pin(self.clone().send(packet))
    }
}

/// Describes an RPC failure for a response's limitations: never the URL.
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

pub(crate) fn public_endpoint(url: &Secret) -> PublicEndpoint {
    let Ok(parsed) = url::Url::parse(url.expose()) else {
        return PublicEndpoint {
            host: String::new(),
            origin: None,
        };
    };
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
