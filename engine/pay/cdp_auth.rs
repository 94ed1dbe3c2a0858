//! The CDP facilitator's per-request JWT (the `generateJwt` of the official CDP SDK): a new
//! token for every call, bound to its method, host and path, valid 120 s, with a random
//! header nonce. The key decides the algorithm as the SDK does: a PEM EC P-256 key signs
//! ES256, base64 of a 64-byte Ed25519 key (seed, then public key) signs EdDSA.
//!
//! Key parsing is the RustCrypto crates' (p256, ed25519-dalek) and signing is jsonwebtoken's;
//! nothing here touches the cryptography. Neither the key nor a token is ever formatted
//! into an error or a log line.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::pkcs8::EncodePrivateKey as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::pkcs8::DecodePrivateKey as _;
use serde::Serialize;

/// How long a token is valid, as the SDK mints it.
const VALIDITY_SECONDS: u64 = 120;

/// Why an API key secret cannot sign. The messages describe the format, never the key.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CdpKeyError {
    #[error(
        "the API key secret is neither a PEM EC P-256 private key nor base64 of a 64-byte Ed25519 key"
    )]
    UnknownFormat,
    #[error("the PEM EC private key could not be read as a P-256 key (PKCS#8 or SEC1)")]
    BadEcKey,
    #[error("the Ed25519 key's last 32 bytes are not the public key of its first 32")]
    MismatchedEd25519,
    #[error("the key could not be prepared for signing")]
    Unusable,
}

/// Signs CDP request tokens with one API key.
#[derive(Clone)]
pub(crate) struct CdpSigner {
    key_id: String,
    algorithm: Algorithm,
    key: EncodingKey,
}

impl fmt::Debug for CdpSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CdpSigner")
            .field("key_id", &self.key_id)
            .field("algorithm", &self.algorithm)
            .field("key", &"<redacted>")
            .finish()
    }
}

#[derive(Serialize)]
struct Claims<'a> {
    sub: &'a str,
    iss: &'static str,
    uris: [String; 1],
    iat: u64,
    nbf: u64,
    exp: u64,
}

impl CdpSigner {
    /// Reads the key and signs one token with it, so a key that cannot sign stops start-up
    /// rather than the first paid call.
    pub(crate) fn new(key_id: &str, secret: &str) -> Result<CdpSigner, CdpKeyError> {
        let (algorithm, key) = if secret.contains("-----BEGIN") {
            (Algorithm::ES256, ec_key(secret)?)
        } else {
            (Algorithm::EdDSA, ed25519_key(secret)?)
        };
        // Two tokens per paid call: parse the key once, not at each.
        crate::support::jws_keys::keep(algorithm, &key);
        let signer = CdpSigner {
            key_id: key_id.to_string(),
            algorithm,
            key,
        };
        signer
            .token("GET", "localhost", "/")
            .map_err(|_| CdpKeyError::Unusable)?;
        Ok(signer)
    }

    /// The algorithm the key signs with (`ES256` or `EdDSA`).
    pub(crate) fn algorithm(&self) -> &'static str {
        match self.algorithm {
            Algorithm::ES256 => "ES256",
            _ => "EdDSA",
        }
    }

    /// A fresh token for one request: `uris` is `"<METHOD> <host><path>"`.
    pub(crate) fn token(
        &self,
        method: &str,
        host: &str,
        path: &str,
    ) -> Result<String, CdpKeyError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let mut header = Header::new(self.algorithm);
        header.kid = Some(self.key_id.clone());
        header.nonce = Some(nonce());
        let claims = Claims {
            sub: &self.key_id,
            iss: "cdp",
            uris: [format!("{method} {host}{path}")],
            iat: now,
            nbf: now,
            exp: now + VALIDITY_SECONDS,
        };
        jsonwebtoken::encode(&header, &claims, &self.key).map_err(|_| CdpKeyError::Unusable)
    }
}

