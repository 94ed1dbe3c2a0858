//! x402 v2 wire pieces: the PaymentRequired challenge and its header encoding.
//!
//! The requirement and bazaar extension come from `render` so the challenge, the catalog and
//! the discovery document can never disagree. This module is the one place that builds a
//! 402: its terms, its extensions ([`extensions`]) and the header's share of bytes per part
//! ([`HEADER_ALLOWANCE`]).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::HeaderValue;
use serde_json::{Map, Value, json};

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

/// The header bytes each part of the `PAYMENT-REQUIRED` JSON may take before base64 (which
/// turns 3 bytes into 4): the payment terms (`x402Version`, `error`, `resource`, `accepts`
/// and the JSON around them), then each extension by its key (its `"key":` and compact
/// value). Their sum, in base64, is [`HEADER_BUDGET`]. An extension whose compact form
/// outgrows its allowance is left out of the header (the 402 body and the facilitator still
/// get it whole); a unit test holds every machine's to its allowance with a long base URL
/// and an `error`. Today the longest terms take 839 bytes and VM09's bazaar outline 1,196;
/// the last two rows are kept for extensions still to come: move bytes to them from the
/// others' headroom, never past the budget.
pub(crate) const HEADER_ALLOWANCE: [(&str, usize); 4] = [
    (TERMS, 900),
    ("bazaar", 1_220),
    ("offer-receipt", 92),
    ("payment-identifier", 92),
];

/// The key of the terms' share in [`HEADER_ALLOWANCE`].
const TERMS: &str = "terms";

/// The allowance of a part of the header; 0 for a part with none.
pub(crate) fn header_allowance(part: &str) -> usize {
    HEADER_ALLOWANCE
        .iter()
        .find(|(name, _)| *name == part)
        .map_or(0, |(_, bytes)| *bytes)
}

/// One extension of a machine's 402.
#[derive(Debug, Clone)]
pub(crate) struct Extension {
    /// Its key under `extensions`.
    pub key: &'static str,
    /// Its whole value: the 402 body's, and what the facilitator is sent.
    pub full: Value,
    /// What the header carries, within the key's allowance.
    pub compact: Value,
}

/// What we state about a machine beside the payment terms, exactly as the 402 body carries
/// it: `resource` (with the listing metadata) and the whole `extensions` object. The payment
/// gate sends these to the facilitator's `/verify` and `/settle` instead of the buyer's echo.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Offer {
    /// The `resource` object.
    pub resource: Value,
    /// The `extensions` object (`bazaar`, …) in full.
    pub extensions: Value,
}

/// Every extension of a machine's 402, in order. The one place to add an extension: the
/// body, the header (within [`HEADER_ALLOWANCE`]) and the [`Offer`] all follow this list.
pub(crate) fn extensions(machine: &Machine) -> Vec<Extension> {
    vec![
        Extension {
            key: "bazaar",
            full: render::bazaar_extension(machine),
            compact: render::bazaar_header_extension(machine),
        },
        payment_identifier(),
    ]
}

/// x402's payment-identifier extension, optional: a buyer who sends an `id` may collect the
/// answer again within the retention (docs/payment.md). The schema is the extension's own
/// (`specs/extensions/payment_identifier.md`); the header carries only `info`.
fn payment_identifier() -> Extension {
    let info = json!({"required": false});
    Extension {
        key: "payment-identifier",
        full: json!({
            "info": info,
            "schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "required": {"type": "boolean"},
                    "id": {
                        "type": "string",
                        "minLength": 16,
                        "maxLength": 128,
                        "pattern": "^[a-zA-Z0-9_-]+$"
                    }
                },
                "required": ["required"]
            }
        }),
        compact: json!({"info": info}),
    }
}

/// The machine's `resource` and whole `extensions`, exactly as its 402 body states them:
/// what the payment gate sends to `/verify` and `/settle`.
pub(crate) fn offer(manifest: &Manifest, machine: &Machine, base_url: &str) -> Offer {
    let extensions: Map<String, Value> = extensions(machine)
        .into_iter()
        .map(|extension| (extension.key.to_string(), extension.full))
        .collect();
    Offer {
        resource: resource(manifest, machine, base_url),
        extensions: Value::Object(extensions),
    }
}

