//! Postgres numeric in binary format (base-10000 digits, weight, sign, display scale) to and
//! from a Decimal128 at a fixed scale, and to and from Postgres's own text of the value.
//!
//! Both directions are exact inverses on the values Postgres stores: digit groups stripped
//! of leading and trailing zeros, no nonzero digit past the display scale, zero positive
//! with weight 0, specials with no digits. A value not in that form is refused rather than
//! silently normalized.

use std::fmt::Write as _;

use bytes::{BufMut, BytesMut};

use super::error::ValueError;

const TY: &str = "numeric";
const SIGN_POS: u16 = 0x0000;
const SIGN_NEG: u16 = 0x4000;
const SIGN_NAN: u16 = 0xC000;
const SIGN_PINF: u16 = 0xD000;
const SIGN_NINF: u16 = 0xF000;
/// NUMERIC_SHORT_DSCALE_MASK and _SHIFT of Postgres's numeric.c.
const SHORT_DSCALE_MASK: u16 = 0x1F80;
const SHORT_DSCALE_SHIFT: u16 = 7;
/// numeric_recv refuses display scales outside this mask.
const DSCALE_MASK: u16 = 0x3FFF;

/// NaN and the infinities, spelled as Postgres prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    NaN,
    PosInf,
    NegInf,
}

impl Special {
    /// Postgres's text for the value.
    pub fn as_str(self) -> &'static str {
        match self {
            Special::NaN => "NaN",
            Special::PosInf => "Infinity",
            Special::NegInf => "-Infinity",
        }
    }

    /// The special value Postgres prints as `s`.
    pub fn parse(s: &str) -> Option<Special> {
        match s {
            "NaN" => Some(Special::NaN),
            "Infinity" => Some(Special::PosInf),
            "-Infinity" => Some(Special::NegInf),
            _ => None,
        }
    }

    fn sign(self) -> u16 {
        match self {
            Special::NaN => SIGN_NAN,
            Special::PosInf => SIGN_PINF,
            Special::NegInf => SIGN_NINF,
        }
    }

    /// The display scale numeric_send reports for a special: it reads NUMERIC_DSCALE off
    /// the special's header as if it were a short numeric, so bits 7-12 of the sign word
    /// show through (0 for NaN, 32 for ±Infinity). numeric_recv ignores it.
    fn dscale(self) -> u16 {
        (self.sign() & SHORT_DSCALE_MASK) >> SHORT_DSCALE_SHIFT
    }
}

/// A numeric as Postgres sends it, checked to be in the stored (canonical) form.
#[derive(Debug)]
pub struct Numeric<'a> {
    negative: bool,
    weight: i16,
    dscale: u16,
    /// Big-endian i16 base-10000 digits, straight from the wire.
    digits: &'a [u8],
}

/// A parsed binary numeric: finite or special.
#[derive(Debug)]
pub enum Parsed<'a> {
    Finite(Numeric<'a>),
    Special(Special),
}

