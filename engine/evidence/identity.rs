//! The signing identity: Ed25519 keys read from PKCS#8 PEM files, the did:web they are
//! published under, the DID document, and compact JWS over JCS payloads.
//!
//! Verification method ids are `<did>#<RFC 7638 thumbprint of the key>`: a key keeps its id
//! whatever its place in the configured list, so a seal signed before a rotation still names
//! its key afterwards (a numbered `#key-1` would move to the new key).

use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _};
use jsonwebtoken::jwk::{
    AlgorithmParameters, CommonParameters, EllipticCurve, Jwk, OctetKeyPairParameters,
    OctetKeyPairType, ThumbprintHash,
};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;
use serde_json::{Value, json};

use crate::evidence::error::EvidenceError;

/// An Ed25519 public key as published: the 32 bytes, base64url (the JWK `x`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    x: String,
}

impl PublicKey {
    fn from_bytes(bytes: &[u8; 32]) -> PublicKey {
        PublicKey {
            x: URL_SAFE_NO_PAD.encode(bytes),
        }
    }

    /// Parses the JWK `x` form (base64url of 32 bytes, padding tolerated) and checks that it
    /// is a point of the curve.
    pub fn parse(x: &str) -> Result<PublicKey, EvidenceError> {
        let bad = || EvidenceError::BadPublicKey(x.to_string());
        let bytes = URL_SAFE_NO_PAD
            .decode(x.trim().trim_end_matches('='))
            .map_err(|_| bad())?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|_| bad())?;
        ed25519_dalek::VerifyingKey::from_bytes(&bytes).map_err(|_| bad())?;
        Ok(PublicKey::from_bytes(&bytes))
    }

    /// The JWK `x` member: base64url of the 32 key bytes.
    pub fn x(&self) -> &str {
        &self.x
    }

    /// The public JWK (`kty` OKP, `crv` Ed25519).
    pub fn jwk(&self) -> Value {
        json!({"kty": "OKP", "crv": "Ed25519", "x": self.x})
    }

    /// The RFC 7638 SHA-256 thumbprint, the fragment of the key's verification method id.
    pub fn thumbprint(&self) -> String {
        let jwk = Jwk {
            common: CommonParameters::default(),
            algorithm: AlgorithmParameters::OctetKeyPair(OctetKeyPairParameters {
                key_type: OctetKeyPairType::OctetKeyPair,
                curve: EllipticCurve::Ed25519,
                x: self.x.clone(),
            }),
        };
        jwk.thumbprint(ThumbprintHash::SHA256)
    }
}

/// The did:web naming a base URL's origin and path (the port's colon percent-encoded), and
/// the path on this server where the document is served: `/.well-known/did.json` for a
/// base URL without a path, `/did.json` below one (a proxy serving us under a prefix strips
/// it, as it does for every other document).
pub(crate) fn did_web(base_url: &str) -> Result<(String, String), EvidenceError> {
    let bad = || EvidenceError::BadBaseUrl(base_url.to_string());
    let url = url::Url::parse(base_url).map_err(|_| bad())?;
    let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(bad)?;
    let mut did = format!("did:web:{host}");
    if let Some(port) = url.port() {
        did.push_str(&format!("%3A{port}"));
    }
    let segments: Vec<&str> = url
        .path_segments()
        .map(|segments| segments.filter(|s| !s.is_empty()).collect())
        .unwrap_or_default();
    for segment in &segments {
        did.push(':');
        did.push_str(&segment.replace(':', "%3A"));
    }
    let path = if segments.is_empty() {
        "/.well-known/did.json"
    } else {
        "/did.json"
    };
    Ok((did, path.to_string()))
}

/// The service's signing identity: the first configured key signs, every configured key
/// and every retired public key is published.
pub struct Identity {
    did: String,
    document_path: String,
    kid: String,
    key: EncodingKey,
    /// Verification method id and key, the signing key first.
    published: Vec<(String, PublicKey)>,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("did", &self.did)
            .field("kid", &self.kid)
            .field("key", &"<redacted>")
            .field("published", &self.published.len())
            .finish()
    }
}

impl Identity {
    /// The identity of the configured key files (the first signs) and retired public keys
    /// (JWK `x` values); None when no key file is configured: signing is off.
    pub fn load(
        base_url: &str,
        key_files: &[PathBuf],
        retired: &[String],
    ) -> Result<Option<Identity>, EvidenceError> {
        if key_files.is_empty() {
            return Ok(None);
        }
        let keys = key_files
            .iter()
            .map(|path| read_signing_key(path))
            .collect::<Result<Vec<_>, _>>()?;
        let retired = retired
            .iter()
            .map(|x| PublicKey::parse(x))
            .collect::<Result<Vec<_>, _>>()?;
        Identity::from_keys(base_url, &keys, &retired).map(Some)
    }

