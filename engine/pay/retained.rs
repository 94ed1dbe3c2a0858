//! Retained paid answers: what a paid answer is as sent, how it is sealed at rest, and the key
//! a resend finds it by. The flow of a resend lives in `collect`; docs/payment.md ("Collecting
//! an answer again") has the table.
//!
//! At rest, one answer's key is HKDF-SHA256(deployment secret, salt = its lookup key, info =
//! the payment-identifier `id`, else the payload's hash) and ChaCha20-Poly1305 binds the
//! lookup key as associated data. The database holds no key material: a stolen database
//! alone opens nothing, and everything needed besides the secret (the payload, the body) is
//! what only the buyer holds in full.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{ChaCha20Poly1305, KeyInit, Nonce};
use hkdf::Hkdf;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The least time a held result outlives its row's settlement ([`Retention::held_window_seconds`]).
const HELD_AFTER_SETTLEMENT_SECONDS: u64 = 86_400;
/// The extension's key in `PaymentRequired.extensions` and `PaymentPayload.extensions`.
pub(crate) const PAYMENT_IDENTIFIER: &str = "payment-identifier";
/// The bounds x402's payment-identifier extension puts on an `id`.
const ID_LENGTHS: std::ops::RangeInclusive<usize> = 16..=128;
/// A ChaCha20-Poly1305 nonce, stored in front of the ciphertext.
const NONCE_BYTES: usize = 12;

/// A paid answer exactly as it went out: status, body bytes and the headers a resend repeats
/// (PAYMENT-RESPONSE, the evidence seal and digest, Cache-Control).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body bytes.
    pub body: Vec<u8>,
    /// Header names (lower case) and values.
    pub headers: Vec<(String, String)>,
}

/// Builds the 200 of a settled paid answer from its body bytes and PAYMENT-RESPONSE: the
/// edge's part (the evidence seal when signing is on). The gate calls it before it records
/// the settlement, so the answer retained is the answer sent.
pub(crate) trait Finisher: Send + Sync {
    /// The answer that goes out.
    fn finish(&self, body: Vec<u8>, payment_response: &str) -> Answer;
}

/// The serialized form inside the seal.
#[derive(Serialize, Deserialize)]
struct Stored {
    status: u16,
    body: String,
    headers: Vec<(String, String)>,
}

/// Why a retained answer cannot be sealed, opened or keyed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RetainedError {
    /// The deployment secret file cannot be read or holds no 32-byte hex secret.
    #[error("delivery key file {path}: {why}")]
    Secret {
        /// The file.
        path: String,
        /// What is wrong (never its content).
        why: String,
    },
    /// No randomness for a nonce or a new secret.
    #[error("no randomness available: {0}")]
    Random(String),
    /// The ciphertext does not open with this key and lookup key.
    #[error("a retained answer does not open with this deployment's key")]
    Open,
    /// Sealing failed.
    #[error("a retained answer could not be sealed")]
    Seal,
}

/// The deployment secret every replica shares (`delivery_key_file`): 32 bytes.
pub(crate) struct DeliverySecret([u8; 32]);

impl std::fmt::Debug for DeliverySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeliverySecret(<redacted>)")
    }
}

impl DeliverySecret {
    /// Reads a secret file: 64 hex characters (surrounding whitespace ignored).
    pub(crate) fn load(path: &Path) -> Result<DeliverySecret, RetainedError> {
        let problem = |why: &str| RetainedError::Secret {
            path: path.display().to_string(),
            why: why.to_string(),
        };
        let text = std::fs::read_to_string(path).map_err(|e| problem(&e.kind().to_string()))?;
        let bytes = alloy_primitives::hex::decode(text.trim())
            .map_err(|_| problem("not 64 hex characters"))?;
        let secret: [u8; 32] = bytes
            .try_into()
            .map_err(|_| problem("not 64 hex characters"))?;
        Ok(DeliverySecret(secret))
    }

    /// Writes a new random secret to `path` (owner-only; never over an existing file).
    pub(crate) fn generate(path: &Path) -> Result<DeliverySecret, RetainedError> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| RetainedError::Random(e.to_string()))?;
        let text = format!("{}\n", alloy_primitives::hex::encode(secret));
        crate::support::private_file::write_new(path, text.as_bytes()).map_err(|e| {
            RetainedError::Secret {
                path: path.display().to_string(),
                why: e.kind().to_string(),
            }
        })?;
        Ok(DeliverySecret(secret))
    }
}

/// How a resend finds a retained answer: the lookup key (sha256 over the canonical payload's
/// and the canonical request's hashes), and the payment-identifier `id`'s scoped hash.
#[derive(Debug, Clone)]
pub(crate) struct Lookup {
    key: [u8; 32],
    /// HKDF's `info`: the `id` when there is one, else the payload's hash.
    info: Vec<u8>,
    /// sha256 of (payTo, resource URL, id): the `id` scoped to us and the resource.
    pub id_sha256: Option<String>,
}