/// Parses and checks a binary numeric.
///
/// # Errors
/// [`ValueError::Malformed`] when the bytes are not a canonical numeric.
pub fn parse(bytes: &[u8]) -> Result<Parsed<'_>, ValueError> {
    let header: [u8; 8] = bytes
        .get(..8)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| {
            ValueError::malformed(
                TY,
                format!("{} bytes, below the 8-byte header", bytes.len()),
            )
        })?;
    let ndigits = i16::from_be_bytes([header[0], header[1]]);
    let weight = i16::from_be_bytes([header[2], header[3]]);
    let sign = u16::from_be_bytes([header[4], header[5]]);
    let dscale = u16::from_be_bytes([header[6], header[7]]);
    let digits = &bytes[8..];
    if ndigits < 0 || digits.len() != 2 * ndigits as usize {
        return Err(ValueError::malformed(
            TY,
            format!("{ndigits} digits declared, {} bytes follow", digits.len()),
        ));
    }
    let special = match sign {
        SIGN_POS | SIGN_NEG => None,
        SIGN_NAN => Some(Special::NaN),
        SIGN_PINF => Some(Special::PosInf),
        SIGN_NINF => Some(Special::NegInf),
        other => {
            return Err(ValueError::malformed(
                TY,
                format!("invalid sign 0x{other:04x}"),
            ))
        }
    };
    if let Some(special) = special {
        if ndigits != 0 || weight != 0 || dscale != special.dscale() {
            return Err(ValueError::malformed(
                TY,
                "a special value with digits, weight or an unexpected scale",
            ));
        }
        return Ok(Parsed::Special(special));
    }
    if dscale & DSCALE_MASK != dscale {
        return Err(ValueError::malformed(
            TY,
            format!("invalid display scale {dscale}"),
        ));
    }
    let n = Numeric {
        negative: sign == SIGN_NEG,
        weight,
        dscale,
        digits,
    };
    for i in 0..n.ndigits() {
        if n.digit(i) > 9999 {
            return Err(ValueError::malformed(
                TY,
                format!("digit {} out of range", n.digit(i)),
            ));
        }
    }
    n.check_canonical()?;
    Ok(Parsed::Finite(n))
}

impl Numeric<'_> {
    fn ndigits(&self) -> usize {
        self.digits.len() / 2
    }

    /// Digit group `i`, most significant first (0 past the end).
    fn digit(&self, i: usize) -> i16 {
        match self.digits.get(2 * i..2 * i + 2) {
            Some(&[hi, lo]) => i16::from_be_bytes([hi, lo]),
            _ => 0,
        }
    }

    /// Stored numerics are stripped and never hold digits past their display scale; only
    /// such values convert to text or a decimal and back to the same bytes.
    fn check_canonical(&self) -> Result<(), ValueError> {
        let n = self.ndigits();
        if n == 0 {
            if self.weight != 0 || self.negative {
                return Err(ValueError::malformed(
                    TY,
                    "zero with a weight or a negative sign",
                ));
            }
            return Ok(());
        }
        if self.digit(0) == 0 || self.digit(n - 1) == 0 {
            return Err(ValueError::malformed(
                TY,
                "leading or trailing zero digit group (not in stored form)",
            ));
        }
        // decimal places the last digit group reaches past the point, beyond the scale
        let last_places = 4 * (n as i64 - 1 - i64::from(self.weight));
        let excess = last_places - i64::from(self.dscale);
        let ok = excess <= 0
            || (excess < 4 && i64::from(self.digit(n - 1)) % 10_i64.pow(excess as u32) == 0);
        if !ok {
            return Err(ValueError::malformed(TY, "digits beyond the display scale"));
        }
        Ok(())
    }

    /// The display scale (digits after the point).
    pub fn dscale(&self) -> u16 {
        self.dscale
    }

    /// The value as an unscaled integer at `scale`, if it fits Decimal128(`precision`, `scale`)
    /// and its display scale is exactly `scale` (else the decimal could not give it back).
    ///
    /// # Errors
    /// [`ValueError::Unrepresentable`] for another display scale or a value out of range.
    pub fn to_decimal(&self, precision: u8, scale: i8) -> Result<i128, ValueError> {
        if i32::from(self.dscale) != i32::from(scale) {
            return Err(ValueError::unrepresentable(
                TY,
                format!(
                    "display scale {} differs from the column's scale {scale}",
                    self.dscale
                ),
            ));
        }
        let out_of_range = || {
            ValueError::unrepresentable(
                TY,
                format!("value does not fit numeric({precision},{scale})"),
            )
        };
        let mut unscaled: i128 = 0;
        for i in 0..self.ndigits() {
            let d = i128::from(self.digit(i));
            // this group is worth d * 10^(4 * (weight - i)); scaled by 10^scale
            let exp = 4 * (i64::from(self.weight) - i as i64) + i64::from(scale);
            let term = if exp >= 0 {
                let p = u32::try_from(exp)
                    .ok()
                    .and_then(|e| 10_i128.checked_pow(e))
                    .ok_or_else(out_of_range)?;
                d.checked_mul(p).ok_or_else(out_of_range)?
            } else {
                // canonical form guarantees the dropped places are zero
                let p = 10_i128.pow(u32::try_from(-exp).unwrap_or(4).min(4));
                d / p
            };
            unscaled = unscaled.checked_add(term).ok_or_else(out_of_range)?;
        }
        if unscaled >= 10_i128.pow(u32::from(precision)) {
            return Err(out_of_range());
        }
        Ok(if self.negative { -unscaled } else { unscaled })
    }

    /// Appends Postgres's text of the value (what `numeric_out` prints).
    pub fn write_text(&self, out: &mut String) {
        if self.negative {
            out.push('-');
        }
        if self.weight < 0 {
            out.push('0');
        } else {
            for i in 0..=self.weight as usize {
                let d = self.digit(i);
                if i == 0 {
                    let _ = write!(out, "{d}");
                } else {
                    push4(out, d);
                }
            }
        }
        if self.dscale > 0 {
            out.push('.');
            let start = out.len();
            let mut i = i64::from(self.weight) + 1;
            while out.len() - start < usize::from(self.dscale) {
                let d = if i >= 0 { self.digit(i as usize) } else { 0 };
                push4(out, d);
                i += 1;
            }
            out.truncate(start + usize::from(self.dscale));
        }
    }
}

