//! Verification against a DID document, as any third party does it: the JWS `kid` must be
//! an assertion method of the document, its key an Ed25519 JWK, the signature must verify
//! (jsonwebtoken), and a seal must state the body's sha256 and our DID.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use crate::evidence::error::VerifyError;
use crate::support::canonical::sha256_hex;

/// The Ed25519 assertion methods of a DID document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DidDocument {
    id: String,
    /// Verification method id and JWK `x`.
    keys: Vec<(String, String)>,
}

/// A JWS whose signature verified: who signed it and what.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    /// The verification method that signed.
    pub kid: String,
    /// The JWS `typ`, when present.
    pub typ: Option<String>,
    /// The signed payload.
    pub payload: Value,
}

impl DidDocument {
    /// Reads a DID document: its `id` and every `assertionMethod` (an id or an embedded
    /// method) that is an Ed25519 `publicKeyJwk`.
    pub fn parse(document: &Value) -> Result<DidDocument, VerifyError> {
        let bad = |m: &str| VerifyError::BadDocument(m.to_string());
        let id = document
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("no id"))?
            .to_string();
        let methods: Vec<&Value> = document
            .get("verificationMethod")
            .and_then(Value::as_array)
            .map(|m| m.iter().collect())
            .unwrap_or_default();
        let assertions = document
            .get("assertionMethod")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("no assertionMethod"))?;
        let mut keys = Vec::new();
        for assertion in assertions {
            let method = match assertion {
                Value::String(reference) => methods
                    .iter()
                    .find(|m| m.get("id").and_then(Value::as_str) == Some(reference))
                    .copied(),
                embedded @ Value::Object(_) => Some(embedded),
                _ => None,
            };
            if let Some((kid, x)) = method.and_then(ed25519_method) {
                keys.push((kid, x));
            }
        }
        if keys.is_empty() {
            return Err(bad("no Ed25519 assertion method"));
        }
        Ok(DidDocument { id, keys })
    }

    /// The document's DID.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn key(&self, kid: &str) -> Option<&str> {
        self.keys
            .iter()
            .find(|(id, _)| id == kid)
            .map(|(_, x)| x.as_str())
    }
}

fn ed25519_method(method: &Value) -> Option<(String, String)> {
    let id = method.get("id")?.as_str()?;
    let jwk = method.get("publicKeyJwk")?;
    let is_ed25519 = jwk.get("kty")?.as_str()? == "OKP" && jwk.get("crv")?.as_str()? == "Ed25519";
    is_ed25519.then(|| Some((id.to_string(), jwk.get("x")?.as_str()?.to_string())))?
}

/// Verifies a compact JWS with the document's key its `kid` names (EdDSA only).
pub fn verify_jws(jws: &str, document: &DidDocument) -> Result<Verified, VerifyError> {
    let jws = jws.trim();
    let header =
        jsonwebtoken::decode_header(jws).map_err(|e| VerifyError::Malformed(e.to_string()))?;
    if header.alg != Algorithm::EdDSA {
        return Err(VerifyError::Algorithm(format!("{:?}", header.alg)));
    }
    let kid = header.kid.ok_or(VerifyError::NoKid)?;
    let in_document = kid
        .strip_prefix(document.id())
        .is_some_and(|rest| rest.starts_with('#'));
    let x = document
        .key(&kid)
        .filter(|_| in_document)
        .ok_or_else(|| VerifyError::UnknownKey(kid.clone()))?;
    let key = DecodingKey::from_ed_components(x)
        .map_err(|e| VerifyError::BadDocument(format!("{kid}: {e}")))?;
    let mut validation = Validation::new(Algorithm::EdDSA);
    // Offers, receipts and seals are statements, not session tokens: no expiry to enforce.
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    let data = jsonwebtoken::decode::<Value>(jws, &key, &validation)
        .map_err(|_| VerifyError::Signature(kid.clone()))?;
    Ok(Verified {
        kid,
        typ: header.typ,
        payload: data.claims,
    })
}

/// Verifies an `Evidence-Seal` against the body bytes as received: the signature, our DID
/// as `iss`, and `body_sha256`.
pub fn verify_seal(
    seal: &str,
    body: &[u8],
    document: &DidDocument,
) -> Result<Verified, VerifyError> {
    let verified = verify_jws(seal, document)?;
    let claim = |name: &str| verified.payload.get(name).and_then(Value::as_str);
    if claim("iss") != Some(document.id()) {
        return Err(VerifyError::Mismatch(format!(
            "the seal's iss {:?} is not the document's DID {}",
            claim("iss"),
            document.id()
        )));
    }
    let digest = sha256_hex(body);
    if claim("body_sha256") != Some(digest.as_str()) {
        return Err(VerifyError::Mismatch(format!(
            "the body's sha256 is {digest}, the seal states {:?}",
            claim("body_sha256")
        )));
    }
    Ok(verified)
}

/// Verifies a receipt given as a compact JWS, a signed receipt object
/// (`{"format": "jws", "signature": …}`), or a SettleResponse (JSON or the base64
/// PAYMENT-RESPONSE header value) carrying one.
pub fn verify_receipt(receipt: &str, document: &DidDocument) -> Result<Verified, VerifyError> {
    let jws = receipt_jws(receipt)?;
    verify_jws(&jws, document)
}