/// The 402's `resource`: the machine's URL, description and media type, and the listing
/// metadata indexes show (`serviceName`, `tags`, `iconUrl`) from machines.yaml.
pub(crate) fn resource(manifest: &Manifest, machine: &Machine, base_url: &str) -> Value {
    let listing = manifest.listing(machine);
    let mut resource = Map::new();
    resource.insert("url".into(), json!(format!("{base_url}{}", machine.path)));
    resource.insert("description".into(), json!(machine.purpose));
    resource.insert("mimeType".into(), json!("application/json"));
    if let Some(name) = listing.service_name {
        resource.insert("serviceName".into(), json!(name));
    }
    if let Some(tags) = listing.tags.filter(|tags| !tags.is_empty()) {
        resource.insert("tags".into(), json!(tags));
    }
    if let Some(icon) = listing.icon {
        let icon = if icon.starts_with('/') {
            format!("{base_url}{icon}")
        } else {
            icon
        };
        resource.insert("iconUrl".into(), json!(icon));
    }
    Value::Object(resource)
}

/// The x402 offer-and-receipt extension's key in `PaymentRequired.extensions`.
pub(crate) const OFFER_RECEIPT: &str = "offer-receipt";

/// The paid resource's URL, as `resource.url` and every signed offer state it.
pub(crate) fn resource_url(base_url: &str, machine: &Machine) -> String {
    format!("{base_url}{}", machine.path)
}

/// The x402 v2 PaymentRequired object for a machine, complete: the 402's JSON body. Its
/// extensions are whole (the bazaar declaration with the full schemas and the output).
pub(crate) fn payment_required(
    manifest: &Manifest,
    machine: &Machine,
    base_url: &str,
    pay_to: &str,
    error: Option<&str>,
) -> Value {
    let offer = offer(manifest, machine, base_url);
    let mut required = terms(manifest, machine, pay_to, error, offer.resource);
    required["extensions"] = offer.extensions;
    required
}

/// The same PaymentRequired as the `PAYMENT-REQUIRED` header carries it: identical terms,
/// with each extension's compact form when it fits its share of [`HEADER_BUDGET`].
pub(crate) fn header_payment_required(
    manifest: &Manifest,
    machine: &Machine,
    base_url: &str,
    pay_to: &str,
    error: Option<&str>,
) -> Value {
    let resource = resource(manifest, machine, base_url);
    let mut required = terms(manifest, machine, pay_to, error, resource);
    let extensions: Map<String, Value> = extensions(machine)
        .into_iter()
        .filter(|extension| header_cost(extension) <= header_allowance(extension.key))
        .map(|extension| (extension.key.to_string(), extension.compact))
        .collect();
    required["extensions"] = Value::Object(extensions);
    required
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

/// The header bytes an extension takes: `,"key":` and its compact value.
fn header_cost(extension: &Extension) -> usize {
    extension.key.len() + 4 + compact_len(&extension.compact)
}

/// Compact JSON bytes of a value, as the header encodes it.
pub(crate) fn compact_len(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |bytes| bytes.len())
}

