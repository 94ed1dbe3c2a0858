//! Structural checks of EVM values in requests: addresses and uint256 decimal strings.

use std::str::FromStr;
use std::sync::{LazyLock, Mutex};

use alloy_primitives::{Address, B256, Signature, U256};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EvmValueError {
    #[error("not a 0x-prefixed 20-byte hex address")]
    AddressFormat,
    #[error("mixed-case address with an invalid EIP-55 checksum")]
    AddressChecksum,
    #[error("not a non-negative decimal integer")]
    IntegerFormat,
    #[error("exceeds 2^256-1")]
    Uint256Overflow,
}

impl EvmValueError {
    pub(crate) fn code(&self) -> &'static str {
        match self {
            EvmValueError::AddressFormat => "invalid_address",
            EvmValueError::AddressChecksum => "invalid_address_checksum",
            EvmValueError::IntegerFormat => "invalid_integer_string",
            EvmValueError::Uint256Overflow => "uint256_out_of_range",
        }
    }
}

/// Parses an address. All-lowercase and all-uppercase hex carry no checksum and are
/// accepted; mixed case must be a valid EIP-55 checksum, since a wrong one usually means a
/// mistyped address.
pub(crate) fn parse_address(text: &str) -> Result<Address, EvmValueError> {
    let hex = text
        .strip_prefix("0x")
        .ok_or(EvmValueError::AddressFormat)?;
    if hex.len() != 40 {
        return Err(EvmValueError::AddressFormat);
    }
    // The decoder refuses any digit that is not hex.
    let address = Address::from_str(text).map_err(|_| EvmValueError::AddressFormat)?;
    if mixes_letter_cases(hex.as_bytes()) && !CHECKSUMS.valid(&address, hex.as_bytes()) {
        return Err(EvmValueError::AddressChecksum);
    }
    Ok(address)
}

/// Whether hex digits use both lower- and uppercase letters (an EIP-55 checksummed spelling).
/// It never stops early, so the compiler checks the digits a vector at a time.
fn mixes_letter_cases(digits: &[u8]) -> bool {
    let (lower, upper) = digits.iter().fold((false, false), |(lower, upper), digit| {
        (
            lower | digit.is_ascii_lowercase(),
            upper | digit.is_ascii_uppercase(),
        )
    });
    lower && upper
}

/// The EIP-55 checksummed spellings found valid lately, one slot per address prefix.
///
/// The keccak behind each verdict was most of a 402's own work: a buyer's paid call repeats
/// its quote's addresses, and tokens and spenders recur across buyers. An address has one
/// valid mixed-case spelling, so a slot holding the address answers both ways; a collision
/// only evicts, and the verdict is then computed again.
struct ChecksumMemo(Mutex<Vec<Option<Spelling>>>);

/// An address and its 40 EIP-55 digits.
type Spelling = (Address, [u8; 40]);

const CHECKSUM_MEMO_SLOTS: usize = 1024;

static CHECKSUMS: LazyLock<ChecksumMemo> =
    LazyLock::new(|| ChecksumMemo(Mutex::new(vec![None; CHECKSUM_MEMO_SLOTS])));