fn push4(out: &mut String, d: i16) {
    let d = d.unsigned_abs();
    for div in [1000, 100, 10, 1] {
        out.push(char::from(b'0' + ((d / div) % 10) as u8));
    }
}

/// Writes a special value in binary.
pub fn write_special(special: Special, out: &mut BytesMut) {
    out.put_i16(0);
    out.put_i16(0);
    out.put_u16(special.sign());
    out.put_u16(special.dscale());
}

/// Writes finite digit groups (most significant first, may hold leading/trailing zeros)
/// in the stored form: stripped, zero as weight 0 and positive.
fn write_groups(
    negative: bool,
    mut weight: i32,
    groups: &[i16],
    dscale: u16,
    out: &mut BytesMut,
) -> Result<(), ValueError> {
    let first = groups.iter().position(|&d| d != 0);
    let (sign, digits) = match first {
        None => {
            weight = 0;
            (SIGN_POS, &groups[..0])
        }
        Some(f) => {
            weight -= f as i32;
            let last = groups.iter().rposition(|&d| d != 0).unwrap_or(f);
            (
                if negative { SIGN_NEG } else { SIGN_POS },
                &groups[f..=last],
            )
        }
    };
    let weight =
        i16::try_from(weight).map_err(|_| ValueError::malformed(TY, "weight out of range"))?;
    let ndigits =
        i16::try_from(digits.len()).map_err(|_| ValueError::malformed(TY, "too many digits"))?;
    out.put_i16(ndigits);
    out.put_i16(weight);
    out.put_u16(sign);
    out.put_u16(dscale);
    for &d in digits {
        out.put_i16(d);
    }
    Ok(())
}

