//! Exact non-negative decimal arithmetic for rates, prices and USD values.
//!
//! Token balances go up to 2^256-1 and prices arrive as decimal strings, so neither f64 nor
//! u128 can carry a product exactly. A value is an integer number of units of 10^-scale held
//! in 512 bits; every operation is checked and answers None instead of wrapping. Rounding is
//! always half-up and always explicit.

use std::cmp::Ordering;

use alloy_primitives::{U256, U512};

/// The largest scale we accept; 10^96 still leaves room for a 256-bit factor in 512 bits.
const MAX_SCALE: u32 = 96;
/// Longest decimal text we parse (digits plus point).
const MAX_TEXT: usize = 120;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decimal {
    units: U512,
    scale: u32,
}

fn pow10(exp: u32) -> Option<U512> {
    U512::from(10u8).checked_pow(U512::from(exp))
}

impl Decimal {
    pub(crate) const ZERO: Decimal = Decimal {
        units: U512::ZERO,
        scale: 0,
    };

    /// `units` × 10^-scale, e.g. a raw token balance and its decimals, or a ray rate and 27.
    pub(crate) fn from_units(units: U256, scale: u32) -> Option<Decimal> {
        (scale <= MAX_SCALE).then(|| Decimal {
            units: U512::from(units),
            scale,
        })
    }

    /// Parses a plain non-negative decimal (`12`, `0.05`, `3000.020`); no sign, exponent or
    /// separators, since an upstream value in any other form is not one we can read exactly.
    pub(crate) fn parse(text: &str) -> Option<Decimal> {
        if text.is_empty() || text.len() > MAX_TEXT {
            return None;
        }
        let (whole, frac) = match text.split_once('.') {
            Some((whole, frac)) => (whole, frac),
            None => (text, ""),
        };
        let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits_only(whole) || !digits_only(frac) {
            return None;
        }
        if text.contains('.') && frac.is_empty() {
            return None;
        }
        let scale = u32::try_from(frac.len()).ok().filter(|s| *s <= MAX_SCALE)?;
        let units = U512::from_str_radix(&format!("{whole}{frac}"), 10).ok()?;
        Some(Decimal { units, scale })
    }

    /// A finite non-negative f64 as the exact decimal of its shortest round-trip text
    /// (what the JSON document said, for the numbers providers send).
    pub(crate) fn from_f64(value: f64) -> Option<Decimal> {
        if !value.is_finite() || value < 0.0 {
            return None;
        }
        // Display never uses exponent notation and prints the shortest round-trip digits.
        Decimal::parse(&format!("{value}"))
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.units.is_zero()
    }

    /// Divides by 10^places exactly (e.g. percent to fraction with 2).
    pub(crate) fn shift_down(self, places: u32) -> Option<Decimal> {
        let scale = self.scale.checked_add(places).filter(|s| *s <= MAX_SCALE)?;
        Some(Decimal {
            units: self.units,
            scale,
        })
    }

    fn rescaled(self, scale: u32) -> Option<U512> {
        let up = scale.checked_sub(self.scale)?;
        self.units.checked_mul(pow10(up)?)
    }

    pub(crate) fn checked_add(self, other: Decimal) -> Option<Decimal> {
        let scale = self.scale.max(other.scale);
        let units = self.rescaled(scale)?.checked_add(other.rescaled(scale)?)?;
        Some(Decimal { units, scale })
    }

    pub(crate) fn checked_mul(self, other: Decimal) -> Option<Decimal> {
        let units = self.units.checked_mul(other.units)?;
        let scale = self.scale + other.scale;
        if scale <= MAX_SCALE {
            return Some(Decimal { units, scale });
        }
        Some(Decimal { units, scale }.round(MAX_SCALE))
    }

    /// Rounds half-up to `places` decimals (no change when it already has fewer).
    pub(crate) fn round(self, places: u32) -> Decimal {
        let Some(drop) = self.scale.checked_sub(places).filter(|d| *d > 0) else {
            return self;
        };
        let Some(divisor) = pow10(drop) else {
            return Decimal::ZERO;
        };
        let (quotient, remainder) = self.units.div_rem(divisor);
        let half = divisor / U512::from(2u8);
        let units = if remainder >= half && !divisor.is_zero() {
            quotient + U512::from(1u8)
        } else {
            quotient
        };
        Decimal {
            units,
            scale: places,
        }
    }

    /// Rounds half-up to `digits` significant digits; digits left of the point are kept.
    pub(crate) fn round_significant(self, digits: u32) -> Decimal {
        let total = u32::try_from(self.units.to_string().len()).unwrap_or(u32::MAX);
        let excess = total.saturating_sub(digits);
        self.round(self.scale.saturating_sub(excess))
    }

    /// self / other, rounded half-up to `places` decimals; None when other is zero.
    pub(crate) fn ratio(self, other: Decimal, places: u32) -> Option<Decimal> {
        if other.is_zero() {
            return None;
        }
        let scale = self.scale.max(other.scale);
        // One extra digit, then round half-up.
        let numerator = self
            .rescaled(scale)?
            .checked_mul(pow10(places.checked_add(1)?)?)?;
        let quotient = numerator / other.rescaled(scale)?;
        Some(
            Decimal {
                units: quotient,
                scale: places + 1,
            }
            .round(places),
        )
    }

