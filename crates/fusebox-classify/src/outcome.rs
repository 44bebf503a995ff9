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

impl Classified {
    /// This verdict as two words, for a store that is written and read a word at a time
    /// ([`SharedVerdict`](crate::SharedVerdict)); [`from_words`](Self::from_words) gives
    /// it back as it was. The first word is a `Retry-After`'s whole seconds (of its delay,
    /// or of its date's distance from the Unix epoch); the second its nanoseconds (bits
    /// 0–31), the outcome (32–33), slowness (34), the kind of retry hint (35–37) and
    /// whether the verdict is ready (38).
    #[inline]
    pub(crate) fn to_words(self) -> [u64; 2] {
        let Classified::Ready(v) = self else {
            return [0, 0];
        };
        let (kind, after) = match v.retry {
            RetryHint::Never => (0, Duration::ZERO),
            RetryHint::Retryable => (1, Duration::ZERO),
            RetryHint::NotSent => (2, Duration::ZERO),
            RetryHint::After(after) => after_words(after),
        };
        let outcome = match v.outcome {
            Outcome::Success => 0,
            Outcome::Failure => 1,
            Outcome::Ignored => 2,
        };
        [
            after.as_secs(),
            u64::from(after.subsec_nanos())
                | outcome << 32
                | u64::from(v.slow) << 34
                | kind << 35
                | 1 << 38,
        ]
    }

    /// The verdict [`to_words`](Self::to_words) made these words of.
    #[inline]
    pub(crate) fn from_words([secs, rest]: [u64; 2]) -> Classified {
        if rest & 1 << 38 == 0 {
            return Classified::AtEndOfStream;
        }
        let outcome = match rest >> 32 & 0b11 {
            0 => Outcome::Success,
            1 => Outcome::Failure,
            _ => Outcome::Ignored,
        };
        // Under a second of nanoseconds: no carry into the seconds.
        let after = Duration::new(secs, (rest & 0xffff_ffff) as u32 % 1_000_000_000);
        let epoch = SystemTime::UNIX_EPOCH;
        let retry = match rest >> 35 & 0b111 {
            0 => RetryHint::Never,
            1 => RetryHint::Retryable,
            2 => RetryHint::NotSent,
            3 => RetryHint::After(RetryAfter::Delay(after)),
            // The distance came from a `SystemTime`: the epoch moved by it is one.
            4 => RetryHint::After(RetryAfter::At(epoch.checked_add(after).unwrap_or(epoch))),
            _ => RetryHint::After(RetryAfter::At(epoch.checked_sub(after).unwrap_or(epoch))),
        };
        Classified::Ready(Verdict {
            outcome,
            slow: rest & 1 << 34 != 0,
            retry,
        })
    }
}

/// A `Retry-After`'s kind (see [`Classified::to_words`]) and its delay or distance from
/// the Unix epoch.
#[cold]
fn after_words(after: RetryAfter) -> (u64, Duration) {
    match after {
        RetryAfter::Delay(delay) => (3, delay),
        RetryAfter::At(at) => match at.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(since) => (4, since),
            Err(before) => (5, before.duration()),
        },
    }
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

    /// Every kind of verdict, as the words a shared verdict keeps, comes back as it was.
    #[test]
    fn words_give_a_verdict_back() {
        let epoch = SystemTime::UNIX_EPOCH;
        let hints = [
            RetryHint::Never,
            RetryHint::Retryable,
            RetryHint::NotSent,
            RetryHint::After(RetryAfter::Delay(Duration::ZERO)),
            RetryHint::After(RetryAfter::Delay(Duration::new(3, 250_000_000))),
            RetryHint::After(RetryAfter::Delay(Duration::MAX)),
            RetryHint::After(RetryAfter::At(epoch)),
            RetryHint::After(RetryAfter::At(epoch + Duration::new(784_111_777, 1))),
            RetryHint::After(RetryAfter::At(epoch - Duration::new(86_400, 999_999_999))),
        ];
        assert_eq!(
            Classified::from_words(Classified::AtEndOfStream.to_words()),
            Classified::AtEndOfStream
        );
        for outcome in [Outcome::Success, Outcome::Failure, Outcome::Ignored] {
            for slow in [false, true] {
                for hint in hints {
                    let verdict =
                        Classified::Ready(Verdict::new(outcome).with_retry(hint).with_slow(slow));
                    assert_eq!(Classified::from_words(verdict.to_words()), verdict);
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]

        /// Any delay, and any date the platform can hold, comes back through the words
        /// exactly.
        #[test]
        fn words_keep_any_retry_after(
            secs in proptest::prelude::any::<u64>(),
            nanos in 0u32..1_000_000_000,
            before in proptest::prelude::any::<bool>(),
            slow in proptest::prelude::any::<bool>(),
        ) {
            let span = Duration::new(secs, nanos);
            let epoch = SystemTime::UNIX_EPOCH;
            let date = if before { epoch.checked_sub(span) } else { epoch.checked_add(span) };
            for after in std::iter::once(RetryAfter::Delay(span)).chain(date.map(RetryAfter::At)) {
                let verdict = Classified::Ready(
                    Verdict::FAILURE.with_retry(RetryHint::After(after)).with_slow(slow),
                );
                proptest::prop_assert_eq!(Classified::from_words(verdict.to_words()), verdict);
            }
        }

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
