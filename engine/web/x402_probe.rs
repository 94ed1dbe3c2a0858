//! The unpaid x402 probe shared by VM08–VM10 (SPEC Part 4 rule 5; docs/x402-probe.md).
//!
//! Exactly one request with the caller's method goes to the caller's URL through the
//! SSRF-safe [`Fetcher`]: POST carries the caller's JSON body (`{}` when omitted), GET never
//! carries one; no custom headers, cookies or credentials; redirects are not followed (a 3xx
//! is reported as such and fails closed). A 402 is read as a v2 challenge (`PAYMENT-REQUIRED`
//! header, base64 JSON) or, when that header is absent, as a v1 challenge (JSON body with
//! `x402Version: 1`). Any other answer is reported truthfully; nothing is paid.

use base64::Engine;
use serde_json::{Map, Value, json};
use url::Url;

use crate::catalog::challenge::PAYMENT_REQUIRED;
use crate::catalog::manifest::Machine;
use crate::net::gateway::Gateway;
use crate::support::canonical::canonical_sha256;
use crate::support::json_value::non_empty_str;
use crate::support::json_value::strings;
use crate::web::fetch::{
    FetchLimits, FetchMethod, FetchRequest, FetchSetupError, Fetcher, Redirects,
};

/// The request identity of a probe: method, URL and the POST body fingerprint.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProbeTarget {
    pub url: Url,
    /// "GET" or "POST".
    pub method: &'static str,
    /// The JSON body sent with POST (`{}` when the caller omitted it); None for GET.
    pub body: Option<Value>,
}

impl ProbeTarget {
    /// The target of a request's `resource_url`, `method` and optional `body`.
    pub(crate) fn new(
        resource_url: &str,
        method: &str,
        body: Option<&Value>,
    ) -> Result<ProbeTarget, ProbeError> {
        let url = Url::parse(resource_url).map_err(|e| ProbeError::Target(e.to_string()))?;
        let (method, body) = match method {
            "GET" => ("GET", None),
            "POST" => ("POST", Some(body.cloned().unwrap_or_else(|| json!({})))),
            other => {
                return Err(ProbeError::Target(format!(
                    "method {other:?} is not GET or POST"
                )));
            }
        };
        Ok(ProbeTarget { url, method, body })
    }

    /// sha256 of the canonical POST body; None for GET (docs/hashing.md).
    pub(crate) fn body_sha256(&self) -> Option<String> {
        self.body.as_ref().map(canonical_sha256)
    }

    /// The `probe` object of the responses.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "method": self.method,
            "resource_url": self.url.as_str(),
            "body_sha256": self.body_sha256(),
        })
    }
}

/// One payment requirement of a challenge, in v2 terms (v1 `maxAmountRequired` is read as
/// `amount`; v1 per-requirement `resource` as the resource URL).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Requirement {
    pub index: usize,
    pub scheme: Option<String>,
    pub network: Option<String>,
    pub asset: Option<String>,
    /// Atomic amount as a decimal string; None when absent or not a non-negative integer.
    pub amount: Option<String>,
    pub pay_to: Option<String>,
    pub max_timeout_seconds: Option<u64>,
    /// The `extra` object ({} when absent or not an object).
    pub extra: Map<String, Value>,
    /// The resource URL the challenge names for this requirement.
    pub resource_url: Option<String>,
}

impl Requirement {
    /// `extra.assetTransferMethod`, with the protocol default: absent means eip3009. A
    /// present value that is not a string is returned as "invalid".
    pub(crate) fn asset_transfer_method(&self) -> String {
        match self.extra.get("assetTransferMethod") {
            None => "eip3009".into(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => "invalid".into(),
        }
    }

    /// Every contract field present (scheme, network, asset, amount, payTo).
    pub(crate) fn complete(&self) -> bool {
        self.scheme.is_some()
            && self.network.is_some()
            && self.asset.is_some()
            && self.amount.is_some()
            && self.pay_to.is_some()
    }
}

/// What the one probe saw.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ProbeOutcome {
    /// A readable x402 challenge.
    Challenge {
        x402_version: u64,
        requirements: Vec<Requirement>,
    },
    /// A 402 whose challenge could not be read (missing, undecodable or malformed).
    UnreadableChallenge { detail: String },
    /// A 3xx: not followed (redirects fail closed).
    Redirect { status: u16 },
    /// Any other status: the resource did not ask for payment.
    NotPaymentRequired { status: u16 },
    /// No answer: the fetcher refused or failed (code and a caller-safe message).
    Failed { code: String, detail: String },
}

