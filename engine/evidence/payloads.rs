//! What is signed: the offer and receipt payloads of the x402 offer-and-receipt extension
//! (`specs/extensions/extension-offer-and-receipt.md`, JWS format), the evidence seal over a
//! paid answer, and the answer's RFC 9530 `Content-Digest`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::evidence::error::EvidenceError;
use crate::evidence::identity::Identity;

/// The extension's key in `PaymentRequired.extensions` and `SettleResponse.extensions`.
pub const OFFER_RECEIPT: &str = "offer-receipt";
/// The response header that carries the evidence seal.
pub const SEAL_HEADER: &str = "evidence-seal";
/// The JWS `typ` of a seal, so a seal is never mistaken for an offer or a receipt.
pub(crate) const SEAL_TYP: &str = "evidence-seal+jwt";
/// The payload version of offers, receipts and seals.
const VERSION: u32 = 1;

/// The signed terms of one `accepts[]` entry (spec §4.2), spelled exactly as in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OfferPayload {
    /// Always 1.
    pub version: u32,
    /// The resource URL exactly as the 402's `resource.url`.
    pub resource_url: String,
    /// The payment scheme (`exact`).
    pub scheme: String,
    /// The CAIP-2 network.
    pub network: String,
    /// The asset contract.
    pub asset: String,
    /// The payee.
    pub pay_to: String,
    /// The price in atomic units.
    pub amount: String,
    /// Unix seconds after which the offer lapses; absent: no expiry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<u64>,
}

impl OfferPayload {
    /// The offer of a PaymentRequirements object (`accepts[]` entry), with no expiry.
    pub fn from_requirement(
        resource_url: &str,
        requirement: &Value,
    ) -> Result<OfferPayload, EvidenceError> {
        let term = |name: &'static str| {
            requirement
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or(EvidenceError::MissingTerm(name))
        };
        Ok(OfferPayload {
            version: VERSION,
            resource_url: resource_url.to_string(),
            scheme: term("scheme")?,
            network: term("network")?,
            asset: term("asset")?,
            pay_to: term("payTo")?,
            amount: term("amount")?,
            valid_until: None,
        })
    }
}

/// The signed receipt of a settled payment (spec §5.2). We include `transaction`: a receipt
/// anyone can check on chain is worth more to our buyers than the privacy-minimal form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptPayload {
    /// Always 1.
    pub version: u32,
    /// The CAIP-2 network the payment settled on.
    pub network: String,
    /// The paid resource URL.
    pub resource_url: String,
    /// The payer's address.
    pub payer: String,
    /// Unix seconds when the receipt was issued.
    pub issued_at: u64,
    /// The settlement transaction hash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transaction: Option<String>,
}

/// The evidence seal's claims: exactly these, nothing else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SealClaims {
    /// Seal version, 1.
    pub v: u32,
    /// Our DID.
    pub iss: String,
    /// Unix seconds when the seal was made.
    pub iat: u64,
    /// The paid resource URL.
    #[serde(rename = "resourceUrl")]
    pub resource_url: String,
    /// The machine id (`VM04`).
    pub machine: String,
    /// The machine's methodology version.
    pub methodology_version: String,
    /// sha256 hex of the canonical request (the ledger's request hash).
    pub request_sha256: String,
    /// sha256 hex of the body bytes as sent.
    pub body_sha256: String,
    /// The payer's address.
    pub payer: String,
    /// The CAIP-2 network.
    pub network: String,
    /// The settlement transaction hash.
    pub transaction: String,
}

/// The facts of one paid, settled answer that its receipt and seal state.
#[derive(Debug, Clone, Copy)]
pub struct AnswerFacts<'a> {
    /// The paid resource URL (the 402's `resource.url`).
    pub resource_url: &'a str,
    /// The machine id.
    pub machine: &'a str,
    /// The machine's methodology version.
    pub methodology_version: &'a str,
    /// sha256 hex of the canonical request (`support::canonical::canonical_sha256`).
    pub request_sha256: &'a str,
    /// The payer's address.
    pub payer: &'a str,
    /// The CAIP-2 network.
    pub network: &'a str,
    /// The settlement transaction hash.
    pub transaction: &'a str,
    /// Unix seconds: the receipt's `issuedAt` and the seal's `iat`.
    pub issued_at: u64,
}

