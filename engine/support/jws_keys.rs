//! jsonwebtoken's process-wide crypto provider: its own aws-lc provider, except that a signing
//! key kept here is parsed once instead of at every token.
//!
//! jsonwebtoken builds a new signer from the key's PKCS#8 bytes for each token, and aws-lc
//! derives the public key while parsing them: a scalar multiplication that costs about as much
//! as the signature (≈ 98k instructions per Ed25519 token, two per signed paid answer). The
//! JWS is still assembled by jsonwebtoken and signed by aws-lc; only the parsed key is kept.
//! Keys that were not kept, and every verification, go to jsonwebtoken's aws-lc provider.

use std::sync::{Arc, RwLock};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair};
use jsonwebtoken::crypto::{CryptoProvider, JwkUtils, JwtSigner, aws_lc};
use jsonwebtoken::errors::Result as JwtResult;
use jsonwebtoken::signature::{Error as SignatureError, Signer};
use jsonwebtoken::{Algorithm, EncodingKey};

/// aws-lc's provider with `signer` in front of its signer factory.
static PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory: signer,
    verifier_factory: aws_lc::DEFAULT_PROVIDER.verifier_factory,
    jwk_utils: JwkUtils {
        extract_rsa_public_key_components: aws_lc::DEFAULT_PROVIDER
            .jwk_utils
            .extract_rsa_public_key_components,
        extract_ec_public_key_coordinates: aws_lc::DEFAULT_PROVIDER
            .jwk_utils
            .extract_ec_public_key_coordinates,
        compute_digest: aws_lc::DEFAULT_PROVIDER.jwk_utils.compute_digest,
    },
};

/// The kept keys. A process keeps the few keys its configuration names, so a scan is the
/// cheapest lookup.
static KEPT: RwLock<Vec<KeptKey>> = RwLock::new(Vec::new());

struct KeptKey {
    /// The PKCS#8 bytes, as an `EncodingKey` holds them.
    pkcs8: Box<[u8]>,
    parsed: Arc<ParsedKey>,
}

enum ParsedKey {
    Ed25519(Ed25519KeyPair),
    P256(EcdsaKeyPair),
}

impl ParsedKey {
    fn parse(algorithm: Algorithm, pkcs8: &[u8]) -> Option<ParsedKey> {
        match algorithm {
            Algorithm::EdDSA => Ed25519KeyPair::from_pkcs8(pkcs8)
                .ok()
                .map(ParsedKey::Ed25519),
            Algorithm::ES256 => EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8)
                .ok()
                .map(ParsedKey::P256),
            _ => None,
        }
    }

    fn algorithm(&self) -> Algorithm {
        match self {
            ParsedKey::Ed25519(_) => Algorithm::EdDSA,
            ParsedKey::P256(_) => Algorithm::ES256,
        }
    }
}

/// Installs this provider for the process. False when another one was installed first (or
/// jsonwebtoken already chose its default): tokens are then still signed, each parsing its key.
pub fn install() -> bool {
    match PROVIDER.install_default() {
        Ok(()) => true,
        Err(installed) => std::ptr::eq(installed, &PROVIDER),
    }
}

/// Keeps `key` (PKCS#8, Ed25519 for EdDSA or P-256 for ES256) parsed for the tokens it signs
/// with `algorithm`, and installs the provider. A key aws-lc cannot parse, or another
/// algorithm, is left to jsonwebtoken, which reports it at the first token.
pub fn keep(algorithm: Algorithm, key: &EncodingKey) {
    install();
    let pkcs8 = key.inner();
    let Some(parsed) = ParsedKey::parse(algorithm, pkcs8) else {
        return;
    };
    let mut kept = KEPT
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !kept.iter().any(|known| known.pkcs8.as_ref() == pkcs8) {
        kept.push(KeptKey {
            pkcs8: pkcs8.into(),
            parsed: Arc::new(parsed),
        });
    }
}

fn kept(algorithm: Algorithm, pkcs8: &[u8]) -> Option<Arc<ParsedKey>> {
    let kept = KEPT.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    kept.iter()
        .find(|known| known.pkcs8.as_ref() == pkcs8 && known.parsed.algorithm() == algorithm)
        .map(|known| Arc::clone(&known.parsed))
}

fn signer(algorithm: &Algorithm, key: &EncodingKey) -> JwtResult<Box<dyn JwtSigner>> {
    match kept(*algorithm, key.inner()) {
        Some(parsed) => Ok(Box::new(KeptSigner(parsed))),
        None => (aws_lc::DEFAULT_PROVIDER.signer_factory)(algorithm, key),
    }
}