/// The probe: its target and outcome.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Probe {
    pub target: ProbeTarget,
    /// When the probe's answer (or its failure) came back: the moment the contract was seen.
    pub received_at: chrono::DateTime<chrono::Utc>,
    pub http_status: Option<u16>,
    pub requests_sent: u32,
    pub outcome: ProbeOutcome,
}

impl Probe {
    /// A limitation sentence describing a non-challenge outcome; None for a challenge.
    pub(crate) fn limitation(&self) -> Option<String> {
        match &self.outcome {
            ProbeOutcome::Challenge { .. } => None,
            ProbeOutcome::UnreadableChallenge { detail } => Some(format!(
                "The resource answered 402 but its payment challenge could not be read: {detail}."
            )),
            ProbeOutcome::Redirect { status } => Some(format!(
                "The resource answered with a redirect (HTTP {status}); redirects are not followed, so no payment contract was observed."
            )),
            ProbeOutcome::NotPaymentRequired { status } => Some(format!(
                "The resource answered HTTP {status} without asking for payment, so no x402 payment contract was observed."
            )),
            ProbeOutcome::Failed { detail, .. } => {
                Some(format!("The unpaid probe got no usable answer: {detail}."))
            }
        }
    }

    /// The requirements of a readable challenge (empty otherwise).
    pub(crate) fn requirements(&self) -> &[Requirement] {
        match &self.outcome {
            ProbeOutcome::Challenge { requirements, .. } => requirements,
            _ => &[],
        }
    }
}

/// The outcome of selecting one requirement for a payer (VM09, VM10; docs/x402-probe.md).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Selection {
    /// The first complete requirement on an allowed scheme, network and asset whose transfer
    /// method is allowed.
    Selected(Requirement),
    /// Candidates exist on an allowed scheme, network and asset, but none uses an allowed
    /// transfer method: the first such candidate, which fails closed.
    UnsupportedMethod(Requirement),
    /// No candidate and at least one requirement lacks a contract field.
    Incomplete,
    /// Every requirement is complete but none is on an allowed scheme, network or asset.
    NoSupportedRequirement,
    /// No readable challenge.
    NoChallenge,
}

impl Selection {
    /// The requirement the packet describes: the selected one, or the candidate whose
    /// transfer method is unsupported.
    pub(crate) fn requirement(&self) -> Option<&Requirement> {
        match self {
            Selection::Selected(r) | Selection::UnsupportedMethod(r) => Some(r),
            _ => None,
        }
    }
}

/// The allowlist `name` of a machine as strings; empty when the manifest has none.
pub(crate) fn allowlist(machine: &Machine, name: &str) -> Vec<String> {
    strings(machine.allowlists.get(name))
}

/// A machine's allowlist as answer text, its values joined by `joiner` ("or", "and"), so an
/// answer states the manifest's list, not a copy of it.
pub(crate) fn allowlist_text(machine: &Machine, name: &str, joiner: &str) -> String {
    allowlist(machine, name).join(&format!(" {joiner} "))
}

/// Selects per the machine's allowlists (`schemes`, `networks`, `assets`,
/// `asset_transfer_methods`; a missing list allows any value). Addresses compare
/// case-insensitively.
pub(crate) fn select(machine: &Machine, probe: &Probe) -> Selection {
    if !matches!(probe.outcome, ProbeOutcome::Challenge { .. }) {
        return Selection::NoChallenge;
    }
    let allows = |name: &str, value: &Option<String>| {
        let list = allowlist(machine, name);
        list.is_empty()
            || value
                .as_deref()
                .is_some_and(|v| list.iter().any(|a| a.eq_ignore_ascii_case(v)))
    };
    let requirements = probe.requirements();
    let candidates: Vec<&Requirement> = requirements
        .iter()
        .filter(|r| r.complete())
        .filter(|r| allows("schemes", &r.scheme) && allows("networks", &r.network))
        .filter(|r| allows("assets", &r.asset))
        .collect();
    let methods = allowlist(machine, "asset_transfer_methods");
    if let Some(found) = candidates
        .iter()
        .find(|r| methods.is_empty() || methods.contains(&r.asset_transfer_method()))
    {
        return Selection::Selected((*found).clone());
    }
    if let Some(first) = candidates.first() {
        return Selection::UnsupportedMethod((*first).clone());
    }
    if requirements.iter().any(|r| !r.complete()) {
        return Selection::Incomplete;
    }
    Selection::NoSupportedRequirement
}