impl ChecksumMemo {
    /// Whether `hex` (40 mixed-case digits of `address`) is its EIP-55 spelling.
    fn valid(&self, address: &Address, hex: &[u8]) -> bool {
        let slot = usize::from(u16::from_be_bytes([address[0], address[1]])) % CHECKSUM_MEMO_SLOTS;
        if let Some((known, spelling)) = &self.lock()[slot]
            && known == address
        {
            return spelling.as_slice() == hex;
        }
        let checksummed = address.to_checksum_buffer(None);
        let Some(spelling) = checksummed
            .as_str()
            .as_bytes()
            .get(2..)
            .and_then(|digits| <[u8; 40]>::try_from(digits).ok())
        else {
            return false;
        };
        self.lock()[slot] = Some((*address, spelling));
        spelling.as_slice() == hex
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<Spelling>>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// An address field of a request as the caller wrote it, parsed (and, for mixed case,
/// checksummed) once, when the request is read: the pre-payment check reports the verdict and
/// the paid work uses the address, without a second EIP-55 keccak.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AddressText(Spelled);

/// A well-formed address keeps its 42 characters inline: reading a request allocates nothing
/// for it, and dropping one frees nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Spelled {
    Address { address: Address, text: [u8; 42] },
    Other { text: String, error: EvmValueError },
}

impl AddressText {
    /// Parses `text` with [`parse_address`], keeping both.
    pub(crate) fn new(text: &str) -> AddressText {
        let spelled = parse_address(text)
            .and_then(|address| {
                let spelling = <[u8; 42]>::try_from(text.as_bytes())
                    .map_err(|_| EvmValueError::AddressFormat)?;
                Ok(Spelled::Address {
                    address,
                    text: spelling,
                })
            })
            .unwrap_or_else(|error| Spelled::Other {
                text: text.to_owned(),
                error,
            });
        AddressText(spelled)
    }

    /// The text as the caller wrote it.
    pub(crate) fn as_str(&self) -> &str {
        match &self.0 {
            // ASCII: "0x" and 40 hex digits.
            Spelled::Address { text, .. } => std::str::from_utf8(text).unwrap_or_default(),
            Spelled::Other { text, .. } => text,
        }
    }

    /// The address, or why the text is not one.
    pub(crate) fn parsed(&self) -> Result<Address, EvmValueError> {
        match &self.0 {
            Spelled::Address { address, .. } => Ok(*address),
            Spelled::Other { error, .. } => Err(error.clone()),
        }
    }
}

impl<'de> serde::Deserialize<'de> for AddressText {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(AddressTextVisitor)
    }
}

struct AddressTextVisitor;

impl serde::de::Visitor<'_> for AddressTextVisitor {
    type Value = AddressText;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<AddressText, E> {
        Ok(AddressText::new(text))
    }
}

impl serde::Serialize for AddressText {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Parses a canonical decimal uint256 string (`0` or no leading zeros).
pub(crate) fn parse_uint256(text: &str) -> Result<U256, EvmValueError> {
    let canonical = text == "0"
        || (!text.is_empty() && !text.starts_with('0') && text.bytes().all(|b| b.is_ascii_digit()));
    if !canonical {
        return Err(EvmValueError::IntegerFormat);
    }
    U256::from_str_radix(text, 10).map_err(|_| EvmValueError::Uint256Overflow)
}

/// Why a personal_sign signature cannot be attributed to a signer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SignatureError {
    /// Not 0x and 65 bytes of hex (r, s, v).
    #[error("not a 0x-prefixed 65-byte hex signature")]
    Format,
    /// The bytes do not recover to any key.
    #[error("does not recover to a signer")]
    Unrecoverable,
}

/// The address whose key signed `message` with EIP-191 `personal_sign` (the prefix
/// "\x19Ethereum Signed Message:\n" + length, then keccak256).
pub(crate) fn personal_sign_signer(
    signature: &str,
    message: &str,
) -> Result<Address, SignatureError> {
    let hex = signature.strip_prefix("0x").ok_or(SignatureError::Format)?;
    if hex.len() != 130 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(SignatureError::Format);
    }
    let signature = Signature::from_str(signature).map_err(|_| SignatureError::Format)?;
    recover_signer(&signature, &alloy_primitives::eip191_hash_message(message))
}

