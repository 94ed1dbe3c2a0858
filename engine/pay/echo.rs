//! What the buyer echoes of our 402, and what we hand the facilitator instead.
//!
//! The facilitator catalogs a listing from `paymentPayload.resource` and
//! `paymentPayload.extensions`, so those must be ours, never the buyer's: `/verify` and
//! `/settle` get our own resource and extensions and our own `accepted`. The buyer's echo is
//! still checked as x402 v2 §5.1.2 allows a client to write it (it includes at least what it
//! received and may add): an absent echo passes; `resource.url` must be ours by the URL
//! equality rule; for each extension we declared, the `info` our header carried must be
//! contained in the echoed `info`; `accepted` must match every field we declared, and keys a
//! client adds to `accepted.extra` are ignored.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Map, Value};
use url::Url;

use crate::pay::payload::{Echoes, Payload};
use crate::pay::retained::{self, PAYMENT_IDENTIFIER};

/// What a paid route declared in its 402, prepared once at start-up.
#[derive(Debug, Clone)]
pub(crate) struct Declared {
    /// The 402's `resource` object (url, description, mimeType).
    resource: Value,
    /// The extensions as the `PAYMENT-REQUIRED` header carried them: what a client echoes.
    header_extensions: Map<String, Value>,
    /// The extensions in full, as the 402's body carries them: what the facilitator gets.
    full_extensions: Map<String, Value>,
    /// `resource.url`, parsed once for the echo's URL equality check.
    resource_url: Option<Url>,
    /// Whether an echo of `resource.url` byte for byte is our resource (our URL is clean).
    verbatim_is_ours: bool,
    /// What `/verify` and `/settle` send of ours, serialized once: every paid call sends
    /// these bytes unchanged (serializing them per call cost ≈ 60k instructions).
    wire: Wire,
    /// Our `accepted`, header extensions and header `resource` as a client echoes them.
    echoes: Echoes,
}

/// Our requirement, resource and extensions as JSON text.
#[derive(Debug, Clone)]
struct Wire {
    requirement: Box<RawValue>,
    resource: Box<RawValue>,
    extensions: Box<RawValue>,
}

impl Declared {
    /// The declaration of a route whose 402 carries `requirement`, `resource` and these
    /// extensions (as its header and as its body carry them); `header_resource` is the
    /// `resource` its header carried.
    pub(crate) fn new(
        requirement: &Value,
        resource: Value,
        header_resource: &Value,
        header_extensions: Map<String, Value>,
        full_extensions: Map<String, Value>,
    ) -> Result<Declared, serde_json::Error> {
        let wire = Wire {
            requirement: to_raw_value(requirement)?,
            resource: to_raw_value(&resource)?,
            extensions: to_raw_value(&full_extensions)?,
        };
        let resource_url = resource
            .get("url")
            .and_then(Value::as_str)
            .and_then(|url| Url::parse(url).ok());
        let verbatim_is_ours = resource_url
            .as_ref()
            .is_some_and(|ours| same_url(ours, ours));
        // The header's resource stands for a parse where its URL is ours verbatim.
        let header_url = header_resource.get("url").and_then(Value::as_str);
        let header_is_ours =
            verbatim_is_ours && header_url == resource.get("url").and_then(Value::as_str);
        let echoes = Echoes::new(
            requirement,
            &header_extensions,
            header_resource,
            header_is_ours,
        )?;
        Ok(Declared {
            resource,
            header_extensions,
            full_extensions,
            resource_url,
            verbatim_is_ours,
            wire,
            echoes,
        })
    }

    /// Our `accepted`, header extensions and header `resource` as a client echoes them.
    pub(crate) fn echoes(&self) -> &Echoes {
        &self.echoes
    }

    /// The requirement as `/verify` and `/settle` send it.
    pub(crate) fn wire_requirement(&self) -> &RawValue {
        &self.wire.requirement
    }

    /// Whether `theirs` is our resource URL by SPEC's URL equality rule. The echo official
    /// clients send is our URL verbatim, which is compared without parsing it.
    fn is_our_url(&self, theirs: Option<&str>) -> bool {
        let (Some(ours), Some(theirs)) = (&self.resource_url, theirs) else {
            return false;
        };
        if theirs == self.url() {
            return self.verbatim_is_ours;
        }
        Url::parse(theirs).is_ok_and(|theirs| same_url(ours, &theirs))
    }

