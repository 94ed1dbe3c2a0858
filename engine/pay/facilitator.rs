//! The x402 facilitator client: `POST /verify`, `POST /settle`, `GET /supported`.
//!
//! Facilitators may answer a rejection with a non-2xx status and still send the JSON verdict,
//! so the body is always parsed. A transport failure or an unparseable answer is
//! `Unavailable`: the caller answers 503 and runs no work.

use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::config::{FacilitatorAuth, Secret};
use crate::net::gateway::{Gateway, Resent, Upstream};
use crate::pay::cdp_auth::{CdpKeyError, CdpSigner};
use crate::support::json_value::non_empty_str;

const MAX_FACILITATOR_RESPONSE_BYTES: usize = 256 * 1024;
/// Longest reason kept from a facilitator. x402's reasons are short snake_case codes, and the
/// text rides in our 402's `PAYMENT-REQUIRED` and in `PAYMENT-RESPONSE`: an unbounded one
/// could push a header past what a proxy in front of us accepts.
const MAX_REASON_CHARS: usize = 128;
/// Largest SettleResponse passed on to the buyer as the facilitator wrote it; a larger one is
/// cut to x402's own fields.
const MAX_SETTLE_RESPONSE_BYTES: usize = 1024;
/// The SettleResponse fields x402 defines, the ones a cut response keeps.
const SETTLE_RESPONSE_FIELDS: [&str; 6] = [
    "success",
    "errorReason",
    "errorMessage",
    "payer",
    "transaction",
    "network",
];

#[derive(Debug, Clone)]
pub(crate) struct FacilitatorClient {
    gateway: Gateway,
    endpoints: Endpoints,
    auth: Authorizer,
    verify_timeout: Duration,
    settle_timeout: Duration,
}

/// The facilitator's verdict on a payment.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VerifyResponse {
    pub is_valid: bool,
    #[serde(default)]
    pub invalid_reason: Option<String>,
    /// The `EXTENSION-RESPONSES` header, decoded; never for the buyer.
    #[serde(skip)]
    pub extension_responses: Option<Value>,
}

/// The outcome of a settlement, kept verbatim for the PAYMENT-RESPONSE header.
#[derive(Debug, Clone)]
pub(crate) struct SettleOutcome {
    pub success: bool,
    pub transaction: Option<String>,
    pub error_reason: Option<String>,
    /// The SettleResponse JSON to send back to the buyer.
    pub response: Value,
    /// The `EXTENSION-RESPONSES` header, decoded; never for the buyer.
    pub extension_responses: Option<Value>,
    /// The answer is to a second sending, after the first one's connection closed unanswered:
    /// the facilitator may have broadcast on the first, whatever this answer says of its own.
    pub after_resend: bool,
}

/// The JSON body of `/verify` and `/settle`, serialized once: x402 v2 sends both the same
/// PaymentPayload and requirements, and a `/settle` retry sends it identical again.
#[derive(Debug, Clone)]
pub(crate) struct PaymentBody(Bytes);

/// `{"x402Version": 2, "paymentPayload": …, "paymentRequirements": …}`, in that order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BodyFields<'a, P> {
    x402_version: u8,
    payment_payload: &'a P,
    payment_requirements: &'a RawValue,
}

impl PaymentBody {
    /// Serializes the PaymentPayload we forward and our requirement (serialized at start-up).
    /// A body that cannot be serialized is a request that cannot be built: `Unavailable`, as
    /// reqwest reported it.
    pub(crate) fn new<P: Serialize>(
        payload: &P,
        requirement: &RawValue,
    ) -> Result<PaymentBody, FacilitatorError> {
        let fields = BodyFields {
            x402_version: 2,
            payment_payload: payload,
            payment_requirements: requirement,
        };
        // Sized for our declaration and a buyer's payload, so the buffer is not regrown.
        let mut bytes = Vec::with_capacity(PAYMENT_BODY_BUFFER_BYTES);
        serde_json::to_writer(&mut bytes, &fields)
            .map(|()| PaymentBody(Bytes::from(bytes)))
            .map_err(|e| FacilitatorError::Unavailable(e.to_string()))
    }
}

/// The first buffer a `/verify` and `/settle` body is serialized into: our declaration and
/// the buyer's payload come to a few KB.
const PAYMENT_BODY_BUFFER_BYTES: usize = 8192;