    /// The identity of keys already in memory (the first signs).
    pub(crate) fn from_keys(
        base_url: &str,
        keys: &[ed25519_dalek::SigningKey],
        retired: &[PublicKey],
    ) -> Result<Identity, EvidenceError> {
        let (did, document_path) = did_web(base_url)?;
        let first = keys
            .first()
            .ok_or_else(|| EvidenceError::Sign("no signing key".into()))?;
        let der = first
            .to_pkcs8_der()
            .map_err(|_| EvidenceError::Sign("the key cannot be encoded".into()))?;
        let mut published: Vec<(String, PublicKey)> = Vec::new();
        let public_keys = keys
            .iter()
            .map(|k| PublicKey::from_bytes(k.verifying_key().as_bytes()))
            .chain(retired.iter().cloned());
        for public in public_keys {
            let id = format!("{did}#{}", public.thumbprint());
            if published.iter().any(|(known, _)| *known == id) {
                return Err(EvidenceError::DuplicateKey(public.x));
            }
            published.push((id, public));
        }
        let key = EncodingKey::from_ed_der(der.as_bytes());
        // Each signed paid answer signs twice: parse the key once, not at each.
        crate::support::jws_keys::keep(Algorithm::EdDSA, &key);
        let identity = Identity {
            kid: published[0].0.clone(),
            did,
            document_path,
            key,
            published,
        };
        // A key that cannot sign stops start-up, not the first paid call.
        identity.sign(&json!({}), None)?;
        Ok(identity)
    }

    /// Our DID (`did:web:…`).
    pub fn did(&self) -> &str {
        &self.did
    }

    /// The verification method id new signatures carry as `kid`.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The path on this server where the DID document is served.
    pub fn document_path(&self) -> &str {
        &self.document_path
    }

    /// How many keys the DID document lists (signing, rotated-out and retired).
    pub fn published_keys(&self) -> usize {
        self.published.len()
    }

    /// The DID document: every published key as a `JsonWebKey2020` verification method,
    /// each listed under `assertionMethod` (signatures made in the service's name).
    pub fn did_document(&self) -> Value {
        let methods: Vec<Value> = self
            .published
            .iter()
            .map(|(id, key)| {
                json!({
                    "id": id,
                    "type": "JsonWebKey2020",
                    "controller": self.did,
                    "publicKeyJwk": key.jwk(),
                })
            })
            .collect();
        let ids: Vec<&str> = self.published.iter().map(|(id, _)| id.as_str()).collect();
        json!({
            "@context": [
                "https://www.w3.org/ns/did/v1",
                "https://w3id.org/security/suites/jws-2020/v1",
            ],
            "id": self.did,
            "verificationMethod": methods,
            "assertionMethod": ids,
        })
    }

    /// A compact JWS (`alg` EdDSA, `kid` our verification method, optional `typ`) whose
    /// payload bytes are the JCS (RFC 8785) form of `payload`.
    pub fn sign<T: Serialize>(
        &self,
        payload: &T,
        typ: Option<&str>,
    ) -> Result<String, EvidenceError> {
        let canonical = serde_json_canonicalizer::to_string(payload)
            .map_err(|e| EvidenceError::Sign(e.to_string()))?;
        // A RawValue serializes as exactly these bytes, so the signed payload is the JCS text.
        let raw = serde_json::value::RawValue::from_string(canonical)
            .map_err(|e| EvidenceError::Sign(e.to_string()))?;
        let mut header = Header::new(Algorithm::EdDSA);
        header.typ = typ.map(str::to_string);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, &raw, &self.key)
            .map_err(|e| EvidenceError::Sign(e.to_string()))
    }
}

fn read_signing_key(path: &Path) -> Result<ed25519_dalek::SigningKey, EvidenceError> {
    let text = std::fs::read_to_string(path).map_err(|e| EvidenceError::ReadKey {
        path: path.display().to_string(),
        kind: e.kind(),
    })?;
    ed25519_dalek::SigningKey::from_pkcs8_pem(text.trim()).map_err(|_| EvidenceError::BadKey {
        path: path.display().to_string(),
    })
}

/// The public key of a private key file, for `keys generate` and for retiring a key.
pub fn read_public_key(path: &Path) -> Result<PublicKey, EvidenceError> {
    let key = read_signing_key(path)?;
    Ok(PublicKey::from_bytes(key.verifying_key().as_bytes()))
}