/// Writes `unscaled / 10^scale` in binary with display scale `scale`.
///
/// # Errors
/// A negative scale (Decimal128 columns of coldwire never have one).
pub fn write_decimal(unscaled: i128, scale: i8, out: &mut BytesMut) -> Result<(), ValueError> {
    let scale =
        u32::try_from(scale).map_err(|_| ValueError::malformed(TY, "negative decimal scale"))?;
    let pow = 10_u128
        .checked_pow(scale)
        .ok_or_else(|| ValueError::malformed(TY, "decimal scale above 38"))?;
    let abs = unscaled.unsigned_abs();
    let mut int_part = abs / pow;
    let mut frac_part = abs % pow;
    let mut int_groups: Vec<i16> = Vec::with_capacity(10);
    while int_part > 0 {
        int_groups.push((int_part % 10_000) as i16);
        int_part /= 10_000;
    }
    int_groups.reverse();
    let frac_len = scale.div_ceil(4) as usize;
    let mut groups = int_groups.clone();
    groups.resize(int_groups.len() + frac_len, 0);
    if frac_len > 0 {
        // the last group holds the scale's last (4 - pad) digits, shifted left by pad
        let pad = frac_len as u32 * 4 - scale;
        let keep = 10_u128.pow(4 - pad);
        groups[int_groups.len() + frac_len - 1] = ((frac_part % keep) * 10_u128.pow(pad)) as i16;
        frac_part /= keep;
        for g in (0..frac_len - 1).rev() {
            groups[int_groups.len() + g] = (frac_part % 10_000) as i16;
            frac_part /= 10_000;
        }
    }
    let dscale = u16::try_from(scale).unwrap_or(0);
    write_groups(
        unscaled < 0,
        int_groups.len() as i32 - 1,
        &groups,
        dscale,
        out,
    )
}

/// Writes the numeric whose Postgres text is `text` (as produced by [`Numeric::write_text`]
/// or [`Special::as_str`]) in binary.
///
/// # Errors
/// [`ValueError::Malformed`] when `text` is not in that form.
pub fn write_text_as_binary(text: &str, out: &mut BytesMut) -> Result<(), ValueError> {
    if let Some(special) = Special::parse(text) {
        write_special(special, out);
        return Ok(());
    }
    let bad = || {
        ValueError::malformed(
            TY,
            format!("not a numeric in Postgres's text form: {:.40}", text),
        )
    };
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int_text, frac_text) = match unsigned.split_once('.') {
        Some((i, f)) if !f.is_empty() => (i, f),
        Some(_) => return Err(bad()),
        None => (unsigned, ""),
    };
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int_text.is_empty()
        || !digits_only(int_text)
        || !digits_only(frac_text)
        || (int_text.len() > 1 && int_text.starts_with('0'))
    {
        return Err(bad());
    }
    let dscale = u16::try_from(frac_text.len())
        .ok()
        .filter(|d| d & DSCALE_MASK == *d)
        .ok_or_else(bad)?;
    let int_groups = int_text.len().div_ceil(4);
    let frac_groups = frac_text.len().div_ceil(4);
    let mut groups = vec![0_i16; int_groups + frac_groups];
    // integer digits right-aligned in their groups, fraction digits left-aligned
    let int_pad = int_groups * 4 - int_text.len();
    for (k, b) in int_text.bytes().enumerate() {
        let pos = int_pad + k;
        groups[pos / 4] = groups[pos / 4] * 10 + i16::from(b - b'0');
    }
    for (k, b) in frac_text.bytes().enumerate() {
        let g = int_groups + k / 4;
        groups[g] += i16::from(b - b'0') * 10_i16.pow(3 - (k % 4) as u32);
    }
    if negative && groups.iter().all(|&d| d == 0) {
        return Err(bad());
    }
    write_groups(negative, int_groups as i32 - 1, &groups, dscale, out)
}

/// A numeric constant as a comparison with a numeric(p, s) column sees it: finite values
/// at the column's scale (rounded down where the scale cannot hold them), or a special.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scaled {
    /// The unscaled value `floor` when `exact`; otherwise a value strictly between `floor`
    /// and `floor + 1`. Values beyond every numeric(38, s) value are ±10^38, which no
    /// column value equals.
    Finite {
        floor: i128,
        exact: bool,
    },
    Special(Special),
}

/// ±10^38: past the largest unscaled value of a numeric(38, s) column (10^38 - 1).
const BEYOND: i128 = 10_i128.pow(38);

