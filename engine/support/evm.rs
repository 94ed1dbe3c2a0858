//! Structural checks of EVM values in requests: addresses and uint256 decimal strings.

use std::str::FromStr;

use alloy_primitives::{Address, U256};

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
    if hex.len() != 40 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(EvmValueError::AddressFormat);
    }
    let has_lower = hex.bytes().any(|b| b.is_ascii_lowercase());
    let has_upper = hex.bytes().any(|b| b.is_ascii_uppercase());
    if has_lower && has_upper {
        Address::parse_checksummed(text, None).map_err(|_| EvmValueError::AddressChecksum)
    } else {
        Address::from_str(text).map_err(|_| EvmValueError::AddressFormat)
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
}
