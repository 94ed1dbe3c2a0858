//! JSON from a provider we do not control, parsed with structural bounds enforced while it is
//! read (depth, keys per object, items per array, total values).
//!
//! serde_json does the parsing; a `DeserializeSeed` counts as it builds the value, so an
//! answer that breaks a bound is refused at the first offending value instead of being
//! built in full and walked afterwards. Definitions (also in docs/vm05-vm11-discovery.md):
//! - depth: the outermost array or object is at depth 1, a container inside it at depth 2;
//!   scalars add no depth;
//! - nodes: every JSON value (object, array, string, number, boolean, null) counts once;
//!   object keys do not count;
//! - a repeated key inside one object makes the answer invalid (its meaning is ambiguous).

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// The bounds an answer must stay within (all inclusive maxima).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JsonBounds {
    pub max_depth: u64,
    pub max_object_keys: u64,
    pub max_array_length: u64,
    pub max_nodes: u64,
}

/// Why an answer was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum JsonRefusal {
    /// The answer broke a bound; `limit` is the manifest limit's name.
    #[error("the answer exceeds {limit} {value}")]
    LimitExceeded { limit: &'static str, value: u64 },
    #[error("the answer is not valid JSON ({0})")]
    Invalid(String),
}

struct Budget {
    bounds: JsonBounds,
    nodes: Cell<u64>,
    exceeded: Cell<Option<(&'static str, u64)>>,
}

impl Budget {
    fn exceed<E: de::Error>(&self, limit: &'static str, value: u64) -> E {
        self.exceeded.set(Some((limit, value)));
        E::custom(format!("{limit} {value} exceeded"))
    }

    fn count_node<E: de::Error>(&self) -> Result<(), E> {
        let nodes = self.nodes.get() + 1;
        self.nodes.set(nodes);
        if nodes > self.bounds.max_nodes {
            return Err(self.exceed("max_json_nodes", self.bounds.max_nodes));
        }
        Ok(())
    }
}

/// Parses `bytes` as one JSON document within `bounds`.
pub(crate) fn parse(bytes: &[u8], bounds: &JsonBounds) -> Result<Value, JsonRefusal> {
    let budget = Budget {
        bounds: *bounds,
        nodes: Cell::new(0),
        exceeded: Cell::new(None),
    };
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let parsed = Node {
        budget: &budget,
        depth: 0,
    }
    .deserialize(&mut deserializer)
    .and_then(|value| deserializer.end().map(|()| value));
    parsed.map_err(|error| match budget.exceeded.get() {
        Some((limit, value)) => JsonRefusal::LimitExceeded { limit, value },
        None => JsonRefusal::Invalid(error.to_string()),
    })
}

/// One value at a nesting depth (the depth of its enclosing container; 0 for the root).
struct Node<'a> {
    budget: &'a Budget,
    depth: u64,
}

impl<'a> Node<'a> {
    /// Counts a container and returns the depth its children are at.
    fn enter<E: de::Error>(&self) -> Result<u64, E> {
        self.budget.count_node()?;
        let depth = self.depth + 1;
        if depth > self.budget.bounds.max_depth {
            return Err(self
                .budget
                .exceed("max_json_depth", self.budget.bounds.max_depth));
        }
        Ok(depth)
    }

    fn child(&self, depth: u64) -> Node<'a> {
        Node {
            budget: self.budget,
            depth,
        }
    }

    fn scalar<E: de::Error>(&self, value: Value) -> Result<Value, E> {
        self.budget.count_node()?;
        Ok(value)
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.scalar(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.scalar(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.scalar(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        match Number::from_f64(v) {
            Some(number) => self.scalar(Value::Number(number)),
            None => Err(E::custom("a number that is not finite")),
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.scalar(Value::String(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.scalar(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.scalar(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let depth = self.enter()?;
        let max = self.budget.bounds.max_array_length;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.child(depth))? {
            if items.len() as u64 >= max {
                return Err(self.budget.exceed("max_array_length", max));
            }
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let depth = self.enter()?;
        let max = self.budget.bounds.max_object_keys;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.len() as u64 >= max {
                return Err(self.budget.exceed("max_object_keys", max));
            }
            if object.contains_key(&key) {
                return Err(de::Error::custom(format!("the key {key:?} repeats")));
            }
            let value = map.next_value_seed(self.child(depth))?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const BOUNDS: JsonBounds = JsonBounds {
        max_depth: 3,
        max_object_keys: 2,
        max_array_length: 3,
        max_nodes: 8,
    };

    fn refusal(text: &str) -> JsonRefusal {
        parse(text.as_bytes(), &BOUNDS).expect_err(text)
    }

    fn exceeded(limit: &'static str, value: u64) -> JsonRefusal {
        JsonRefusal::LimitExceeded { limit, value }
    }

    #[test]
    fn values_at_the_bounds_parse_unchanged() {
        let text = r#"{"a":[[1,2.5,null]],"b":"x"}"#;
        assert_eq!(
            parse(text.as_bytes(), &BOUNDS),
            Ok(json!({"a": [[1, 2.5, null]], "b": "x"}))
        );
        assert_eq!(parse(b" true ", &BOUNDS), Ok(json!(true)));
    }

    #[test]
    fn each_bound_is_named_when_broken() {
        assert_eq!(refusal("[[[[1]]]]"), exceeded("max_json_depth", 3));
        assert_eq!(
            refusal(r#"{"a":1,"b":2,"c":3}"#),
            exceeded("max_object_keys", 2)
        );
        assert_eq!(refusal("[1,2,3,4]"), exceeded("max_array_length", 3));
        assert_eq!(
            refusal("[[1,2,3],[4,5,6],[7]]"),
            exceeded("max_json_nodes", 8)
        );
    }

    #[test]
    fn depth_far_beyond_serde_json_recursion_limit_is_still_the_depth_bound() {
        let deep = format!("{}{}", "[".repeat(500), "]".repeat(500));
        assert_eq!(refusal(&deep), exceeded("max_json_depth", 3));
    }

    #[test]
    fn malformed_repeated_keys_and_trailing_data_are_invalid() {
        for text in [r#"{"a":1,"a":2}"#, "[1,]", "{} {}", "", "NaN"] {
            assert!(matches!(refusal(text), JsonRefusal::Invalid(_)), "{text:?}");
        }
    }
}