/// `text` read as `numeric_in` reads it (blanks around, a sign, digits with a point, an
/// exponent; `NaN`, `Infinity`, `inf` in any case), at `scale`. `None` for anything else
/// (newer servers' underscores and hexadecimal among them): the caller then leaves the
/// comparison to Postgres.
pub fn scaled(text: &str, scale: i8) -> Option<Scaled> {
    let t = text.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c'));
    match t.to_ascii_lowercase().as_str() {
        "nan" => return Some(Scaled::Special(Special::NaN)),
        "infinity" | "+infinity" | "inf" | "+inf" => return Some(Scaled::Special(Special::PosInf)),
        "-infinity" | "-inf" => return Some(Scaled::Special(Special::NegInf)),
        _ => {}
    }
    let (negative, rest) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let (mantissa, exponent) = match rest.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (rest, None),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int_part.is_empty() && frac_part.is_empty())
        || !digits_only(int_part)
        || !digits_only(frac_part)
    {
        return None;
    }
    let exponent: i64 = match exponent {
        None => 0,
        Some(e) => {
            let (sign, digits) = match e.as_bytes().first()? {
                b'-' => (-1, &e[1..]),
                b'+' => (1, &e[1..]),
                _ => (1, e),
            };
            if digits.is_empty() || !digits_only(digits) {
                return None;
            }
            // Postgres refuses exponents past ±1000 (the statement fails there anyway).
            let digits = digits.trim_start_matches('0');
            sign * if digits.len() > 6 {
                1_000_000
            } else {
                digits.parse().unwrap_or(0)
            }
        }
    };
    let all = format!("{int_part}{frac_part}");
    let significant = all.trim_start_matches('0');
    if significant.is_empty() {
        return Some(Scaled::Finite {
            floor: 0,
            exact: true,
        });
    }
    // The value is significant × 10^shift at the column's scale.
    let shift = exponent - frac_part.len() as i64 + i64::from(scale);
    let n = significant.len() as i64;
    let (magnitude, exact) = if shift >= 0 {
        if n + shift > 38 {
            (BEYOND, true)
        } else {
            (
                significant.parse::<i128>().ok()? * 10_i128.pow(shift as u32),
                true,
            )
        }
    } else if -shift >= n {
        (0, false)
    } else {
        let (whole, dropped) = significant.split_at((n + shift) as usize);
        if whole.len() > 38 {
            (BEYOND, true)
        } else {
            (
                whole.parse::<i128>().ok()?,
                dropped.bytes().all(|b| b == b'0'),
            )
        }
    };
    let floor = match (negative, exact) {
        (false, _) => magnitude,
        (true, true) => -magnitude,
        (true, false) => -magnitude - 1,
    };
    Some(Scaled::Finite { floor, exact })
}

