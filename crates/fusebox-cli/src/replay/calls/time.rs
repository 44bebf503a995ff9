//! Timestamps: RFC 3339 and seconds since the epoch, read by hand into nanoseconds since
//! the Unix epoch, and the cache that reads a timestamp in the minute of the one before by
//! its seconds alone.

use super::number::POW10;

/// The latest time a replay can count: nanoseconds since the Unix epoch are a `u64`, and
/// `u64::MAX` of them is this instant. A timestamp after it, or a call that would end
/// after it, is an error.
pub(crate) const LATEST: &str = "2554-07-21T23:34:33.709551615Z";

/// Why a timestamp past [`LATEST`] is refused.
pub(crate) const TOO_LATE: &str =
    "out of range: the latest time a replay can count is 2554-07-21T23:34:33.709551615Z";

/// `secs` seconds and `nanos` nanoseconds since the epoch, in nanoseconds, if that is
/// no later than [`LATEST`].
#[inline]
fn nanos_since_epoch(secs: u64, nanos: u64) -> Option<u64> {
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// The last RFC 3339 timestamp's minute: consecutive calls share their date, hour, minute
/// and zone, so only the seconds need reading.
#[derive(Debug, Clone, Default)]
pub(super) struct MinuteCache {
    valid: bool,
    prefix: [u8; 16],
    zone: [u8; 6],
    zone_len: usize,
    /// Seconds since the epoch at the start of that minute (zone applied).
    minute_secs: i64,
}

impl MinuteCache {
    /// The timestamp `s`, if it is in the cached minute.
    #[inline]
    pub(super) fn get(&self, s: &[u8]) -> Option<u64> {
        self.get_prefix(s)
            .and_then(|(at, len)| (len == s.len()).then_some(at))
    }

    /// A timestamp in the cached minute at the start of `s` (which may go on: a JSON
    /// line's closing quote and the rest), and its length.
    // Always inlined: called once per line, and outlined (as the reading loop grew) the
    // call and its result through memory cost ~5 % of reading a line (callgrind).
    #[inline(always)]
    pub(super) fn get_prefix(&self, s: &[u8]) -> Option<(u64, usize)> {
        if !self.valid || s.len() < 20 || s[16] != b':' {
            return None;
        }
        // Sixteen bytes compared as one number (a call to memcmp costs more).
        let mut head = [0u8; 16];
        head.copy_from_slice(&s[..16]);
        if u128::from_ne_bytes(head) != u128::from_ne_bytes(self.prefix) {
            return None;
        }
        let (d1, d2) = (s[17].wrapping_sub(b'0'), s[18].wrapping_sub(b'0'));
        if d1 > 9 || d2 > 9 {
            return None;
        }
        // 60 is a leap second (read as :59, as the full parse does); above it, the full
        // parse explains what is wrong.
        let second = u64::from(d1 * 10 + d2);
        if second > 60 {
            return None;
        }
        let (nanos, end) = fraction(s, 19)?;
        let zone_end = end + self.zone_len;
        let zone = s.get(end..zone_end)?;
        if !zone.iter().zip(&self.zone).all(|(a, b)| a == b) {
            return None;
        }
        // The last minute a replay can count ends early: past its end the full parse
        // explains.
        let secs = u64::try_from(self.minute_secs).ok()? + second.min(59);
        Some((nanos_since_epoch(secs, nanos)?, zone_end))
    }

    pub(super) fn set(&mut self, s: &[u8], minute_secs: i64, zone_start: usize) {
        let zone = &s[zone_start..];
        if s.len() < 16 || zone.len() > 6 {
            self.valid = false;
            return;
        }
        self.prefix.copy_from_slice(&s[..16]);
        self.zone[..zone.len()].copy_from_slice(zone);
        self.zone_len = zone.len();
        self.minute_secs = minute_secs;
        self.valid = true;
    }
}

/// The nanoseconds of an optional `.fraction` at `i`, and where it ends; `None` for a
/// point without digits.
#[inline]
pub(super) fn fraction(s: &[u8], i: usize) -> Option<(u64, usize)> {
    if s.get(i) != Some(&b'.') {
        return Some((0, i));
    }
    let (nanos, digits, end) = fraction_digits(s, i + 1);
    (digits > 0).then_some((nanos, end))
}

/// The digits of a fraction from `i` as nanoseconds (the first nine count), whether there
/// were any (0 or 1..=9), and where they end.
#[inline]
fn fraction_digits(s: &[u8], mut i: usize) -> (u64, usize, usize) {
    let mut nanos: u64 = 0;
    let mut digits = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if digits < 9 {
            nanos = nanos * 10 + u64::from(s[i] - b'0');
            digits += 1;
        }
        i += 1;
    }
    (nanos * POW10[9 - digits], digits, i)
}

