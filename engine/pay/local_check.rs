//! What can be checked about an `exact` EIP-3009 payment without the network, before it costs
//! a facilitator `/verify`: the signature recovers to `authorization.from` under the asset's
//! EIP-712 domain, `to` is our payee, `value` is the price, and the validity window is open.
//!
//! A 65-byte signature is an EOA's and is recovered here. Anything else (an ERC-1271 smart
//! wallet signature, or one wrapped per ERC-6492 for an undeployed wallet) can only be checked
//! against the chain, so it is left to the facilitator; the other checks still apply to it.
//! The refusal reasons are the ones the reference facilitator uses for the same faults.

use std::borrow::Cow;
use std::str::FromStr;

use alloy::sol;
use alloy::sol_types::{Eip712Domain, SolStruct};
use alloy_primitives::{Address, B256, Signature, U256, keccak256};
use serde_json::Value;

use crate::catalog::manifest::Payment;
use crate::chain::networks;
use crate::support::evm;

sol! {
    /// EIP-3009's signed message.
    struct TransferWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }
}

/// The facilitator treats a `validBefore` this close to now as already expired (one block).
const VALID_BEFORE_MARGIN_SECONDS: u64 = 6;
/// An EOA's signature: r, s, v.
const EOA_SIGNATURE_BYTES: usize = 65;

/// Why a payment was refused locally; `reason()` is the x402 `invalidReason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LocalRefusal {
    #[error("the authorization is not well formed")]
    Malformed,
    #[error("the signature does not recover to authorization.from")]
    Signature,
    #[error("authorization.to is not our payee")]
    Recipient,
    #[error("authorization.value is not the price")]
    Value,
    #[error("validBefore has passed (or is within one block)")]
    Expired,
    #[error("validAfter is in the future")]
    NotYetValid,
}

impl LocalRefusal {
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            LocalRefusal::Malformed => "invalid_payload",
            LocalRefusal::Signature => "invalid_exact_evm_signature",
            LocalRefusal::Recipient => "invalid_exact_evm_recipient_mismatch",
            LocalRefusal::Value => "invalid_exact_evm_payload_authorization_value_mismatch",
            LocalRefusal::Expired => "invalid_exact_evm_payload_authorization_valid_before",
            LocalRefusal::NotYetValid => "invalid_exact_evm_payload_authorization_valid_after",
        }
    }
}

/// How far the local check got with a payment it did not refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LocalVerdict {
    /// An EOA signature that recovers to `from`, and every field as required.
    Checked,
    /// Every field as required; the (smart wallet) signature is left to the facilitator.
    SignatureDeferred,
}

#[derive(Debug, thiserror::Error)]
#[error("payment domain from the manifest: {0}")]
pub(crate) struct DomainError(String);

/// The asset's EIP-712 domain, with its separator hashed once: every payment is signed under
/// the same domain, and hashing it per payment cost five keccaks (≈ 27k instructions).
#[derive(Debug, Clone)]
pub(crate) struct PaymentDomain {
    /// `hashStruct(domain)`, as alloy computes it.
    separator: B256,
}

impl PaymentDomain {
    fn new(domain: &Eip712Domain) -> PaymentDomain {
        PaymentDomain {
            separator: domain.separator(),
        }
    }

    /// The digest the buyer signed: EIP-712's `keccak256(0x19 ‖ 0x01 ‖ domainSeparator ‖
    /// hashStruct(message))`, what alloy's `eip712_signing_hash` computes, with the domain's
    /// part hashed at start-up. A unit test holds the two equal.
    fn signing_hash(&self, message: &TransferWithAuthorization) -> B256 {
        let mut digest_input = [0u8; 2 + 32 + 32];
        digest_input[..2].copy_from_slice(&[0x19, 0x01]);
        digest_input[2..34].copy_from_slice(self.separator.as_slice());
        digest_input[34..].copy_from_slice(message.eip712_hash_struct().as_slice());
        keccak256(digest_input)
    }
}

/// The asset's EIP-712 domain, from the manifest's payment section: name and version as
/// published in `extra`, the chain id of its CAIP-2 network, the asset as verifying contract.
pub(crate) fn payment_domain(payment: &Payment) -> Result<PaymentDomain, DomainError> {
    eip712_domain(payment).map(|domain| PaymentDomain::new(&domain))
}

