//! Why evidence cannot be signed or does not verify. Messages name files and formats,
//! never a key's secret bytes.

/// Why the signing identity cannot be prepared or a payload cannot be signed.
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    /// A key file cannot be read.
    #[error("{path}: cannot read the evidence signing key: {kind}")]
    ReadKey {
        /// The file.
        path: String,
        /// Why (the I/O error kind; the content is never quoted).
        kind: std::io::ErrorKind,
    },
    /// A key file holds no PKCS#8 PEM Ed25519 private key.
    #[error(
        "{path}: not a PKCS#8 PEM Ed25519 private key (`factomat keys generate PATH` writes one)"
    )]
    BadKey {
        /// The file.
        path: String,
    },
    /// A key file cannot be written.
    #[error("{path}: cannot write the key file: {kind}")]
    WriteKey {
        /// The file.
        path: String,
        /// Why.
        kind: std::io::ErrorKind,
    },
    /// The operating system's random source failed.
    #[error("no randomness for a new key: {0}")]
    Random(String),
    /// A retired public key is not base64url of 32 bytes of an Ed25519 point.
    #[error("{0:?} is not an Ed25519 public key (base64url of 32 bytes, the JWK `x`)")]
    BadPublicKey(String),
    /// The same public key is configured twice.
    #[error("the public key {0} is configured twice")]
    DuplicateKey(String),
    /// The base URL cannot be named by a did:web.
    #[error("the base URL {0:?} has no host a did:web can name")]
    BadBaseUrl(String),
    /// A payment requirement lacks a field the offer repeats.
    #[error("the payment requirement has no string {0:?}")]
    MissingTerm(&'static str),
    /// The payload could not be canonicalized or signed.
    #[error("signing failed: {0}")]
    Sign(String),
}

/// Why a signed artifact does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The DID document is not one we can read.
    #[error("the DID document is unusable: {0}")]
    BadDocument(String),
    /// The JWS is not a compact JWS with a JSON header.
    #[error("not a compact JWS: {0}")]
    Malformed(String),
    /// The header's algorithm is not EdDSA.
    #[error("the JWS algorithm is {0:?}, not EdDSA")]
    Algorithm(String),
    /// The header has no `kid`.
    #[error("the JWS header has no kid")]
    NoKid,
    /// The `kid` is no assertion method of the DID document.
    #[error("the kid {0} is not an assertion method of the DID document")]
    UnknownKey(String),
    /// The signature does not verify with the key the `kid` names.
    #[error("the signature does not verify with {0}")]
    Signature(String),
    /// The signed payload is not what was presented beside it.
    #[error("{0}")]
    Mismatch(String),
}
