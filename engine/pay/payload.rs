//! The buyer's PaymentPayload as decoded, and its canonical hash.
//!
//! An x402 v2 client echoes our 402's `accepted`, `extensions` and `resource`: about three
//! quarters of a payload's bytes (the bazaar outline alone is about 1 KB). The official
//! clients write that echo back byte for byte as our `PAYMENT-REQUIRED` header carried it, so
//! an echo equal to our bytes is recognized without being parsed: it passes the echo check
//! as it is ours, and its canonical form is ours too, prepared at start-up with the hash
//! state the first two begin (`Echoes`). Any other echo is parsed and checked field by field.
//! Either way the payload's canonical hash, the lookup key of a retained answer, is the same
//! bytes' hash.

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::pay::retained;
use crate::support::canonical::{canonical_json, sha256_hex_of, write_canonical_into};

/// The first buffer a payload's canonical remainder is written into.
const CANONICAL_BUFFER_BYTES: usize = 2048;

/// The top-level fields a client echoes from our 402, in canonical (byte) order.
const ECHOED: [&str; 3] = ["accepted", "extensions", "resource"];

/// One field of our 402 as a client echoes it.
#[derive(Debug, Clone)]
struct Echo {
    /// Its compact JSON as our header carried it; `None` where an echo of it may not stand
    /// for a parse.
    text: Option<String>,
    /// Its canonical form.
    canonical: Vec<u8>,
}

impl Echo {
    fn new(value: &Value, stands: bool) -> Result<Echo, serde_json::Error> {
        Ok(Echo {
            text: stands.then(|| serde_json::to_string(value)).transpose()?,
            canonical: canonical_json(value).into_bytes(),
        })
    }
}

/// Our 402's `accepted`, header `extensions` and `resource` as a client echoes them,
/// prepared once per paid route.
#[derive(Debug, Clone)]
pub(crate) struct Echoes {
    /// In the order of [`ECHOED`].
    echoes: [Echo; 3],
    /// sha256 after `{"accepted":…,"extensions":…`, both ours: every payload that echoes
    /// both as they came and has no other key sorting before `payload` starts so.
    both_hashed: Sha256,
}

impl Echoes {
    /// The echoes of a 402 that declared `requirement`, these header extensions and this
    /// header `resource`. Extensions that declare a payment-identifier `id` (which only a
    /// buyer may write) never stand for a parse, nor does a resource that the URL rule
    /// would not take as ours verbatim (`resource_is_ours_verbatim`).
    pub(crate) fn new(
        requirement: &Value,
        header_extensions: &Map<String, Value>,
        resource: &Value,
        resource_is_ours_verbatim: bool,
    ) -> Result<Echoes, serde_json::Error> {
        let extensions = Value::Object(header_extensions.clone());
        let echoed = serde_json::json!({ "extensions": &extensions });
        let without_id = matches!(retained::payment_identifier(&echoed), Ok(None));
        let echoes = [
            Echo::new(requirement, true)?,
            Echo::new(&extensions, without_id)?,
            Echo::new(resource, resource_is_ours_verbatim)?,
        ];
        let mut both_hashed = Sha256::new();
        both_hashed.update(b"{\"accepted\":");
        both_hashed.update(&echoes[0].canonical);
        both_hashed.update(b",\"extensions\":");
        both_hashed.update(&echoes[1].canonical);
        Ok(Echoes {
            echoes,
            both_hashed,
        })
    }

    /// Which echoed field `key` is, if it is one, and `text` is ours byte for byte.
    fn ours(&self, key: &str, text: &str) -> Option<usize> {
        let field = ECHOED.iter().position(|echoed| *echoed == key)?;
        (self.echoes[field].text.as_deref() == Some(text)).then_some(field)
    }
}

/// A decoded PaymentPayload: its top-level fields, less the echoes that were ours byte for
/// byte, which are kept as marks.
#[derive(Debug)]
pub(crate) struct Payload {
    /// Every other top-level field, in the buyer's order (an empty object for a payload that
    /// is not an object).
    fields: Value,
    /// Which of [`ECHOED`] were ours byte for byte.
    ours: [bool; 3],
}

