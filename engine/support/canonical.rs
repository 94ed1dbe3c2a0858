//! Canonical JSON and sha256 hex digests, the basis of every baseline hash we publish.
//!
//! Canonical form: object keys sorted by their UTF-8 bytes, no insignificant whitespace,
//! strings escaped as serde_json escapes them, numbers as serde_json prints them (the hashed
//! documents only hold integers). Keys are sorted here explicitly because serde_json keeps
//! insertion order in this build (`preserve_order`).

use std::io::{self, Write};

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The first buffer a canonical form is written into: a payment payload's is about 1 KB; a
/// larger document grows it.
const CANONICAL_BUFFER_BYTES: usize = 4096;

/// Serializes `value` canonically.
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_canonical_into(value, &mut out);
    // serde_json writes UTF-8 only: the lossy path is never taken.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Appends the canonical form of `value` to `out`.
pub fn write_canonical_into(value: &Value, out: &mut Vec<u8>) {
    // Writing into a Vec cannot fail.
    let _ = write_canonical(value, out);
}

/// Lowercase hex of a finished sha256.
pub fn sha256_hex_of(hasher: Sha256) -> String {
    alloy_primitives::hex::encode(hasher.finalize())
}

/// Writes the canonical form token by token into `out` (a buffer, or a hasher directly).
fn write_canonical<W: Write>(value: &Value, out: &mut W) -> io::Result<()> {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.write_all(b"{")?;
            for (i, (key, child)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                serde_json::to_writer(&mut *out, key.as_str())?;
                out.write_all(b":")?;
                write_canonical(child, out)?;
            }
            out.write_all(b"}")
        }
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_canonical(item, out)?;
            }
            out.write_all(b"]")
        }
        scalar => Ok(serde_json::to_writer(&mut *out, scalar)?),
    }
}

/// Lowercase hex sha256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    alloy_primitives::hex::encode(Sha256::digest(bytes))
}

/// sha256 of the canonical JSON of `value`. The bytes are gathered in one buffer and hashed
/// at once: the canonical form is written in many short pieces, and each piece fed to the
/// hasher directly cost more than copying it.
pub fn canonical_sha256(value: &Value) -> String {
    let mut canonical = Vec::with_capacity(CANONICAL_BUFFER_BYTES);
    write_canonical_into(value, &mut canonical);
    sha256_hex(&canonical)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_sorted_at_every_depth_and_whitespace_is_dropped() {
        let value = json!({"b": [1, {"z": true, "a": null}], "a": "x\"y"});
        assert_eq!(
            canonical_json(&value),
            r#"{"a":"x\"y","b":[1,{"a":null,"z":true}]}"#
        );
    }

    #[test]
    fn the_hash_is_of_the_canonical_bytes() {
        let value = json!({"z": {"b": [1, -2, 3.5, "é\u{1}"], "a": null}, "a": false, "": "\"\\"});
        // Python's json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        // writes the same bytes; its sha256 is pinned here.
        assert_eq!(
            canonical_json(&value),
            r#"{"":"\"\\","a":false,"z":{"a":null,"b":[1,-2,3.5,"é\u0001"]}}"#
        );
        assert_eq!(
            canonical_sha256(&value),
            "3c492b1cac4a05fc6cdeed503390aed2a5459a671d377bafda1cc89ac872cfa7"
        );
    }

    #[test]
    fn sha256_matches_a_known_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
