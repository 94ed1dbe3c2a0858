//! The x402 facilitator client: `POST /verify`, `POST /settle`, `GET /supported`.
//!
//! Facilitators may answer a rejection with a non-2xx status and still send the JSON verdict,
//! so the body is always parsed. A transport failure or an unparseable answer is
//! `Unavailable`: the caller answers 503 and runs no work.

use std::time::Duration;

use tokio::time::Instant;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::{FacilitatorAuth, Secret};
use crate::net::gateway::{Gateway, Upstream};
use crate::pay::cdp_auth::{CdpKeyError, CdpSigner};

const MAX_FACILITATOR_RESPONSE_BYTES: usize = 256 * 1024;

#[derive(Debug, Clone)]
pub(crate) struct FacilitatorClient {
    gateway: Gateway,
    base: reqwest::Url,
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
}

/// The outcome of a settlement, kept verbatim for the PAYMENT-RESPONSE header.
#[derive(Debug, Clone)]
pub(crate) struct SettleOutcome {
    pub success: bool,
    pub transaction: Option<String>,
    pub error_reason: Option<String>,
    /// The SettleResponse JSON to send back to the buyer.
    pub response: Value,
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
            base,
            auth,
            verify_timeout,
            settle_timeout,
        }
    }

    /// The configured `/verify` timeout (the window check counts it).
    pub(crate) fn verify_timeout(&self) -> Duration {
        self.verify_timeout
    }

    fn endpoint(&self, name: &str) -> reqwest::Url {
        let mut url = self.base.clone();
        let path = format!("{}/{name}", url.path().trim_end_matches('/'));
        url.set_path(&path);
        url
    }

    async fn call(
        &self,
        method: reqwest::Method,
        name: &'static str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<(u16, Value), FacilitatorError> {
        let url = self.endpoint(name);
        let authorization = self.auth.value(&method, &url);
        let mut builder = self
            .gateway
            .request(method, url)
            .timeout(timeout)
            .header("accept", "application/json");
        if let Some(value) = authorization {
            builder = builder.header("authorization", value);
        }
        if let Some(body) = body {
            builder = builder.json(body);
        }
        let request = builder
            .build()
            .map_err(|e| FacilitatorError::Unavailable(e.without_url().to_string()))?;
        let mut response = self
            .gateway
            .send(Upstream::new("facilitator", name), request)
            .await
            .map_err(|e| FacilitatorError::Unavailable(e.without_url().to_string()))?;
        let status = response.status().as_u16();
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
        Ok((status, value))
    }

    fn body(payload: &Value, requirement: &Value) -> Value {
        json!({"x402Version": 2, "paymentPayload": payload, "paymentRequirements": requirement})
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
        payload: &Value,
        requirement: &Value,
        deadline: Instant,
    ) -> Result<VerifyResponse, FacilitatorError> {
        let body = Self::body(payload, requirement);
        let timeout = Self::within(self.verify_timeout, deadline)?;
        let (status, value) = self
            .call(reqwest::Method::POST, "verify", Some(&body), timeout)
            .await?;
        serde_json::from_value(value).map_err(|_| FacilitatorError::BadAnswer { status })
    }

    /// `POST /settle`, answered before `deadline`. A parseable verdict of failure is an `Ok`
    /// with `success: false`.
    pub(crate) async fn settle(
        &self,
        payload: &Value,
        requirement: &Value,
        deadline: Instant,
    ) -> Result<SettleOutcome, FacilitatorError> {
        let body = Self::body(payload, requirement);
        let timeout = Self::within(self.settle_timeout, deadline)?;
        let (status, mut value) = self
            .call(reqwest::Method::POST, "settle", Some(&body), timeout)
            .await?;
        let Some(success) = value.get("success").and_then(Value::as_bool) else {
            return Err(FacilitatorError::BadAnswer { status });
        };
        if let Value::Object(map) = &mut value {
            // Facilitator-internal extension results are not for the buyer.
            map.shift_remove("extensionResponses");
        }
        let text = |key: &str| {
            value
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        Ok(SettleOutcome {
            success,
            transaction: text("transaction"),
            error_reason: text("errorReason"),
            response: value,
        })
    }

    /// `GET /supported`; true when it lists `exact` on `network` for x402 v2.
    pub(crate) async fn supports(
        &self,
        scheme: &str,
        network: &str,
    ) -> Result<bool, FacilitatorError> {
        let (_, value) = self
            .call(reqwest::Method::GET, "supported", None, self.verify_timeout)
            .await?;
        let kinds = value.get("kinds").and_then(Value::as_array);
        Ok(kinds.into_iter().flatten().any(|kind| {
            kind.get("x402Version").and_then(Value::as_u64) == Some(2)
                && kind.get("scheme").and_then(Value::as_str) == Some(scheme)
                && kind.get("network").and_then(Value::as_str) == Some(network)
        }))
    }
}