/// The address whose key made `signature` over the 32-byte hash `prehash` (a high `s` is
/// normalized first, as Ethereum's ecrecover-based verifiers accept it).
///
/// libsecp256k1 (the `secp256k1` crate, through alloy-primitives) does the recovery: about a
/// fifth of the instructions of the RustCrypto `k256` path, which recovers in constant time
/// and then verifies the signature again. A signature being recovered is public data, so
/// constant time buys nothing here (docs/decisions.md).
pub(crate) fn recover_signer(
    signature: &Signature,
    prehash: &B256,
) -> Result<Address, SignatureError> {
    signature
        .recover_from_prehash_secp256k1(prehash)
        .map(|key| Address::from_secp256k1_public_key(&key))
        .map_err(|_| SignatureError::Unrecoverable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_follow_eip55_only_when_mixed_case() {
        let usdc = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
        assert!(parse_address(usdc).is_ok());
        assert!(parse_address(&usdc.to_lowercase()).is_ok());
        assert!(parse_address(&format!("0x{}", usdc[2..].to_uppercase())).is_ok());
        let broken = usdc.replace("fCD6", "fcD6");
        assert_eq!(parse_address(&broken), Err(EvmValueError::AddressChecksum));
        assert_eq!(parse_address("0x1234"), Err(EvmValueError::AddressFormat));
        assert_eq!(parse_address(&usdc[2..]), Err(EvmValueError::AddressFormat));
        let not_hex = format!("{}g", &usdc[..41]);
        assert_eq!(parse_address(&not_hex), Err(EvmValueError::AddressFormat));
        let mixed_not_hex = format!("0x{}", "aG".repeat(20));
        assert_eq!(
            parse_address(&mixed_not_hex),
            Err(EvmValueError::AddressFormat)
        );
    }

    #[test]
    fn remembered_verdicts_match_the_checksum_both_ways() {
        // Each spelling twice: the second answer comes from the memo.
        let weth = "0x4200000000000000000000000000000000000006";
        let spender = "0x000000000022D473030F116dDEE9F6B43aC78BA3";
        let wrong = "0x000000000022d473030F116dDEE9F6B43aC78BA3";
        for _ in 0..2 {
            assert!(parse_address(weth).is_ok());
            assert!(parse_address(spender).is_ok());
            assert_eq!(parse_address(wrong), Err(EvmValueError::AddressChecksum));
            assert_eq!(
                Address::parse_checksummed(spender, None).ok(),
                parse_address(spender).ok()
            );
        }
        // A wrong spelling asked first is not remembered as the right one.
        let usdt = "0xfde4C96c8593536E31F229EA8f37b2ADa2699bb2";
        let usdt_wrong = "0xFde4C96c8593536E31F229EA8f37b2ADa2699bb2";
        assert_eq!(
            parse_address(usdt_wrong),
            Err(EvmValueError::AddressChecksum)
        );
        assert!(parse_address(usdt).is_ok());
        assert_eq!(
            parse_address(usdt_wrong),
            Err(EvmValueError::AddressChecksum)
        );
    }

    #[test]
    fn an_address_field_keeps_its_text_and_its_verdict() {
        let usdc = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
        let field: AddressText = serde_json::from_value(serde_json::json!(usdc)).expect("read");
        assert_eq!(field.as_str(), usdc);
        assert_eq!(field.parsed(), parse_address(usdc));
        assert_eq!(serde_json::json!(field), serde_json::json!(usdc));
        let broken = AddressText::new(&usdc.replace("fCD6", "fcD6"));
        assert_eq!(broken.parsed(), Err(EvmValueError::AddressChecksum));
        assert_eq!(
            AddressText::new("0x1234").parsed(),
            Err(EvmValueError::AddressFormat)
        );
        // Text that is no address is kept as written too, and read from a borrowed request.
        let request = format!(r#"["{usdc}","0x1234","0x{}"]"#, "g".repeat(40));
        let doc = crate::support::json_doc::Doc::parse(&request).expect("JSON");
        let fields: Vec<AddressText> = serde::Deserialize::deserialize(&doc).expect("read");
        let texts: Vec<&str> = fields.iter().map(AddressText::as_str).collect();
        assert_eq!(texts, [usdc, "0x1234", &format!("0x{}", "g".repeat(40))]);
        assert_eq!(fields[2].parsed(), Err(EvmValueError::AddressFormat));
    }

    #[test]
    fn uint256_bounds_are_exact() {
        let max = "115792089237316195423570985008687907853269984665640564039457584007913129639935";
        let over = "115792089237316195423570985008687907853269984665640564039457584007913129639936";
        assert_eq!(parse_uint256(max), Ok(U256::MAX));
        assert_eq!(parse_uint256(over), Err(EvmValueError::Uint256Overflow));
        assert_eq!(parse_uint256("0"), Ok(U256::ZERO));
        assert_eq!(parse_uint256("01"), Err(EvmValueError::IntegerFormat));
        assert_eq!(parse_uint256("-1"), Err(EvmValueError::IntegerFormat));
        assert_eq!(parse_uint256(""), Err(EvmValueError::IntegerFormat));
    }

    #[test]
    fn a_personal_sign_signature_recovers_its_signer() {
        // viem's signMessage({message: "https://factomat.test.example"}) with anvil key #2.
        let signature = "0x031bb39fee54ccb995245009faea93dbeee3d4ef15a2a6c017eee5c1e031dcb902135927f17f5065247badd89c6b2b708e03cf9052ec3d530ffde8fdc5da88931b";
        let signer = personal_sign_signer(signature, "https://factomat.test.example");
        let payee = parse_address("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC");
        assert_eq!(signer.ok(), payee.clone().ok());
        let other = personal_sign_signer(signature, "https://other.example");
        assert_ne!(other.ok(), payee.ok());
        assert_eq!(
            personal_sign_signer("0x1234", "x"),
            Err(SignatureError::Format)
        );
    }

    /// What the RustCrypto (k256) recovery, used before libsecp256k1, makes of a signature.
    fn k256_signer(signature: &Signature, prehash: &B256) -> Option<Address> {
        signature
            .recover_from_prehash(prehash)
            .ok()
            .map(|key| Address::from_public_key(&key))
    }

    #[test]
    fn libsecp256k1_recovers_the_same_signer_as_k256_and_refuses_a_bad_signature() {
        // viem's signMessage({message: "https://factomat.test.example"}) with anvil key #2.
        let signature = Signature::from_str("0x031bb39fee54ccb995245009faea93dbeee3d4ef15a2a6c017eee5c1e031dcb902135927f17f5065247badd89c6b2b708e03cf9052ec3d530ffde8fdc5da88931b").expect("signature");
        let prehash = alloy_primitives::eip191_hash_message("https://factomat.test.example");
        let signer = recover_signer(&signature, &prehash).expect("recovers");
        assert_eq!(
            Ok(signer),
            parse_address("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC")
        );
        assert_eq!(Some(signer), k256_signer(&signature, &prehash));
        // The same signature with the other parity, and over another message: another key,
        // the same one on both paths.
        let flipped = Signature::new(signature.r(), signature.s(), !signature.v());
        let other = alloy_primitives::keccak256("another message");
        for (signature, prehash) in [(flipped, prehash), (signature, other)] {
            let recovered = recover_signer(&signature, &prehash).ok();
            assert_ne!(recovered, Some(signer));
            assert_eq!(recovered, k256_signer(&signature, &prehash));
        }
        // r = 0, r at or above the group order, s = 0: no key; both paths refuse.
        let order = U256::from_str_radix(
            "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141",
            16,
        )
        .expect("order");
        for bad in [
            Signature::new(U256::ZERO, signature.s(), signature.v()),
            Signature::new(order, signature.s(), signature.v()),
            Signature::new(signature.r(), U256::ZERO, signature.v()),
        ] {
            assert_eq!(
                recover_signer(&bad, &prehash),
                Err(SignatureError::Unrecoverable)
            );
            assert_eq!(k256_signer(&bad, &prehash), None);
        }
    }
}