fn eip712_domain(payment: &Payment) -> Result<Eip712Domain, DomainError> {
    let chain = networks::by_caip2(&payment.network)
        .ok_or_else(|| DomainError(format!("unknown network {}", payment.network)))?;
    let asset = Address::from_str(&payment.asset)
        .map_err(|e| DomainError(format!("asset {}: {e}", payment.asset)))?;
    Ok(Eip712Domain::new(
        Some(Cow::Owned(payment.eip712_name.clone())),
        Some(Cow::Owned(payment.eip712_version.clone())),
        Some(U256::from(chain.chain_id)),
        Some(asset),
        None,
    ))
}

/// What the payment must say.
pub(crate) struct Expected<'a> {
    pub domain: &'a PaymentDomain,
    pub pay_to: Address,
    pub amount: U256,
    /// Unix seconds.
    pub now: u64,
}

/// Checks `payload` (the PaymentPayload's `payload`: `{signature, authorization}`) in the
/// reference facilitator's order: signature, recipient, validBefore, validAfter, value.
pub(crate) fn check(
    payload: &Value,
    expected: &Expected<'_>,
) -> Result<LocalVerdict, LocalRefusal> {
    let message = authorization(payload)?;
    let signature = payload
        .get("signature")
        .and_then(Value::as_str)
        .and_then(|s| s.strip_prefix("0x"))
        .and_then(|hex| alloy_primitives::hex::decode(hex).ok())
        .ok_or(LocalRefusal::Malformed)?;
    let verdict = if signature.len() == EOA_SIGNATURE_BYTES {
        let signature = Signature::from_raw(&signature).map_err(|_| LocalRefusal::Signature)?;
        let hash = expected.domain.signing_hash(&message);
        match evm::recover_signer(&signature, &hash) {
            Ok(signer) if signer == message.from => LocalVerdict::Checked,
            _ => return Err(LocalRefusal::Signature),
        }
    } else {
        LocalVerdict::SignatureDeferred
    };
    if message.to != expected.pay_to {
        return Err(LocalRefusal::Recipient);
    }
    if message.validBefore < U256::from(expected.now.saturating_add(VALID_BEFORE_MARGIN_SECONDS)) {
        return Err(LocalRefusal::Expired);
    }
    if message.validAfter > U256::from(expected.now) {
        return Err(LocalRefusal::NotYetValid);
    }
    if message.value != expected.amount {
        return Err(LocalRefusal::Value);
    }
    Ok(verdict)
}