/// A kept key signing one token, as jsonwebtoken's own aws-lc signers do.
struct KeptSigner(Arc<ParsedKey>);

impl Signer<Vec<u8>> for KeptSigner {
    fn try_sign(&self, message: &[u8]) -> Result<Vec<u8>, SignatureError> {
        match self.0.as_ref() {
            ParsedKey::Ed25519(pair) => Ok(pair.sign(message).as_ref().to_vec()),
            ParsedKey::P256(pair) => pair
                .sign(&SystemRandom::new(), message)
                .map(|signature| signature.as_ref().to_vec())
                .map_err(SignatureError::from_source),
        }
    }
}

impl JwtSigner for KeptSigner {
    fn algorithm(&self) -> Algorithm {
        self.0.algorithm()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, KeyPair as _, UnparsedPublicKey};
    use ed25519_dalek::pkcs8::EncodePrivateKey as _;
    use jsonwebtoken::{DecodingKey, Header, Validation};

    type SignerFactory = fn(&Algorithm, &EncodingKey) -> JwtResult<Box<dyn JwtSigner>>;

    /// The signature `factory`'s signer makes over `message`.
    fn signed_by(
        factory: SignerFactory,
        algorithm: Algorithm,
        key: &EncodingKey,
        message: &[u8],
    ) -> Vec<u8> {
        factory(&algorithm, key)
            .ok()
            .and_then(|signer| signer.try_sign(message).ok())
            .expect("signed")
    }

    fn ed25519_key(seed: u8) -> (EncodingKey, [u8; 32]) {
        let key = ed25519_dalek::SigningKey::from_bytes(&[seed; 32]);
        let der = key.to_pkcs8_der().expect("der");
        (
            EncodingKey::from_ed_der(der.as_bytes()),
            key.verifying_key().to_bytes(),
        )
    }

    #[test]
    fn a_kept_ed25519_key_signs_the_bytes_jsonwebtokens_own_signer_signs() {
        let (key, public) = ed25519_key(41);
        assert!(kept(Algorithm::EdDSA, key.inner()).is_none());
        keep(Algorithm::EdDSA, &key);
        assert!(kept(Algorithm::EdDSA, key.inner()).is_some());
        assert!(
            kept(Algorithm::ES256, key.inner()).is_none(),
            "kept for its algorithm only"
        );
        let message = b"header.payload";
        let ours = signed_by(signer, Algorithm::EdDSA, &key, message);
        let theirs = signed_by(
            aws_lc::DEFAULT_PROVIDER.signer_factory,
            Algorithm::EdDSA,
            &key,
            message,
        );
        assert_eq!(
            ours, theirs,
            "Ed25519 is deterministic: the same key gives the same bytes"
        );

        let token = jsonwebtoken::encode(
            &Header::new(Algorithm::EdDSA),
            &serde_json::json!({"a": 1}),
            &key,
        )
        .expect("token");
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        let decoded = jsonwebtoken::decode::<serde_json::Value>(
            &token,
            &DecodingKey::from_ed_der(&public),
            &validation,
        )
        .expect("verifies");
        assert_eq!(decoded.claims, serde_json::json!({"a": 1}));
    }

    #[test]
    fn a_kept_p256_key_signs_es256_that_its_public_key_verifies() {
        let secret = p256::SecretKey::from_slice(&[7u8; 32]).expect("scalar");
        let der = p256::pkcs8::EncodePrivateKey::to_pkcs8_der(&secret).expect("der");
        let key = EncodingKey::from_ec_der(der.as_bytes());
        keep(Algorithm::ES256, &key);
        let message = b"header.payload";
        let signature = signed_by(signer, Algorithm::ES256, &key, message);
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der.as_bytes())
            .expect("pair");
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, pair.public_key().as_ref())
            .verify(message, &signature)
            .expect("verifies");
    }

    #[test]
    fn a_key_not_kept_still_signs() {
        let (key, public) = ed25519_key(42);
        install();
        let signature = signed_by(signer, Algorithm::EdDSA, &key, b"m");
        ed25519_dalek::VerifyingKey::from_bytes(&public)
            .expect("public")
            .verify_strict(
                b"m",
                &ed25519_dalek::Signature::from_slice(&signature).expect("64"),
            )
            .expect("verifies");
        assert!(kept(Algorithm::EdDSA, key.inner()).is_none());
    }
}