    /// The exact value with trailing zeros removed (`0.048213`, `1500`).
    pub(crate) fn to_plain(self) -> String {
        let text = self.unrounded_text();
        if text.contains('.') {
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            text
        }
    }

    /// Rounded half-up to exactly `places` decimals (`303.40`).
    pub(crate) fn to_fixed(self, places: u32) -> String {
        let rounded = self.round(places);
        let pad = places - rounded.scale.min(places);
        let text = rounded.unrounded_text();
        match (places, pad) {
            (0, _) => text,
            (_, 0) => text,
            (_, _) if rounded.scale == 0 => format!("{text}.{}", "0".repeat(pad as usize)),
            _ => format!("{text}{}", "0".repeat(pad as usize)),
        }
    }

    fn unrounded_text(&self) -> String {
        let digits = self.units.to_string();
        let scale = self.scale as usize;
        if scale == 0 {
            return digits;
        }
        let padded = format!("{digits:0>width$}", width = scale + 1);
        let (whole, frac) = padded.split_at(padded.len() - scale);
        format!("{whole}.{frac}")
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        let scale = self.scale.max(other.scale);
        match (self.rescaled(scale), other.rescaled(scale)) {
            (Some(a), Some(b)) => a.cmp(&b),
            // Rescaling within MAX_SCALE cannot overflow 512 bits for 256-bit inputs; order
            // by the integer part if it ever does.
            _ => (self.units / pow10(self.scale).unwrap_or(U512::from(1u8)))
                .cmp(&(other.units / pow10(other.scale).unwrap_or(U512::from(1u8)))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(text: &str) -> Decimal {
        Decimal::parse(text).expect(text)
    }

    #[test]
    fn parsing_is_strict() {
        for bad in ["", "-1", "1e5", "1.", ".5", "1,5", "0x10", "NaN", " 1"] {
            assert_eq!(Decimal::parse(bad), None, "{bad}");
        }
        assert_eq!(d("3000.020").to_plain(), "3000.02");
        assert_eq!(d("0.00001234").to_plain(), "0.00001234");
        assert_eq!(d("12").to_plain(), "12");
        assert_eq!(d("0").to_plain(), "0");
    }

    #[test]
    fn significant_rounding_keeps_whole_digits() {
        assert_eq!(
            d("0.000123456789").round_significant(3).to_plain(),
            "0.000123"
        );
        assert_eq!(d("1.99996").round_significant(4).to_plain(), "2");
        assert_eq!(d("123456.78").round_significant(3).to_plain(), "123457");
        assert_eq!(d("0.5").round_significant(10).to_plain(), "0.5");
    }

    #[test]
    fn ray_rates_are_exact_to_the_last_digit() {
        let ray = U256::from_str_radix("48213456789012345678901234", 10).expect("ray");
        let apr = Decimal::from_units(ray, 27).expect("scale");
        assert_eq!(apr.to_plain(), "0.048213456789012345678901234");
    }

    #[test]
    fn products_above_2_pow_64_are_exact() {
        // 123456789 tokens with 18 decimals (above 2^64 raw) at $1.234567.
        let raw = U256::from_str_radix("123456789000000000000000000", 10).expect("raw");
        let balance = Decimal::from_units(raw, 18).expect("balance");
        let value = balance.checked_mul(d("1.234567")).expect("product");
        assert_eq!(value.to_plain(), "152415677.625363");
        assert_eq!(value.to_fixed(2), "152415677.63");
        let max = Decimal::from_units(U256::MAX, 0).expect("max");
        assert!(max.checked_mul(d("99999.999999")).is_some());
    }

    #[test]
    fn rounding_and_ratios_are_half_up() {
        assert_eq!(d("0.125").to_fixed(2), "0.13");
        assert_eq!(d("0.124").to_fixed(2), "0.12");
        assert_eq!(d("303.4").to_fixed(2), "303.40");
        assert_eq!(d("7").to_fixed(2), "7.00");
        assert_eq!(
            d("1500.01")
                .ratio(d("1803.41"), 4)
                .expect("ratio")
                .to_plain(),
            "0.8318"
        );
        assert_eq!(
            d("2").ratio(d("3"), 4).expect("ratio").to_fixed(4),
            "0.6667"
        );
        assert_eq!(d("1").ratio(Decimal::ZERO, 4), None);
    }

    #[test]
    fn ordering_aligns_scales() {
        assert!(d("0.05") > d("0.0499999999"));
        assert_eq!(d("0.50").cmp(&d("0.5")), Ordering::Equal);
        assert_eq!(Decimal::from_f64(2.5125).expect("f64").to_plain(), "2.5125");
        assert_eq!(
            Decimal::from_f64(2.9876)
                .and_then(|v| v.shift_down(2))
                .map(|v| v.to_plain()),
            Some("0.029876".to_string())
        );
        assert_eq!(Decimal::from_f64(-1.0), None);
        assert_eq!(Decimal::from_f64(f64::NAN), None);
    }
}