/// The text of a binary numeric parameter, for [`scaled`]; `None` when malformed.
pub fn binary_text(bytes: &[u8]) -> Option<String> {
    match parse(bytes).ok()? {
        Parsed::Special(s) => Some(s.as_str().to_owned()),
        Parsed::Finite(n) => {
            let mut out = String::new();
            n.write_text(&mut out);
            Some(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bin(ndigits: i16, weight: i16, sign: u16, dscale: u16, digits: &[i16]) -> Vec<u8> {
        let mut v = Vec::new();
        for x in [ndigits as u16, weight as u16, sign, dscale] {
            v.extend_from_slice(&x.to_be_bytes());
        }
        for d in digits {
            v.extend_from_slice(&d.to_be_bytes());
        }
        v
    }

    fn text_of(bytes: &[u8]) -> String {
        match parse(bytes).unwrap() {
            Parsed::Finite(n) => {
                let mut s = String::new();
                n.write_text(&mut s);
                s
            }
            Parsed::Special(s) => s.as_str().to_owned(),
        }
    }

    fn via_text(bytes: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        write_text_as_binary(&text_of(bytes), &mut out).unwrap();
        out.to_vec()
    }

    fn via_decimal(bytes: &[u8], p: u8, s: i8) -> (i128, Vec<u8>) {
        let Parsed::Finite(n) = parse(bytes).unwrap() else {
            panic!("finite")
        };
        let v = n.to_decimal(p, s).unwrap();
        let mut out = BytesMut::new();
        write_decimal(v, s, &mut out).unwrap();
        (v, out.to_vec())
    }

    /// (binary, text) pairs as Postgres 15 sends and prints them.
    fn cases() -> Vec<(Vec<u8>, &'static str)> {
        vec![
            (bin(0, 0, SIGN_POS, 0, &[]), "0"),
            (bin(0, 0, SIGN_POS, 3, &[]), "0.000"),
            (bin(2, 0, SIGN_POS, 2, &[1, 5000]), "1.50"),
            (bin(1, -1, SIGN_NEG, 3, &[10]), "-0.001"),
            (bin(1, -2, SIGN_POS, 10, &[1]), "0.0000000100"),
            (bin(2, 1, SIGN_POS, 0, &[12, 3456]), "123456"),
            (bin(1, 2, SIGN_POS, 0, &[1]), "100000000"),
            (bin(1, 2, SIGN_POS, 1, &[1]), "100000000.0"),
            (bin(3, 0, SIGN_NEG, 9, &[7, 1234, 5670]), "-7.123456700"),
            (bin(0, 0, SIGN_NAN, 0, &[]), "NaN"),
            (bin(0, 0, SIGN_PINF, 32, &[]), "Infinity"),
            (bin(0, 0, SIGN_NINF, 32, &[]), "-Infinity"),
        ]
    }

    #[test]
    fn text_matches_postgres_and_round_trips() {
        for (b, text) in cases() {
            assert_eq!(text_of(&b), text);
            assert_eq!(via_text(&b), b, "{text}");
        }
    }

    #[test]
    fn decimal_round_trips() {
        assert_eq!(
            via_decimal(&bin(2, 0, SIGN_POS, 2, &[1, 5000]), 5, 2),
            (150, bin(2, 0, SIGN_POS, 2, &[1, 5000]))
        );
        assert_eq!(
            via_decimal(&bin(1, -1, SIGN_NEG, 3, &[10]), 10, 3),
            (-1, bin(1, -1, SIGN_NEG, 3, &[10]))
        );
        assert_eq!(
            via_decimal(&bin(0, 0, SIGN_POS, 4, &[]), 10, 4),
            (0, bin(0, 0, SIGN_POS, 4, &[]))
        );
        // numeric(38,10) extremes: 28 nines . 10 nines
        let max = bin(
            10,
            6,
            SIGN_POS,
            10,
            &[9999, 9999, 9999, 9999, 9999, 9999, 9999, 9999, 9999, 9900],
        );
        let (v, back) = via_decimal(&max, 38, 10);
        assert_eq!(v, 10_i128.pow(38) - 1);
        assert_eq!(back, max);
        let mut min = max.clone();
        min[4..6].copy_from_slice(&SIGN_NEG.to_be_bytes());
        assert_eq!(via_decimal(&min, 38, 10), (1 - 10_i128.pow(38), min));
        // scale 38: 0.000…1
        let tiny = bin(1, -10, SIGN_POS, 38, &[100]);
        assert_eq!(via_decimal(&tiny, 38, 38), (1, tiny));
        // round trip of every case that has a decimal form, at its own scale
        for (b, text) in cases() {
            if let Ok(Parsed::Finite(n)) = parse(&b) {
                let s = n.dscale() as i8;
                assert_eq!(via_decimal(&b, 38, s).1, b, "{text}");
            }
        }
    }

    #[test]
    fn decimal_refuses_other_scales_and_overflow() {
        let b = bin(2, 0, SIGN_POS, 2, &[1, 5000]);
        let Parsed::Finite(n) = parse(&b).unwrap() else {
            panic!()
        };
        assert!(matches!(
            n.to_decimal(10, 3),
            Err(ValueError::Unrepresentable { .. })
        ));
        assert!(matches!(
            n.to_decimal(2, 2),
            Err(ValueError::Unrepresentable { .. })
        ));
        let b = bin(1, 12, SIGN_POS, 0, &[1]);
        let Parsed::Finite(n) = parse(&b).unwrap() else {
            panic!()
        };
        assert!(matches!(
            n.to_decimal(38, 0),
            Err(ValueError::Unrepresentable { .. })
        ));
    }

    #[test]
    fn refuses_non_canonical_and_malformed() {
        assert!(parse(&bin(1, 0, SIGN_POS, 0, &[0])).is_err()); // unstripped zero
        assert!(parse(&bin(2, 0, SIGN_POS, 4, &[1, 0])).is_err()); // trailing zero group
        assert!(parse(&bin(2, 0, SIGN_POS, 1, &[1, 1000 + 1])).is_err()); // digits past dscale
        assert!(parse(&bin(1, 0, SIGN_POS, 0, &[10_000])).is_err());
        assert!(parse(&bin(0, 0, 0x1234, 0, &[])).is_err());
        assert!(parse(&bin(0, 1, SIGN_NAN, 0, &[])).is_err());
        assert!(parse(&bin(0, 0, SIGN_PINF, 0, &[])).is_err()); // Postgres sends dscale 32
        assert!(parse(&bin(2, 0, SIGN_POS, 0, &[1])).is_err()); // declared 2, one present
        assert!(parse(&[0, 0, 0]).is_err());
        for bad in [
            "", "-", "1.", ".5", "01", "-0", "1e5", "+1", " 1", "1.2.3", "nan",
        ] {
            assert!(
                write_text_as_binary(bad, &mut BytesMut::new()).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn thousand_digit_text_round_trips() {
        let text = format!("-{}.{}1", "9".repeat(1000), "0".repeat(998));
        let mut b = BytesMut::new();
        write_text_as_binary(&text, &mut b).unwrap();
        assert_eq!(text_of(&b), text);
        assert_eq!(via_text(&b), b.to_vec());
    }

    #[test]
    fn constants_read_at_a_scale_round_down_when_inexact() {
        let f = |floor, exact| Some(Scaled::Finite { floor, exact });
        assert_eq!(scaled("1.5", 2), f(150, true));
        assert_eq!(scaled(" +1.005\n", 2), f(100, false));
        assert_eq!(scaled("-1.005", 2), f(-101, false));
        assert_eq!(scaled("-0.001", 2), f(-1, false));
        assert_eq!(scaled("0.001", 2), f(0, false));
        assert_eq!(scaled("-0", 2), f(0, true));
        assert_eq!(scaled("1.", 0), f(1, true));
        assert_eq!(scaled(".5", 1), f(5, true));
        assert_eq!(scaled("12e-1", 1), f(12, true));
        assert_eq!(scaled("1.2E+3", 0), f(1200, true));
        assert_eq!(
            scaled("1.50000000000000000000000000000000000000000", 2),
            f(150, true)
        );
        assert_eq!(scaled("1e40", 2), f(BEYOND, true));
        assert_eq!(
            scaled("-99999999999999999999999999999999999999999.5", 0),
            f(-BEYOND, true)
        );
        assert_eq!(scaled("1e-9999999", 2), f(0, false));
        assert_eq!(scaled("42", 3), f(42_000, true));
        assert_eq!(scaled("NaN", 2), Some(Scaled::Special(Special::NaN)));
        assert_eq!(scaled(" -inf ", 2), Some(Scaled::Special(Special::NegInf)));
        assert_eq!(
            scaled("INFINITY", 2),
            Some(Scaled::Special(Special::PosInf))
        );
        for bad in [
            "", ".", "-", "1e", "1_000", "0x1F", "1.2.3", "e5", "nan1", "1 2", "--1",
        ] {
            assert_eq!(scaled(bad, 2), None, "{bad:?}");
        }
    }
}
