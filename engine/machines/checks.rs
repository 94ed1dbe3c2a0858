//! Structural semantic checks shared by the machines' pre-payment validation. None of them
//! does I/O: no DNS, no RPC, no fetch. Each returns a 400 naming the field.

use alloy_primitives::{Address, U256};
use serde_json::Value;

use crate::http::error::ApiError;
use crate::net::url_policy;
use crate::support::canonical;
use crate::support::evm;

/// The value at a JSON pointer (RFC 6901), as `Value::pointer` finds it. Our pointers are
/// literals without escapes, so this walks them without `Value::pointer`'s per-segment
/// `String` allocations: every pre-payment check runs on the free 402 path.
pub fn at<'a>(request: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.contains('~') {
        return request.pointer(pointer);
    }
    if pointer.is_empty() {
        return Some(request);
    }
    let segments = pointer.strip_prefix('/')?;
    segments
        .split('/')
        .try_fold(request, |value, segment| match value {
            Value::Object(map) => map.get(segment),
            Value::Array(items) => array_index(segment).and_then(|i| items.get(i)),
            _ => None,
        })
}

/// An RFC 6901 array index: digits, no sign, no leading zero.
fn array_index(segment: &str) -> Option<usize> {
    let canonical = segment == "0" || !segment.starts_with(['0', '+']);
    canonical.then(|| segment.parse().ok()).flatten()
}

/// The string at a JSON pointer, if present.
pub fn text<'a>(request: &'a Value, pointer: &str) -> Option<&'a str> {
    at(request, pointer).and_then(Value::as_str)
}

/// A URL input that must pass the public-HTTPS policy.
pub fn public_url(request: &Value, pointer: &str) -> Result<Option<url::Url>, ApiError> {
    match text(request, pointer) {
        None => Ok(None),
        Some(raw) => url_policy::check_public_https_url(raw)
            .map(Some)
            .map_err(|e| ApiError::invalid_field(e.code(), pointer, e.to_string())),
    }
}

/// An EVM address input (format and, for mixed case, EIP-55 checksum).
pub fn address(request: &Value, pointer: &str) -> Result<Option<Address>, ApiError> {
    match text(request, pointer) {
        None => Ok(None),
        Some(raw) => evm::parse_address(raw)
            .map(Some)
            .map_err(|e| ApiError::invalid_field(e.code(), pointer, format!("{pointer}: {e}"))),
    }
}

/// A token contract address: a valid address that is not the zero address.
pub fn token_address(request: &Value, pointer: &str) -> Result<Option<Address>, ApiError> {
    let token = address(request, pointer)?;
    if token.is_some_and(|a| a.is_zero()) {
        return Err(ApiError::invalid_field(
            "zero_token_address",
            pointer,
            "the zero address is not a token contract",
        ));
    }
    Ok(token)
}

/// A uint256 decimal string.
pub fn uint256(request: &Value, pointer: &str) -> Result<Option<U256>, ApiError> {
    match text(request, pointer) {
        None => Ok(None),
        Some(raw) => evm::parse_uint256(raw)
            .map(Some)
            .map_err(|e| ApiError::invalid_field(e.code(), pointer, format!("{pointer}: {e}"))),
    }
}

/// Every address in an array field.
pub fn address_list(request: &Value, pointer: &str) -> Result<Vec<Address>, ApiError> {
    let items = at(request, pointer).and_then(Value::as_array);
    let mut out = Vec::new();
    for i in 0..items.map_or(0, Vec::len) {
        if let Some(a) = address(request, &format!("{pointer}/{i}"))? {
            out.push(a);
        }
    }
    Ok(out)
}

/// The probe method rule of VM08–VM10: a GET probe never carries a body.
pub fn no_body_for_get(request: &Value) -> Result<(), ApiError> {
    if text(request, "/method") == Some("GET") && request.get("body").is_some() {
        return Err(ApiError::invalid_field(
            "body_not_allowed_for_get",
            "/body",
            "a GET probe has no body; omit body or use method POST",
        ));
    }
    Ok(())
}

/// Collapses runs of whitespace to one space and trims.
pub fn normalize_query(query: &str) -> String {
    query.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Normalizes the `queries` array: whitespace collapsed, each 2..=400 characters after
/// normalization, ordered lexicographically, duplicates rejected.
pub fn normalized_queries(request: &Value) -> Result<Vec<String>, ApiError> {
    let raw = request.get("queries").and_then(Value::as_array);
    let mut queries = Vec::new();
    for (i, item) in raw.into_iter().flatten().enumerate() {
        let normalized = normalize_query(item.as_str().unwrap_or_default());
        let chars = normalized.chars().count();
        if !(2..=400).contains(&chars) {
            return Err(ApiError::invalid_field(
                "invalid_query",
                format!("/queries/{i}"),
                format!(
                    "a query must hold 2 to 400 characters after whitespace is collapsed; this one has {chars}"
                ),
            ));
        }
        queries.push(normalized);
    }
    queries.sort();
    if let Some(pair) = queries.windows(2).find(|w| w[0] == w[1]) {
        return Err(ApiError::invalid_field(
            "duplicate_query",
            "/queries",
            format!("queries repeat after normalization: {:?}", pair[0]),
        ));
    }
    Ok(queries)
}

/// A caller-held baseline must come from this machine's methodology.
pub fn baseline_methodology(request: &Value, expected: &str) -> Result<(), ApiError> {
    match text(request, "/baseline/methodology_version") {
        Some(found) if found != expected => Err(ApiError::invalid_field(
            "baseline_methodology_mismatch",
            "/baseline/methodology_version",
            format!("baseline is from methodology {found:?}; this machine runs {expected:?}"),
        )),
        _ => Ok(()),
    }
}

/// A sealed value whose `hash_field` must equal the canonical sha256 of `sealed`.
pub fn seal_matches(request: &Value, hash_pointer: &str, sealed: &Value) -> Result<(), ApiError> {
    let claimed = text(request, hash_pointer).unwrap_or_default();
    if claimed != canonical::canonical_sha256(sealed) {
        return Err(ApiError::invalid_field(
            "baseline_tampered",
            hash_pointer,
            "the baseline does not match its own hash; send back the baseline exactly as returned",
        ));
    }
    Ok(())
}

/// The object at `pointer` without the keys listed, for hashing what a seal covers.
pub fn without_keys(request: &Value, pointer: &str, keys: &[&str]) -> Value {
    let mut value = at(request, pointer).cloned().unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        for key in keys {
            map.shift_remove(*key);
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn at_finds_what_value_pointer_finds() {
        let doc = json!({
            "owner": "0xabc",
            "a": {"b": [10, {"c": true}], "": 1, "x~y": 2, "p/q": 3},
            "list": [[0, 1], "two"],
        });
        let pointers = [
            "",
            "/",
            "/owner",
            "/missing",
            "owner",
            "/a/b",
            "/a/b/0",
            "/a/b/1/c",
            "/a/b/2",
            "/a/b/01",
            "/a/b/+1",
            "/a/b/-1",
            "/a/b/00",
            "/a/",
            "/a/x~0y",
            "/a/p~1q",
            "/a/x~y",
            "/list/0/1",
            "/list/1",
            "/list/1/0",
            "/owner/0",
            "/a/b/18446744073709551616",
        ];
        for pointer in pointers {
            assert_eq!(
                at(&doc, pointer),
                doc.pointer(pointer),
                "pointer {pointer:?}"
            );
        }
    }
}
