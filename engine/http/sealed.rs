//! A settled paid answer's evidence, when signing is on (docs/evidence-signatures.md): the
//! signed receipt goes into PAYMENT-RESPONSE's `extensions["offer-receipt"]`, the
//! `Evidence-Seal` and `Content-Digest` into headers over the body bytes exactly as sent.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::HeaderValue;
use serde_json::{Value, json};

use crate::catalog::manifest::Machine;
use crate::evidence::{self, AnswerFacts, Identity, OFFER_RECEIPT};
use crate::support::json_value::non_empty_str;

/// Why a paid answer goes out without evidence (it still goes out: the buyer has paid).
#[derive(Debug, thiserror::Error)]
pub(super) enum SealError {
    #[error("the PAYMENT-RESPONSE is not base64 JSON")]
    PaymentResponse,
    #[error("the PAYMENT-RESPONSE has no {0}")]
    Missing(&'static str),
    #[error(transparent)]
    Sign(#[from] evidence::EvidenceError),
    #[error("a header value is not valid: {0}")]
    Header(#[from] http::header::InvalidHeaderValue),
}

/// What a sealed paid 200 carries.
pub(super) struct Sealed {
    /// The PAYMENT-RESPONSE value with the receipt in its extensions.
    pub(super) payment_response: String,
    /// The `Evidence-Seal` value.
    pub(super) seal: HeaderValue,
    /// The `Content-Digest` value.
    pub(super) content_digest: HeaderValue,
}

/// The evidence of a settled answer: payer, network and transaction are read from the
/// SettleResponse the buyer gets, so receipt, seal and PAYMENT-RESPONSE cannot disagree.
pub(super) fn seal(
    identity: &Identity,
    resource_url: &str,
    machine: &Machine,
    request_sha256: &str,
    payment_response: &str,
    body: &[u8],
) -> Result<Sealed, SealError> {
    let mut settle: Value = STANDARD
        .decode(payment_response)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .ok_or(SealError::PaymentResponse)?;
    let field = |name: &'static str| {
        non_empty_str(&settle, name)
            .map(str::to_string)
            .ok_or(SealError::Missing(name))
    };
    let (payer, network, transaction) = (field("payer")?, field("network")?, field("transaction")?);
    let facts = AnswerFacts {
        resource_url,
        machine: &machine.machine,
        methodology_version: &machine.methodology_version,
        request_sha256,
        payer: &payer,
        network: &network,
        transaction: &transaction,
        issued_at: evidence::now_seconds(),
    };
    let signed = identity.paid_evidence(&facts, body)?;
    if !settle.get("extensions").is_some_and(Value::is_object) {
        settle["extensions"] = json!({});
    }
    settle["extensions"][OFFER_RECEIPT] = signed.receipt_extension;
    Ok(Sealed {
        payment_response: STANDARD.encode(serde_json::to_vec(&settle).unwrap_or_default()),
        seal: HeaderValue::from_str(&signed.seal)?,
        content_digest: HeaderValue::from_str(&signed.content_digest)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::embedded::MANIFEST;

    fn identity() -> Identity {
        let key = ed25519_dalek::SigningKey::from_bytes(&[4; 32]);
        Identity::from_keys("https://x.example", &[key], &[]).expect("identity")
    }

    fn encoded(settle: &Value) -> String {
        STANDARD.encode(settle.to_string())
    }

    #[test]
    fn the_receipt_joins_the_payment_response_and_agrees_with_the_seal() {
        let identity = identity();
        let machine = &MANIFEST.machines[1];
        let settle = json!({
            "success": true, "transaction": "0xabc", "network": "eip155:8453",
            "payer": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
        });
        let body = br#"{"ok":true}"#;
        let sealed = seal(
            &identity,
            "https://x.example/v1/a",
            machine,
            "ab",
            &encoded(&settle),
            body,
        )
        .expect("sealed");
        let document = evidence::DidDocument::parse(&identity.did_document()).expect("document");
        let receipt =
            evidence::verify_receipt(&sealed.payment_response, &document).expect("receipt");
        let claims = evidence::verify_seal(sealed.seal.to_str().expect("ascii"), body, &document)
            .expect("seal");
        evidence::receipt_matches_seal(&receipt.payload, &claims.payload).expect("agree");
        assert_eq!(claims.payload["machine"], machine.machine.as_str());
        assert_eq!(
            sealed.content_digest,
            evidence::content_digest(body).as_str()
        );
        let mut unsettled = settle.clone();
        unsettled["transaction"] = json!("");
        assert!(matches!(
            seal(&identity, "u", machine, "ab", &encoded(&unsettled), body),
            Err(SealError::Missing("transaction"))
        ));
        assert!(seal(&identity, "u", machine, "ab", "not base64!", body).is_err());
    }
}
