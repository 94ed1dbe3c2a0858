//! Request ids: every response carries `x-request-id`, every log line of the request carries
//! it (the request line as a field, a paid call's lines through the span the call runs in)
//! and a paid call's ledger row keeps it.
//!
//! A caller's id is kept when it is well formed (so a buyer's or a proxy's id follows the
//! request); anything else is replaced by a fresh random one rather than echoed, so a log line
//! never carries a caller's arbitrary bytes.

use http::{HeaderMap, HeaderName, HeaderValue};

/// The header that carries the id, both ways (a `HeaderName` built at compile time: parsing
/// the name on every request showed in the per-request instruction count).
pub(crate) const HEADER: HeaderName = HeaderName::from_static("x-request-id");
/// The longest caller id kept.
const MAX_LEN: usize = 128;

/// The request's id: the caller's well-formed `x-request-id`, or a fresh one.
pub(crate) fn for_request(headers: &HeaderMap) -> HeaderValue {
    headers
        .get(&HEADER)
        .filter(|value| well_formed(value.as_bytes()))
        .cloned()
        .unwrap_or_else(fresh)
}

/// 1–128 characters of letters, digits and `-_.:` — enough for UUIDs, trace ids and the
/// common proxy formats, nothing that needs escaping in a log line.
fn well_formed(bytes: &[u8]) -> bool {
    !bytes.is_empty()
        && bytes.len() <= MAX_LEN
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// 128 random bits as 32 lowercase hex characters.
fn fresh() -> HeaderValue {
    let mut bytes = [0u8; 16];
    // The OS source only fails on a broken system; a zero id is then still a valid header.
    let _ = getrandom::fill(&mut bytes);
    // The hex string's own allocation becomes the header's bytes: no second copy.
    HeaderValue::from_maybe_shared(bytes::Bytes::from(hex(&bytes)))
        .unwrap_or(HeaderValue::from_static("0"))
}

/// Lowercase hex in one allocation (a `format!` per byte cost ~10k instructions a request).
fn hex(bytes: &[u8]) -> String {
    alloy::primitives::hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(HEADER, HeaderValue::from_bytes(value).expect("header"));
        headers
    }

    #[test]
    fn a_well_formed_caller_id_is_kept_and_others_are_replaced() {
        let kept = for_request(&with(b"buyer-7f3a:01.retry_2"));
        assert_eq!(kept, "buyer-7f3a:01.retry_2");
        for bad in [&b"has space"[..], b"quote\"", &[b'a'; 129], b"tab\there"] {
            let replaced = for_request(&with(bad));
            assert_ne!(replaced.as_bytes(), bad);
            assert_eq!(replaced.len(), 32);
        }
        let first = for_request(&HeaderMap::new());
        let second = for_request(&HeaderMap::new());
        assert!(
            first
                .to_str()
                .expect("ascii")
                .bytes()
                .all(|b| b.is_ascii_hexdigit())
        );
        assert_ne!(first, second, "fresh ids differ");
    }
}