/// Seconds since the epoch, with up to nine decimals, to nanoseconds.
#[inline]
pub(crate) fn parse_seconds(s: &[u8]) -> Result<u64, &'static str> {
    const EXPECTED: &str = "expected RFC 3339 or seconds since the epoch";
    let mut i = 0;
    let mut secs: Option<u64> = Some(0);
    while i < s.len() && s[i].is_ascii_digit() {
        secs = secs
            .and_then(|n| n.checked_mul(10))
            .and_then(|n| n.checked_add(u64::from(s[i] - b'0')));
        i += 1;
    }
    if i == 0 {
        return Err(EXPECTED);
    }
    let mut nanos: u64 = 0;
    if i < s.len() {
        if s[i] != b'.' {
            return Err(EXPECTED);
        }
        let end;
        (nanos, _, end) = fraction_digits(s, i + 1);
        if end != s.len() {
            return Err(EXPECTED);
        }
    }
    secs.and_then(|secs| nanos_since_epoch(secs, nanos))
        .ok_or(TOO_LATE)
}

/// RFC 3339 (`2024-05-01T12:00:00.120Z`, a space for the `T`, an offset for the `Z`) to
/// nanoseconds since the epoch.
pub(crate) fn parse_rfc3339(s: &[u8]) -> Result<u64, &'static str> {
    rfc3339_parts(s).map(|p| p.at)
}

pub(super) struct Rfc3339 {
    pub(super) at: u64,
    pub(super) minute_secs: i64,
    pub(super) zone_start: usize,
}

