//! Classification of plain HTTP responses by status code.

use crate::call::Call;
use crate::classifier::Classifier;
use crate::outcome::{Classified, Outcome, RetryAfter, RetryHint, Verdict};
use http::{HeaderMap, StatusCode, header};
use std::ops::RangeInclusive;

/// A set of HTTP status codes (100..=999), one bit each: membership is a shift and a mask.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct StatusSet {
    bits: [u64; 16],
}

impl StatusSet {
    /// The empty set.
    pub const fn new() -> Self {
        StatusSet { bits: [0; 16] }
    }

    /// Whether `code` is in the set.
    #[inline]
    pub fn contains(&self, code: u16) -> bool {
        let code = code as usize;
        code < 1024 && self.bits[code / 64] & (1 << (code % 64)) != 0
    }

    /// Adds `code` (codes outside 100..=999 are not HTTP statuses and are skipped).
    pub fn insert(&mut self, code: u16) {
        if (100..=999).contains(&code) {
            let code = code as usize;
            self.bits[code / 64] |= 1 << (code % 64);
        }
    }

    /// Removes `code`.
    pub fn remove(&mut self, code: u16) {
        if code < 1024 {
            let code = code as usize;
            self.bits[code / 64] &= !(1 << (code % 64));
        }
    }

    /// The codes in the set, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (100u16..=999).filter(|c| self.contains(*c))
    }
}

impl std::fmt::Debug for StatusSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl FromIterator<u16> for StatusSet {
    fn from_iter<I: IntoIterator<Item = u16>>(iter: I) -> Self {
        let mut set = StatusSet::new();
        for code in iter {
            set.insert(code);
        }
        set
    }
}

/// Classifies HTTP responses by status code.
///
/// Defaults:
/// - **failure**: 500, 502, 503, 504, and any status of 600 or more (not HTTP);
/// - **ignored**: 429 Too Many Requests (a route opts in with
///   [`count_too_many_requests`](HttpClassifier::count_too_many_requests));
/// - **success**: everything else: 2xx, 3xx, and 4xx — a caller's bad request says nothing
///   about the dependency's health;
/// - **retryable**: 502, 503, 504 and 429, honouring `Retry-After` when present.
///
/// Each code can be moved with [`failure`](HttpClassifier::failure),
/// [`success`](HttpClassifier::success), [`ignore`](HttpClassifier::ignore) and the range
/// variants. The classifier remembers which codes were set so: a named route's classifier
/// takes the default route's settings for every code it does not set itself
/// ([`Classifier::inherit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpClassifier {
    failure: StatusSet,
    ignored: StatusSet,
    retryable: StatusSet,
    /// Codes whose outcome was set (not left at the default).
    outcome_set: StatusSet,
    /// Codes whose retryability was set.
    retry_set: StatusSet,
}

impl Default for HttpClassifier {
    fn default() -> Self {
        let mut failure: StatusSet = [500, 502, 503, 504].into_iter().collect();
        for code in 600..=999 {
            failure.insert(code);
        }
        HttpClassifier {
            failure,
            ignored: [429].into_iter().collect(),
            retryable: [429, 502, 503, 504].into_iter().collect(),
            outcome_set: StatusSet::default(),
            retry_set: StatusSet::default(),
        }
    }
}

impl HttpClassifier {
    /// The defaults described above.
    pub fn new() -> Self {
        Self::default()
    }

    fn set_outcome(&mut self, code: u16, outcome: Outcome) {
        match outcome {
            Outcome::Failure => {
                self.failure.insert(code);
                self.ignored.remove(code);
            }
            Outcome::Ignored => {
                self.failure.remove(code);
                self.ignored.insert(code);
            }
            Outcome::Success => {
                self.failure.remove(code);
                self.ignored.remove(code);
            }
        }
        self.outcome_set.insert(code);
    }

    fn set_retryable(&mut self, code: u16, retryable: bool) {
        if retryable {
            self.retryable.insert(code);
        } else {
            self.retryable.remove(code);
        }
        self.retry_set.insert(code);
    }

    /// Counts `code` as a failure.
    pub fn failure(mut self, code: u16) -> Self {
        self.set_outcome(code, Outcome::Failure);
        self
    }

    /// Counts every code in `codes` as a failure.
    pub fn failure_range(mut self, codes: RangeInclusive<u16>) -> Self {
        for code in codes {
            self = self.failure(code);
        }
        self
    }

    /// Counts `code` as a success.
    pub fn success(mut self, code: u16) -> Self {
        self.set_outcome(code, Outcome::Success);
        self
    }

    /// Counts every code in `codes` as a success.
    pub fn success_range(mut self, codes: RangeInclusive<u16>) -> Self {
        for code in codes {
            self = self.success(code);
        }
        self
    }

    /// Does not count `code` at all.
    pub fn ignore(mut self, code: u16) -> Self {
        self.set_outcome(code, Outcome::Ignored);
        self
    }

    /// Does not count any code in `codes`.
    pub fn ignore_range(mut self, codes: RangeInclusive<u16>) -> Self {
        for code in codes {
            self = self.ignore(code);
        }
        self
    }

    /// Whether a retry may help after `code` (when it is a failure or ignored).
    pub fn retryable(mut self, code: u16, retryable: bool) -> Self {
        self.set_retryable(code, retryable);
        self
    }

