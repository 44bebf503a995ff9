//! The arithmetic of timeouts and deadlines, apart from the service plumbing so that it can
//! be tested without a runtime.
//!
//! Everything here is a pure function of its arguments: the caller reads the clock (once)
//! and the headers, and these functions decide how long a call may take, what to tell the
//! next hop, and what an incoming header means.

use fusebox_classify::deadline::{format_grpc_timeout, parse_grpc_timeout};
use http::{HeaderMap, HeaderName, HeaderValue};
use std::time::Duration;
use tokio::time::Instant;

/// How long a call that carries a deadline may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Budget {
    /// The deadline has passed: fail without calling the inner service.
    Expired,
    /// Run for at most `limit`, the smaller of the time left and the route's timeout.
    Run {
        /// The effective timeout.
        limit: Duration,
    },
}

/// The budget of a call on a route whose timeout is `route_timeout`, at `now`, under a
/// caller's `deadline`.
pub(crate) fn budget(now: Instant, deadline: Instant, route_timeout: Duration) -> Budget {
    if now >= deadline {
        return Budget::Expired;
    }
    Budget::Run {
        limit: route_timeout.min(deadline.saturating_duration_since(now)),
    }
}

/// The `grpc-timeout` to send downstream for a call allowed `limit`, given the value the
/// request already carries (if any): `None` keeps the existing value, which is already at
/// least as strict. A malformed existing value is replaced.
pub(crate) fn outbound_grpc_timeout(
    existing: Option<&HeaderValue>,
    limit: Duration,
) -> Option<HeaderValue> {
    match existing.and_then(parse_grpc_timeout) {
        Some(theirs) if theirs <= limit => None,
        _ => Some(format_grpc_timeout(limit)),
    }
}

/// A duration as a header value of whole milliseconds, rounded down (a budget must not
/// grow in transit).
pub(crate) fn millis_value(limit: Duration) -> HeaderValue {
    HeaderValue::from(u64::try_from(limit.as_millis()).unwrap_or(u64::MAX))
}

/// Parses a header of whole milliseconds: 1 to 19 ASCII digits, nothing else (no sign, no
/// spaces, no unit). `None` for anything else.
pub(crate) fn parse_millis(value: &HeaderValue) -> Option<Duration> {
    let bytes = value.as_bytes();
    if bytes.is_empty() || bytes.len() > 19 || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let millis = bytes
        .iter()
        .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
    Some(Duration::from_millis(millis))
}

/// Which incoming header a timeout came from, for the malformed-value counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// `grpc-timeout`.
    GrpcTimeout,
    /// The configured milliseconds header.
    Millis,
}

impl Source {
    /// The metric label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Source::GrpcTimeout => "grpc-timeout",
            Source::Millis => "millis-header",
        }
    }
}

/// What the incoming headers say about the caller's timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Incoming {
    /// The smallest well-formed timeout found.
    pub(crate) timeout: Option<Duration>,
    /// The first header whose value could not be parsed (and was ignored).
    pub(crate) malformed: Option<Source>,
}

