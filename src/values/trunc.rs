//! `date_trunc` of timestamps as Postgres computes it (`timestamp_trunc`, and
//! `timestamptz_trunc` in a session whose TimeZone is UTC): µs since 1970 in and out,
//! ±infinity unchanged. Postgres truncates the broken-down time (year, month, day, hour,
//! …), which for units up to a day is the floor to a multiple of the unit (days and the
//! time of day split with the floor, and both epochs fall on midnight), for a week the
//! Monday on or before the day, and for months, quarters and years the first day of that
//! period in the proleptic Gregorian calendar Postgres uses (astronomical years: 0 is
//! 1 BC).

use super::temporal::{civil_from_days, days_from_civil, MICROS_PER_DAY};

/// The units coldwire truncates to; others (`decade`, `century`, `millennium`, and the
/// abbreviations Postgres also reads) leave the statement to Postgres.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TruncUnit {
    Microseconds,
    Milliseconds,
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Quarter,
    Year,
}

impl TruncUnit {
    /// The unit `text` names, as `date_trunc` reads it (case-insensitive).
    pub fn named(text: &str) -> Option<Self> {
        Some(match text.to_ascii_lowercase().as_str() {
            "microseconds" => Self::Microseconds,
            "milliseconds" => Self::Milliseconds,
            "second" => Self::Second,
            "minute" => Self::Minute,
            "hour" => Self::Hour,
            "day" => Self::Day,
            "week" => Self::Week,
            "month" => Self::Month,
            "quarter" => Self::Quarter,
            "year" => Self::Year,
            _ => return None,
        })
    }

    /// The name as coldwire writes it back into SQL.
    pub fn name(self) -> &'static str {
        match self {
            Self::Microseconds => "microseconds",
            Self::Milliseconds => "milliseconds",
            Self::Second => "second",
            Self::Minute => "minute",
            Self::Hour => "hour",
            Self::Day => "day",
            Self::Week => "week",
            Self::Month => "month",
            Self::Quarter => "quarter",
            Self::Year => "year",
        }
    }

    /// `micros` (µs since 1970, or a sentinel) truncated to the unit.
    pub fn apply(self, micros: i64) -> i64 {
        if micros == i64::MIN || micros == i64::MAX {
            return micros;
        }
        let floor = |unit: i64| micros - micros.rem_euclid(unit);
        match self {
            Self::Microseconds => micros,
            Self::Milliseconds => floor(1_000),
            Self::Second => floor(1_000_000),
            Self::Minute => floor(60_000_000),
            Self::Hour => floor(3_600_000_000),
            Self::Day => floor(MICROS_PER_DAY),
            Self::Week | Self::Month | Self::Quarter | Self::Year => {
                let days = micros.div_euclid(MICROS_PER_DAY);
                let first = match self {
                    // 1970-01-01 was a Thursday: Monday is 3 days before.
                    Self::Week => days - (days + 3).rem_euclid(7),
                    _ => {
                        let (year, month, _) = civil_from_days(days);
                        let month = match self {
                            Self::Month => month,
                            Self::Quarter => (month - 1) / 3 * 3 + 1,
                            _ => 1,
                        };
                        days_from_civil(year, month, 1)
                    }
                };
                first * MICROS_PER_DAY
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TruncUnit::*;

    /// µs since 1970 of a UTC date and time.
    fn at(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, us: i64) -> i64 {
        days_from_civil(y, mo, d) * MICROS_PER_DAY + ((h * 60 + mi) * 60 + s) * 1_000_000 + us
    }

    #[test]
    fn civil_days_round_trip_across_eras() {
        for days in (-3_000_000..3_000_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(10_957), (2000, 1, 1));
        assert_eq!(civil_from_days(-719_528), (0, 1, 1));
    }

    #[test]
    fn truncates_as_postgres_does() {
        let t = at(2024, 8, 14, 13, 45, 17, 123_456);
        assert_eq!(Milliseconds.apply(t), at(2024, 8, 14, 13, 45, 17, 123_000));
        assert_eq!(Second.apply(t), at(2024, 8, 14, 13, 45, 17, 0));
        assert_eq!(Minute.apply(t), at(2024, 8, 14, 13, 45, 0, 0));
        assert_eq!(Hour.apply(t), at(2024, 8, 14, 13, 0, 0, 0));
        assert_eq!(Day.apply(t), at(2024, 8, 14, 0, 0, 0, 0));
        // 2024-08-14 was a Wednesday.
        assert_eq!(Week.apply(t), at(2024, 8, 12, 0, 0, 0, 0));
        assert_eq!(Month.apply(t), at(2024, 8, 1, 0, 0, 0, 0));
        assert_eq!(Quarter.apply(t), at(2024, 7, 1, 0, 0, 0, 0));
        assert_eq!(Year.apply(t), at(2024, 1, 1, 0, 0, 0, 0));
        // Before 1970 and before year 1: the floor, not towards zero.
        let old = at(1969, 12, 31, 23, 59, 59, 999_999);
        assert_eq!(Day.apply(old), at(1969, 12, 31, 0, 0, 0, 0));
        assert_eq!(
            Milliseconds.apply(old),
            at(1969, 12, 31, 23, 59, 59, 999_000)
        );
        let bc = at(-44, 3, 15, 12, 0, 0, 0);
        assert_eq!(Year.apply(bc), at(-44, 1, 1, 0, 0, 0, 0));
        assert_eq!(Quarter.apply(bc), at(-44, 1, 1, 0, 0, 0, 0));
        // Week across a year boundary: 2021-01-01 (Friday) belongs to the week of
        // Monday 2020-12-28.
        assert_eq!(
            Week.apply(at(2021, 1, 1, 5, 0, 0, 0)),
            at(2020, 12, 28, 0, 0, 0, 0)
        );
        assert_eq!(Day.apply(i64::MAX), i64::MAX);
        assert_eq!(Year.apply(i64::MIN), i64::MIN);
        assert_eq!(TruncUnit::named("DAY"), Some(Day));
        assert_eq!(TruncUnit::named("days"), None);
    }
}