/// 16 random bytes as 32 lowercase hex characters, as the SDK's header nonce.
fn nonce() -> String {
    let mut bytes = [0u8; 16];
    // The OS source only fails on a broken system; the token is then still valid.
    let _ = getrandom::fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A PEM P-256 key, PKCS#8 (`BEGIN PRIVATE KEY`) or SEC1 (`BEGIN EC PRIVATE KEY`). Secrets
/// kept in one environment line often carry `\n` escapes instead of line breaks.
fn ec_key(secret: &str) -> Result<EncodingKey, CdpKeyError> {
    let pem = secret.replace("\\n", "\n");
    let pem = pem.trim();
    let key = if pem.contains("BEGIN EC PRIVATE KEY") {
        p256::SecretKey::from_sec1_pem(pem).map_err(|_| CdpKeyError::BadEcKey)?
    } else {
        p256::SecretKey::from_pkcs8_pem(pem).map_err(|_| CdpKeyError::BadEcKey)?
    };
    let der =
        p256::pkcs8::EncodePrivateKey::to_pkcs8_der(&key).map_err(|_| CdpKeyError::BadEcKey)?;
    Ok(EncodingKey::from_ec_der(der.as_bytes()))
}

/// Base64 of 64 bytes: the 32-byte seed, then the 32-byte public key (checked against it).
fn ed25519_key(secret: &str) -> Result<EncodingKey, CdpKeyError> {
    let bytes = STANDARD
        .decode(secret.trim())
        .map_err(|_| CdpKeyError::UnknownFormat)?;
    let bytes: [u8; 64] = bytes.try_into().map_err(|_| CdpKeyError::UnknownFormat)?;
    let (seed, public) = bytes.split_at(32);
    let seed: [u8; 32] = seed.try_into().map_err(|_| CdpKeyError::UnknownFormat)?;
    let signing = ed25519_dalek::SigningKey::from_bytes(&seed);
    if signing.verifying_key().as_bytes() != public {
        return Err(CdpKeyError::MismatchedEd25519);
    }
    let der = signing.to_pkcs8_der().map_err(|_| CdpKeyError::Unusable)?;
    Ok(EncodingKey::from_ed_der(der.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_keys_are_refused_without_quoting_them() {
        let cases = [
            "not a key at all",
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----",
            // 64 bytes whose public half is not the seed's.
            &STANDARD.encode([7u8; 64]),
            &STANDARD.encode([7u8; 32]),
        ];
        for secret in cases {
            let error = CdpSigner::new("key-id", secret).expect_err("refused");
            assert!(!error.to_string().contains(secret), "{error}");
        }
    }

    #[test]
    fn an_ed25519_key_signs_eddsa_with_the_claims_the_sdk_uses() {
        let signing = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]);
        let mut raw = [0u8; 64];
        raw[..32].copy_from_slice(&[9u8; 32]);
        raw[32..].copy_from_slice(signing.verifying_key().as_bytes());
        let signer =
            CdpSigner::new("organizations/o/apiKeys/k", &STANDARD.encode(raw)).expect("valid key");
        assert_eq!(signer.algorithm(), "EdDSA");
        let token = signer
            .token("POST", "127.0.0.1:4021", "/verify")
            .expect("token");
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        let decode = |part: &str| -> serde_json::Value {
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(part)
                .expect("base64url");
            serde_json::from_slice(&bytes).expect("json")
        };
        let (header, claims) = (decode(parts[0]), decode(parts[1]));
        assert_eq!(header["alg"], "EdDSA");
        assert_eq!(header["kid"], "organizations/o/apiKeys/k");
        assert_eq!(header["typ"], "JWT");
        assert_eq!(header["nonce"].as_str().map(str::len), Some(32));
        assert_eq!(claims["uris"][0], "POST 127.0.0.1:4021/verify");
        assert_eq!(claims["iss"], "cdp");
        assert_eq!(claims["sub"], "organizations/o/apiKeys/k");
        assert_eq!(
            claims["exp"].as_u64().expect("exp") - claims["nbf"].as_u64().expect("nbf"),
            120
        );
        let second = signer
            .token("POST", "127.0.0.1:4021", "/verify")
            .expect("token");
        assert_ne!(token, second, "every token has its own nonce");
    }
}