/// The `selected_requirement` object of VM09 and VM10.
pub(crate) fn requirement_json(requirement: &Requirement) -> Value {
    json!({
        "index": requirement.index,
        "scheme": requirement.scheme,
        "network": requirement.network,
        "asset": requirement.asset,
        "amount_atomic": requirement.amount,
        "pay_to": requirement.pay_to,
        "max_timeout_seconds": requirement.max_timeout_seconds,
        "asset_transfer_method": requirement.asset_transfer_method(),
    })
}

/// A failure of ours around a probe (never the probed server's answer, which is reported).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The request's target could not be read although it passed the pre-payment checks.
    #[error("the probe target passed the checks but is unreadable: {0}")]
    Target(String),
    /// The manifest lacks a fetch limit of the machine.
    #[error(transparent)]
    Limits(#[from] FetchSetupError),
    /// The fetcher (TLS, gateway) could not be built.
    #[error("{0}")]
    Setup(String),
}

/// Readiness of the probe: the manifest limits and a fetcher can be built.
pub(crate) fn ready(machine: &Machine, config: &crate::config::Config) -> Result<(), ProbeError> {
    FetchLimits::from_machine(machine)?;
    let gateway = Gateway::new().map_err(|e| ProbeError::Setup(e.to_string()))?;
    Fetcher::new(gateway, config)
        .map(|_| ())
        .map_err(|e| ProbeError::Setup(e.to_string()))
}

/// Sends the one unpaid probe with this machine's limits.
pub(crate) async fn probe(
    gateway: &Gateway,
    config: &crate::config::Config,
    machine: &Machine,
    target: ProbeTarget,
) -> Result<Probe, ProbeError> {
    let limits = FetchLimits::from_machine(machine)?;
    let fetcher =
        Fetcher::new(gateway.clone(), config).map_err(|e| ProbeError::Setup(e.to_string()))?;
    let method = match &target.body {
        Some(body) => FetchMethod::PostJson(body.clone()),
        None => FetchMethod::Get,
    };
    let outcome = fetcher
        .fetch(FetchRequest {
            url: target.url.clone(),
            method,
            redirects: Redirects::Return,
            limits,
        })
        .await;
    let received_at = chrono::Utc::now();
    let requests_sent = outcome.requests_sent;
    let (http_status, probe_outcome) = match outcome.result {
        Err(refusal) => (
            None,
            ProbeOutcome::Failed {
                code: refusal.code().to_string(),
                detail: refusal.to_string(),
            },
        ),
        Ok(response) => (
            Some(response.status),
            read_answer(
                response.status,
                response.headers.get(PAYMENT_REQUIRED).map(String::as_str),
                &response.body,
                response.truncated(),
                response
                    .dropped_headers
                    .iter()
                    .any(|h| h == PAYMENT_REQUIRED),
            ),
        ),
    };
    Ok(Probe {
        target,
        received_at,
        http_status,
        requests_sent,
        outcome: probe_outcome,
    })
}

/// Classifies one answer (pure; unit-tested).
pub(crate) fn read_answer(
    status: u16,
    header: Option<&str>,
    body: &[u8],
    body_truncated: bool,
    header_dropped: bool,
) -> ProbeOutcome {
    if (300..400).contains(&status) {
        return ProbeOutcome::Redirect { status };
    }
    if status != 402 {
        return ProbeOutcome::NotPaymentRequired { status };
    }
    if header_dropped {
        return unreadable("the PAYMENT-REQUIRED header was too long or not text");
    }
    match header {
        Some(encoded) => read_v2_header(encoded),
        None if body_truncated => {
            unreadable("no PAYMENT-REQUIRED header and the body was cut at the size or time limit")
        }
        None => read_v1_body(body),
    }
}

fn unreadable(detail: &str) -> ProbeOutcome {
    ProbeOutcome::UnreadableChallenge {
        detail: detail.to_string(),
    }
}

/// v2: base64 (standard, padding optional) of the PaymentRequired JSON.
fn read_v2_header(encoded: &str) -> ProbeOutcome {
    let trimmed = encoded.trim();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(trimmed)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(trimmed));
    let Ok(bytes) = bytes else {
        return unreadable("the PAYMENT-REQUIRED header is not base64");
    };
    let Ok(value) = serde_json::from_slice::<Value>(&bytes) else {
        return unreadable("the PAYMENT-REQUIRED header is not JSON");
    };
    if value.get("x402Version").and_then(Value::as_u64) != Some(2) {
        return unreadable("the PAYMENT-REQUIRED header does not state x402Version 2");
    }
    let resource = value
        .pointer("/resource/url")
        .and_then(Value::as_str)
        .map(str::to_string);
    challenge(2, &value, |_| resource.clone(), "amount")
}

