//! Evidence anyone can verify (docs/evidence-signatures.md): the Ed25519 signing identity
//! published as a did:web document, compact JWS over RFC 8785 (JCS) payloads, the x402
//! offer-and-receipt artifacts, the evidence seal over a paid answer, its `Content-Digest`,
//! and the verification `factomat evidence verify` runs.
//!
//! Signing is jsonwebtoken's (EdDSA), canonical JSON is serde_json_canonicalizer's, key
//! parsing is ed25519-dalek's: nothing here touches the cryptography itself. No private key
//! is ever formatted into an error, a log line or a document.
//!
//! This module sits beside `catalog` and `config`: it imports only `support`, so every layer
//! above may sign (the http layer signs offers at start-up and hands them to the 402
//! builder; the payment gate signs receipts and seals).

mod error;
mod identity;
mod payloads;
mod verify;

pub use error::{EvidenceError, VerifyError};
pub use identity::{Identity, PublicKey, generate_key_file, read_public_key};
pub use payloads::{
    AnswerFacts, OFFER_RECEIPT, OfferPayload, PaidEvidence, ReceiptPayload, SEAL_HEADER,
    SealClaims, content_digest, now_seconds, offer_extension, receipt_extension,
};
pub use verify::{
    DidDocument, Verified, did_of_document_url, receipt_matches_seal, verify_jws, verify_receipt,
    verify_seal,
};