    /// Takes from `default` the outcome and retryability of every code that `default` set
    /// and this classifier did not.
    pub fn inherit(&mut self, default: &HttpClassifier) {
        for (code, outcome) in default.set_outcomes() {
            if !self.outcome_set.contains(code) {
                self.set_outcome(code, outcome);
            }
        }
        for code in default.retry_set.iter() {
            if !self.retry_set.contains(code) {
                self.set_retryable(code, default.retryable.contains(code));
            }
        }
    }

    /// The codes whose outcome was set (not left at the default), each with its outcome.
    pub fn set_outcomes(&self) -> impl Iterator<Item = (u16, Outcome)> + '_ {
        self.outcome_set.iter().map(|code| {
            let outcome = if self.failure.contains(code) {
                Outcome::Failure
            } else if self.ignored.contains(code) {
                Outcome::Ignored
            } else {
                Outcome::Success
            };
            (code, outcome)
        })
    }

    /// Counts 429 Too Many Requests as a failure (`true`) or ignores it (`false`, the
    /// default). Whether a partner's throttling should open a breaker is a per-route choice.
    pub fn count_too_many_requests(self, count: bool) -> Self {
        if count {
            self.failure(429)
        } else {
            self.ignore(429)
        }
    }

    /// The outcome of `status`, without retry information.
    #[inline]
    pub fn outcome(&self, status: StatusCode) -> Outcome {
        let code = status.as_u16();
        if self.failure.contains(code) {
            Outcome::Failure
        } else if self.ignored.contains(code) {
            Outcome::Ignored
        } else {
            Outcome::Success
        }
    }

    /// The full verdict on a response head.
    #[inline]
    pub fn verdict(&self, status: StatusCode, headers: &HeaderMap) -> Verdict {
        let outcome = self.outcome(status);
        if outcome == Outcome::Success || !self.retryable.contains(status.as_u16()) {
            return Verdict::new(outcome);
        }
        let retry = match headers.get(header::RETRY_AFTER).and_then(RetryAfter::parse) {
            Some(after) => RetryHint::After(after),
            None => RetryHint::Retryable,
        };
        Verdict::new(outcome).with_retry(retry)
    }
}

impl Classifier for HttpClassifier {
    #[inline]
    fn classify_response(
        &self,
        _call: &Call<'_>,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Classified {
        Classified::Ready(self.verdict(status, headers))
    }

    fn classify_eos(&self, _call: &Call<'_>, _trailers: Option<&HeaderMap>) -> Verdict {
        // Never deferred: the status line decided. Reaching here means a custom wrapper
        // asked anyway; the stream ended normally, so the answer stands as a success.
        Verdict::SUCCESS
    }
    fn inherit(&mut self, default: &Self) {
        HttpClassifier::inherit(self, default);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use proptest::prelude::*;
    use std::time::Duration;

    fn st(code: u16) -> StatusCode {
        StatusCode::from_u16(code).unwrap()
    }

    #[test]
    fn defaults_follow_the_design() {
        let c = HttpClassifier::new();
        for code in [
            200, 201, 204, 301, 304, 400, 401, 403, 404, 409, 422, 501, 505,
        ] {
            assert_eq!(c.outcome(st(code)), Outcome::Success, "{code}");
        }
        for code in [500, 502, 503, 504, 600, 999] {
            assert_eq!(c.outcome(st(code)), Outcome::Failure, "{code}");
        }
        assert_eq!(c.outcome(st(429)), Outcome::Ignored);
        let empty = HeaderMap::new();
        assert_eq!(c.verdict(st(500), &empty).retry(), RetryHint::Never);
        assert_eq!(c.verdict(st(503), &empty).retry(), RetryHint::Retryable);
        assert_eq!(c.verdict(st(200), &empty), Verdict::SUCCESS);
    }

    #[test]
    fn retry_after_is_read_on_retryable_statuses() {
        let c = HttpClassifier::new();
        let mut h = HeaderMap::new();
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("7"));
        let v = c.verdict(st(429), &h);
        assert_eq!(v.outcome(), Outcome::Ignored);
        assert_eq!(
            v.retry(),
            RetryHint::After(RetryAfter::Delay(Duration::from_secs(7)))
        );
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("garbage"));
        assert_eq!(c.verdict(st(503), &h).retry(), RetryHint::Retryable);
    }

    #[test]
    fn overrides() {
        let c = HttpClassifier::new()
            .count_too_many_requests(true)
            .failure_range(400..=403)
            .success(500)
            .ignore(404);
        assert_eq!(c.outcome(st(429)), Outcome::Failure);
        assert_eq!(c.outcome(st(401)), Outcome::Failure);
        assert_eq!(c.outcome(st(500)), Outcome::Success);
        assert_eq!(c.outcome(st(404)), Outcome::Ignored);
        let back = c.count_too_many_requests(false);
        assert_eq!(back.outcome(st(429)), Outcome::Ignored);
    }

    proptest! {
        #[test]
        fn status_set_matches_a_vec(codes in proptest::collection::vec(0u16..1200, 0..50), probe in 0u16..1200) {
            let set: StatusSet = codes.iter().copied().collect();
            let expected = (100..=999).contains(&probe) && codes.contains(&probe);
            prop_assert_eq!(set.contains(probe), expected);
        }
    }
}