/// v1: the 402 JSON body `{x402Version: 1, accepts: [...]}`.
fn read_v1_body(body: &[u8]) -> ProbeOutcome {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return unreadable("no PAYMENT-REQUIRED header and the body is not JSON");
    };
    if value.get("x402Version").and_then(Value::as_u64) != Some(1) {
        return unreadable(
            "no PAYMENT-REQUIRED header and the body is not an x402 version 1 challenge",
        );
    }
    let per_item = |item: &Value| text(item, "resource");
    challenge(1, &value, per_item, "maxAmountRequired")
}

fn challenge(
    version: u64,
    value: &Value,
    resource_of: impl Fn(&Value) -> Option<String>,
    amount_key: &str,
) -> ProbeOutcome {
    let Some(accepts) = value.get("accepts").and_then(Value::as_array) else {
        return unreadable("the challenge has no accepts list");
    };
    if accepts.is_empty() {
        return unreadable("the challenge's accepts list is empty");
    }
    let requirements = accepts
        .iter()
        .enumerate()
        .map(|(index, item)| Requirement {
            index,
            scheme: text(item, "scheme"),
            network: text(item, "network"),
            asset: text(item, "asset"),
            amount: text(item, amount_key).filter(|a| is_decimal(a)),
            pay_to: text(item, "payTo"),
            max_timeout_seconds: item.get("maxTimeoutSeconds").and_then(Value::as_u64),
            extra: item
                .get("extra")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
            resource_url: resource_of(item),
        })
        .collect();
    ProbeOutcome::Challenge {
        x402_version: version,
        requirements,
    }
}

fn text(item: &Value, key: &str) -> Option<String> {
    non_empty_str(item, key).map(str::to_string)
}

/// A canonical non-negative decimal integer of at most 78 digits (uint256 range by length).
fn is_decimal(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 78
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(value: &Value) -> String {
        crate::catalog::challenge::encode_header(value)
    }

    #[test]
    fn reads_v2_header_and_defaults() {
        let header = v2(&json!({
            "x402Version": 2,
            "resource": {"url": "https://a.example.com/x"},
            "accepts": [{"scheme": "exact", "network": "eip155:8453", "asset": "0xA",
                "amount": "5000", "payTo": "0xB", "maxTimeoutSeconds": 60,
                "extra": {"name": "USD Coin", "version": "2"}}]
        }));
        let ProbeOutcome::Challenge {
            x402_version,
            requirements,
        } = read_answer(402, Some(&header), b"{}", false, false)
        else {
            panic!("not a challenge");
        };
        assert_eq!(x402_version, 2);
        assert_eq!(requirements[0].amount.as_deref(), Some("5000"));
        assert_eq!(requirements[0].asset_transfer_method(), "eip3009");
        assert_eq!(
            requirements[0].resource_url.as_deref(),
            Some("https://a.example.com/x")
        );
        assert!(requirements[0].complete());
    }

    #[test]
    fn reads_v1_body() {
        let body = json!({"x402Version": 1, "error": "x", "accepts": [{"scheme": "exact",
            "network": "base", "maxAmountRequired": "10", "resource": "https://a.example.com/y",
            "payTo": "0xB", "asset": "0xA"}]});
        let outcome = read_answer(402, None, body.to_string().as_bytes(), false, false);
        let ProbeOutcome::Challenge {
            x402_version,
            requirements,
        } = outcome
        else {
            panic!("not a challenge");
        };
        assert_eq!(x402_version, 1);
        assert_eq!(requirements[0].amount.as_deref(), Some("10"));
    }

    #[test]
    fn non_challenges_are_reported() {
        assert_eq!(
            read_answer(200, None, b"ok", false, false),
            ProbeOutcome::NotPaymentRequired { status: 200 }
        );
        assert_eq!(
            read_answer(302, None, b"", false, false),
            ProbeOutcome::Redirect { status: 302 }
        );
        assert!(matches!(
            read_answer(402, None, b"{}", false, false),
            ProbeOutcome::UnreadableChallenge { .. }
        ));
        assert!(matches!(
            read_answer(402, Some("!!"), b"{}", false, false),
            ProbeOutcome::UnreadableChallenge { .. }
        ));
        assert!(!is_decimal("01"));
        assert!(!is_decimal("-1"));
    }
}
