//! Reading lists out of `serde_json::Value`s: manifests, schemas, listings and baselines all
//! hold arrays of strings where a missing or mistyped member means "none".

use serde_json::Value;

/// The string items of `value` when it is an array; nothing when it is absent or not an
/// array. Items that are not strings are passed over.
pub(crate) fn str_items(value: Option<&Value>) -> impl Iterator<Item = &str> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// The string at `key` of an object, when it is there and not empty: how the optional text
/// fields of upstream JSON (SettleResponses, challenges, signed payloads) are read.
pub(crate) fn non_empty_str<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value
        .get(key)
        .and_then(Value::as_str)
        .filter(|text| !text.is_empty())
}

/// [`str_items`], owned.
pub(crate) fn strings(value: Option<&Value>) -> Vec<String> {
    str_items(value).map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_array_gives_its_strings_and_anything_else_gives_none() {
        let list = json!(["a", 1, "b", null]);
        assert_eq!(str_items(Some(&list)).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(strings(Some(&list)), ["a", "b"]);
        assert_eq!(str_items(Some(&json!("a"))).count(), 0);
        assert_eq!(str_items(Some(&json!({"a": "b"}))).count(), 0);
        assert_eq!(str_items(None).count(), 0);
    }

    #[test]
    fn a_non_empty_string_field_or_none() {
        let object = json!({"a": "x", "b": "", "c": 1});
        assert_eq!(non_empty_str(&object, "a"), Some("x"));
        assert_eq!(non_empty_str(&object, "b"), None);
        assert_eq!(non_empty_str(&object, "c"), None);
        assert_eq!(non_empty_str(&object, "d"), None);
    }
}
