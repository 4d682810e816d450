//! Dates and timestamps between Postgres's epoch (2000-01-01) and Arrow's (1970-01-01),
//! with ±infinity kept as the sentinels Postgres itself uses.
//!
//! Postgres sends `-infinity`/`infinity` as `i32::MIN`/`i32::MAX` (date) and
//! `i64::MIN`/`i64::MAX` (timestamp, timestamptz); coldwire stores the same sentinels in
//! Arrow, unshifted. Every finite date fits after the shift, and no shifted date can land on a
//! sentinel. Finite timestamps from 294247-01-10 04:00:54.775807 on (the last 30 years of
//! Postgres's range) do not fit µs since 1970 in an i64 beside the sentinels: they are
//! refused, never wrapped or clamped.

use super::error::ValueError;

/// Days from 1970-01-01 to 2000-01-01.
pub const PG_EPOCH_DAYS: i32 = 10_957;
/// Microseconds from 1970-01-01 to 2000-01-01.
pub const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
/// Microseconds in a day; `time` allows `24:00:00`, which equals it.
pub const MICROS_PER_DAY: i64 = 86_400_000_000;

/// A Postgres date (days since 2000) as Arrow Date32 (days since 1970).
///
/// # Errors
/// A finite day number outside what Postgres can hold.
pub fn date_to_arrow(pg_days: i32) -> Result<i32, ValueError> {
    if is_sentinel32(pg_days) {
        return Ok(pg_days);
    }
    pg_days
        .checked_add(PG_EPOCH_DAYS)
        .filter(|d| !is_sentinel32(*d))
        .ok_or_else(|| ValueError::malformed("date", format!("day {pg_days} out of range")))
}

/// An Arrow Date32 back to a Postgres date.
///
/// # Errors
/// A day number that no Postgres date maps to.
pub fn date_from_arrow(days: i32) -> Result<i32, ValueError> {
    if is_sentinel32(days) {
        return Ok(days);
    }
    days.checked_sub(PG_EPOCH_DAYS)
        .filter(|d| !is_sentinel32(*d))
        .ok_or_else(|| ValueError::malformed("date", format!("day {days} out of range")))
}

/// A Postgres timestamp (µs since 2000) as Arrow µs since 1970.
///
/// # Errors
/// [`ValueError::Unrepresentable`] for finite timestamps from year 294247 on.
pub fn timestamp_to_arrow(ty: &'static str, pg_micros: i64) -> Result<i64, ValueError> {
    if is_sentinel64(pg_micros) {
        return Ok(pg_micros);
    }
    pg_micros.checked_add(PG_EPOCH_MICROS).filter(|m| !is_sentinel64(*m)).ok_or_else(|| {
        ValueError::unrepresentable(
            ty,
            format!("{pg_micros} µs after 2000-01-01 is beyond 294247-01-10, the last instant Parquet's µs since 1970 can hold"),
        )
    })
}

/// Arrow µs since 1970 back to a Postgres timestamp.
///
/// # Errors
/// A value that no Postgres timestamp maps to.
pub fn timestamp_from_arrow(ty: &'static str, micros: i64) -> Result<i64, ValueError> {
    if is_sentinel64(micros) {
        return Ok(micros);
    }
    micros
        .checked_sub(PG_EPOCH_MICROS)
        .filter(|m| !is_sentinel64(*m))
        .ok_or_else(|| ValueError::malformed(ty, format!("{micros} µs since 1970 out of range")))
}

/// Checks a Postgres `time` (µs since midnight, `24:00:00` included).
///
/// # Errors
/// A value outside 0..=24:00:00.
pub fn check_time(micros: i64) -> Result<i64, ValueError> {
    if (0..=MICROS_PER_DAY).contains(&micros) {
        Ok(micros)
    } else {
        Err(ValueError::malformed(
            "time",
            format!("{micros} µs is outside 00:00:00..24:00:00"),
        ))
    }
}

fn is_sentinel32(v: i32) -> bool {
    v == i32::MIN || v == i32::MAX
}

fn is_sentinel64(v: i64) -> bool {
    v == i64::MIN || v == i64::MAX
}

/// (year, month, day) of a day number (days since 1970-01-01), proleptic Gregorian.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The day number (days since 1970-01-01) of a proleptic Gregorian date.
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = year - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Postgres's range: 4714-11-24 BC .. 5874897-12-31 (dates) in days since 2000.
    const PG_DATE_MIN: i32 = -2_451_545;
    const PG_DATE_MAX: i32 = 2_147_483_494 - 2_451_545 - 1;
    /// 4714-11-24 00:00 BC .. 294276-12-31 23:59:59.999999 in µs since 2000.
    const PG_TS_MIN: i64 = -211_813_488_000_000_000;
    const PG_TS_MAX: i64 = 9_223_371_331_199_999_999;

    #[test]
    fn dates_shift_and_keep_infinity() {
        assert_eq!(date_to_arrow(0).unwrap(), 10_957);
        assert_eq!(date_from_arrow(10_957).unwrap(), 0);
        for d in [i32::MIN, i32::MAX, PG_DATE_MIN, PG_DATE_MAX, -1, 1] {
            assert_eq!(date_from_arrow(date_to_arrow(d).unwrap()).unwrap(), d);
        }
        assert!(date_to_arrow(i32::MAX - 1).is_err());
        assert!(date_from_arrow(i32::MIN + 1).is_err());
    }

    #[test]
    fn timestamps_shift_keep_infinity_and_refuse_the_far_future() {
        assert_eq!(timestamp_to_arrow("timestamp", 0).unwrap(), PG_EPOCH_MICROS);
        for t in [
            i64::MIN,
            i64::MAX,
            PG_TS_MIN,
            -1,
            1,
            i64::MAX - PG_EPOCH_MICROS - 1,
        ] {
            let a = timestamp_to_arrow("timestamp", t).unwrap();
            assert_eq!(timestamp_from_arrow("timestamp", a).unwrap(), t);
        }
        // the first refused instant, 294247-01-10 04:00:54.775807, lands on the sentinel
        let first_refused = i64::MAX - PG_EPOCH_MICROS;
        assert!(matches!(
            timestamp_to_arrow("timestamp", first_refused),
            Err(ValueError::Unrepresentable { .. })
        ));
        assert!(timestamp_to_arrow("timestamp", PG_TS_MAX).is_err());
        assert!(timestamp_from_arrow("timestamp", i64::MIN + 1).is_err());
    }

    #[test]
    fn time_allows_midnight_at_both_ends() {
        assert_eq!(check_time(0).unwrap(), 0);
        assert_eq!(check_time(MICROS_PER_DAY).unwrap(), MICROS_PER_DAY);
        assert!(check_time(-1).is_err());
        assert!(check_time(MICROS_PER_DAY + 1).is_err());
    }
}