/// One facilitator answer: status, JSON body (read as `T`), and the `EXTENSION-RESPONSES`
/// sidechannel.
struct Answer<T> {
    status: u16,
    value: T,
    extension_responses: Option<Value>,
    /// See [`SettleOutcome::after_resend`].
    resent: bool,
}

/// Most bytes of an `EXTENSION-RESPONSES` header read; a larger one is ignored.
const MAX_EXTENSION_RESPONSES_BYTES: usize = 8 * 1024;

/// The `EXTENSION-RESPONSES` header (base64 of a JSON object keyed by extension), decoded;
/// None when absent or unreadable (it reports on listings, never on the payment).
fn extension_responses(headers: &reqwest::header::HeaderMap) -> Option<Value> {
    use base64::Engine as _;
    let value = headers.get("extension-responses")?.as_bytes();
    if value.len() > MAX_EXTENSION_RESPONSES_BYTES {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.trim_ascii())
        .ok()?;
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .filter(Value::is_object)
}

/// x402 v2's non-terminal settle answer: broadcast, receipt not seen yet (§5.3.2).
pub(crate) const SETTLEMENT_PENDING: &str = "settlement_pending";

impl SettleOutcome {
    /// The facilitator broadcast but did not see the receipt: the transaction is the handle.
    pub(crate) fn is_pending(&self) -> bool {
        !self.success && self.error_reason.as_deref() == Some(SETTLEMENT_PENDING)
    }
}

/// What each facilitator request carries to authenticate.
#[derive(Debug, Clone)]
pub(crate) enum Authorizer {
    None,
    Static(Secret),
    /// A fresh JWT per request, bound to its method, host and path.
    Cdp(CdpSigner),
}

impl Authorizer {
    /// The configured mode; a CDP key that cannot sign is refused here, at start-up.
    pub(crate) fn from_config(auth: &FacilitatorAuth) -> Result<Authorizer, CdpKeyError> {
        Ok(match auth {
            FacilitatorAuth::None => Authorizer::None,
            FacilitatorAuth::Static(value) => Authorizer::Static(value.clone()),
            FacilitatorAuth::Cdp { key_id, key_secret } => {
                Authorizer::Cdp(CdpSigner::new(key_id, key_secret.expose())?)
            }
        })
    }

    /// The mode's name, for the start-up log line.
    pub(crate) fn mode(&self) -> &'static str {
        match self {
            Authorizer::None => "none",
            Authorizer::Static(_) => "static",
            Authorizer::Cdp(signer) => signer.algorithm(),
        }
    }

    /// The Authorization value of one request. The CDP uri is the host as the facilitator
    /// URL writes it (with its port when it has one) and the path, without scheme or query.
    fn value(&self, method: &reqwest::Method, url: &reqwest::Url) -> Option<String> {
        match self {
            Authorizer::None => None,
            Authorizer::Static(value) => Some(value.expose().to_string()),
            Authorizer::Cdp(signer) => {
                let host = url.host_str().unwrap_or_default();
                let host = match url.port() {
                    Some(port) => format!("{host}:{port}"),
                    None => host.to_string(),
                };
                // A key that signed at start-up keeps signing; were it to fail, the request
                // goes without a token and the facilitator's 401 is reported as such.
                signer
                    .token(method.as_str(), &host, url.path())
                    .ok()
                    .map(|token| format!("Bearer {token}"))
            }
        }
    }
}

/// A facilitator endpoint.
#[derive(Debug, Clone, Copy)]
enum Endpoint {
    Verify,
    Settle,
    Supported,
}

impl Endpoint {
    /// Its path segment, which also names it in metrics and logs.
    fn name(self) -> &'static str {
        match self {
            Endpoint::Verify => "verify",
            Endpoint::Settle => "settle",
            Endpoint::Supported => "supported",
        }
    }
}

/// The facilitator's endpoints under its base URL (a path prefix is kept), built once.
#[derive(Debug, Clone)]
struct Endpoints {
    verify: reqwest::Url,
    settle: reqwest::Url,
    supported: reqwest::Url,
}

impl Endpoints {
    fn under(base: &reqwest::Url) -> Endpoints {
        let url = |endpoint: Endpoint| {
            let mut url = base.clone();
            let path = format!("{}/{}", url.path().trim_end_matches('/'), endpoint.name());
            url.set_path(&path);
            url
        };
        Endpoints {
            verify: url(Endpoint::Verify),
            settle: url(Endpoint::Settle),
            supported: url(Endpoint::Supported),
        }
    }

