//! The JSON error body every non-2xx answer of ours carries:
//! `{"error":{"code":"...","message":"...","field":"..."}}`.

use std::borrow::Cow;

use http::StatusCode;

use crate::machines::{CheckFailure, NotReady};
use crate::pay::call::Refusal;

/// A request rejection or service refusal with a stable machine-readable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub(crate) struct ApiError {
    pub status: StatusCode,
    /// Nearly always one of our fixed codes: borrowed, not copied per answer.
    pub code: Cow<'static, str>,
    pub message: String,
    pub field: Option<String>,
}

/// The bytes of `{"error":{"code":"","message":""}}` around the two strings.
const BODY_FRAME: usize = r#"{"error":{"code":"","message":""}}"#.len();
/// The bytes `,"field":""` adds around the field.
const FIELD_FRAME: usize = r#","field":"""#.len();

impl ApiError {
    pub(crate) fn new(
        status: StatusCode,
        code: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        ApiError {
            status,
            code: code.into(),
            message: message.into(),
            field: None,
        }
    }

    /// HTTP 400: the request is invalid; no payment contract is issued.
    pub(crate) fn bad_request(
        code: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// HTTP 400 naming the offending field (a JSON pointer such as `/asset/symbol`).
    pub(crate) fn invalid_field(
        code: impl Into<Cow<'static, str>>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ApiError::bad_request(code, message).with_field(field)
    }

    pub(crate) fn unavailable(
        code: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
    }

    pub(crate) fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub(crate) fn body(&self) -> Vec<u8> {
        // Sized for the common case (nothing to escape), so the buffer never grows. The frame
        // is written as bytes and each string by serde_json: a derived struct's serializer
        // wrote and escaped each key too, at about twice the cost.
        let field = self.field.as_deref();
        let mut bytes = Vec::with_capacity(
            BODY_FRAME
                + self.code.len()
                + self.message.len()
                + field.map_or(0, |f| FIELD_FRAME + f.len()),
        );
        bytes.extend_from_slice(br#"{"error":{"code":"#);
        write_string(&mut bytes, &self.code);
        bytes.extend_from_slice(br#","message":"#);
        write_string(&mut bytes, &self.message);
        if let Some(field) = field {
            bytes.extend_from_slice(br#","field":"#);
            write_string(&mut bytes, field);
        }
        bytes.extend_from_slice(b"}}");
        bytes
    }
}

/// Appends `text` as a JSON string: copied between quotes when nothing in it needs escaping,
/// else escaped by serde_json. serde_json's escaper goes byte by byte through a table; the
/// check goes a word at a time, and an error's strings nearly never need escaping.
fn write_string(out: &mut Vec<u8>, text: &str) {
    if needs_no_escape(text.as_bytes()) {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        // Writing into a Vec cannot fail.
        let _ = serde_json::to_writer(out, text);
    }
}

/// No byte JSON must escape (RFC 8259 §7: `"`, `\` and U+0000 to U+001F). Eight bytes are
/// checked at a time: an error's strings are short, and a byte loop (or a vectorized one,
/// whose vectors such strings rarely fill) cost about seven instructions a byte.
fn needs_no_escape(bytes: &[u8]) -> bool {
    let mut words = bytes.chunks_exact(8);
    let mut found = false;
    for word in &mut words {
        found |= <[u8; 8]>::try_from(word).map_or(true, word_needs_escape);
    }
    // The tail, padded with a letter.
    let mut tail = [b'a'; 8];
    tail[..words.remainder().len()].copy_from_slice(words.remainder());
    !(found || word_needs_escape(tail))
}

/// Whether any of eight bytes is below 0x20, `"` or `\`, with the bit tests for "some
/// byte is zero" and "some byte is below n" (exact for n ≤ 0x80; bytes from 0x80 never match).
fn word_needs_escape(bytes: [u8; 8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let word = u64::from_ne_bytes(bytes);
    let below = |n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word;
    let equal = |b: u8| {
        let diff = word ^ (ONES * u64::from(b));
        diff.wrapping_sub(ONES) & !diff
    };
    (below(0x20) | equal(b'"') | equal(b'\\')) & HIGHS != 0
}

impl From<CheckFailure> for ApiError {
    /// A machine's pre-payment refusal: 400, naming the field when there is one.
    fn from(failure: CheckFailure) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: failure.code.into(),
            message: failure.message,
            field: failure.field,
        }
    }
}

impl From<NotReady> for ApiError {
    /// A machine this deployment cannot run: 503 before any payment is verified.
    fn from(not_ready: NotReady) -> Self {
        ApiError::unavailable(not_ready.code, not_ready.message)
    }
}

impl From<&Refusal> for ApiError {
    /// A refusal of ours on the paid path: 500 when the work failed or the payee or price cannot
    /// be read, 400 for a malformed payment-identifier, 409 for one bound to another payment,
    /// else 503 (a paid payment's work that failed when run once more is one: resend later).
    fn from(refusal: &Refusal) -> Self {
        let status = match refusal {
            Refusal::WorkFailed | Refusal::Misconfigured => StatusCode::INTERNAL_SERVER_ERROR,
            Refusal::LedgerUnavailable
            | Refusal::LedgerUnavailableOnResend
            | Refusal::FacilitatorUnavailable { .. }
            | Refusal::RerunFailed
            | Refusal::InProgress
            | Refusal::OutcomeUnknown => StatusCode::SERVICE_UNAVAILABLE,
            Refusal::IdentifierInvalid => StatusCode::BAD_REQUEST,
            Refusal::IdentifierConflict => StatusCode::CONFLICT,
        };
        ApiError::new(status, refusal.code(), refusal.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::{ApiError, write_string};

    /// Every character, alone and inside text, is written as serde_json writes it.
    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        let as_serde = |text: &str| serde_json::to_vec(text).expect("a string serializes");
        let ours = |text: &str| {
            let mut out = Vec::new();
            write_string(&mut out, text);
            out
        };
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            let alone = c.to_string();
            assert_eq!(ours(&alone), as_serde(&alone), "{:#x}", c as u32);
        }
        // Past the first few pages every character is copied alike (multi-byte UTF-8).
        for c in (0..0x800).filter_map(char::from_u32) {
            let inside = format!("/owner must be 0x{c} followed by hexadecimal digits");
            assert_eq!(ours(&inside), as_serde(&inside), "{:#x}", c as u32);
        }
        // Each byte value at each place in a word and in the tail.
        for c in (0..0x100).filter_map(char::from_u32) {
            for at in 0..=17 {
                let inside = format!("{}{c}{}", "a".repeat(at), "b".repeat(17 - at));
                assert_eq!(ours(&inside), as_serde(&inside), "{:#x} at {at}", c as u32);
            }
        }
        assert_eq!(ours(""), b"\"\"");
    }

    /// The body is written into a buffer sized for it: it never grows when nothing needs escaping.
    #[test]
    fn an_error_body_fills_the_buffer_sized_for_it() {
        let with_field = ApiError::invalid_field(
            "invalid_address",
            "/owner",
            "/owner must be 0x and 40 digits",
        );
        let without_field = ApiError::bad_request("empty_body", "the request body is empty");
        for (error, field) in [(with_field, Some("/owner")), (without_field, None)] {
            let body = error.body();
            assert_eq!(
                body.len(),
                body.capacity(),
                "{}",
                String::from_utf8_lossy(&body)
            );
            let parsed: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            assert_eq!(parsed["error"]["code"], &*error.code);
            assert_eq!(parsed["error"]["message"], error.message.as_str());
            assert_eq!(parsed["error"]["field"].as_str(), field);
        }
        // Text that needs escaping is escaped as serde_json escapes it.
        let quoted = ApiError::invalid_field("invalid_value", "/a\"b", "line\nbreak \u{7} \\ é");
        let parsed: serde_json::Value = serde_json::from_slice(&quoted.body()).expect("JSON");
        assert_eq!(parsed["error"]["message"], "line\nbreak \u{7} \\ é");
        assert_eq!(parsed["error"]["field"], "/a\"b");
    }
}
