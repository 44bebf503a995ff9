//! The verdict on one finished call.

use std::time::{Duration, SystemTime};

/// What a finished call says about the health of the dependency.
///
/// Every layer of fusebox reads the same outcome: the breaker's windows count
/// [`Outcome::Success`] and [`Outcome::Failure`]; [`Outcome::Ignored`] calls enter no window
/// at all (a cancelled request, a 429 on a route that does not count it, fusebox's own
/// rejections).
///
/// Closed on purpose: the three outcomes are what every window, budget and limit counts, and
/// a fourth would change what each layer means; match it exhaustively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The dependency answered correctly (2xx, 3xx, 4xx other than 429 by default).
    Success,
    /// The dependency failed (5xx 500/502/503/504, transport errors, timeouts by default).
    Failure,
    /// The call says nothing about the dependency's health and is not counted.
    Ignored,
}

/// When a retry of a failed call could help.
///
/// A hint is about the *failure*; whether the request may be repeated at all is a property
/// of the request ([`Call::idempotent`](crate::Call::idempotent)) which the retry layer
/// combines with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum RetryHint {
    /// Retrying will not help (a 500, a bad answer, or the outcome was not a failure).
    #[default]
    Never,
    /// A retry may help (502, 503, 504, a reset connection, a timeout).
    Retryable,
    /// A retry may help, but not before the server's `Retry-After` (or gRPC pushback).
    After(RetryAfter),
    /// The request never reached the dependency (connection refused): repeating it is safe
    /// even when the request itself is not idempotent.
    NotSent,
}

/// A server's request to wait before retrying, from a `Retry-After` header.
///
/// Closed: a `Retry-After` value is a delay or a date, nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetryAfter {
    /// `Retry-After: <delay-seconds>`, or gRPC's `grpc-retry-pushback-ms`.
    Delay(Duration),
    /// `Retry-After: <HTTP-date>`; the retry layer resolves it against its clock.
    At(SystemTime),
}

impl RetryAfter {
    /// Parses a `Retry-After` header value: delay-seconds or an HTTP-date.
    ///
    /// Malformed values give `None` (the header is ignored, never an error).
    pub fn parse(value: &http::HeaderValue) -> Option<Self> {
        let text = value.to_str().ok()?.trim();
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            // Over-long digit strings saturate instead of failing: "wait very long".
            let secs = text.parse::<u64>().unwrap_or(u64::MAX);
            return Some(RetryAfter::Delay(Duration::from_secs(secs)));
        }
        httpdate::parse_http_date(text).ok().map(RetryAfter::At)
    }

    /// The delay this stands for, seen from `now` (wall-clock time). A date in the past is
    /// a zero delay.
    pub fn delay_from(&self, now: SystemTime) -> Duration {
        match *self {
            RetryAfter::Delay(d) => d,
            RetryAfter::At(at) => at.duration_since(now).unwrap_or(Duration::ZERO),
        }
    }
}

/// The full verdict on one finished call: outcome, whether it was slow, and a retry hint.
///
/// The classifier decides outcome and retry hint; the layer that measured the call's
/// latency sets [`is_slow`](Verdict::is_slow) against the route's slow-call threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Verdict {
    outcome: Outcome,
    slow: bool,
    retry: RetryHint,
}

impl Verdict {
    /// A successful call.
    pub const SUCCESS: Verdict = Verdict::new(Outcome::Success);
    /// A failed call that retrying will not help.
    pub const FAILURE: Verdict = Verdict::new(Outcome::Failure);
    /// A call that is not counted.
    pub const IGNORED: Verdict = Verdict::new(Outcome::Ignored);

    /// A verdict with the given outcome, not slow, with no retry hint.
    pub const fn new(outcome: Outcome) -> Self {
        Verdict {
            outcome,
            slow: false,
            retry: RetryHint::Never,
        }
    }

    /// The same verdict with a retry hint.
    pub const fn with_retry(mut self, retry: RetryHint) -> Self {
        self.retry = retry;
        self
    }

    /// The same verdict, marked slow or not.
    pub const fn with_slow(mut self, slow: bool) -> Self {
        self.slow = slow;
        self
    }

    /// Success, failure or ignored.
    pub const fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// Whether the call took at least the route's slow-call threshold.
    pub const fn is_slow(&self) -> bool {
        self.slow
    }

    /// Whether a retry may help, and when.
    pub const fn retry(&self) -> RetryHint {
        self.retry
    }

    /// Shorthand for `outcome() == Outcome::Failure`.
    pub const fn is_failure(&self) -> bool {
        matches!(self.outcome, Outcome::Failure)
    }
}

