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

/// The x402 offer-and-receipt extension's key in `PaymentRequired.extensions`.
pub(crate) const OFFER_RECEIPT: &str = "offer-receipt";

/// A machine's prepared 402: header value and JSON body, built once at start-up.
#[derive(Debug, Clone)]
pub(crate) struct Challenge {
    pub header: HeaderValue,
    pub body: Bytes,
    /// Whether the header carries the signed offers too (the body always does).
    pub offers_in_header: bool,
}

/// The paid resource's URL, as `resource.url` and every signed offer state it.
pub(crate) fn resource_url(base_url: &str, machine: &Machine) -> String {
    format!("{base_url}{}", machine.path)
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

/// Adds the signed `offer-receipt` extension (prepared at start-up by the http layer, which
/// holds the signing key) to a PaymentRequired; `with_schema` false leaves its JSON Schema
/// out, as the header does.
fn with_offers(mut required: Value, offers: &Value, with_schema: bool) -> Value {
    let mut extension = offers.clone();
    if !with_schema && let Value::Object(map) = &mut extension {
        map.remove("schema");
    }
    if let Some(Value::Object(extensions)) = required.get_mut("extensions") {
        extensions.insert(OFFER_RECEIPT.into(), extension);
    }
    required
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
            "url": resource_url(base_url, machine),
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
    /// `offers` is the signed `offer-receipt` extension, when signing is on: the body always
    /// carries it, the header only while the header still fits [`HEADER_BUDGET`] with it
    /// (docs/decisions.md).
    pub(crate) fn for_machine(
        manifest: &Manifest,
        machine: &Machine,
        base_url: &str,
        pay_to: &str,
        error: Option<&str>,
        offers: Option<&Value>,
    ) -> Result<Challenge, http::header::InvalidHeaderValue> {
        let mut header = encode_header(&header_payment_required(
            manifest, machine, base_url, pay_to, error,
        ));
        let mut body = payment_required(manifest, machine, base_url, pay_to, error);
        let mut offers_in_header = false;
        if let Some(offers) = offers {
            let required = header_payment_required(manifest, machine, base_url, pay_to, error);
            let with = encode_header(&with_offers(required, offers, false));
            if with.len() <= HEADER_BUDGET {
                header = with;
                offers_in_header = true;
            }
            body = with_offers(body, offers, true);
        }
        Ok(Challenge {
            header: HeaderValue::from_str(&header)?,
            body: Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
            offers_in_header,
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
            let challenge =
                Challenge::for_machine(&MANIFEST, machine, BASE_URL, PAY_TO, error, None)
                    .expect("header value");
            assert!(
                challenge.header.len() <= HEADER_BUDGET,
                "{}: {} bytes",
                machine.machine,
                challenge.header.len()
            );
        }
    }

    /// An `offer-receipt` extension shaped as the http layer signs it: one JWS offer of the
    /// size an EdDSA signature over a real offer has, and the schema.
    fn offers(signature_chars: usize) -> Value {
        json!({
            "info": {"offers": [{"format": "jws", "acceptIndex": 0, "signature": "e".repeat(signature_chars)}]},
            "schema": {"type": "object", "required": ["offers"]},
        })
    }

    #[test]
    fn offers_ride_in_the_header_while_it_fits_and_always_in_the_body() {
        for machine in &MANIFEST.machines {
            for (size, in_header) in [(200, true), (4000, false)] {
                let challenge = Challenge::for_machine(
                    &MANIFEST,
                    machine,
                    BASE_URL,
                    PAY_TO,
                    None,
                    Some(&offers(size)),
                )
                .expect("header value");
                assert!(
                    challenge.header.len() <= HEADER_BUDGET,
                    "{}",
                    machine.machine
                );
                let header: Value = serde_json::from_slice(
                    &STANDARD
                        .decode(challenge.header.as_bytes())
                        .expect("base64"),
                )
                .expect("json");
                let body: Value = serde_json::from_slice(&challenge.body).expect("json");
                let offer = &body["extensions"][OFFER_RECEIPT];
                assert_eq!(offer["info"], offers(size)["info"]);
                assert!(offer.get("schema").is_some());
                let header_offer = header["extensions"].get(OFFER_RECEIPT);
                assert_eq!(
                    header_offer.is_some(),
                    in_header,
                    "{} {size}",
                    machine.machine
                );
                if let Some(header_offer) = header_offer {
                    assert_eq!(header_offer, &json!({"info": offers(size)["info"]}));
                }
            }
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