fn receipt_jws(text: &str) -> Result<String, VerifyError> {
    let text = text.trim();
    if text.split('.').count() == 3 && !text.starts_with('{') {
        return Ok(text.to_string());
    }
    let json: Value = serde_json::from_str(text)
        .or_else(|_| {
            let bytes = STANDARD.decode(text).map_err(|e| e.to_string())?;
            serde_json::from_slice(&bytes).map_err(|e| e.to_string())
        })
        .map_err(|_| VerifyError::Malformed("the receipt is no JWS, JSON or base64 JSON".into()))?;
    let candidates = [
        "/signature",
        "/info/receipt/signature",
        "/extensions/offer-receipt/info/receipt/signature",
    ];
    candidates
        .iter()
        .find_map(|pointer| json.pointer(pointer).and_then(Value::as_str))
        .map(str::to_string)
        .ok_or_else(|| VerifyError::Malformed("no receipt signature in the JSON".into()))
}

/// A receipt and a seal of the same answer agree on resource, payer, network and
/// transaction.
pub fn receipt_matches_seal(receipt: &Value, seal: &Value) -> Result<(), VerifyError> {
    for (in_receipt, in_seal) in [
        ("resourceUrl", "resourceUrl"),
        ("payer", "payer"),
        ("network", "network"),
        ("transaction", "transaction"),
    ] {
        if receipt.get(in_receipt) != seal.get(in_seal) {
            return Err(VerifyError::Mismatch(format!(
                "the receipt's {in_receipt} {} differs from the seal's {}",
                receipt.get(in_receipt).unwrap_or(&Value::Null),
                seal.get(in_seal).unwrap_or(&Value::Null)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::identity::{Identity, PublicKey};
    use crate::evidence::payloads::{AnswerFacts, TEST_FACTS};
    use serde_json::json;

    fn identity(seeds: &[u8], retired: &[u8]) -> Identity {
        let keys: Vec<_> = seeds
            .iter()
            .map(|s| ed25519_dalek::SigningKey::from_bytes(&[*s; 32]))
            .collect();
        let retired: Vec<_> = retired
            .iter()
            .map(|s| {
                let key = ed25519_dalek::SigningKey::from_bytes(&[*s; 32]);
                PublicKey::parse(
                    &base64::engine::general_purpose::URL_SAFE_NO_PAD
                        .encode(key.verifying_key().as_bytes()),
                )
                .expect("public")
            })
            .collect();
        Identity::from_keys("https://x.example", &keys, &retired).expect("identity")
    }

    const FACTS: AnswerFacts<'static> = TEST_FACTS;

    #[test]
    fn a_seal_verifies_and_one_flipped_byte_anywhere_fails_it() {
        let signer = identity(&[1], &[]);
        let document = DidDocument::parse(&signer.did_document()).expect("document");
        let body = br#"{"machine":"VM01","ok":true}"#;
        let evidence = signer.paid_evidence(&FACTS, body).expect("signed");
        let verified = verify_seal(&evidence.seal, body, &document).expect("verifies");
        assert_eq!(verified.payload["machine"], "VM01");
        assert_eq!(verified.typ.as_deref(), Some("evidence-seal+jwt"));
        let mut edited = body.to_vec();
        edited[3] ^= 1;
        assert!(matches!(
            verify_seal(&evidence.seal, &edited, &document),
            Err(VerifyError::Mismatch(_))
        ));
        let mut other = FACTS;
        other.payer = "0x0000000000000000000000000000000000000001";
        let forged_claims = signer.seal_claims(&other, body);
        // A payload edited after signing (claims swapped into the signed seal) fails.
        let parts: Vec<&str> = evidence.seal.split('.').collect();
        let swapped = format!(
            "{}.{}.{}",
            parts[0],
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(serde_json_canonicalizer::to_vec(&forged_claims).expect("jcs")),
            parts[2]
        );
        assert!(matches!(
            verify_seal(&swapped, body, &document),
            Err(VerifyError::Signature(_))
        ));
        let receipt =
            verify_receipt(&evidence.receipt_extension.to_string(), &document).expect("receipt");
        assert_eq!(receipt.payload["transaction"], "0x01");
        receipt_matches_seal(&receipt.payload, &verified.payload).expect("agree");
    }

    #[test]
    fn a_key_the_document_does_not_list_fails_and_rotation_keeps_old_seals_valid() {
        let old = identity(&[2], &[]);
        let stranger = identity(&[9], &[]);
        let body = b"{}";
        let old_seal = old.paid_evidence(&FACTS, body).expect("signed").seal;
        let rotated = identity(&[1, 2], &[]);
        let document = DidDocument::parse(&rotated.did_document()).expect("document");
        let new_seal = rotated.paid_evidence(&FACTS, body).expect("signed").seal;
        assert_eq!(
            verify_seal(&new_seal, body, &document).expect("new").kid,
            rotated.kid()
        );
        assert_eq!(
            verify_seal(&old_seal, body, &document).expect("old").kid,
            old.kid()
        );
        let stranger_seal = stranger.paid_evidence(&FACTS, body).expect("signed").seal;
        assert!(matches!(
            verify_seal(&stranger_seal, body, &document),
            Err(VerifyError::UnknownKey(_))
        ));
        // Retired as a public key only, the old key still verifies its seals.
        let retired = identity(&[1], &[2]);
        let document = DidDocument::parse(&retired.did_document()).expect("document");
        verify_seal(&old_seal, body, &document).expect("retired key verifies");
        // A document of another DID does not vouch for our keys.
        let mut foreign = rotated.did_document();
        foreign["id"] = json!("did:web:elsewhere.example");
        let foreign = DidDocument::parse(&foreign).expect("document");
        assert!(verify_seal(&new_seal, body, &foreign).is_err());
    }
}