impl Payload {
    /// Parses a payload's JSON text, recognizing echoes of `ours`.
    pub(crate) fn parse(text: &str, ours: &Echoes) -> Result<Payload, serde_json::Error> {
        // A top level that does not split cleanly (an escaped or repeated key, not an object)
        // is parsed whole, as any other payload was.
        match serde_json::from_str::<TopLevel<'_>>(text) {
            Ok(top) if top.has_unique_keys() => Payload::from_top(top, ours),
            _ => serde_json::from_str(text).map(Payload::from_value),
        }
    }

    /// A payload parsed whole: no echo is marked as ours.
    pub(crate) fn from_value(value: Value) -> Payload {
        let fields = match value {
            Value::Object(_) => value,
            _ => Value::Object(Map::new()),
        };
        Payload {
            fields,
            ours: [false; 3],
        }
    }

    fn from_top(top: TopLevel<'_>, echoes: &Echoes) -> Result<Payload, serde_json::Error> {
        let mut fields = Map::with_capacity(top.0.len());
        let mut ours = [false; 3];
        for (key, raw) in top.0 {
            match echoes.ours(key, raw.get()) {
                Some(field) => ours[field] = true,
                None => {
                    fields.insert(key.to_owned(), serde_json::from_str(raw.get())?);
                }
            }
        }
        Ok(Payload {
            fields: Value::Object(fields),
            ours,
        })
    }

    /// A top-level field that was parsed (not an echo marked as ours).
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.fields.get(key)
    }

    /// The parsed top-level fields as an object.
    pub(crate) fn fields(&self) -> &Value {
        &self.fields
    }

    /// Whether `accepted` was our requirement byte for byte.
    pub(crate) fn accepted_is_ours(&self) -> bool {
        self.ours[0]
    }

    /// Whether `extensions` were our header's byte for byte.
    pub(crate) fn extensions_are_ours(&self) -> bool {
        self.ours[1]
    }

    /// Whether `resource` was our header's byte for byte.
    pub(crate) fn resource_is_ours(&self) -> bool {
        self.ours[2]
    }

    /// sha256 of the whole payload's canonical JSON, as `canonical_sha256` of the payload
    /// parsed whole gives it; the echoes marked as ours contribute their prepared form.
    pub(crate) fn canonical_sha256(&self, ours: &Echoes) -> String {
        let mut entries: Vec<(&str, Part<'_>)> = self
            .fields
            .as_object()
            .into_iter()
            .flatten()
            .map(|(key, value)| (key.as_str(), Part::Parsed(value)))
            .collect();
        for (field, echo) in ours.echoes.iter().enumerate() {
            if self.ours[field] {
                entries.push((ECHOED[field], Part::Ours(&echo.canonical)));
            }
        }
        entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let starts_with_both = self.accepted_is_ours()
            && self.extensions_are_ours()
            && entries.first().is_some_and(|(key, _)| *key == "accepted")
            && entries.get(1).is_some_and(|(key, _)| *key == "extensions");
        let mut canonical = Vec::with_capacity(CANONICAL_BUFFER_BYTES);
        let (mut hasher, rest) = if starts_with_both {
            (ours.both_hashed.clone(), &entries[2..])
        } else {
            canonical.push(b'{');
            (Sha256::new(), &entries[..])
        };
        for (i, (key, part)) in rest.iter().enumerate() {
            if starts_with_both || i > 0 {
                canonical.push(b',');
            }
            // A key is a string: serializing it cannot fail.
            let _ = serde_json::to_writer(&mut canonical, key);
            canonical.push(b':');
            match part {
                Part::Parsed(value) => write_canonical_into(value, &mut canonical),
                Part::Ours(bytes) => canonical.extend_from_slice(bytes),
            }
        }
        canonical.push(b'}');
        hasher.update(&canonical);
        sha256_hex_of(hasher)
    }
}

