//! The x402 facilitator client: `POST /verify`, `POST /settle`, `GET /supported`.
//!
//! Facilitators may answer a rejection with a non-2xx status and still send the JSON verdict,
//! so the body is always parsed. A transport failure or an unparseable answer is
//! `Unavailable`: the caller answers 503 and runs no work.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::Secret;
use crate::net::gateway::Gateway;

const MAX_FACILITATOR_RESPONSE_BYTES: usize = 256 * 1024;

#[derive(Debug, Clone)]
pub(crate) struct FacilitatorClient {
    gateway: Gateway,
    base: reqwest::Url,
    authorization: Option<Secret>,
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

#[derive(Debug, thiserror::Error)]
pub(crate) enum FacilitatorError {
    #[error("facilitator unreachable or timed out: {0}")]
    Unavailable(String),
    #[error("facilitator answered {status} without a usable verdict")]
    BadAnswer { status: u16 },
}

impl FacilitatorClient {
    pub(crate) fn new(
        gateway: Gateway,
        base: reqwest::Url,
        authorization: Option<Secret>,
        verify_timeout: Duration,
        settle_timeout: Duration,
    ) -> Self {
        FacilitatorClient {
            gateway,
            base,
            authorization,
            verify_timeout,
            settle_timeout,
        }
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
        name: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<(u16, Value), FacilitatorError> {
        let mut builder = self
            .gateway
            .request(method, self.endpoint(name))
            .timeout(timeout)
            .header("accept", "application/json");
        if let Some(auth) = &self.authorization {
            builder = builder.header("authorization", auth.expose());
        }
        if let Some(body) = body {
            builder = builder.json(body);
        }
        let request = builder
            .build()
            .map_err(|e| FacilitatorError::Unavailable(e.without_url().to_string()))?;
        let mut response = self
            .gateway
            .send(request)
            .await
            .map_err(|e| FacilitatorError::Unavailable(e.without_url().to_string()))?;
        let status = response.status().as_u16();
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

    /// `POST /verify` with our own requirement (never the client's copy).
    pub(crate) async fn verify(
        &self,
        payload: &Value,
        requirement: &Value,
    ) -> Result<VerifyResponse, FacilitatorError> {
        let body = Self::body(payload, requirement);
        let (status, value) = self
            .call(
                reqwest::Method::POST,
                "verify",
                Some(&body),
                self.verify_timeout,
            )
            .await?;
        serde_json::from_value(value).map_err(|_| FacilitatorError::BadAnswer { status })
    }

    /// `POST /settle`. A parseable verdict of failure is an `Ok` with `success: false`.
    pub(crate) async fn settle(
        &self,
        payload: &Value,
        requirement: &Value,
    ) -> Result<SettleOutcome, FacilitatorError> {
        let body = Self::body(payload, requirement);
        let (status, mut value) = self
            .call(
                reqwest::Method::POST,
                "settle",
                Some(&body),
                self.settle_timeout,
            )
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
