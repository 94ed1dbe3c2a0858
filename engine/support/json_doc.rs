//! A JSON document whose strings borrow from the text it was parsed from.
//!
//! Every paid route reads its body once into a [`Doc`], checks it against the machine's input
//! schema (jsonschema validates any representation that implements its `Json` trait) and reads
//! the machine's typed request from it. A `serde_json::Value` costs more on that path: each
//! string is copied, and each object is an insertion-ordered map that SipHashes its keys. Here
//! an object is a vector of members and a string without escapes points into the body.
//!
//! The meaning is `Value`'s: serde_json parses the text, numbers are its `Number`s, and a
//! repeated member name keeps its first place and its last value.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use jsonschema::JsonType;
use jsonschema::json::{Array, Json, Node, NodeIdentity, Object, cmp};
use serde::de::value::{Error as DeError, MapAccessDeserializer, MapDeserializer, SeqDeserializer};
use serde::de::{self, Deserialize, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value};

/// Objects up to this many members look for repeated names pair by pair; larger ones sort.
const PAIRWISE_MEMBERS: usize = 8;

/// One JSON value.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Doc<'a> {
    /// `null`.
    #[default]
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number as serde_json reads it.
    Number(Number),
    /// A string, borrowed from the text unless it had escapes.
    String(Cow<'a, str>),
    /// An array.
    Array(Vec<Doc<'a>>),
    /// An object's members in the order the text gives them, each name once.
    Object(Vec<Member<'a>>),
}

/// An object's member: its name and value.
pub type Member<'a> = (Cow<'a, str>, Doc<'a>);

impl<'a> Doc<'a> {
    /// Parses JSON text (the whole of it: trailing characters are an error).
    pub fn parse(text: &'a str) -> Result<Doc<'a>, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The same document, borrowing `value`'s strings.
    pub fn from_value(value: &'a Value) -> Doc<'a> {
        match value {
            Value::Null => Doc::Null,
            Value::Bool(flag) => Doc::Bool(*flag),
            Value::Number(number) => Doc::Number(number.clone()),
            Value::String(text) => Doc::String(Cow::Borrowed(text)),
            Value::Array(items) => Doc::Array(items.iter().map(Doc::from_value).collect()),
            Value::Object(map) => Doc::Object(
                map.iter()
                    .map(|(name, child)| (Cow::Borrowed(name.as_str()), Doc::from_value(child)))
                    .collect(),
            ),
        }
    }

    /// The members, when this is an object.
    pub fn as_object(&self) -> Option<&[Member<'a>]> {
        match self {
            Doc::Object(members) => Some(members),
            _ => None,
        }
    }

    /// The same document as a `serde_json::Value`, for what takes one (hashes, errors).
    pub fn to_value(&self) -> Value {
        match self {
            Doc::Null => Value::Null,
            Doc::Bool(flag) => Value::Bool(*flag),
            Doc::Number(number) => Value::Number(number.clone()),
            Doc::String(text) => Value::String(text.to_string()),
            Doc::Array(items) => Value::Array(items.iter().map(Doc::to_value).collect()),
            Doc::Object(members) => Value::Object(
                members
                    .iter()
                    .map(|(name, child)| (name.to_string(), child.to_value()))
                    .collect(),
            ),
        }
    }
}

/// A member name as serde_json hands it over: borrowed when it had no escapes.
struct Name<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(NameVisitor)
    }
}

struct NameVisitor;

impl<'de> Visitor<'de> for NameVisitor {
    type Value = Name<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a member name")
    }

    fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Name<'de>, E> {
        Ok(Name(Cow::Borrowed(text)))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Name<'de>, E> {
        Ok(Name(Cow::Owned(text.to_owned())))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<Name<'de>, E> {
        Ok(Name(Cow::Owned(text)))
    }
}

impl<'de> Deserialize<'de> for Doc<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DocVisitor)
    }
}

