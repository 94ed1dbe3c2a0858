//! x402 v2 wire pieces: the PaymentRequired challenge and its header encoding.
//!
//! The requirement and bazaar extension come from `render` so the challenge, the catalog and
//! the discovery document can never disagree.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::HeaderValue;
use serde_json::{Value, json};

use crate::catalog::manifest::{Machine, Manifest};
use crate::catalog::render;

/// Header names of the v2 HTTP transport.
pub const PAYMENT_REQUIRED: &str = "payment-required";
pub const PAYMENT_SIGNATURE: &str = "payment-signature";
pub const PAYMENT_RESPONSE: &str = "payment-response";

/// A machine's prepared 402: header value and JSON body, built once at start-up.
#[derive(Debug, Clone)]
pub struct Challenge {
    pub header: HeaderValue,
    pub body: Bytes,
}

/// The x402 v2 PaymentRequired object for a machine.
pub fn payment_required(
    manifest: &Manifest,
    machine: &Machine,
    base_url: &str,
    pay_to: &str,
    error: Option<&str>,
) -> Value {
    let mut required = json!({
        "x402Version": manifest.payment.x402_version,
        "resource": {
            "url": format!("{base_url}{}", machine.path),
            "description": machine.purpose,
            "mimeType": "application/json",
        },
        "accepts": [render::requirement(manifest, machine, Some(pay_to))],
        "extensions": {"bazaar": render::bazaar_extension(machine)},
    });
    if let (Some(error), Value::Object(map)) = (error, &mut required) {
        map.shift_insert(1, "error".into(), json!(error));
    }
    required
}

/// Standard, padded base64 of the JSON (URL-safe base64 breaks the official clients).
pub fn encode_header(value: &Value) -> String {
    STANDARD.encode(serde_json::to_vec(value).unwrap_or_default())
}

impl Challenge {
    pub fn new(required: &Value) -> Result<Challenge, http::header::InvalidHeaderValue> {
        Ok(Challenge {
            header: HeaderValue::from_str(&encode_header(required))?,
            body: Bytes::from(serde_json::to_vec(required).unwrap_or_default()),
        })
    }
}