/// What a paid 200 carries beyond its body: the receipt extension for PAYMENT-RESPONSE's
/// `extensions`, the `Evidence-Seal` and the `Content-Digest` header values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaidEvidence {
    /// `{"info": {"receipt": {"format": "jws", "signature": …}}}`, the value of
    /// `extensions["offer-receipt"]` in the SettleResponse.
    pub receipt_extension: Value,
    /// The `Evidence-Seal` header value (compact JWS).
    pub seal: String,
    /// The `Content-Digest` header value.
    pub content_digest: String,
}

/// RFC 9530 `Content-Digest` of the body bytes as sent: `sha-256=:<base64>:`.
pub fn content_digest(body: &[u8]) -> String {
    content_digest_of(&Sha256::digest(body))
}

fn content_digest_of(body_sha256: &[u8]) -> String {
    format!("sha-256=:{}:", STANDARD.encode(body_sha256))
}

/// The `offer-receipt` extension of a 402: its signed offers (JWS objects) under
/// `info.offers`; with the spec's JSON Schema of `info` when `with_schema`.
pub fn offer_extension(offers: &[Value], with_schema: bool) -> Value {
    let mut extension = json!({"info": {"offers": offers}});
    if with_schema {
        extension["schema"] = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "offers": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "format": {"type": "string", "const": "jws"},
                            "acceptIndex": {"type": "integer"},
                            "signature": {"type": "string", "description": "JWS compact serialization containing the offer payload"},
                        },
                        "required": ["format", "signature"],
                    },
                },
            },
            "required": ["offers"],
        });
    }
    extension
}

/// The `offer-receipt` extension of a SettleResponse: `{"info": {"receipt": …}}`.
pub fn receipt_extension(receipt: Value) -> Value {
    json!({"info": {"receipt": receipt}})
}

impl Identity {
    /// A signed offer object: `{"format": "jws", "acceptIndex": i, "signature": <JWS>}`.
    /// Sign once per route at start-up and reuse it.
    pub fn sign_offer(
        &self,
        offer: &OfferPayload,
        accept_index: usize,
    ) -> Result<Value, EvidenceError> {
        let jws = self.sign(offer, None)?;
        Ok(json!({"format": "jws", "acceptIndex": accept_index, "signature": jws}))
    }

    /// A signed receipt object: `{"format": "jws", "signature": <JWS>}`.
    pub fn sign_receipt(&self, receipt: &ReceiptPayload) -> Result<Value, EvidenceError> {
        let jws = self.sign(receipt, None)?;
        Ok(json!({"format": "jws", "signature": jws}))
    }

    /// The seal claims of a paid answer whose body is `body` (the bytes as sent).
    pub fn seal_claims(&self, facts: &AnswerFacts<'_>, body: &[u8]) -> SealClaims {
        self.seal_claims_of(facts, &Sha256::digest(body))
    }

    fn seal_claims_of(&self, facts: &AnswerFacts<'_>, body_sha256: &[u8]) -> SealClaims {
        SealClaims {
            v: VERSION,
            iss: self.did().to_string(),
            iat: facts.issued_at,
            resource_url: facts.resource_url.to_string(),
            machine: facts.machine.to_string(),
            methodology_version: facts.methodology_version.to_string(),
            request_sha256: facts.request_sha256.to_string(),
            body_sha256: alloy_primitives::hex::encode(body_sha256),
            payer: facts.payer.to_string(),
            network: facts.network.to_string(),
            transaction: facts.transaction.to_string(),
        }
    }