/// What a classifier can tell from a response head.
///
/// Closed: a verdict is known from the head or only at the end of the body, the two places
/// a response carries its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classified {
    /// The verdict is known from the status line and headers.
    Ready(Verdict),
    /// The verdict depends on the trailers (gRPC): the layers wrap the body in a
    /// [`ClassifiedBody`](crate::ClassifiedBody) and classify at end of stream.
    AtEndOfStream,
}

impl From<Verdict> for Classified {
    /// A verdict known from the response head: [`Classified::Ready`].
    fn from(verdict: Verdict) -> Self {
        Classified::Ready(verdict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn retry_after_seconds_and_dates() {
        assert_eq!(
            RetryAfter::parse(&HeaderValue::from_static("2")),
            Some(RetryAfter::Delay(Duration::from_secs(2)))
        );
        assert_eq!(
            RetryAfter::parse(&HeaderValue::from_static(" 120 ")),
            Some(RetryAfter::Delay(Duration::from_secs(120)))
        );
        let date = RetryAfter::parse(&HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"))
            .expect("an IMF-fixdate parses");
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(date, RetryAfter::At(at));
        assert_eq!(
            date.delay_from(at - Duration::from_secs(5)),
            Duration::from_secs(5)
        );
        assert_eq!(date.delay_from(at + Duration::from_secs(5)), Duration::ZERO);
    }

    #[test]
    fn malformed_retry_after_is_ignored() {
        for bad in ["", "-1", "1.5", "soon", "Sun, 99 Nov 1994 08:49:37 GMT"] {
            assert_eq!(
                RetryAfter::parse(&HeaderValue::from_static(bad)),
                None,
                "{bad:?}"
            );
        }
        assert_eq!(
            RetryAfter::parse(&HeaderValue::from_static("99999999999999999999999")),
            Some(RetryAfter::Delay(Duration::from_secs(u64::MAX)))
        );
    }

    #[test]
    fn verdict_builders() {
        let v = Verdict::FAILURE
            .with_retry(RetryHint::Retryable)
            .with_slow(true);
        assert!(v.is_failure());
        assert!(v.is_slow());
        assert_eq!(v.retry(), RetryHint::Retryable);
        assert_eq!(Verdict::SUCCESS.outcome(), Outcome::Success);
        assert!(!Verdict::IGNORED.is_slow());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]

        /// Arbitrary bytes: no panic; a delay comes only from digits (saturating, never
        /// overflowing), a date only from a text that is an HTTP-date.
        #[test]
        fn retry_after_from_arbitrary_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)) {
            if let Ok(value) = HeaderValue::from_bytes(&bytes) {
                match RetryAfter::parse(&value) {
                    Some(RetryAfter::Delay(d)) => {
                        let text = value.to_str().unwrap().trim();
                        proptest::prop_assert!(!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()));
                        proptest::prop_assert_eq!(d.as_secs(), text.parse::<u64>().unwrap_or(u64::MAX));
                    }
                    Some(RetryAfter::At(at)) => {
                        let text = value.to_str().unwrap().trim();
                        proptest::prop_assert_eq!(httpdate::parse_http_date(text).ok(), Some(at));
                    }
                    None => {}
                }
            }
        }

        /// Valid values give their delay or date; huge numbers saturate; one byte changed
        /// gives a value of the right kind or none.
        #[test]
        fn retry_after_near_valid(
            secs in proptest::prelude::any::<u64>(),
            huge in proptest::prelude::any::<u128>(),
            date_secs in 0u64..253_402_300_799,
            at in 0usize..40,
            byte in 0x20u8..0x7f,
        ) {
            let delay = HeaderValue::from_str(&secs.to_string()).unwrap();
            proptest::prop_assert_eq!(RetryAfter::parse(&delay), Some(RetryAfter::Delay(Duration::from_secs(secs))));
            let long = HeaderValue::from_str(&format!("{huge}{huge}")).unwrap();
            proptest::prop_assert_eq!(RetryAfter::parse(&long), Some(RetryAfter::Delay(Duration::from_secs(u64::MAX))));
            let when = SystemTime::UNIX_EPOCH + Duration::from_secs(date_secs);
            let text = httpdate::fmt_http_date(when);
            let date = HeaderValue::from_str(&text).unwrap();
            proptest::prop_assert_eq!(RetryAfter::parse(&date), Some(RetryAfter::At(when)));
            let mut mutated = text.into_bytes();
            let at = at % mutated.len();
            mutated[at] = byte;
            let value = HeaderValue::from_bytes(&mutated).unwrap();
            if let Some(RetryAfter::At(at)) = RetryAfter::parse(&value) {
                proptest::prop_assert_eq!(httpdate::parse_http_date(value.to_str().unwrap().trim()).ok(), Some(at));
            }
        }
    }
}