    /// Our `resource.url` as declared ("" when the 402 had none).
    pub(crate) fn url(&self) -> &str {
        self.resource
            .get("url")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// Why an echo was refused; the reason is the 402's `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EchoRefusal {
    /// `accepted` differs from our requirement in a field we declared.
    #[error("payment_requirements_mismatch")]
    Requirements,
    /// The echoed `resource.url` is not our resource.
    #[error("resource_url_mismatch")]
    ResourceUrl,
    /// An echoed extension does not contain what we declared.
    #[error("extension_echo_mismatch")]
    Extension,
}

impl EchoRefusal {
    /// The reason written into the 402.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            EchoRefusal::Requirements => "payment_requirements_mismatch",
            EchoRefusal::ResourceUrl => "resource_url_mismatch",
            EchoRefusal::Extension => "extension_echo_mismatch",
        }
    }
}

/// Checks the buyer's `accepted`, `resource` and `extensions` against what we declared.
/// An echo that was ours byte for byte (`Payload`) passes as it is.
pub(crate) fn check(
    payload: &Payload,
    requirement: &Value,
    declared: &Declared,
) -> Result<(), EchoRefusal> {
    if !payload.accepted_is_ours() {
        let accepted = payload.get("accepted").ok_or(EchoRefusal::Requirements)?;
        if !accepted_matches(accepted, requirement) {
            return Err(EchoRefusal::Requirements);
        }
    }
    if !payload.resource_is_ours()
        && let Some(resource) = payload.get("resource")
    {
        let theirs = resource.get("url").and_then(Value::as_str);
        if !declared.is_our_url(theirs) {
            return Err(EchoRefusal::ResourceUrl);
        }
    }
    if payload.extensions_are_ours() {
        return Ok(());
    }
    let Some(echoed) = payload.get("extensions") else {
        return Ok(());
    };
    let echoed = echoed.as_object().ok_or(EchoRefusal::Extension)?;
    for (name, ours) in &declared.header_extensions {
        let Some(theirs) = echoed.get(name) else {
            continue;
        };
        if !contains(theirs.get("info"), ours.get("info")) {
            return Err(EchoRefusal::Extension);
        }
    }
    Ok(())
}

/// The PaymentPayload the facilitator gets: the buyer's signed `payload` and version, with
/// our own `accepted`, `resource` and `extensions` — plus the one client-owned field that
/// passed validation, payment-identifier's `info.id`.
pub(crate) fn for_facilitator<'a>(payload: &'a Payload, declared: &'a Declared) -> Forwarded<'a> {
    Forwarded {
        payload: payload.fields(),
        declared,
        id: retained::payment_identifier(payload.fields())
            .ok()
            .flatten(),
    }
}

/// The PaymentPayload for the facilitator, borrowed: it serializes as the buyer's fields
/// (in their order, without `accepted`, `resource` and `extensions`), then our `accepted`,
/// `resource` and `extensions` as serialized at start-up. Nothing is cloned; it is
/// serialized once per call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Forwarded<'a> {
    payload: &'a Value,
    declared: &'a Declared,
    /// The buyer's payment-identifier `id`, valid.
    id: Option<&'a str>,
}

impl Serialize for Forwarded<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.payload.as_object().into_iter().flatten() {
            if !matches!(key.as_str(), "accepted" | "resource" | "extensions") {
                map.serialize_entry(key, value)?;
            }
        }
        map.serialize_entry("accepted", &self.declared.wire.requirement)?;
        map.serialize_entry("resource", &self.declared.wire.resource)?;
        let extensions = &self.declared.full_extensions;
        let identifier = extensions
            .get(PAYMENT_IDENTIFIER)
            .and_then(Value::as_object);
        let info = identifier
            .and_then(|i| i.get("info"))
            .and_then(Value::as_object);
        match (self.id, identifier, info) {
            (Some(id), Some(identifier), Some(info)) => {
                // Our declared payment-identifier with the buyer's `id` in its `info`.
                let info = Replaced {
                    map: info,
                    key: "id",
                    value: id,
                };
                let identifier = Replaced {
                    map: identifier,
                    key: "info",
                    value: info,
                };
                let extensions = Replaced {
                    map: extensions,
                    key: PAYMENT_IDENTIFIER,
                    value: identifier,
                };
                map.serialize_entry("extensions", &extensions)?;
            }
            _ => map.serialize_entry("extensions", &self.declared.wire.extensions)?,
        }
        map.end()
    }
}