    fn url(&self, endpoint: Endpoint) -> &reqwest::Url {
        match endpoint {
            Endpoint::Verify => &self.verify,
            Endpoint::Settle => &self.settle,
            Endpoint::Supported => &self.supported,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum FacilitatorError {
    #[error("facilitator unreachable or timed out: {0}")]
    Unavailable(String),
    #[error("facilitator refused our credentials ({status}); check facilitator_auth and its key")]
    Unauthorized { status: u16 },
    #[error("facilitator answered {status} without a usable verdict")]
    BadAnswer { status: u16 },
}

impl FacilitatorClient {
    pub(crate) fn new(
        gateway: Gateway,
        base: reqwest::Url,
        auth: Authorizer,
        verify_timeout: Duration,
        settle_timeout: Duration,
    ) -> Self {
        FacilitatorClient {
            gateway,
            endpoints: Endpoints::under(&base),
            auth,
            verify_timeout,
            settle_timeout,
        }
    }

    /// The configured `/verify` timeout (the window check counts it).
    pub(crate) fn verify_timeout(&self) -> Duration {
        self.verify_timeout
    }

    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: reqwest::Method,
        endpoint: Endpoint,
        body: Option<&PaymentBody>,
        timeout: Duration,
    ) -> Result<Answer<T>, FacilitatorError> {
        let url = self.endpoints.url(endpoint);
        let authorization = self.auth.value(&method, url);
        let build = || {
            let mut builder = self
                .gateway
                .request(method.clone(), url.clone())
                .timeout(timeout)
                .header("accept", "application/json");
            if let Some(value) = &authorization {
                builder = builder.header("authorization", value.as_str());
            }
            if let Some(PaymentBody(bytes)) = body {
                // A clone of `Bytes` shares the serialized body; nothing is serialized again.
                builder = builder
                    .header("content-type", "application/json")
                    .body(bytes.clone());
            }
            builder.build()
        };
        let mut response = self
            .gateway
            .send(Upstream::new("facilitator", endpoint.name()), build)
            .await
            .map_err(|e| FacilitatorError::Unavailable(e.without_url().to_string()))?;
        let status = response.status().as_u16();
        let resent = response.extensions().get::<Resent>().is_some();
        let extension_responses = extension_responses(response.headers());
        if matches!(status, 401 | 403) {
            return Err(FacilitatorError::Unauthorized { status });
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| FacilitatorError::Unavailable(e.without_url().to_string()))?
        {
            if bytes.len() + chunk.len() > MAX_FACILITATOR_RESPONSE_BYTES {
                return Err(FacilitatorError::BadAnswer { status });
            }
            bytes.extend_from_slice(&chunk);
        }
        let value =
            serde_json::from_slice(&bytes).map_err(|_| FacilitatorError::BadAnswer { status })?;
        Ok(Answer {
            status,
            value,
            extension_responses,
            resent,
        })
    }

    /// The configured timeout of a step, clipped to what is left before `deadline`.
    fn within(configured: Duration, deadline: Instant) -> Result<Duration, FacilitatorError> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(FacilitatorError::Unavailable(
                "no time left before the authorization's deadline".into(),
            ));
        }
        Ok(configured.min(left))
    }

    /// `POST /verify` with our own requirement (never the client's copy), answered before
    /// `deadline`.
    pub(crate) async fn verify(
        &self,
        body: &PaymentBody,
        deadline: Instant,
    ) -> Result<VerifyResponse, FacilitatorError> {
        let timeout = Self::within(self.verify_timeout, deadline)?;
        let answer = self
            .call::<VerifyResponse>(reqwest::Method::POST, Endpoint::Verify, Some(body), timeout)
            .await?;
        let mut verdict = answer.value;
        verdict.extension_responses = answer.extension_responses;
        verdict.invalid_reason = verdict.invalid_reason.map(bounded_reason);
        Ok(verdict)
    }