struct DocVisitor;

impl<'de> Visitor<'de> for DocVisitor {
    type Value = Doc<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Doc<'de>, E> {
        Ok(Doc::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Doc<'de>, E> {
        Ok(Doc::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Doc<'de>, D::Error> {
        Doc::deserialize(deserializer)
    }

    fn visit_bool<E: de::Error>(self, flag: bool) -> Result<Doc<'de>, E> {
        Ok(Doc::Bool(flag))
    }

    fn visit_u64<E: de::Error>(self, number: u64) -> Result<Doc<'de>, E> {
        Ok(Doc::Number(number.into()))
    }

    fn visit_i64<E: de::Error>(self, number: i64) -> Result<Doc<'de>, E> {
        Ok(Doc::Number(number.into()))
    }

    fn visit_f64<E: de::Error>(self, number: f64) -> Result<Doc<'de>, E> {
        // serde_json reads no infinity or NaN from text; `Value` makes them null too.
        Ok(Number::from_f64(number).map_or(Doc::Null, Doc::Number))
    }

    fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Doc<'de>, E> {
        Ok(Doc::String(Cow::Borrowed(text)))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Doc<'de>, E> {
        Ok(Doc::String(Cow::Owned(text.to_owned())))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<Doc<'de>, E> {
        Ok(Doc::String(Cow::Owned(text)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Doc<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Doc::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc<'de>, A::Error> {
        let mut members: Vec<Member<'de>> = Vec::with_capacity(map.size_hint().unwrap_or(4));
        while let Some((Name(name), value)) = map.next_entry::<Name<'de>, Doc<'de>>()? {
            members.push((name, value));
        }
        Ok(Doc::Object(without_repeats(members)))
    }
}

/// `Value`'s rule for a repeated name: the first place, the last value.
fn without_repeats(members: Vec<Member<'_>>) -> Vec<Member<'_>> {
    if !has_repeats(&members) {
        return members;
    }
    let mut kept: Vec<Member<'_>> = Vec::with_capacity(members.len());
    let mut place: HashMap<Cow<'_, str>, usize> = HashMap::with_capacity(members.len());
    for (name, value) in members {
        match place.get(&name) {
            Some(&at) => kept[at].1 = value,
            None => {
                place.insert(name.clone(), kept.len());
                kept.push((name, value));
            }
        }
    }
    kept
}

fn has_repeats(members: &[Member<'_>]) -> bool {
    if members.len() <= PAIRWISE_MEMBERS {
        return members
            .iter()
            .enumerate()
            .any(|(at, (name, _))| members[at + 1..].iter().any(|(other, _)| other == name));
    }
    let mut names: Vec<&str> = members.iter().map(|(name, _)| name.as_ref()).collect();
    names.sort_unstable();
    names.windows(2).any(|pair| pair[0] == pair[1])
}

// Reading a typed request from a document, as serde_json reads one from a `Value`.

fn visit_number<'de, V: Visitor<'de>>(number: &Number, visitor: V) -> Result<V::Value, DeError> {
    if let Some(unsigned) = number.as_u64() {
        visitor.visit_u64(unsigned)
    } else if let Some(signed) = number.as_i64() {
        visitor.visit_i64(signed)
    } else {
        match number.as_f64() {
            Some(float) => visitor.visit_f64(float),
            None => Err(de::Error::custom("a number out of range")),
        }
    }
}

fn members_deserializer<'de, 'a>(
    members: &'a [Member<'a>],
) -> MapDeserializer<'de, impl Iterator<Item = (&'a str, &'a Doc<'a>)>, DeError> {
    MapDeserializer::new(members.iter().map(|(name, value)| (name.as_ref(), value)))
}