/// A top-level value of the canonical form: parsed, or ours in its prepared form.
enum Part<'a> {
    Parsed(&'a Value),
    Ours(&'a [u8]),
}

/// A JSON object's top level as borrowed keys and raw values, in order.
struct TopLevel<'a>(Vec<(&'a str, &'a RawValue)>);

impl TopLevel<'_> {
    fn has_unique_keys(&self) -> bool {
        let keys = &self.0;
        keys.iter()
            .enumerate()
            .all(|(i, (key, _))| keys[..i].iter().all(|(other, _)| other != key))
    }
}

impl<'de> Deserialize<'de> for TopLevel<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(TopLevelVisitor)
    }
}

struct TopLevelVisitor;

impl<'de> Visitor<'de> for TopLevelVisitor {
    type Value = TopLevel<'de>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopLevel<'de>, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(6));
        while let Some(key) = map.next_key::<&'de str>()? {
            entries.push((key, map.next_value::<&'de RawValue>()?));
        }
        Ok(TopLevel(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::canonical::canonical_sha256;
    use serde_json::json;

    fn requirement() -> Value {
        json!({"scheme": "exact", "network": "eip155:8453", "amount": "10000",
               "extra": {"name": "USD Coin", "version": "2"}})
    }

    fn header_extensions() -> Map<String, Value> {
        let extensions = json!({
            "bazaar": {"info": {"input": {"type": "http", "method": "POST", "body": {"a": "é\u{1}"}}}},
            "payment-identifier": {"info": {"required": false}},
        });
        extensions.as_object().cloned().unwrap_or_default()
    }

    fn resource() -> Value {
        json!({"url": "https://factomat.test.example/v1/x", "mimeType": "application/json"})
    }

    fn echoes() -> Echoes {
        Echoes::new(&requirement(), &header_extensions(), &resource(), true)
            .expect("values serialize")
    }

    /// A payload as an official client writes it: our echoes as compact JSON, in its order.
    fn echoed(order: &[&str], changes: &Value) -> String {
        let mut whole = json!({
            "x402Version": 2,
            "payload": {"signature": "0xab", "authorization": {"nonce": "0x01"}},
            "accepted": requirement(),
            "extensions": header_extensions(),
            "resource": resource(),
        });
        for (key, value) in changes.as_object().into_iter().flatten() {
            whole[key] = value.clone();
        }
        let mut ordered = Map::new();
        for key in order {
            if let Some(value) = whole.get(*key) {
                ordered.insert((*key).to_owned(), value.clone());
            }
        }
        for (key, value) in whole.as_object().into_iter().flatten() {
            if !ordered.contains_key(key) {
                ordered.insert(key.clone(), value.clone());
            }
        }
        serde_json::to_string(&ordered).unwrap_or_default()
    }

    fn hash_of_whole(text: &str) -> String {
        canonical_sha256(&serde_json::from_str::<Value>(text).unwrap_or_default())
    }

    #[test]
    fn echoes_as_they_came_are_marked_and_not_parsed() {
        let text = echoed(&["x402Version", "payload"], &json!({}));
        let payload = Payload::parse(&text, &echoes()).expect("valid JSON");
        assert!(payload.accepted_is_ours() && payload.extensions_are_ours());
        assert!(payload.resource_is_ours());
        assert_eq!(payload.get("accepted"), None);
        assert_eq!(payload.get("extensions"), None);
        assert_eq!(payload.get("resource"), None);
        assert_eq!(payload.get("x402Version"), Some(&json!(2)));
        let keys: Vec<&String> = payload
            .fields()
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys, ["x402Version", "payload"]);
    }

    #[test]
    fn a_resource_the_url_rule_would_not_take_verbatim_is_parsed() {
        let ours = Echoes::new(&requirement(), &header_extensions(), &resource(), false)
            .expect("values serialize");
        let payload = Payload::parse(&echoed(&[], &json!({})), &ours).expect("valid JSON");
        assert!(!payload.resource_is_ours());
        assert_eq!(payload.get("resource"), Some(&resource()));
    }

    #[test]
    fn any_other_echo_is_parsed() {
        let ours = echoes();
        let mut accepted = requirement();
        accepted["extra"]["clientKey"] = json!(1);
        let text = echoed(
            &[],
            &json!({"accepted": accepted, "extensions": {"bazaar": {}}}),
        );
        let payload = Payload::parse(&text, &ours).expect("valid JSON");
        assert!(!payload.accepted_is_ours() && !payload.extensions_are_ours());
        assert_eq!(payload.get("accepted"), Some(&accepted));
        // Spaced JSON (Python's default) is the same value, not the same bytes: parsed.
        let spaced = text.replace(",\"", ", \"");
        let payload = Payload::parse(&spaced, &ours).expect("valid JSON");
        assert!(!payload.accepted_is_ours());
        assert_eq!(payload.get("accepted"), Some(&accepted));
    }

    #[test]
    fn the_canonical_hash_is_the_whole_payloads_whichever_path() {
        let ours = echoes();
        let both = Payload::parse(&echoed(&["extensions", "accepted"], &json!({})), &ours);
        assert!(both.is_ok_and(|p| p.accepted_is_ours() && p.extensions_are_ours()));
        let texts = [
            // Both ours: the prepared hash state.
            echoed(&["x402Version", "payload"], &json!({})),
            echoed(&["extensions", "accepted"], &json!({})),
            // One ours, or none.
            echoed(&[], &json!({"extensions": {"bazaar": {"info": {}}}})),
            echoed(&[], &json!({"accepted": {"scheme": "exact"}})),
            echoed(&[], &json!({"accepted": 1, "extensions": []})),
            // Keys sorting before or between the echoes.
            echoed(&[], &json!({"aaa": true})),
            echoed(&[], &json!({"b": [1, {"z": 1, "a": 2}]})),
            echoed(&[], &json!({"": "\"\\"})),
            // A key with an escape, a repeated key, not an object: parsed whole.
            r#"{"accepted":1,"x\u0079":2}"#.to_owned(),
            r#"{"payload":1,"payload":2}"#.to_owned(),
            "[1,2]".to_owned(),
            "{}".to_owned(),
        ];
        for text in texts {
            let payload = Payload::parse(&text, &ours).expect("valid JSON");
            let expected = if text.starts_with('[') {
                canonical_sha256(&json!({}))
            } else {
                hash_of_whole(&text)
            };
            assert_eq!(payload.canonical_sha256(&ours), expected, "{text}");
        }
    }

    #[test]
    fn a_repeated_key_keeps_the_last_value_as_a_whole_parse_does() {
        let payload = Payload::parse(r#"{"payload":1,"payload":2}"#, &echoes()).expect("valid");
        assert_eq!(payload.get("payload"), Some(&json!(2)));
    }

    #[test]
    fn an_echo_with_an_id_is_never_taken_as_ours() {
        let mut extensions = header_extensions();
        extensions.insert(
            retained::PAYMENT_IDENTIFIER.into(),
            json!({"info": {"required": true, "id": "pay_0123456789abcdef"}}),
        );
        let ours =
            Echoes::new(&requirement(), &extensions, &resource(), true).expect("values serialize");
        let text = echoed(&[], &json!({"extensions": extensions}));
        let payload = Payload::parse(&text, &ours).expect("valid JSON");
        assert!(!payload.extensions_are_ours());
        assert_eq!(
            retained::payment_identifier(payload.fields()),
            Ok(Some("pay_0123456789abcdef"))
        );
    }

    #[test]
    fn malformed_json_is_an_error() {
        for text in ["", "{", r#"{"accepted":}"#, r#"{"a":1}x"#] {
            assert!(Payload::parse(text, &echoes()).is_err(), "{text}");
        }
    }
}