impl Lookup {
    /// The lookup of one presented payment for one request.
    pub(crate) fn new(
        payload_sha256: &str,
        request_sha256: &str,
        id: Option<&str>,
        pay_to: &str,
        resource_url: &str,
    ) -> Lookup {
        let key: [u8; 32] = Sha256::new()
            .chain_update(payload_sha256.as_bytes())
            .chain_update([0u8])
            .chain_update(request_sha256.as_bytes())
            .finalize()
            .into();
        let id_sha256 = id.map(|id| {
            let scoped = Sha256::new()
                .chain_update(pay_to.to_ascii_lowercase().as_bytes())
                .chain_update([0u8])
                .chain_update(resource_url.as_bytes())
                .chain_update([0u8])
                .chain_update(id.as_bytes())
                .finalize();
            alloy_primitives::hex::encode(scoped)
        });
        let info = id.unwrap_or(payload_sha256).as_bytes().to_vec();
        Lookup {
            key,
            info,
            id_sha256,
        }
    }

    /// The lookup key as stored (hex).
    pub(crate) fn key_hex(&self) -> String {
        alloy_primitives::hex::encode(self.key)
    }

    fn cipher(&self, secret: &DeliverySecret) -> ChaCha20Poly1305 {
        let mut key = [0u8; 32];
        // 32 bytes is always within HKDF-SHA256's output bound.
        let _ = Hkdf::<Sha256>::new(Some(&self.key), &secret.0).expand(&self.info, &mut key);
        ChaCha20Poly1305::new(&key.into())
    }
}

/// Seals an answer: a random nonce, then the ciphertext bound to the lookup key.
pub(crate) fn seal(
    secret: &DeliverySecret,
    lookup: &Lookup,
    answer: &Answer,
) -> Result<Vec<u8>, RetainedError> {
    let stored = Stored {
        status: answer.status,
        body: STANDARD.encode(&answer.body),
        headers: answer.headers.clone(),
    };
    let plain = serde_json::to_vec(&stored).map_err(|_| RetainedError::Seal)?;
    let mut nonce = [0u8; NONCE_BYTES];
    getrandom::fill(&mut nonce).map_err(|e| RetainedError::Random(e.to_string()))?;
    let sealed = lookup
        .cipher(secret)
        .encrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: &plain,
                aad: &lookup.key,
            },
        )
        .map_err(|_| RetainedError::Seal)?;
    Ok([nonce.as_slice(), &sealed].concat())
}

/// Opens a sealed answer with the lookup that sealed it.
pub(crate) fn open(
    secret: &DeliverySecret,
    lookup: &Lookup,
    sealed: &[u8],
) -> Result<Answer, RetainedError> {
    if sealed.len() < NONCE_BYTES {
        return Err(RetainedError::Open);
    }
    let (nonce, ciphertext) = sealed.split_at(NONCE_BYTES);
    let plain = lookup
        .cipher(secret)
        .decrypt(
            Nonce::from_slice(nonce),
            Payload {
                msg: ciphertext,
                aad: &lookup.key,
            },
        )
        .map_err(|_| RetainedError::Open)?;
    let stored: Stored = serde_json::from_slice(&plain).map_err(|_| RetainedError::Open)?;
    Ok(Answer {
        status: stored.status,
        body: STANDARD
            .decode(stored.body)
            .map_err(|_| RetainedError::Open)?,
        headers: stored.headers,
    })
}

/// A payment-identifier `id` outside x402's bounds (16–128 of `[A-Za-z0-9_-]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "extensions[\"payment-identifier\"].info.id must be 16 to 128 characters of A-Z, a-z, 0-9, '_' and '-'"
)]
pub(crate) struct InvalidIdentifier;

/// The payload's payment-identifier `id`, if it carries one.
pub(crate) fn payment_identifier(payload: &Value) -> Result<Option<&str>, InvalidIdentifier> {
    let Some(id) = payload
        .get("extensions")
        .and_then(|extensions| extensions.get(PAYMENT_IDENTIFIER))
        .and_then(|extension| extension.get("info"))
        .and_then(|info| info.get("id"))
    else {
        return Ok(None);
    };
    let id = id.as_str().ok_or(InvalidIdentifier)?;
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if ID_LENGTHS.contains(&id.len()) && id.chars().all(allowed) {
        Ok(Some(id))
    } else {
        Err(InvalidIdentifier)
    }
}

/// The retention settings and the secret that seals retained answers.
#[derive(Debug)]
pub(crate) struct Retention {
    /// How long an answer bought with an `id` stays collectable after settlement (seconds).
    pub with_id_seconds: u64,
    /// How long an answer bought without one does (seconds).
    pub without_id_seconds: u64,
    /// How long a resend waits for an original still being processed.
    pub in_flight_wait: std::time::Duration,
    /// The deployment secret.
    pub secret: DeliverySecret,
}

impl Retention {
    /// Until when (unix seconds) an answer settled at `now` may be collected again.
    pub(crate) fn collectable_until(&self, lookup: &Lookup, now: u64) -> i64 {
        let seconds = if lookup.id_sha256.is_some() {
            self.with_id_seconds
        } else {
            self.with_id_seconds.min(self.without_id_seconds)
        };
        i64::try_from(now.saturating_add(seconds)).unwrap_or(i64::MAX)
    }