impl<'de, 'a> Deserializer<'de> for &'a Doc<'a> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self {
            Doc::Null => visitor.visit_unit(),
            Doc::Bool(flag) => visitor.visit_bool(*flag),
            Doc::Number(number) => visit_number(number, visitor),
            Doc::String(text) => visitor.visit_str(text),
            Doc::Array(items) => {
                let mut seq = SeqDeserializer::new(items.iter());
                let value = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(value)
            }
            Doc::Object(members) => {
                let mut map = members_deserializer(members);
                let value = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(value)
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self {
            Doc::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match self {
            Doc::String(text) => visitor.visit_enum(text.as_ref().into_deserializer()),
            Doc::Object(members) if members.len() == 1 => {
                visitor.visit_enum(MapAccessDeserializer::new(members_deserializer(members)))
            }
            _ => Err(de::Error::invalid_type(
                de::Unexpected::Other("a JSON value that is not an enum"),
                &"a string or an object with one member",
            )),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier
    }
}

impl<'de, 'a> IntoDeserializer<'de, DeError> for &'a Doc<'a> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

// Validating a document with jsonschema.

/// jsonschema's name for the [`Doc`] representation: `jsonschema::options_for::<DocJson>()`.
pub struct DocJson;

impl Json for DocJson {
    type Node<'a> = &'a Doc<'a>;
    type PreparedKey = String;
    type StringBuffer = Doc<'static>;

    // Objects are vectors: a pass over the members costs no more than a lookup's scan.
    const KEYS_PER_LOOKUP: usize = 2;
    const ACYCLIC: bool = true;

    fn prepare_key(key: &str) -> String {
        key.to_owned()
    }

    fn with_string_node<T>(
        buffer: &mut Doc<'static>,
        string: &str,
        f: impl FnOnce(Self::Node<'_>) -> T,
    ) -> T {
        *buffer = Doc::String(Cow::Owned(string.to_owned()));
        f(buffer)
    }
}

impl<'a> Node<'a, DocJson> for &'a Doc<'a> {
    type Object = &'a [Member<'a>];
    type Array = &'a [Doc<'a>];
    type Number = &'a Number;

    fn as_object(&self) -> Option<&'a [Member<'a>]> {
        match self {
            Doc::Object(members) => Some(members),
            _ => None,
        }
    }

    fn as_array(&self) -> Option<&'a [Doc<'a>]> {
        match self {
            Doc::Array(items) => Some(items),
            _ => None,
        }
    }

    fn as_string(&self) -> Option<Cow<'a, str>> {
        match self {
            Doc::String(text) => Some(Cow::Borrowed(text.as_ref())),
            _ => None,
        }
    }

    fn as_number(&self) -> Option<&'a Number> {
        match self {
            Doc::Number(number) => Some(number),
            _ => None,
        }
    }

    fn as_boolean(&self) -> Option<bool> {
        match self {
            Doc::Bool(flag) => Some(*flag),
            _ => None,
        }
    }

    fn is_null(&self) -> bool {
        matches!(self, Doc::Null)
    }

    fn json_type(&self) -> JsonType {
        match self {
            Doc::Null => JsonType::Null,
            Doc::Bool(_) => JsonType::Boolean,
            Doc::Number(_) => JsonType::Number,
            Doc::String(_) => JsonType::String,
            Doc::Array(_) => JsonType::Array,
            Doc::Object(_) => JsonType::Object,
        }
    }

    fn equals_value(&self, expected: &Value) -> bool {
        match (self, expected) {
            // `enum` and `const` on strings, the common case, without building a `Value`.
            (Doc::String(text), Value::String(wanted)) => text == wanted,
            (Doc::String(_), _) | (_, Value::String(_)) => false,
            _ => cmp::equal(&self.to_value(), expected),
        }
    }

    fn to_value(&self) -> Cow<'a, Value> {
        Cow::Owned(Doc::to_value(self))
    }

    fn identity(&self) -> Option<NodeIdentity> {
        Some(NodeIdentity::new(
            std::ptr::from_ref::<Doc<'a>>(self) as usize
        ))
    }
}