/// A map serialized with `key`'s value replaced by `value` in place, or appended when the
/// map lacks it (what an insert into the map would have serialized).
struct Replaced<'a, V> {
    map: &'a Map<String, Value>,
    key: &'a str,
    value: V,
}

impl<V: Serialize> Serialize for Replaced<'_, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.map {
            if key == self.key {
                map.serialize_entry(key, &self.value)?;
            } else {
                map.serialize_entry(key, value)?;
            }
        }
        if !self.map.contains_key(self.key) {
            map.serialize_entry(self.key, &self.value)?;
        }
        map.end()
    }
}

/// Every field of our requirement is equal in `accepted`; `extra` may hold more keys.
fn accepted_matches(accepted: &Value, requirement: &Value) -> bool {
    let (Some(accepted), Some(requirement)) = (accepted.as_object(), requirement.as_object())
    else {
        return false;
    };
    requirement.iter().all(|(key, ours)| match key.as_str() {
        "extra" => contains(accepted.get("extra"), Some(ours)),
        _ => accepted.get(key) == Some(ours),
    }) && accepted.keys().all(|key| requirement.contains_key(key))
}

/// True when every key of `ours` is in `theirs` with a contained value (arrays and scalars
/// equal). Nothing declared is contained in anything.
fn contains(theirs: Option<&Value>, ours: Option<&Value>) -> bool {
    match (theirs, ours) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(Value::Object(theirs)), Some(Value::Object(ours))) => ours
            .iter()
            .all(|(key, value)| contains(theirs.get(key), Some(value))),
        (Some(theirs), Some(ours)) => theirs == ours,
    }
}