    /// Until when the answer of a row settled at `settled` (unix seconds) that its buyer never
    /// got may be run again and collected: its own window; when delivered answers bought
    /// this way are not kept (a window of zero), the held results' window, since a delivery
    /// removes the binding and one left on a settled row is an answer still owed.
    pub(crate) fn owed_until(&self, lookup: &Lookup, settled: u64) -> i64 {
        if self.keeps_delivered(lookup) {
            return self.collectable_until(lookup, settled);
        }
        i64::try_from(settled.saturating_add(self.held_window_seconds())).unwrap_or(i64::MAX)
    }

    /// Whether a delivered answer bought this way is kept at all (its window is not zero).
    pub(crate) fn keeps_delivered(&self, lookup: &Lookup) -> bool {
        self.collectable_until(lookup, 0) > 0
    }

    /// The longest window an answer can be collected in: the with-`id` one, which the
    /// without-`id` window never exceeds.
    pub(crate) fn longest_window_seconds(&self) -> u64 {
        self.with_id_seconds
    }

    /// How long after its row settles a result held for a buyer told "pending" stays to be
    /// collected: a day, or the longest window if that is longer. A reconcile settles the row
    /// without its buyer, who was only told to come back; a window counted from then would
    /// run out unseen (at retention 0, at the next sweep).
    pub(crate) fn held_window_seconds(&self) -> u64 {
        self.longest_window_seconds()
            .max(HELD_AFTER_SETTLEMENT_SECONDS)
    }

    /// How often expired answers are swept: half the shorter window, between 1 and 30 seconds;
    /// 30 when delivered answers are not kept (only held results and bindings are left).
    pub(crate) fn sweep_interval(&self) -> std::time::Duration {
        let shortest = self.with_id_seconds.min(self.without_id_seconds);
        let half = match shortest {
            0 => 30,
            shortest => (shortest / 2).clamp(1, 30),
        };
        std::time::Duration::from_secs(half)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer() -> Answer {
        Answer {
            status: 200,
            body: br#"{"result":"the page text"}"#.to_vec(),
            headers: vec![("payment-response".into(), "eyJ9".into())],
        }
    }

    fn lookup(request: &str, id: Option<&str>) -> Lookup {
        Lookup::new(
            "payload-hash",
            request,
            id,
            "0xPAY",
            "https://x.example/v1/a",
        )
    }

    #[test]
    fn an_answer_opens_only_with_its_secret_and_its_lookup() {
        let secret = DeliverySecret([7; 32]);
        let sealed = seal(&secret, &lookup("req", None), &answer()).expect("sealed");
        assert!(
            !sealed
                .windows(b"page text".len())
                .any(|w| w == b"page text"),
            "the body is not readable at rest"
        );
        assert_eq!(
            open(&secret, &lookup("req", None), &sealed).expect("opens"),
            answer()
        );
        assert!(open(&DeliverySecret([8; 32]), &lookup("req", None), &sealed).is_err());
        assert!(open(&secret, &lookup("other", None), &sealed).is_err());
        assert!(open(&secret, &lookup("req", Some("an-id-of-16-chars")), &sealed).is_err());
    }

    #[test]
    fn an_id_is_scoped_to_our_payee_and_resource() {
        let ours = lookup("req", Some("abcdefghijklmnop"));
        let other = Lookup::new(
            "payload-hash",
            "req",
            Some("abcdefghijklmnop"),
            "0xPAY",
            "https://x.example/v1/b",
        );
        assert!(ours.id_sha256.is_some());
        assert_ne!(ours.id_sha256, other.id_sha256);
        assert_eq!(ours.key_hex(), other.key_hex());
    }

    #[test]
    fn identifiers_outside_the_extensions_bounds_are_refused() {
        let with = |id: Value| json!({"extensions": {"payment-identifier": {"info": {"required": false, "id": id}}}});
        assert_eq!(payment_identifier(&json!({})), Ok(None));
        assert_eq!(
            payment_identifier(&with(json!("pay_0123456789abcdef"))),
            Ok(Some("pay_0123456789abcdef"))
        );
        for bad in [
            json!("short"),
            json!("has a space in it!!"),
            json!("x".repeat(129)),
            json!(17),
        ] {
            assert_eq!(payment_identifier(&with(bad)), Err(InvalidIdentifier));
        }
    }

    #[test]
    fn a_secret_file_is_written_for_its_owner_only_and_read_back() {
        let dir = std::env::temp_dir().join(format!("factomat-delivery-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("delivery-key");
        let made = DeliverySecret::generate(&path).expect("generated");
        assert_eq!(DeliverySecret::load(&path).expect("loaded").0, made.0);
        assert!(
            DeliverySecret::generate(&path).is_err(),
            "never overwritten"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, "not hex").expect("write");
        assert!(DeliverySecret::load(&path).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