    /// `POST /settle`, answered before `deadline`. A parseable verdict of failure is an `Ok`
    /// with `success: false`.
    pub(crate) async fn settle(
        &self,
        body: &PaymentBody,
        deadline: Instant,
    ) -> Result<SettleOutcome, FacilitatorError> {
        let timeout = Self::within(self.settle_timeout, deadline)?;
        let Answer {
            status,
            mut value,
            extension_responses,
            resent,
        } = self
            .call::<Value>(reqwest::Method::POST, Endpoint::Settle, Some(body), timeout)
            .await?;
        let Some(success) = value.get("success").and_then(Value::as_bool) else {
            return Err(FacilitatorError::BadAnswer { status });
        };
        if let Value::Object(map) = &mut value {
            // Facilitator-internal extension results are not for the buyer.
            map.shift_remove("extensionResponses");
            bound_settle_response(map);
        }
        let text = |key: &str| non_empty_str(&value, key).map(str::to_string);
        Ok(SettleOutcome {
            success,
            transaction: text("transaction"),
            error_reason: text("errorReason"),
            response: value,
            extension_responses,
            after_resend: resent,
        })
    }

    /// `GET /supported`; true when it lists `exact` on `network` for x402 v2.
    pub(crate) async fn supports(
        &self,
        scheme: &str,
        network: &str,
    ) -> Result<bool, FacilitatorError> {
        let answer = self
            .call::<Value>(
                reqwest::Method::GET,
                Endpoint::Supported,
                None,
                self.verify_timeout,
            )
            .await?;
        let kinds = answer.value.get("kinds").and_then(Value::as_array);
        Ok(kinds.into_iter().flatten().any(|kind| {
            kind.get("x402Version").and_then(Value::as_u64) == Some(2)
                && kind.get("scheme").and_then(Value::as_str) == Some(scheme)
                && kind.get("network").and_then(Value::as_str) == Some(network)
        }))
    }
}

/// `reason` cut to `MAX_REASON_CHARS` characters.
fn bounded_reason(reason: String) -> String {
    match reason.char_indices().nth(MAX_REASON_CHARS) {
        Some((end, _)) => reason[..end].to_string(),
        None => reason,
    }
}

/// Bounds a SettleResponse that goes back to the buyer: reasons cut to `MAX_REASON_CHARS`,
/// and a response still over `MAX_SETTLE_RESPONSE_BYTES` cut to x402's own fields, each
/// dropped when it is not a short scalar.
fn bound_settle_response(map: &mut serde_json::Map<String, Value>) {
    for field in ["errorReason", "errorMessage"] {
        if let Some(Value::String(text)) = map.get_mut(field) {
            *text = bounded_reason(std::mem::take(text));
        }
    }
    let size = serde_json::to_vec(&*map).map_or(usize::MAX, |bytes| bytes.len());
    if size <= MAX_SETTLE_RESPONSE_BYTES {
        return;
    }
    tracing::warn!(
        bytes = size,
        "facilitator SettleResponse too large to pass on: keeping x402's fields"
    );
    map.retain(|field, value| {
        SETTLE_RESPONSE_FIELDS.contains(&field.as_str())
            && match value {
                Value::String(text) => text.len() <= MAX_REASON_CHARS,
                Value::Bool(_) => true,
                _ => false,
            }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reasons_are_cut_at_a_character_boundary() {
        assert_eq!(
            bounded_reason("insufficient_funds".into()),
            "insufficient_funds"
        );
        let long = "é".repeat(300);
        let cut = bounded_reason(long);
        assert_eq!(cut.chars().count(), MAX_REASON_CHARS);
        assert!(cut.chars().all(|c| c == 'é'));
    }

    #[test]
    fn a_settle_response_stays_as_written_unless_too_large() {
        let written = json!({"success": false, "errorReason": "invalid_exact_evm_payload_signature",
            "transaction": "", "network": "eip155:8453", "facilitatorNote": "kept"});
        let mut map = written.as_object().expect("object").clone();
        bound_settle_response(&mut map);
        assert_eq!(Value::Object(map), written);

        let mut large = json!({"success": false, "errorReason": "x".repeat(5000),
            "network": "eip155:8453", "payer": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
            "debug": {"trace": "y".repeat(2000)}})
        .as_object()
        .expect("object")
        .clone();
        bound_settle_response(&mut large);
        assert_eq!(
            large["errorReason"].as_str().map(str::len),
            Some(MAX_REASON_CHARS)
        );
        assert!(large.get("debug").is_none(), "{large:?}");
        assert_eq!(large["payer"], "0x857b06519E91e3A54538791bDbb0E22373e36b66");
        assert!(serde_json::to_vec(&large).expect("json").len() <= MAX_SETTLE_RESPONSE_BYTES);
    }
}
