//! Deadlines carried in request extensions, and the `grpc-timeout` wire format.
//!
//! The timeout layer reads an incoming `grpc-timeout` (or a configured header) into a
//! [`Deadline`] in the request's extensions; every layer below honours it: the timeout layer
//! uses the smaller of the remaining time and the route's timeout, the retry layer starts no
//! attempt past it, and outbound calls send what remains downstream. The type lives here so
//! that layers can share it without depending on one another.

use http::HeaderValue;
use std::time::Duration;
use tokio::time::Instant;

/// The `grpc-timeout` header.
pub const GRPC_TIMEOUT: &str = "grpc-timeout";

/// The instant by which the caller needs an answer. Stored in `http::Extensions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline(Instant);

impl Deadline {
    /// A deadline at `at`.
    pub fn at(at: Instant) -> Self {
        Deadline(at)
    }

    /// A deadline `timeout` from now (tokio time). Saturates far in the future.
    pub fn after(timeout: Duration) -> Self {
        let now = Instant::now();
        Deadline(
            now.checked_add(timeout)
                .unwrap_or(now + Duration::from_secs(86_400 * 365 * 30)),
        )
    }

    /// The instant.
    pub fn instant(&self) -> Instant {
        self.0
    }

    /// Time left (zero once passed).
    pub fn remaining(&self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }

    /// Whether the deadline has passed.
    pub fn is_expired(&self) -> bool {
        Instant::now() >= self.0
    }

    /// The earlier of two deadlines.
    pub fn min(self, other: Deadline) -> Deadline {
        if other.0 < self.0 { other } else { self }
    }
}

/// Parses a `grpc-timeout` value: 1 to 8 ASCII digits and a unit (`H`, `M`, `S`, `m`, `u`,
/// `n`). Anything else is `None`: a malformed header is ignored, never an error.
pub fn parse_grpc_timeout(value: &HeaderValue) -> Option<Duration> {
    let bytes = value.as_bytes();
    let (digits, unit) = bytes.split_at(bytes.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
    Some(match unit[0] {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Formats a duration as a `grpc-timeout` value, in the finest unit whose 8 digits hold it
/// (rounding down, as the remaining budget must not grow in transit).
pub fn format_grpc_timeout(timeout: Duration) -> HeaderValue {
    const MAX: u128 = 99_999_999;
    let nanos = timeout.as_nanos();
    let (n, unit) = [
        (1u128, 'n'),
        (1_000, 'u'),
        (1_000_000, 'm'),
        (1_000_000_000, 'S'),
        (60_000_000_000, 'M'),
        (3_600_000_000_000, 'H'),
    ]
    .iter()
    .map(|(div, unit)| (nanos / div, *unit))
    .find(|(n, _)| *n <= MAX)
    .unwrap_or((MAX, 'H'));
    // Formatting allocates: only done for requests that carry a deadline downstream.
    HeaderValue::from_str(&format!("{n}{unit}"))
        .unwrap_or_else(|_| HeaderValue::from_static("99999999H"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hv(s: &'static str) -> HeaderValue {
        HeaderValue::from_static(s)
    }

    #[test]
    fn parses_every_unit() {
        assert_eq!(
            parse_grpc_timeout(&hv("1H")),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(
            parse_grpc_timeout(&hv("2M")),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_grpc_timeout(&hv("3S")), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_grpc_timeout(&hv("250m")),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            parse_grpc_timeout(&hv("7u")),
            Some(Duration::from_micros(7))
        );
        assert_eq!(
            parse_grpc_timeout(&hv("99999999n")),
            Some(Duration::from_nanos(99_999_999))
        );
    }

    #[test]
    fn malformed_values_are_ignored() {
        for bad in ["", "S", "100", "1x", "123456789S", "-1S", "1.5S", " 1S"] {
            assert_eq!(parse_grpc_timeout(&hv(bad)), None, "{bad:?}");
        }
    }

    #[test]
    fn formats_round_trip_without_growing() {
        for d in [
            Duration::from_nanos(5),
            Duration::from_millis(250),
            Duration::from_secs(3),
            Duration::from_secs(86_400 * 400),
            Duration::from_nanos(123_456_789_012),
        ] {
            let back = parse_grpc_timeout(&format_grpc_timeout(d)).unwrap();
            assert!(back <= d, "{d:?} -> {back:?}");
        }
        assert_eq!(format_grpc_timeout(Duration::from_millis(250)), "250000u");
        assert_eq!(format_grpc_timeout(Duration::from_secs(3600)), "3600000m");
    }

    #[tokio::test(start_paused = true)]
    async fn deadlines_on_paused_time() {
        let d = Deadline::after(Duration::from_secs(2));
        assert_eq!(d.remaining(), Duration::from_secs(2));
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(d.remaining(), Duration::from_millis(500));
        assert!(!d.is_expired());
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(d.is_expired());
        let earlier = Deadline::after(Duration::from_secs(1));
        assert_eq!(d.min(earlier), d);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]

        /// Arbitrary bytes: no panic, and a duration only from 1 to 8 digits and a unit.
        #[test]
        fn grpc_timeout_from_arbitrary_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..16)) {
            if let Ok(value) = HeaderValue::from_bytes(&bytes)
                && parse_grpc_timeout(&value).is_some()
            {
                let (digits, unit) = bytes.split_at(bytes.len() - 1);
                proptest::prop_assert!((1..=8).contains(&digits.len()));
                proptest::prop_assert!(digits.iter().all(u8::is_ascii_digit));
                proptest::prop_assert!(b"HMSmun".contains(&unit[0]));
            }
        }

        /// Valid values give their duration, up to the largest (99999999H, no overflow);
        /// a ninth digit, another unit or a changed byte gives a valid reading or none;
        /// any duration formats to a value that parses to no more than it.
        #[test]
        fn grpc_timeout_near_valid(
            n in 0u64..=99_999_999,
            unit in 0usize..6,
            at in 0usize..9,
            byte in 0x20u8..0x7f,
            nanos in proptest::prelude::any::<u64>(),
            secs in proptest::prelude::any::<u64>(),
        ) {
            let (u, scale) = [(b'H', 3_600_000_000_000u128), (b'M', 60_000_000_000), (b'S', 1_000_000_000), (b'm', 1_000_000), (b'u', 1_000), (b'n', 1)][unit];
            let text = format!("{n}{}", u as char);
            let got = parse_grpc_timeout(&HeaderValue::from_str(&text).unwrap());
            proptest::prop_assert_eq!(got.map(|d| d.as_nanos()), Some(u128::from(n) * scale));
            let nine = format!("{}{n:08}{}", 1, u as char);
            proptest::prop_assert_eq!(parse_grpc_timeout(&HeaderValue::from_str(&nine).unwrap()), None);
            let mut mutated = text.clone().into_bytes();
            let at = at % mutated.len();
            mutated[at] = byte;
            if let Some(d) = parse_grpc_timeout(&HeaderValue::from_bytes(&mutated).unwrap()) {
                proptest::prop_assert!(d <= Duration::from_secs(99_999_999 * 3600));
            }
            for d in [Duration::from_nanos(nanos), Duration::new(secs, 0)] {
                let back = parse_grpc_timeout(&format_grpc_timeout(d)).expect("formats parse");
                proptest::prop_assert!(back <= d);
            }
        }
    }
}