pub(super) fn rfc3339_parts(s: &[u8]) -> Result<Rfc3339, &'static str> {
    fn num(s: &[u8], at: usize, len: usize) -> Result<u32, &'static str> {
        let mut n = 0u32;
        for &b in s.get(at..at + len).ok_or("too short")? {
            if !b.is_ascii_digit() {
                return Err("expected RFC 3339, e.g. 2024-05-01T12:00:00.120Z");
            }
            n = n * 10 + u32::from(b - b'0');
        }
        Ok(n)
    }
    if s.len() < 20 || s[7] != b'-' || s[13] != b':' || s[16] != b':' {
        return Err("expected RFC 3339, e.g. 2024-05-01T12:00:00.120Z");
    }
    if !matches!(s[10], b'T' | b't' | b' ') {
        return Err("expected a T between the date and the time");
    }
    let (year, month, day) = (num(s, 0, 4)?, num(s, 5, 2)?, num(s, 8, 2)?);
    let (hour, minute, second) = (num(s, 11, 2)?, num(s, 14, 2)?, num(s, 17, 2)?);
    if !(1..=12).contains(&month) {
        return Err("the month is out of range");
    }
    if day == 0 || day > days_in_month(year, month) {
        return Err("the day is out of range");
    }
    if hour > 23 || minute > 59 || second > 60 {
        return Err("the time of day is out of range");
    }
    let (nanos, i) = fraction(s, 19).ok_or("expected digits after the decimal point")?;
    let offset_secs: i64 = match s.get(i) {
        Some(b'Z' | b'z') if i + 1 == s.len() => 0,
        Some(&sign @ (b'+' | b'-')) if i + 6 == s.len() && s[i + 3] == b':' => {
            let (h, m) = (num(s, i + 1, 2)?, num(s, i + 4, 2)?);
            if h > 23 || m > 59 {
                return Err("the offset is out of range");
            }
            let o = i64::from(h * 3600 + m * 60);
            if sign == b'+' { o } else { -o }
        }
        _ => return Err("expected a time zone: Z or an offset such as +02:00"),
    };
    let days = days_from_civil(i64::from(year), month, day);
    let minute_secs = days * 86_400 + i64::from(hour * 3600 + minute * 60) - offset_secs;
    let secs = u64::try_from(minute_secs + i64::from(second.min(59))).map_err(|_| "before 1970")?;
    Ok(Rfc3339 {
        at: nanos_since_epoch(secs, nanos).ok_or(TOO_LATE)?,
        minute_secs,
        zone_start: i,
    })
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Formats nanoseconds since the epoch as RFC 3339 with milliseconds (`...T12:00:00.120Z`).
pub fn format_rfc3339(ns: u64) -> String {
    let secs = (ns / 1_000_000_000) as i64;
    let millis = (ns % 1_000_000_000) / 1_000_000;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // civil_from_days (Howard Hinnant).
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(parse_rfc3339(b"1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(
            parse_rfc3339(b"2024-05-01T12:00:00.120Z"),
            Ok(1_714_564_800_120_000_000)
        );
        assert_eq!(
            parse_rfc3339(b"2024-05-01T14:00:00.12+02:00"),
            Ok(1_714_564_800_120_000_000)
        );
        assert_eq!(
            parse_rfc3339(b"2024-02-30T00:00:00Z"),
            Err("the day is out of range")
        );
        assert_eq!(
            parse_rfc3339(b"2024-13-01T00:00:00Z"),
            Err("the month is out of range")
        );
        assert!(parse_rfc3339(b"2024-05-01T12:00:00").is_err());
        assert_eq!(parse_seconds(b"12.5").ok(), Some(12_500_000_000));
        assert_eq!(parse_seconds(b"7").ok(), Some(7_000_000_000));
        assert_eq!(parse_seconds(b"1.0000000019").ok(), Some(1_000_000_001));
        assert_eq!(parse_seconds(b"1e3").ok(), None);
        assert_eq!(
            format_rfc3339(1_714_564_800_120_000_000),
            "2024-05-01T12:00:00.120Z"
        );
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00.000Z");
        // Round trip across leap years.
        for days in [0u64, 59, 60, 365, 789, 11_016, 19_844, 20_000] {
            let ns = days * 86_400 * 1_000_000_000 + 3_723_456_000_000;
            assert_eq!(
                parse_rfc3339(format_rfc3339(ns).as_bytes()),
                Ok(ns),
                "{days}"
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(10_000))]

        /// The hand-written RFC 3339 parser (kept for speed: a replay reads millions of
        /// timestamps) reads UTC timestamps as humantime does, from 1970 to the year 9999
        /// — dates that do not exist, leap seconds and fractions of any length included —
        /// and refuses those past the latest a replay counts.
        #[test]
        fn rfc3339_reads_as_humantime(
            date in (1970u32..10_000, 0u32..14, 0u32..33),
            time in (0u32..25, 0u32..61, 0u32..62),
            fraction in proptest::option::of("[0-9]{1,12}"),
        ) {
            let ((y, mo, d), (h, mi, sec)) = (date, time);
            let fraction = fraction.map(|f| format!(".{f}")).unwrap_or_default();
            let text = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{sec:02}{fraction}Z");
            let ours = parse_rfc3339(text.as_bytes());
            match humantime::parse_rfc3339(&text) {
                Ok(t) => {
                    let ns = t
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_nanos())
                        .unwrap_or_default();
                    let expected = u64::try_from(ns).map_err(|_| TOO_LATE);
                    proptest::prop_assert_eq!(ours, expected, "{}", text);
                }
                Err(_) => proptest::prop_assert!(ours.is_err(), "{} read as {:?}", text, ours),
            }
        }
    }
}