/// An object's members as jsonschema walks them.
pub struct MembersIter<'a>(std::slice::Iter<'a, Member<'a>>);

impl<'a> Iterator for MembersIter<'a> {
    type Item = (&'a str, &'a Doc<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(name, value)| (name.as_ref(), value))
    }
}

impl<'a> Object<'a, DocJson> for &'a [Member<'a>] {
    type Node = &'a Doc<'a>;
    type MemberName = &'a str;
    type MembersIter = MembersIter<'a>;

    fn len(&self) -> usize {
        <[Member<'a>]>::len(self)
    }

    fn get(&self, key: &String) -> Option<&'a Doc<'a>> {
        self.iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value)
    }

    fn members(&self) -> MembersIter<'a> {
        MembersIter(self.iter())
    }
}

impl<'a> Array<'a, DocJson> for &'a [Doc<'a>] {
    type Node = &'a Doc<'a>;
    type ElementsIter = std::slice::Iter<'a, Doc<'a>>;

    fn len(&self) -> usize {
        <[Doc<'a>]>::len(self)
    }

    fn elements(&self) -> std::slice::Iter<'a, Doc<'a>> {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::{Value, json};

    use super::{Doc, DocJson};

    const TEXTS: [&str; 9] = [
        r#"{"owner":"0x1DBE5A0BE3Be6c3D8e9f4C0f8a3f4A4e0b6e8412","n":[1,-2,3.5,null,true]}"#,
        r#"{"a":1,"b":{"c":"x","c":"y"},"a":2}"#,
        r#"{"é\u00e9":"tab\there","k":"\ud83d\ude00"}"#,
        r#"[{},[],"",0,18446744073709551615,-9223372036854775808,1e300]"#,
        r#"{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k3":33,"k10":10}"#,
        r#""just a string""#,
        "  {\"spaced\" : [ 1 , 2 ] }  ",
        "null",
        r#"{"nested":{"deeper":{"deepest":[{"x":"y"}]}}}"#,
    ];

    #[test]
    fn reads_every_text_as_serde_json_value_does() {
        for text in TEXTS {
            let value: Value = serde_json::from_str(text).expect("valid JSON");
            let doc = Doc::parse(text).expect("valid JSON");
            assert_eq!(doc.to_value(), value, "{text}");
            // Same order as Value's map, which keeps a repeated name's first place.
            assert_eq!(
                serde_json::to_string(&doc.to_value()).expect("serializes"),
                serde_json::to_string(&value).expect("serializes"),
                "{text}"
            );
            assert_eq!(Doc::from_value(&value), doc, "{text}");
        }
    }

    #[test]
    fn refuses_what_serde_json_refuses() {
        for text in [
            "",
            "{",
            "{\"a\":}",
            "{} {}",
            "[1,]",
            "nul",
            "{\"a\":1,}",
            "01",
        ] {
            assert!(Doc::parse(text).is_err(), "{text:?}");
            assert!(serde_json::from_str::<Value>(text).is_err(), "{text:?}");
        }
        // serde_json's nesting limit (128) holds for a document as for a `Value`.
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(Doc::parse(&nested(100)).is_ok());
        assert!(Doc::parse(&nested(200)).is_err());
        assert!(serde_json::from_str::<Value>(&nested(200)).is_err());
    }

    #[test]
    fn strings_without_escapes_borrow_the_text() {
        let doc = Doc::parse(r#"{"plain":"abc","escaped":"a\nb"}"#).expect("valid JSON");
        let members = doc.as_object().expect("an object");
        assert!(matches!(&members[0].0, std::borrow::Cow::Borrowed("plain")));
        assert!(matches!(
            &members[0].1,
            Doc::String(std::borrow::Cow::Borrowed("abc"))
        ));
        assert!(
            matches!(&members[1].1, Doc::String(std::borrow::Cow::Owned(text)) if text == "a\nb")
        );
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Typed {
        name: String,
        count: u64,
        offset: i64,
        ratio: f64,
        maybe: Option<String>,
        absent: Option<u8>,
        kind: Kind,
        tags: Vec<String>,
        wrapped: Wrapped,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum Kind {
        Native,
        Erc20,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Wrapped(String);

    #[test]
    fn typed_requests_read_as_from_a_value() {
        let text = r#"{"name":"n","count":7,"offset":-3,"ratio":0.5,"maybe":null,
            "kind":"erc20","tags":["a","b"],"wrapped":"w"}"#;
        let doc = Doc::parse(text).expect("valid JSON");
        let from_doc = Typed::deserialize(&doc).expect("reads");
        let from_value: Typed = serde_json::from_str(text).expect("reads");
        assert_eq!(from_doc, from_value);

        for (bad, wanted) in [
            (
                r#"{"name":1}"#,
                "invalid type: integer `1`, expected a string",
            ),
            (r#"{"name":"n","extra":1}"#, "unknown field `extra`"),
            (r#"{"name":"n"}"#, "missing field `count`"),
        ] {
            let doc = Doc::parse(bad).expect("valid JSON");
            let error = Typed::deserialize(&doc).expect_err("does not read");
            assert!(error.to_string().contains(wanted), "{bad}: {error}");
        }
    }

    #[test]
    fn validates_as_the_value_validator_does() {
        let schema = json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["owner", "kind"],
            "properties": {
                "owner": {"type": "string", "pattern": "^0x[0-9a-fA-F]{40}$"},
                "kind": {"enum": ["native", "erc20"]},
                "limit": {"type": "integer", "minimum": 1, "maximum": 10},
                "zero": {"not": {"const": {"a": [1, 2]}}},
                "names": {"type": "array", "uniqueItems": true, "maxItems": 2,
                          "items": {"type": "string", "minLength": 2, "maxLength": 3}}
            }
        });
        let by_value = jsonschema::options().build(&schema).expect("compiles");
        let by_doc = jsonschema::options_for::<DocJson>()
            .build(&schema)
            .expect("compiles");
        let owner = "0x1DBE5A0BE3Be6c3D8e9f4C0f8a3f4A4e0b6e8412";
        let instances = [
            json!({"owner": owner, "kind": "native"}),
            json!({"owner": owner, "kind": "erc20", "limit": 10, "names": ["ab", "abc"]}),
            json!({"owner": "0x12", "kind": "native"}),
            json!({"owner": owner, "kind": "other"}),
            json!({"owner": owner, "kind": 1}),
            json!({"owner": owner}),
            json!({"owner": owner, "kind": "native", "extra": true}),
            json!({"owner": owner, "kind": "native", "limit": 11}),
            json!({"owner": owner, "kind": "native", "limit": 2.5}),
            json!({"owner": owner, "kind": "native", "zero": {"a": [1, 2]}}),
            json!({"owner": owner, "kind": "native", "zero": {"a": [1.0, 2]}}),
            json!({"owner": owner, "kind": "native", "zero": {"a": [2, 1]}}),
            json!({"owner": owner, "kind": "native", "names": ["ab", "ab"]}),
            json!({"owner": owner, "kind": "native", "names": ["a", "abcd", "ab"]}),
            json!([]),
            json!("text"),
        ];
        for instance in &instances {
            let doc = Doc::from_value(instance);
            assert_eq!(
                by_doc.is_valid(&doc),
                by_value.is_valid(instance),
                "{instance}"
            );
            let described = |error: jsonschema::ValidationError<'_>| {
                format!("{error} at {}", error.instance_path())
            };
            let doc_errors: Vec<String> = by_doc.iter_errors(&doc).map(described).collect();
            let value_errors: Vec<String> = by_value.iter_errors(instance).map(described).collect();
            assert_eq!(doc_errors, value_errors, "{instance}");
        }
    }
}
