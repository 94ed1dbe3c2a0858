//! Structural semantic checks shared by the machines' pre-payment validation. None of them
//! does I/O: no DNS, no RPC, no fetch. Each refusal names the field.

use std::ops::RangeInclusive;

use alloy_primitives::{Address, U256};
use serde_json::Value;

use super::CheckFailure;
use crate::net::url_policy;
use crate::support::canonical;
use crate::support::evm;

/// The value at a JSON pointer (RFC 6901), as `Value::pointer` finds it. Our pointers are
/// literals without escapes, so this walks them without `Value::pointer`'s per-segment
/// `String` allocations: every pre-payment check runs on the free 402 path.
pub(crate) fn at<'a>(request: &'a Value, pointer: &str) -> Option<&'a Value> {
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

/// A URL input that must pass the public-HTTPS policy.
pub(crate) fn public_url(raw: &str, pointer: &str) -> Result<url::Url, CheckFailure> {
    url_policy::check_public_https_url(raw)
        .map_err(|e| CheckFailure::field(e.code(), pointer, e.to_string()))
}

/// An EVM address input (format and, for mixed case, EIP-55 checksum).
pub(crate) fn address(raw: &str, pointer: &str) -> Result<Address, CheckFailure> {
    evm::parse_address(raw).map_err(|e| address_failure(&e, pointer))
}

/// An EVM address input parsed when the request was read ([`evm::AddressText`]).
pub(crate) fn address_field(
    field: &evm::AddressText,
    pointer: &str,
) -> Result<Address, CheckFailure> {
    field.parsed().map_err(|e| address_failure(&e, pointer))
}

fn address_failure(error: &evm::EvmValueError, pointer: &str) -> CheckFailure {
    CheckFailure::field(error.code(), pointer, format!("{pointer}: {error}"))
}

/// An optional EVM address input.
pub(crate) fn optional_address(
    raw: Option<&str>,
    pointer: &str,
) -> Result<Option<Address>, CheckFailure> {
    raw.map(|raw| address(raw, pointer)).transpose()
}

/// A token contract address: a valid address that is not the zero address.
pub(crate) fn token_address(raw: &str, pointer: &str) -> Result<Address, CheckFailure> {
    token_contract(address(raw, pointer)?, pointer)
}

/// [`token_address`] of a field parsed when the request was read.
pub(crate) fn token_address_field(
    field: &evm::AddressText,
    pointer: &str,
) -> Result<Address, CheckFailure> {
    token_contract(address_field(field, pointer)?, pointer)
}

fn token_contract(token: Address, pointer: &str) -> Result<Address, CheckFailure> {
    if token.is_zero() {
        return Err(CheckFailure::field(
            "zero_token_address",
            pointer,
            "the zero address is not a token contract",
        ));
    }
    Ok(token)
}

/// A uint256 decimal string.
pub(crate) fn uint256(raw: &str, pointer: &str) -> Result<U256, CheckFailure> {
    evm::parse_uint256(raw)
        .map_err(|e| CheckFailure::field(e.code(), pointer, format!("{pointer}: {e}")))
}

/// Every address in an array field.
pub(crate) fn address_list(items: &[String], pointer: &str) -> Result<Vec<Address>, CheckFailure> {
    items
        .iter()
        .enumerate()
        .map(|(i, raw)| address(raw, &format!("{pointer}/{i}")))
        .collect()
}

/// The probe method rule of VM08–VM10: a GET probe never carries a body.
pub(crate) fn no_body_for_get(method: &str, body: Option<&Value>) -> Result<(), CheckFailure> {
    if method == "GET" && body.is_some() {
        return Err(CheckFailure::field(
            "body_not_allowed_for_get",
            "/body",
            "a GET probe has no body; omit body or use method POST",
        ));
    }
    Ok(())
}

/// Collapses runs of whitespace to one space and trims.
pub(crate) fn normalize_query(query: &str) -> String {
    query.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Normalizes the `queries` array: whitespace collapsed, each within `chars` characters
/// after normalization (the manifest's `min_query_chars` to `max_query_chars`), ordered
/// lexicographically, duplicates rejected.
pub(crate) fn normalized_queries(
    raw: &[String],
    chars: &RangeInclusive<usize>,
) -> Result<Vec<String>, CheckFailure> {
    let mut queries = Vec::new();
    for (i, item) in raw.iter().enumerate() {
        let normalized = normalize_query(item);
        let count = normalized.chars().count();
        if !chars.contains(&count) {
            return Err(CheckFailure::field(
                "invalid_query",
                format!("/queries/{i}"),
                format!(
                    "a query must hold {} to {} characters after whitespace is collapsed; this one has {count}",
                    chars.start(),
                    chars.end()
                ),
            ));
        }
        queries.push(normalized);
    }
    queries.sort();
    if let Some(pair) = queries.windows(2).find(|w| w[0] == w[1]) {
        return Err(CheckFailure::field(
            "duplicate_query",
            "/queries",
            format!("queries repeat after normalization: {:?}", pair[0]),
        ));
    }
    Ok(queries)
}

/// A caller-held baseline must come from this machine's methodology.
pub(crate) fn baseline_methodology(baseline: &Value, expected: &str) -> Result<(), CheckFailure> {
    match text_at(baseline, "/methodology_version") {
        Some(found) if found != expected => Err(CheckFailure::field(
            "baseline_methodology_mismatch",
            "/baseline/methodology_version",
            format!("baseline is from methodology {found:?}; this machine runs {expected:?}"),
        )),
        _ => Ok(()),
    }
}

/// A sealed value whose claimed hash (at `hash_pointer`) must equal the canonical sha256 of
/// `sealed`.
pub(crate) fn seal_matches(
    claimed: Option<&str>,
    hash_pointer: &str,
    sealed: &Value,
) -> Result<(), CheckFailure> {
    if claimed.unwrap_or_default() != canonical::canonical_sha256(sealed) {
        return Err(CheckFailure::field(
            "baseline_tampered",
            hash_pointer,
            "the baseline does not match its own hash; send back the baseline exactly as returned",
        ));
    }
    Ok(())
}

/// A baseline sealed by its own hash: the value at `key` must be the canonical sha256 of the
/// baseline without that key.
pub(crate) fn self_sealed(baseline: &Value, key: &str) -> Result<(), CheckFailure> {
    seal_matches(
        baseline.get(key).and_then(Value::as_str),
        &format!("/baseline/{key}"),
        &without_keys(baseline, &[key]),
    )
}

/// An object without the keys listed, for hashing what a seal covers.
pub(crate) fn without_keys(value: &Value, keys: &[&str]) -> Value {
    let mut value = value.clone();
    if let Value::Object(map) = &mut value {
        for key in keys {
            map.shift_remove(*key);
        }
    }
    value
}

/// The string of a JSON value at a pointer, if present.
pub(crate) fn text_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    at(value, pointer).and_then(Value::as_str)
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