/// The URL equality rule of SPEC: the same scheme, lowercased host and effective port, and
/// the same path and query, byte for byte; userinfo and fragments are refused.
fn same_url(ours: &Url, theirs: &Url) -> bool {
    let clean = |url: &Url| {
        url.username().is_empty() && url.password().is_none() && url.fragment().is_none()
    };
    clean(theirs)
        && ours.scheme() == theirs.scheme()
        && ours.host_str() == theirs.host_str()
        && ours.port_or_known_default() == theirs.port_or_known_default()
        && ours.path() == theirs.path()
        && ours.query().unwrap_or_default() == theirs.query().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bazaar() -> Map<String, Value> {
        let extensions = json!({"bazaar": {"info": {"input": {"type": "http", "method": "POST"}}}});
        extensions.as_object().cloned().unwrap_or_default()
    }

    /// Our declaration, with `full_extensions` in the 402's body.
    fn declared_with(full_extensions: Map<String, Value>) -> Declared {
        let resource =
            json!({"url": "https://factomat.test.example/v1/x", "mimeType": "application/json"});
        Declared::new(
            &requirement(),
            resource.clone(),
            &resource,
            bazaar(),
            full_extensions,
        )
        .expect("a Value serializes")
    }

    fn declared() -> Declared {
        declared_with(bazaar())
    }

    /// What the facilitator gets, as a value.
    fn forwarded_value(payload: &Value, declared: &Declared) -> Value {
        serde_json::to_value(for_facilitator(&parsed(payload), declared)).unwrap_or_default()
    }

    /// A payload parsed whole, no echo marked as ours: the field-by-field rules.
    fn parsed(payload: &Value) -> Payload {
        Payload::from_value(payload.clone())
    }

    fn requirement() -> Value {
        json!({"scheme": "exact", "amount": "10000", "extra": {"name": "USD Coin", "version": "2"}})
    }

    fn payload(changes: Value) -> Value {
        let mut payload = json!({
            "x402Version": 2,
            "accepted": requirement(),
            "resource": {"url": "https://FACTOMAT.test.example:443/v1/x"},
            "extensions": {"bazaar": {"info": {"input": {"type": "http", "method": "POST", "body": {}}}}},
            "payload": {"signature": "0x"},
        });
        for (key, value) in changes.as_object().into_iter().flatten() {
            payload[key] = value.clone();
        }
        payload
    }

    #[test]
    fn an_echo_that_adds_to_what_we_declared_passes() {
        let mut extra = payload(json!({}));
        extra["accepted"]["extra"]["clientKey"] = json!(1);
        assert_eq!(check(&parsed(&extra), &requirement(), &declared()), Ok(()));
        let bare = json!({"accepted": requirement(), "payload": {}});
        assert_eq!(check(&parsed(&bare), &requirement(), &declared()), Ok(()));
    }

    #[test]
    fn our_url_verbatim_or_equal_by_the_rule_passes_and_nothing_else() {
        let ours = declared();
        assert!(ours.is_our_url(Some("https://factomat.test.example/v1/x")));
        assert!(ours.is_our_url(Some("https://Factomat.Test.Example:443/v1/x")));
        for theirs in [
            "https://factomat.test.example/v1/x/",
            "https://factomat.test.example/v1/x#frag",
            "https://user@factomat.test.example/v1/x",
            "http://factomat.test.example/v1/x",
            "not a url",
        ] {
            assert!(!ours.is_our_url(Some(theirs)), "{theirs}");
        }
        assert!(!ours.is_our_url(None));
    }

    #[test]
    fn a_rewritten_resource_or_extension_or_term_is_refused() {
        let cases = [
            (
                json!({"resource": {"url": "https://evil.example/v1/x"}}),
                EchoRefusal::ResourceUrl,
            ),
            (
                json!({"extensions": {"bazaar": {"info": {"input": {"type": "http", "method": "GET"}}}}}),
                EchoRefusal::Extension,
            ),
            (
                json!({"extensions": {"bazaar": {}}}),
                EchoRefusal::Extension,
            ),
            (
                json!({"accepted": {"scheme": "exact", "amount": "1", "extra": {"name": "USD Coin", "version": "2"}}}),
                EchoRefusal::Requirements,
            ),
        ];
        for (change, refusal) in cases {
            assert_eq!(
                check(
                    &parsed(&payload(change.clone())),
                    &requirement(),
                    &declared()
                ),
                Err(refusal),
                "{change}"
            );
        }
    }

    #[test]
    fn the_facilitator_gets_our_resource_extensions_and_terms() {
        let mut sent = payload(
            json!({"resource": {"url": "https://factomat.test.example/v1/x", "description": "theirs"}}),
        );
        sent["accepted"]["extra"]["clientKey"] = json!(1);
        let forwarded = forwarded_value(&sent, &declared());
        assert_eq!(forwarded["resource"], declared().resource);
        assert_eq!(forwarded["accepted"], requirement());
        assert_eq!(forwarded["payload"], sent["payload"]);
        assert_eq!(forwarded["extensions"], Value::Object(bazaar()));
    }

    #[test]
    fn the_forwarded_payload_keeps_the_buyer_order_then_ours() {
        let sent = payload(json!({}));
        let text = serde_json::to_string(&for_facilitator(&parsed(&sent), &declared()))
            .unwrap_or_default();
        let expected = concat!(
            r#"{"x402Version":2,"payload":{"signature":"0x"},"#,
            r#""accepted":{"scheme":"exact","amount":"10000","extra":{"name":"USD Coin","version":"2"}},"#,
            r#""resource":{"url":"https://factomat.test.example/v1/x","mimeType":"application/json"},"#,
            r#""extensions":{"bazaar":{"info":{"input":{"type":"http","method":"POST"}}}}}"#,
        );
        assert_eq!(text, expected);
    }

    #[test]
    fn a_valid_payment_identifier_id_is_the_one_client_field_forwarded() {
        let identifier = json!({"info": {"required": false}, "schema": {"type": "object"}});
        let mut full = bazaar();
        full.insert(PAYMENT_IDENTIFIER.into(), identifier.clone());
        let ours = declared_with(full);
        let mut sent = payload(json!({}));
        sent["extensions"][PAYMENT_IDENTIFIER] =
            json!({"info": {"required": true, "id": "pay_0123456789abcdef", "extra": 1}});
        let forwarded = forwarded_value(&sent, &ours);
        let mut expected = identifier.clone();
        expected["info"]["id"] = json!("pay_0123456789abcdef");
        assert_eq!(forwarded["extensions"][PAYMENT_IDENTIFIER], expected);
        // In place, as an insert into our declared `info` would have put it.
        let text =
            serde_json::to_string(&for_facilitator(&parsed(&sent), &ours)).unwrap_or_default();
        assert!(text.contains(
            r#""payment-identifier":{"info":{"required":false,"id":"pay_0123456789abcdef"},"schema":{"type":"object"}}"#
        ), "{text}");
        // An invalid `id` is not forwarded: our declaration goes as it was serialized.
        sent["extensions"][PAYMENT_IDENTIFIER]["info"]["id"] = json!("bad id");
        let forwarded = forwarded_value(&sent, &ours);
        assert_eq!(forwarded["extensions"][PAYMENT_IDENTIFIER], identifier);
    }
}