/// Writes a new Ed25519 key as PKCS#8 PEM to `path`, readable by its owner only (0600). An
/// existing file is never overwritten.
pub fn generate_key_file(path: &Path) -> Result<PublicKey, EvidenceError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| EvidenceError::Random(e.to_string()))?;
    let key = ed25519_dalek::SigningKey::from_bytes(&seed);
    let pem = key
        .to_pkcs8_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
        .map_err(|_| EvidenceError::Sign("the key cannot be encoded".into()))?;
    let write_error = |e: std::io::Error| EvidenceError::WriteKey {
        path: path.display().to_string(),
        kind: e.kind(),
    };
    crate::support::private_file::write_new(path, pem.as_bytes()).map_err(write_error)?;
    Ok(PublicKey::from_bytes(key.verifying_key().as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> ed25519_dalek::SigningKey {
        ed25519_dalek::SigningKey::from_bytes(&[seed; 32])
    }

    #[test]
    fn the_did_names_the_origin_with_an_encoded_port_and_the_path() {
        let cases = [
            (
                "https://api.example.com",
                "did:web:api.example.com",
                "/.well-known/did.json",
            ),
            (
                "http://127.0.0.1:8402",
                "did:web:127.0.0.1%3A8402",
                "/.well-known/did.json",
            ),
            (
                "https://example.com:443",
                "did:web:example.com",
                "/.well-known/did.json",
            ),
            (
                "https://example.com/factomat/v2",
                "did:web:example.com:factomat:v2",
                "/did.json",
            ),
        ];
        for (base, did, path) in cases {
            assert_eq!(
                did_web(base).expect(base),
                (did.to_string(), path.to_string())
            );
        }
        assert!(did_web("not a url").is_err());
    }

    #[test]
    fn the_document_lists_every_key_under_assertion_method_with_absolute_ids() {
        let retired = PublicKey::from_bytes(key(3).verifying_key().as_bytes());
        let identity =
            Identity::from_keys("https://api.example.com", &[key(1), key(2)], &[retired])
                .expect("identity");
        let document = identity.did_document();
        assert_eq!(document["id"], "did:web:api.example.com");
        let methods = document["verificationMethod"].as_array().expect("methods");
        assert_eq!(methods.len(), 3);
        for (method, assertion) in methods
            .iter()
            .zip(document["assertionMethod"].as_array().expect("ids"))
        {
            let id = method["id"].as_str().expect("id");
            assert!(id.starts_with("did:web:api.example.com#"), "{id}");
            assert_eq!(&method["id"], assertion);
            assert_eq!(method["publicKeyJwk"]["kty"], "OKP");
            assert_eq!(method["publicKeyJwk"]["crv"], "Ed25519");
            assert!(method["publicKeyJwk"].get("d").is_none(), "no private part");
        }
        assert_eq!(identity.kid(), methods[0]["id"]);
        // The same key has the same id wherever it stands in the list.
        let rotated = Identity::from_keys("https://api.example.com", &[key(2), key(1)], &[])
            .expect("identity");
        assert_eq!(
            rotated.did_document()["verificationMethod"][1]["id"],
            methods[0]["id"]
        );
        assert!(Identity::from_keys("https://api.example.com", &[key(1), key(1)], &[]).is_err());
    }

    #[test]
    fn the_jws_payload_is_the_jcs_text_and_the_header_names_the_key() {
        let identity = Identity::from_keys("https://api.example.com", &[key(1)], &[]).expect("id");
        let jws = identity
            .sign(&json!({"b": 1, "a": "é", "c": [2.50, 1e21]}), None)
            .expect("signed");
        let parts: Vec<&str> = jws.split('.').collect();
        assert_eq!(parts.len(), 3);
        let payload = URL_SAFE_NO_PAD.decode(parts[1]).expect("base64url");
        assert_eq!(
            String::from_utf8(payload).expect("utf-8"),
            r#"{"a":"é","b":1,"c":[2.5,1e+21]}"#
        );
        let header: Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).expect("b64")).expect("json");
        assert_eq!(header, json!({"alg": "EdDSA", "kid": identity.kid()}));
        assert!(!format!("{identity:?}").contains(&URL_SAFE_NO_PAD.encode([1u8; 32])));
    }

    #[test]
    fn a_generated_key_file_is_owner_only_loads_and_is_never_overwritten() {
        let dir = std::env::temp_dir().join(format!("factomat-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("evidence.pem");
        let _ = std::fs::remove_file(&path);
        let public = generate_key_file(&path).expect("written");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(read_public_key(&path).expect("read"), public);
        assert!(generate_key_file(&path).is_err(), "an existing key is kept");
        let identity = Identity::load("https://x.example", std::slice::from_ref(&path), &[])
            .expect("loads")
            .expect("on");
        assert!(identity.kid().ends_with(&public.thumbprint()));
        assert!(
            Identity::load("https://x.example", &[], &[])
                .expect("off")
                .is_none()
        );
        std::fs::write(dir.join("bad.pem"), "not a key").expect("write");
        let error =
            Identity::load("https://x.example", &[dir.join("bad.pem")], &[]).expect_err("bad");
        assert!(matches!(error, EvidenceError::BadKey { .. }));
        assert!(PublicKey::parse("AAAA").is_err());
        assert_eq!(PublicKey::parse(public.x()).expect("parses"), public);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