/// `x402Version`, `error`, `resource` and `accepts`: the part the header and body share.
fn terms(
    manifest: &Manifest,
    machine: &Machine,
    pay_to: &str,
    error: Option<&str>,
    resource: Value,
) -> Value {
    let mut required = json!({
        "x402Version": manifest.payment.x402_version,
        "resource": resource,
        "accepts": [render::requirement(manifest, machine, Some(pay_to))],
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

/// The PaymentRequired a `PAYMENT-REQUIRED` header carries, as a client reads it.
pub(crate) fn decode_header(header: &HeaderValue) -> Option<Value> {
    let json = STANDARD.decode(header.as_bytes()).ok()?;
    serde_json::from_slice(&json).ok()
}

/// A machine's prepared 402: header value and JSON body, built once at start-up.
#[derive(Debug, Clone)]
pub(crate) struct Challenge {
    pub header: HeaderValue,
    pub body: Bytes,
    /// Whether the header carries the signed offers too (the body always does).
    pub offers_in_header: bool,
}

impl Challenge {
    /// The machine's 402: the compact PaymentRequired in the header, the full one in the body.
    /// `offers` is the signed `offer-receipt` extension, when signing is on: the body always
    /// carries it, the header only within the extension's [`HEADER_ALLOWANCE`] (a compact
    /// JWS is about 1 KB, more than a default proxy leaves beside the terms and the bazaar
    /// outline, so today the offers ride in the body: docs/decisions.md).
    pub(crate) fn for_machine(
        manifest: &Manifest,
        machine: &Machine,
        base_url: &str,
        pay_to: &str,
        error: Option<&str>,
        offers: Option<&Value>,
    ) -> Result<Challenge, http::header::InvalidHeaderValue> {
        let error = error.map(error_code);
        let mut header = header_payment_required(manifest, machine, base_url, pay_to, error);
        let mut body = payment_required(manifest, machine, base_url, pay_to, error);
        let mut offers_in_header = false;
        if let Some(offers) = offers {
            let compact = with_offers(json!({"extensions": {}}), offers, false);
            let cost = OFFER_RECEIPT.len() + 4 + compact_len(&compact["extensions"][OFFER_RECEIPT]);
            if cost <= header_allowance(OFFER_RECEIPT) {
                header = with_offers(header, offers, false);
                offers_in_header = true;
            }
            body = with_offers(body, offers, true);
        }
        Ok(Challenge {
            header: HeaderValue::from_str(&encode_header(&header))?,
            body: Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
            offers_in_header,
        })
    }
}

/// The longest `error` a challenge carries; with it every header fits [`HEADER_BUDGET`].
const MAX_ERROR_CODE_BYTES: usize = 64;

/// `reason` when it is shaped like an x402 code (lower-case letters, digits and `_`, at most
/// [`MAX_ERROR_CODE_BYTES`]), else `payment_rejected`: a facilitator's reason is passed on,
/// but free text (escaped in JSON, a control character takes six bytes) could push the
/// header past its budget and a proxy in front of us would answer 502 instead.
fn error_code(reason: &str) -> &str {
    let code_shaped = !reason.is_empty()
        && reason.len() <= MAX_ERROR_CODE_BYTES
        && reason
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if code_shaped {
        reason
    } else {
        "payment_rejected"
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
        let longest = "e".repeat(MAX_ERROR_CODE_BYTES);
        let hostile = "\u{1}".repeat(128);
        for machine in &MANIFEST.machines {
            for error in [
                longest.as_str(),
                hostile.as_str(),
                "😀".repeat(128).as_str(),
            ] {
                let challenge =
                    Challenge::for_machine(&MANIFEST, machine, BASE_URL, PAY_TO, Some(error), None)
                        .expect("header value");
                assert!(
                    challenge.header.len() <= HEADER_BUDGET,
                    "{}: {} bytes",
                    machine.machine,
                    challenge.header.len()
                );
            }
        }
    }

    #[test]
    fn a_reason_not_shaped_like_a_code_is_not_passed_on() {
        let machine = &MANIFEST.machines[0];
        let error_of = |reason: &str| {
            let challenge =
                Challenge::for_machine(&MANIFEST, machine, BASE_URL, PAY_TO, Some(reason), None)
                    .expect("header value");
            let body: Value = serde_json::from_slice(&challenge.body).expect("json");
            body["error"].as_str().map(str::to_string)
        };
        let code = "invalid_exact_evm_payload_authorization_valid_before";
        assert_eq!(error_of(code).as_deref(), Some(code));
        for text in ["Insufficient funds", "\u{1}\u{1}", "", &"e".repeat(65)] {
            assert_eq!(
                error_of(text).as_deref(),
                Some("payment_rejected"),
                "{text:?}"
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
    fn offers_ride_in_the_header_only_within_their_allowance_and_always_in_the_body() {
        for machine in &MANIFEST.machines {
            for (size, in_header) in [(4, true), (200, false)] {
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

    #[test]
    fn the_allowances_add_up_to_the_budget() {
        let json_bytes: usize = HEADER_ALLOWANCE.iter().map(|(_, bytes)| bytes).sum();
        assert!(json_bytes.div_ceil(3) * 4 <= HEADER_BUDGET, "{json_bytes}");
    }

    #[test]
    fn every_part_of_every_header_fits_its_allowance() {
        let error = Some("invalid_exact_evm_payload_authorization_valid_before");
        for machine in &MANIFEST.machines {
            let mut header = header_payment_required(&MANIFEST, machine, BASE_URL, PAY_TO, error);
            for extension in extensions(machine) {
                let fits = header_cost(&extension) <= header_allowance(extension.key);
                assert!(fits, "{} {}", machine.machine, extension.key);
                assert!(header["extensions"].get(extension.key).is_some());
            }
            header["extensions"] = json!({});
            assert!(
                compact_len(&header) <= header_allowance(TERMS),
                "{} terms: {} bytes",
                machine.machine,
                compact_len(&header)
            );
        }
    }

    #[test]
    fn the_offer_is_exactly_what_the_body_states() {
        for machine in &MANIFEST.machines {
            let body = payment_required(&MANIFEST, machine, BASE_URL, PAY_TO, None);
            let offer = offer(&MANIFEST, machine, BASE_URL);
            assert_eq!(offer.resource, body["resource"]);
            assert_eq!(offer.extensions, body["extensions"]);
            let listing = MANIFEST.listing(machine);
            assert_eq!(offer.resource["serviceName"], json!(listing.service_name));
            assert_eq!(offer.resource["tags"], json!(listing.tags));
            let icon = offer.resource["iconUrl"].as_str().unwrap_or_default();
            assert!(icon.starts_with(BASE_URL), "{icon}");
        }
    }
}
