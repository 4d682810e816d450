//! Date and timestamp literals read exactly as Postgres reads them, for the strict ISO
//! forms whose meaning does not depend on DateStyle: `YYYY-MM-DD`, then for timestamps
//! ` HH:MM[:SS[.ffffff]]` (or `T`), then for timestamptz an explicit offset (`Z`, `±HH`,
//! `±HH:MM`, `±HHMM`), or none when the session's TimeZone is UTC. Anything else (other
//! field orders, names of months, time zone names, `24:00`, leap seconds, more than six
//! fractional digits, years beyond 9999 or before 1, `now`, `today`, surrounding spaces)
//! gives `None`: the caller then leaves the comparison to Postgres. `infinity` and
//! `-infinity` read as the sentinels coldwire stores.
//!
//! Values are in Arrow's units: days since 1970-01-01 (date), µs since 1970-01-01 00:00
//! (timestamp; timestamptz in UTC).

use super::temporal::{days_from_civil, MICROS_PER_DAY};

/// Which temporal type a literal is read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemporalKind {
    Date,
    Timestamp,
    /// `utc`: the session's TimeZone is UTC, so a literal without an offset means UTC.
    Timestamptz {
        utc: bool,
    },
}

/// The value of `text` as `kind`, when it is in a strict ISO form.
pub fn temporal_literal(text: &str, kind: TemporalKind) -> Option<i64> {
    let infinite = |sign: i64| match kind {
        TemporalKind::Date => i64::from(if sign > 0 { i32::MAX } else { i32::MIN }),
        _ => {
            if sign > 0 {
                i64::MAX
            } else {
                i64::MIN
            }
        }
    };
    match text {
        "infinity" | "+infinity" => return Some(infinite(1)),
        "-infinity" => return Some(infinite(-1)),
        _ => {}
    }
    let b = text.as_bytes();
    let digits = |from: usize, n: usize| -> Option<i64> {
        let part = b.get(from..from + n)?;
        part.iter().all(u8::is_ascii_digit).then(|| {
            part.iter()
                .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'))
        })
    };
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    if b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') {
        return None;
    }
    if year < 1 || !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let rest = &b[10..];
    if kind == TemporalKind::Date {
        return rest.is_empty().then_some(days);
    }
    let mut micros = days.checked_mul(MICROS_PER_DAY)?;
    if rest.is_empty() {
        return match kind {
            TemporalKind::Timestamptz { utc: false } => None,
            _ => Some(micros),
        };
    }
    if !matches!(rest[0], b' ' | b'T') {
        return None;
    }
    let t = &rest[1..];
    let two = |i: usize| -> Option<i64> {
        let p = t.get(i..i + 2)?;
        p.iter()
            .all(u8::is_ascii_digit)
            .then(|| i64::from(p[0] - b'0') * 10 + i64::from(p[1] - b'0'))
    };
    let (hour, minute) = (two(0)?, two(3)?);
    if t.get(2) != Some(&b':') || hour > 23 || minute > 59 {
        return None;
    }
    let mut i = 5;
    let mut second = 0;
    let mut fraction = 0;
    if t.get(i) == Some(&b':') {
        second = two(i + 1)?;
        if second > 59 {
            return None;
        }
        i += 3;
        if t.get(i) == Some(&b'.') {
            let start = i + 1;
            let mut end = start;
            while t.get(end).is_some_and(u8::is_ascii_digit) {
                end += 1;
            }
            let n = end - start;
            if n == 0 || n > 6 {
                return None;
            }
            let value = t[start..end]
                .iter()
                .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'));
            fraction = value * 10i64.pow(u32::try_from(6 - n).ok()?);
            i = end;
        }
    }
    micros += ((hour * 60 + minute) * 60 + second) * 1_000_000 + fraction;
    let zone = &t[i..];
    let offset = match (kind, zone) {
        (_, []) => match kind {
            TemporalKind::Timestamptz { utc: false } => return None,
            _ => 0,
        },
        (TemporalKind::Timestamptz { .. }, zone) => offset_seconds(zone)?,
        _ => return None,
    };
    micros.checked_sub(offset * 1_000_000)
}

/// `Z`, `±HH`, `±HH:MM` or `±HHMM` in seconds east of UTC.
fn offset_seconds(zone: &[u8]) -> Option<i64> {
    if zone == b"Z" {
        return Some(0);
    }
    let sign = match zone.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let d = |i: usize| -> Option<i64> {
        let c = *zone.get(i)?;
        c.is_ascii_digit().then(|| i64::from(c - b'0'))
    };
    let hours = d(1)? * 10 + d(2)?;
    let minutes = match zone.len() {
        3 => 0,
        5 => d(3)? * 10 + d(4)?,
        6 if zone[3] == b':' => d(4)? * 10 + d(5)?,
        _ => return None,
    };
    if hours > 15 || minutes > 59 {
        return None;
    }
    Some(sign * (hours * 3600 + minutes * 60))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TZ: TemporalKind = TemporalKind::Timestamptz { utc: false };

    #[test]
    fn strict_iso_forms_read_as_postgres_reads_them() {
        use TemporalKind::{Date, Timestamp};
        assert_eq!(temporal_literal("1970-01-01", Date), Some(0));
        assert_eq!(temporal_literal("2000-01-01", Date), Some(10_957));
        assert_eq!(temporal_literal("2024-02-29", Date), Some(19_782));
        assert_eq!(temporal_literal("2023-02-29", Date), None);
        assert_eq!(temporal_literal("2024-01-01 00:00", Date), None);
        assert_eq!(
            temporal_literal("1970-01-01 00:00:01.5", Timestamp),
            Some(1_500_000)
        );
        assert_eq!(
            temporal_literal("1970-01-02T00:00:00", Timestamp),
            Some(MICROS_PER_DAY)
        );
        assert_eq!(
            temporal_literal("1970-01-01 00:00:00.123456", Timestamp),
            Some(123_456)
        );
        assert_eq!(
            temporal_literal("1970-01-01 00:00:00.1234567", Timestamp),
            None
        );
        assert_eq!(temporal_literal("1970-01-01 24:00:00", Timestamp), None);
        assert_eq!(temporal_literal("1970-01-01 00:00:00+02", Timestamp), None);
        assert_eq!(temporal_literal("1970-01-01 02:00:00+02", TZ), Some(0));
        assert_eq!(
            temporal_literal("1970-01-01 00:00:00-05:30", TZ),
            Some(19_800_000_000)
        );
        assert_eq!(temporal_literal("1970-01-01 00:00:00Z", TZ), Some(0));
        assert_eq!(temporal_literal("1970-01-01 00:00:00", TZ), None);
        assert_eq!(
            temporal_literal("1970-01-01", TemporalKind::Timestamptz { utc: true }),
            Some(0)
        );
        assert_eq!(temporal_literal("01/02/2024", Date), None);
        assert_eq!(temporal_literal(" 2024-01-01", Date), None);
        assert_eq!(
            temporal_literal("infinity", Date),
            Some(i64::from(i32::MAX))
        );
        assert_eq!(temporal_literal("-infinity", Timestamp), Some(i64::MIN));
    }
}
