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
pub(crate) const PAYMENT_REQUIRED: &str = "payment-required";
pub(crate) const PAYMENT_SIGNATURE: &str = "payment-signature";
pub(crate) const PAYMENT_RESPONSE: &str = "payment-response";

/// Most bytes a `PAYMENT-REQUIRED` header may take. nginx's default `proxy_buffer_size`
/// (4 KiB, one page) must hold the status line and every response header; this leaves
/// about 1 KiB for the others and a long configured base URL.
pub(crate) const HEADER_BUDGET: usize = 3072;

/// A machine's prepared 402: header value and JSON body, built once at start-up.
#[derive(Debug, Clone)]
pub(crate) struct Challenge {
    pub header: HeaderValue,
    pub body: Bytes,
}

/// The x402 v2 PaymentRequired object for a machine, complete: the 402's JSON body. Its
/// bazaar extension carries the full request schema and the output example.
pub(crate) fn payment_required(
    manifest: &Manifest,
    machine: &Machine,
    base_url: &str,
    pay_to: &str,
    error: Option<&str>,
) -> Value {
    let bazaar = render::bazaar_extension(machine);
    required_with(manifest, machine, base_url, pay_to, error, bazaar)
}

/// The same PaymentRequired as the `PAYMENT-REQUIRED` header carries it: identical terms,
/// with the bazaar extension reduced to the input example and the request schema's outline
/// so the header fits [`HEADER_BUDGET`].
pub(crate) fn header_payment_required(
    manifest: &Manifest,
    machine: &Machine,
    base_url: &str,
    pay_to: &str,
    error: Option<&str>,
) -> Value {
    let bazaar = render::bazaar_header_extension(machine);
    required_with(manifest, machine, base_url, pay_to, error, bazaar)
}

fn required_with(
    manifest: &Manifest,
    machine: &Machine,
    base_url: &str,
    pay_to: &str,
    error: Option<&str>,
    bazaar: Value,
) -> Value {
    let mut required = json!({
        "x402Version": manifest.payment.x402_version,
        "resource": {
            "url": format!("{base_url}{}", machine.path),
            "description": machine.purpose,
            "mimeType": "application/json",
        },
        "accepts": [render::requirement(manifest, machine, Some(pay_to))],
        "extensions": {"bazaar": bazaar},
    });
    if let (Some(error), Value::Object(map)) = (error, &mut required) {
        map.shift_insert(1, "error".into(), json!(error));
    }
    required
}

/// Standard, padded base64 of the JSON (URL-safe base64 breaks the official clients).
pub(crate) fn encode_header(value: &Value) -> String {
    STANDARD.encode(serde_json::to_vec(value).unwrap_or_default())
}

impl Challenge {
    /// The machine's 402: the compact PaymentRequired in the header, the full one in the body.
    pub(crate) fn for_machine(
        manifest: &Manifest,
        machine: &Machine,
        base_url: &str,
        pay_to: &str,
        error: Option<&str>,
    ) -> Result<Challenge, http::header::InvalidHeaderValue> {
        let header = header_payment_required(manifest, machine, base_url, pay_to, error);
        let body = payment_required(manifest, machine, base_url, pay_to, error);
        Ok(Challenge {
            header: HeaderValue::from_str(&encode_header(&header))?,
            body: Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::embedded::MANIFEST;

    const PAY_TO: &str = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";
    /// A base URL longer than most operators use.
    const BASE_URL: &str = "https://observations.payments.an-operator-with-a-long-name.example";

    #[test]
    fn every_header_fits_the_budget_even_with_an_error() {
        for machine in &MANIFEST.machines {
            let error = Some("invalid_exact_evm_payload_authorization_valid_before");
            let challenge = Challenge::for_machine(&MANIFEST, machine, BASE_URL, PAY_TO, error)
                .expect("header value");
            assert!(
                challenge.header.len() <= HEADER_BUDGET,
                "{}: {} bytes",
                machine.machine,
                challenge.header.len()
            );
        }
    }

    #[test]
    fn header_and_body_state_the_same_terms() {
        for machine in &MANIFEST.machines {
            let header = header_payment_required(&MANIFEST, machine, BASE_URL, PAY_TO, None);
            let body = payment_required(&MANIFEST, machine, BASE_URL, PAY_TO, None);
            for key in ["x402Version", "resource", "accepts"] {
                assert_eq!(header[key], body[key], "{} {key}", machine.machine);
            }
            let header_input = &header["extensions"]["bazaar"]["info"]["input"];
            assert_eq!(header_input, &body["extensions"]["bazaar"]["info"]["input"]);
            assert_eq!(
                body["extensions"]["bazaar"]["info"]["output"]["example"],
                machine.output_example
            );
        }
    }
}
