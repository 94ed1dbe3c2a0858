//! Token amounts: atomic units written in whole units, exactly.

use alloy_primitives::U256;

/// Formats atomic units with `decimals` places, trimming trailing zeros.
pub(crate) fn format_units(amount: U256, decimals: u32) -> String {
    let text = amount.to_string();
    let decimals = decimals as usize;
    if decimals == 0 {
        return text;
    }
    let padded = format!("{text:0>width$}", width = decimals + 1);
    let (whole, frac) = padded.split_at(padded.len() - decimals);
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        whole.to_string()
    } else {
        format!("{whole}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_formatted_exactly() {
        assert_eq!(format_units(U256::from(10_000u64), 6), "0.01");
        assert_eq!(format_units(U256::from(5_000u64), 6), "0.005");
        assert_eq!(format_units(U256::from(1_000_000u64), 6), "1");
        assert_eq!(format_units(U256::ZERO, 6), "0");
        assert_eq!(format_units(U256::from(123u64), 0), "123");
        assert_eq!(
            format_units(U256::MAX, 18),
            "115792089237316195423570985008687907853269984665640564039457.584007913129639935"
        );
    }
}