    /// The `Evidence-Seal` value: a compact JWS over the JCS form of `claims`.
    pub fn seal(&self, claims: &SealClaims) -> Result<String, EvidenceError> {
        self.sign(claims, Some(SEAL_TYP))
    }

    /// Everything a settled paid answer carries: the receipt (with its transaction), the
    /// seal over `body`, and its Content-Digest. Call once the payment is proven, with the
    /// body bytes exactly as they will be sent; keep the result with the answer so a
    /// collected-again answer carries the same receipt and seal.
    pub fn paid_evidence(
        &self,
        facts: &AnswerFacts<'_>,
        body: &[u8],
    ) -> Result<PaidEvidence, EvidenceError> {
        let receipt = self.sign_receipt(&ReceiptPayload {
            version: VERSION,
            network: facts.network.to_string(),
            resource_url: facts.resource_url.to_string(),
            payer: facts.payer.to_string(),
            issued_at: facts.issued_at,
            transaction: Some(facts.transaction.to_string()),
        })?;
        // The seal states the body's sha256 in hex and Content-Digest in base64: hash once.
        let body_sha256 = Sha256::digest(body);
        Ok(PaidEvidence {
            receipt_extension: receipt_extension(receipt),
            seal: self.seal(&self.seal_claims_of(facts, &body_sha256))?,
            content_digest: content_digest_of(&body_sha256),
        })
    }
}

/// Unix seconds now (0 if the clock is before 1970).
pub fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// The facts of one paid answer, for the tests of this module and of verification.
#[cfg(test)]
pub(crate) const TEST_FACTS: AnswerFacts<'static> = AnswerFacts {
    resource_url: "https://x.example/v1/a",
    machine: "VM01",
    methodology_version: "m-1",
    request_sha256: "ab",
    payer: "0x857b06519E91e3A54538791bDbb0E22373e36b66",
    network: "eip155:8453",
    transaction: "0x01",
    issued_at: 1_700_000_000,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_digest_is_rfc_9530_sha_256() {
        // The example body and value of RFC 9530 §2.
        assert_eq!(
            content_digest(b"{\"hello\": \"world\"}"),
            "sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:"
        );
    }

    #[test]
    fn an_offer_repeats_the_requirement_exactly() {
        let requirement = json!({
            "scheme": "exact", "network": "eip155:8453", "amount": "10000",
            "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
            "payTo": "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC", "maxTimeoutSeconds": 60,
        });
        let offer =
            OfferPayload::from_requirement("https://x.example/v1/a", &requirement).expect("offer");
        let text = serde_json_canonicalizer::to_string(&offer).expect("jcs");
        assert_eq!(
            text,
            r#"{"amount":"10000","asset":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913","network":"eip155:8453","payTo":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","resourceUrl":"https://x.example/v1/a","scheme":"exact","version":1}"#
        );
        assert!(OfferPayload::from_requirement("u", &json!({"scheme": "exact"})).is_err());
    }

    #[test]
    fn seal_claims_are_exactly_the_eleven_named() {
        let identity = Identity::from_keys(
            "https://x.example",
            &[ed25519_dalek::SigningKey::from_bytes(&[5; 32])],
            &[],
        )
        .expect("identity");
        let facts = TEST_FACTS;
        let claims = serde_json::to_value(identity.seal_claims(&facts, b"{}")).expect("json");
        let mut names: Vec<&String> = claims.as_object().expect("object").keys().collect();
        names.sort();
        assert_eq!(
            names,
            [
                "body_sha256",
                "iat",
                "iss",
                "machine",
                "methodology_version",
                "network",
                "payer",
                "request_sha256",
                "resourceUrl",
                "transaction",
                "v"
            ]
        );
        assert_eq!(claims["iss"], "did:web:x.example");
        let evidence = identity.paid_evidence(&facts, b"{}").expect("signed");
        assert_eq!(evidence.content_digest, content_digest(b"{}"));
        assert_eq!(
            evidence.receipt_extension["info"]["receipt"]["format"],
            "jws"
        );
    }
}