/// Reads the caller's timeout from `grpc-timeout` (when `grpc` is set) and from the
/// milliseconds header `millis` (when configured). When both are present the smaller wins;
/// malformed values are ignored and reported.
pub(crate) fn incoming(headers: &HeaderMap, grpc: bool, millis: Option<&HeaderName>) -> Incoming {
    let mut found = Incoming::default();
    let mut read = |value: Option<&HeaderValue>,
                    parse: fn(&HeaderValue) -> Option<Duration>,
                    source: Source| {
        let Some(value) = value else { return };
        match parse(value) {
            Some(t) => found.timeout = Some(found.timeout.map_or(t, |old| old.min(t))),
            None => {
                found.malformed.get_or_insert(source);
            }
        }
    };
    if grpc {
        read(
            headers.get(fusebox_classify::deadline::GRPC_TIMEOUT),
            parse_grpc_timeout,
            Source::GrpcTimeout,
        );
    }
    if let Some(name) = millis {
        read(headers.get(name), parse_millis, Source::Millis);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_smaller_of_deadline_and_route_timeout_wins() {
        let now = Instant::now();
        assert_eq!(
            budget(now, now + ms(100), ms(250)),
            Budget::Run { limit: ms(100) }
        );
        assert_eq!(
            budget(now, now + ms(900), ms(250)),
            Budget::Run { limit: ms(250) }
        );
        assert_eq!(budget(now, now, ms(250)), Budget::Expired);
        assert_eq!(budget(now + ms(1), now, ms(250)), Budget::Expired);
    }

    #[test]
    fn outbound_grpc_timeout_never_loosens_a_stricter_one() {
        let tighter = HeaderValue::from_static("50m");
        assert_eq!(outbound_grpc_timeout(Some(&tighter), ms(100)), None);
        let looser = HeaderValue::from_static("5S");
        assert_eq!(
            outbound_grpc_timeout(Some(&looser), ms(100)),
            Some(HeaderValue::from_static("100000u"))
        );
        let garbage = HeaderValue::from_static("soon");
        assert_eq!(
            outbound_grpc_timeout(Some(&garbage), ms(100)),
            Some(HeaderValue::from_static("100000u"))
        );
        assert_eq!(
            outbound_grpc_timeout(None, ms(2000)),
            Some(HeaderValue::from_static("2000000u"))
        );
    }

    #[test]
    fn millis_round_down_and_parse_strictly() {
        assert_eq!(millis_value(Duration::from_micros(1999)), "1");
        assert_eq!(millis_value(ms(250)), "250");
        assert_eq!(
            parse_millis(&HeaderValue::from_static("250")),
            Some(ms(250))
        );
        assert_eq!(parse_millis(&HeaderValue::from_static("0")), Some(ms(0)));
        for bad in ["", "-1", "1.5", "250ms", " 250", "99999999999999999999"] {
            assert_eq!(
                parse_millis(&HeaderValue::from_static(bad)),
                None,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn incoming_takes_the_smaller_and_reports_malformed_values() {
        let name = HeaderName::from_static("x-request-timeout-ms");
        let mut headers = HeaderMap::new();
        assert_eq!(incoming(&headers, true, Some(&name)), Incoming::default());

        headers.insert("grpc-timeout", HeaderValue::from_static("2S"));
        headers.insert(name.clone(), HeaderValue::from_static("1500"));
        let both = incoming(&headers, true, Some(&name));
        assert_eq!(both.timeout, Some(ms(1500)));
        assert_eq!(both.malformed, None);
        // Not configured to read grpc-timeout, or no millis header: only the other counts.
        assert_eq!(
            incoming(&headers, false, Some(&name)).timeout,
            Some(ms(1500))
        );
        assert_eq!(incoming(&headers, true, None).timeout, Some(ms(2000)));

        headers.insert("grpc-timeout", HeaderValue::from_static("2 seconds"));
        let bad_grpc = incoming(&headers, true, Some(&name));
        assert_eq!(bad_grpc.timeout, Some(ms(1500)));
        assert_eq!(bad_grpc.malformed, Some(Source::GrpcTimeout));

        headers.insert(name.clone(), HeaderValue::from_static("soon"));
        let both_bad = incoming(&headers, true, Some(&name));
        assert_eq!(both_bad.timeout, None);
        assert_eq!(both_bad.malformed, Some(Source::GrpcTimeout));
        assert_eq!(Source::Millis.label(), "millis-header");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]

        /// A millisecond header of arbitrary bytes: no panic, and a duration only from 1 to
        /// 19 digits, exactly their value (19 digits never overflow).
        #[test]
        fn millis_from_arbitrary_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24)) {
            if let Ok(value) = HeaderValue::from_bytes(&bytes)
                && let Some(d) = parse_millis(&value)
            {
                proptest::prop_assert!((1..=19).contains(&bytes.len()));
                let n: u64 = std::str::from_utf8(&bytes).unwrap().parse().unwrap();
                proptest::prop_assert_eq!(d, Duration::from_millis(n));
            }
        }

        /// Valid values and their limits: any u64 of up to 19 digits is read exactly, a
        /// twentieth digit is refused; what is sent downstream never grows the budget.
        #[test]
        fn millis_and_outbound_near_valid(n in proptest::prelude::any::<u64>(), limit_ns in proptest::prelude::any::<u64>(), theirs in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12)) {
            let text = n.to_string();
            let got = parse_millis(&HeaderValue::from_str(&text).unwrap());
            proptest::prop_assert_eq!(got, (text.len() <= 19).then(|| Duration::from_millis(n)));
            let limit = Duration::from_nanos(limit_ns);
            proptest::prop_assert_eq!(parse_millis(&millis_value(limit)), Some(ms(u64::try_from(limit.as_millis()).unwrap())));
            let existing = HeaderValue::from_bytes(&theirs).ok();
            let sent = outbound_grpc_timeout(existing.as_ref(), limit)
                .or(existing)
                .expect("a value is kept or sent");
            let sent = fusebox_classify::deadline::parse_grpc_timeout(&sent).expect("what goes downstream parses");
            proptest::prop_assert!(sent <= limit);
        }
    }
}
