//! Verification against a DID document, as any third party does it: the JWS `kid` must be
//! an assertion method of the document, its key an Ed25519 JWK, the signature must verify
//! (jsonwebtoken), and a seal must state the body's sha256 and our DID.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use crate::evidence::error::VerifyError;
use crate::evidence::identity::did_web;
use crate::evidence::payloads::SEAL_TYP;
use crate::support::canonical::sha256_hex;
use crate::support::json_value::non_empty_str;

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
    if verified.typ.as_deref() != Some(SEAL_TYP) {
        return Err(VerifyError::Mismatch(format!(
            "the JWS typ is {:?}, not a seal's {SEAL_TYP}",
            verified.typ
        )));
    }
    resource_of_document(&verified.payload, document)?;
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
/// The payload must be a receipt (x402 offer-and-receipt: `version` 1, `payer`, `issuedAt`,
/// `network`, `resourceUrl`) for a resource of the document's DID: a signed offer or a seal
/// verifies as a JWS too, and neither proves a payment.
pub fn verify_receipt(receipt: &str, document: &DidDocument) -> Result<Verified, VerifyError> {
    let jws = receipt_jws(receipt)?;
    let verified = verify_jws(&jws, document)?;
    if verified.typ.as_deref() == Some(SEAL_TYP) {
        return Err(VerifyError::Mismatch(
            "this JWS is an evidence seal, not a receipt".into(),
        ));
    }
    let payload = &verified.payload;
    let is_receipt = payload.get("version").and_then(Value::as_u64) == Some(1)
        && non_empty_str(payload, "payer").is_some()
        && non_empty_str(payload, "network").is_some()
        && payload.get("issuedAt").is_some_and(Value::is_u64);
    if !is_receipt {
        return Err(VerifyError::Mismatch(
            "the signed payload is no receipt (version 1, payer, network, issuedAt): an offer proves no payment".into(),
        ));
    }
    resource_of_document(payload, document)?;
    Ok(verified)
}

/// The payload's `resourceUrl` is served under the DID: the document's DID is the did:web of
/// the resource URL's origin and one of its leading paths (a base URL with or without a
/// path). Without this, any document could vouch for another host's resources.
fn resource_of_document(payload: &Value, document: &DidDocument) -> Result<(), VerifyError> {
    let resource = payload
        .get("resourceUrl")
        .and_then(Value::as_str)
        .ok_or_else(|| VerifyError::Mismatch("the signed payload names no resourceUrl".into()))?;
    let served_under = url::Url::parse(resource).is_ok_and(|url| {
        let segments: Vec<&str> = url
            .path_segments()
            .map(|segments| segments.filter(|s| !s.is_empty()).collect())
            .unwrap_or_default();
        (0..=segments.len()).any(|depth| {
            let mut base = url.clone();
            base.set_path(&segments[..depth].join("/"));
            did_web(base.as_str()).is_ok_and(|(did, _)| did == document.id())
        })
    });
    if served_under {
        Ok(())
    } else {
        Err(VerifyError::Mismatch(format!(
            "the resource {resource} is not served under {}",
            document.id()
        )))
    }
}

/// The DID a document fetched from `url` must carry: the did:web whose resolution is `url`
/// (`https://host/.well-known/did.json` → `did:web:host`, `https://host/a/did.json` →
/// `did:web:host:a`). None for a URL no did:web resolves to.
pub fn did_of_document_url(url: &str) -> Option<String> {
    let url = url::Url::parse(url).ok()?;
    let path = url.path();
    let base_path = if path == "/.well-known/did.json" {
        ""
    } else {
        path.strip_suffix("/did.json")?
    };
    let mut base = url.clone();
    base.set_path(base_path);
    base.set_query(None);
    did_web(base.as_str()).ok().map(|(did, _)| did)
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

    #[test]
    fn an_offer_or_a_seal_is_no_receipt() {
        let signer = identity(&[1], &[]);
        let document = DidDocument::parse(&signer.did_document()).expect("document");
        let offer = crate::evidence::payloads::OfferPayload {
            version: 1,
            resource_url: "https://x.example/v1/a".into(),
            scheme: "exact".into(),
            network: "eip155:8453".into(),
            asset: "0x8335".into(),
            pay_to: "0xabc".into(),
            amount: "10000".into(),
            valid_until: None,
        };
        let signed_offer = signer.sign_offer(&offer, 0).expect("offer");
        assert!(verify_jws(signed_offer["signature"].as_str().expect("jws"), &document).is_ok());
        assert!(matches!(
            verify_receipt(&signed_offer.to_string(), &document),
            Err(VerifyError::Mismatch(_))
        ));
        let evidence = signer.paid_evidence(&FACTS, b"{}").expect("signed");
        assert!(matches!(
            verify_receipt(&evidence.seal, &document),
            Err(VerifyError::Mismatch(_))
        ));
        let receipt = evidence.receipt_extension["info"]["receipt"]["signature"]
            .as_str()
            .expect("receipt jws")
            .to_string();
        assert!(matches!(
            verify_seal(&receipt, b"{}", &document),
            Err(VerifyError::Mismatch(_))
        ));
        verify_receipt(&receipt, &document).expect("the receipt is one");
    }

    #[test]
    fn a_resource_of_another_host_or_path_is_refused() {
        // The same keys under a document that claims another DID, as a forger's would.
        let forger = identity(&[1], &[]);
        let mut claimed = forger.did_document();
        claimed["id"] = json!("did:web:api.example.com");
        let methods = claimed["verificationMethod"]
            .as_array_mut()
            .expect("methods");
        let kid = format!(
            "did:web:api.example.com#{}",
            forger.kid().split('#').nth(1).expect("#")
        );
        methods[0]["id"] = json!(kid);
        claimed["assertionMethod"] = json!([kid]);
        let document = DidDocument::parse(&claimed).expect("document");
        let resource = |payload: Value| resource_of_document(&payload, &document);
        assert!(resource(json!({"resourceUrl": "https://api.example.com/v1/vm02"})).is_ok());
        assert!(resource(json!({"resourceUrl": "https://api.example.com:8443/v1/vm02"})).is_err());
        assert!(resource(json!({"resourceUrl": "https://x.example/v1/vm02"})).is_err());
        assert!(resource(json!({"resourceUrl": "https://evil.example/api.example.com"})).is_err());
        assert!(resource(json!({})).is_err());

        let under_path = Identity::from_keys(
            "https://example.com/factomat",
            &[ed25519_dalek::SigningKey::from_bytes(&[3; 32])],
            &[],
        )
        .expect("identity");
        let document = DidDocument::parse(&under_path.did_document()).expect("document");
        let resource = |url: &str| resource_of_document(&json!({"resourceUrl": url}), &document);
        assert!(resource("https://example.com/factomat/v1/vm02").is_ok());
        assert!(resource("https://example.com/v1/vm02").is_err());
        assert!(resource("https://example.com/other/v1/vm02").is_err());
    }

    #[test]
    fn a_document_url_names_its_did_web() {
        assert_eq!(
            did_of_document_url("https://api.example.com/.well-known/did.json").as_deref(),
            Some("did:web:api.example.com")
        );
        assert_eq!(
            did_of_document_url("http://127.0.0.1:8402/.well-known/did.json").as_deref(),
            Some("did:web:127.0.0.1%3A8402")
        );
        assert_eq!(
            did_of_document_url("https://example.com/factomat/did.json").as_deref(),
            Some("did:web:example.com:factomat")
        );
        assert_eq!(did_of_document_url("https://example.com/keys.json"), None);
    }
}