/// The signed message from `payload.authorization` (decimal strings, hex addresses, nonce).
fn authorization(payload: &Value) -> Result<TransferWithAuthorization, LocalRefusal> {
    let fields = payload
        .get("authorization")
        .ok_or(LocalRefusal::Malformed)?;
    let text = |name: &str| {
        fields
            .get(name)
            .and_then(Value::as_str)
            .ok_or(LocalRefusal::Malformed)
    };
    let address = |name: &str| {
        text(name).and_then(|s| Address::from_str(s).map_err(|_| LocalRefusal::Malformed))
    };
    let number = |name: &str| {
        text(name).and_then(|s| U256::from_str_radix(s, 10).map_err(|_| LocalRefusal::Malformed))
    };
    Ok(TransferWithAuthorization {
        from: address("from")?,
        to: address("to")?,
        value: number("value")?,
        validAfter: number("validAfter")?,
        validBefore: number("validBefore")?,
        nonce: text("nonce")
            .and_then(|s| B256::from_str(s).map_err(|_| LocalRefusal::Malformed))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::embedded::MANIFEST;
    use serde_json::json;

    /// Signed by viem's signTypedData (the official client's signer) for anvil account #1.
    fn signed() -> Value {
        json!({
            "authorization": {
                "from": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
                "to": "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
                "value": "10000",
                "validAfter": "0",
                "validBefore": "4102444800",
                "nonce": "0x35ef02838c55e27b900ba725cbbc8b125d5329b3b1ef88256dab65f2da0dce3b"
            },
            "signature": "0x7475722ff69ab75eace7cef694c41c417c1c92ebdc00b22c0e11721efea9f4230fd8c37722500a2d7dc90ed6b042766deb21873e178ff4de096580ada5e7e4d11b"
        })
    }

    fn run(payload: &Value, now: u64) -> Result<LocalVerdict, LocalRefusal> {
        let domain = payment_domain(&MANIFEST.payment).expect("domain");
        let expected = Expected {
            domain: &domain,
            pay_to: Address::from_str("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC").unwrap(),
            amount: U256::from(10_000u64),
            now,
        };
        check(payload, &expected)
    }

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn a_client_signature_recovers_to_its_payer() {
        assert_eq!(run(&signed(), NOW), Ok(LocalVerdict::Checked));
    }

    #[test]
    fn libsecp256k1_recovers_the_payer_k256_recovered() {
        let payload = signed();
        let message = authorization(&payload).expect("authorization");
        let domain = payment_domain(&MANIFEST.payment).expect("domain");
        let hash = domain.signing_hash(&message);
        let text = payload["signature"].as_str().expect("signature");
        let signature = Signature::from_str(text).expect("signature");
        let k256 = signature
            .recover_from_prehash(&hash)
            .expect("k256 recovers");
        let signer = evm::recover_signer(&signature, &hash).expect("recovers");
        assert_eq!(signer, Address::from_public_key(&k256));
        assert_eq!(signer, message.from);
        let mut garbled = signature.as_bytes();
        garbled[..32].fill(0);
        let garbled = Signature::from_raw(&garbled).expect("65 bytes");
        assert!(
            evm::recover_signer(&garbled, &hash).is_err(),
            "r = 0 recovers nothing"
        );
    }

    #[test]
    fn the_prepared_domain_hashes_as_alloy_does() {
        let alloy_domain = eip712_domain(&MANIFEST.payment).expect("domain");
        let domain = payment_domain(&MANIFEST.payment).expect("domain");
        let mut message = authorization(&signed()).expect("authorization");
        for value in [0u64, 1, 10_000, u64::MAX] {
            message.value = U256::from(value);
            message.validBefore = U256::from(value / 2);
            assert_eq!(
                domain.signing_hash(&message),
                message.eip712_signing_hash(&alloy_domain)
            );
        }
        let other_domain = Eip712Domain::new(
            Some(Cow::Borrowed("USDC")),
            Some(Cow::Borrowed("2")),
            Some(U256::from(84_532u64)),
            Some(message.to),
            None,
        );
        let other = PaymentDomain::new(&other_domain);
        assert_eq!(
            other.signing_hash(&message),
            message.eip712_signing_hash(&other_domain)
        );
        assert_ne!(other.signing_hash(&message), domain.signing_hash(&message));
    }

    #[test]
    fn each_fault_gets_the_facilitators_reason() {
        let mut forged = signed();
        forged["signature"] = json!(format!("0x{}1b", "11".repeat(64)));
        assert_eq!(run(&forged, NOW), Err(LocalRefusal::Signature));
        let mut other_payer = signed();
        other_payer["authorization"]["from"] = json!("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC");
        assert_eq!(run(&other_payer, NOW), Err(LocalRefusal::Signature));
        // A signed field changed after signing breaks the signature first.
        let mut raised = signed();
        raised["authorization"]["value"] = json!("20000");
        assert_eq!(run(&raised, NOW), Err(LocalRefusal::Signature));
        assert_eq!(run(&signed(), 4_102_444_800), Err(LocalRefusal::Expired));
        assert_eq!(run(&signed(), 4_102_444_795), Err(LocalRefusal::Expired));
        let mut garbled = signed();
        garbled["authorization"]["nonce"] = json!("0x12");
        assert_eq!(run(&garbled, NOW), Err(LocalRefusal::Malformed));
        assert_eq!(
            LocalRefusal::Signature.reason(),
            "invalid_exact_evm_signature"
        );
    }

    #[test]
    fn smart_wallet_signatures_are_deferred_but_their_fields_are_checked() {
        let mut wallet = signed();
        wallet["signature"] = json!(format!("0x{}", "ab".repeat(200)));
        assert_eq!(run(&wallet, NOW), Ok(LocalVerdict::SignatureDeferred));
        wallet["authorization"]["to"] = json!("0x90F79bf6EB2c4f870365E785982E1f101E93b906");
        assert_eq!(run(&wallet, NOW), Err(LocalRefusal::Recipient));
        let mut late = signed();
        late["signature"] = json!(format!("0x{}", "ab".repeat(200)));
        late["authorization"]["validAfter"] = json!((NOW + 100).to_string());
        assert_eq!(run(&late, NOW), Err(LocalRefusal::NotYetValid));
        let mut cheap = signed();
        cheap["signature"] = json!(format!("0x{}", "ab".repeat(200)));
        cheap["authorization"]["value"] = json!("1");
        assert_eq!(run(&cheap, NOW), Err(LocalRefusal::Value));
    }
}
