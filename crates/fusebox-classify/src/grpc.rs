//! Classification of gRPC responses by `grpc-status`, from the headers of a trailers-only
//! response or from the trailers at the end of the stream (for gRPC-Web, from the trailer
//! frame at the end of the body: [`grpc_web`](crate::grpc_web)).
//!
//! # Missing and malformed statuses
//!
//! A gRPC server must end every response with a `grpc-status`. When the stream ends
//! without one, or with a value that is not a decimal number, the server broke the protocol:
//! the call is classified as [`Code::Unknown`] (a failure by default), which is also what
//! gRPC clients report to their callers. A numeric status outside 0..=16 is `UNKNOWN` too,
//! as the gRPC specification asks. A non-200 HTTP status on a gRPC call (a proxy's 503)
//! maps to a gRPC code as in gRPC's "HTTP to gRPC status code mapping".

use crate::call::Call;
use crate::classifier::Classifier;
use crate::outcome::{Classified, Outcome, RetryAfter, RetryHint, Verdict};
use http::{HeaderMap, StatusCode};
use std::time::Duration;

/// The `grpc-status` header / trailer.
pub const GRPC_STATUS: &str = "grpc-status";
/// The `grpc-retry-pushback-ms` trailer: a server's request to wait before retrying.
pub const GRPC_RETRY_PUSHBACK_MS: &str = "grpc-retry-pushback-ms";

/// The gRPC status codes.
///
/// Closed: gRPC has these seventeen codes; any other number reads as `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[allow(missing_docs)]
pub enum Code {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

impl Code {
    const ALL: [Code; 17] = [
        Code::Ok,
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    /// The code for a number; numbers outside 0..=16 are `Unknown`.
    pub fn from_i32(n: i32) -> Code {
        usize::try_from(n)
            .ok()
            .and_then(|i| Code::ALL.get(i).copied())
            .unwrap_or(Code::Unknown)
    }

    /// Parses a `grpc-status` value (ASCII decimal); anything else is `Unknown`.
    pub fn parse(value: &[u8]) -> Code {
        if value.is_empty() || value.len() > 3 || !value.iter().all(u8::is_ascii_digit) {
            return Code::Unknown;
        }
        let n = value
            .iter()
            .fold(0i32, |acc, d| acc * 10 + i32::from(d - b'0'));
        Code::from_i32(n)
    }

    /// The gRPC code for a non-200 HTTP status on a gRPC call (gRPC's HTTP mapping).
    pub fn from_http(status: StatusCode) -> Code {
        match status.as_u16() {
            400 => Code::Internal,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::Unimplemented,
            429 | 502 | 503 | 504 => Code::Unavailable,
            _ => Code::Unknown,
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u8)
    }
}

/// Classifies gRPC responses by status code.
///
/// Defaults:
/// - **failure**: UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN, DATA_LOSS;
/// - **ignored**: RESOURCE_EXHAUSTED (a route opts in with
///   [`count_resource_exhausted`](GrpcClassifier::count_resource_exhausted)) and CANCELLED
///   (the caller gave up; it says nothing about the server);
/// - **success**: OK and every other code — the server answered, the caller asked wrongly;
/// - **retryable**: UNAVAILABLE and RESOURCE_EXHAUSTED, honouring `grpc-retry-pushback-ms`
///   (a negative pushback means "do not retry").
///
/// The classifier remembers which codes were set: a named route's classifier takes the
/// default route's settings for every code it does not set itself ([`Classifier::inherit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcClassifier {
    failure: u32,
    ignored: u32,
    retryable: u32,
    /// Codes whose outcome was set.
    outcome_set: u32,
    /// Codes whose retryability was set.
    retry_set: u32,
}

impl Default for GrpcClassifier {
    fn default() -> Self {
        let bits = |codes: &[Code]| codes.iter().fold(0u32, |acc, c| acc | c.bit());
        GrpcClassifier {
            failure: bits(&[
                Code::Unavailable,
                Code::DeadlineExceeded,
                Code::Internal,
                Code::Unknown,
                Code::DataLoss,
            ]),
            ignored: bits(&[Code::ResourceExhausted, Code::Cancelled]),
            retryable: bits(&[Code::Unavailable, Code::ResourceExhausted]),
            outcome_set: 0,
            retry_set: 0,
        }
    }
}

impl GrpcClassifier {
    /// The defaults described above.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts `code` as a failure.
    pub fn failure(mut self, code: Code) -> Self {
        self.failure |= code.bit();
        self.ignored &= !code.bit();
        self.outcome_set |= code.bit();
        self
    }

    /// Counts `code` as a success.
    pub fn success(mut self, code: Code) -> Self {
        self.failure &= !code.bit();
        self.ignored &= !code.bit();
        self.outcome_set |= code.bit();
        self
    }

    /// Does not count `code`.
    pub fn ignore(mut self, code: Code) -> Self {
        self.failure &= !code.bit();
        self.ignored |= code.bit();
        self.outcome_set |= code.bit();
        self
    }

    /// Whether a retry may help after `code`.
    pub fn retryable(mut self, code: Code, retryable: bool) -> Self {
        if retryable {
            self.retryable |= code.bit();
        } else {
            self.retryable &= !code.bit();
        }
        self.retry_set |= code.bit();
        self
    }

    /// Takes from `default` the outcome and retryability of every code that `default` set
    /// and this classifier did not.
    pub fn inherit(&mut self, default: &GrpcClassifier) {
        let outcome = default.outcome_set & !self.outcome_set;
        self.failure = (self.failure & !outcome) | (default.failure & outcome);
        self.ignored = (self.ignored & !outcome) | (default.ignored & outcome);
        self.outcome_set |= outcome;
        let retry = default.retry_set & !self.retry_set;
        self.retryable = (self.retryable & !retry) | (default.retryable & retry);
        self.retry_set |= retry;
    }

    /// Counts RESOURCE_EXHAUSTED as a failure (`true`) or ignores it (`false`, default).
    pub fn count_resource_exhausted(self, count: bool) -> Self {
        if count {
            self.failure(Code::ResourceExhausted)
        } else {
            self.ignore(Code::ResourceExhausted)
        }
    }

    /// The outcome of `code`.
    pub fn outcome(&self, code: Code) -> Outcome {
        if self.failure & code.bit() != 0 {
            Outcome::Failure
        } else if self.ignored & code.bit() != 0 {
            Outcome::Ignored
        } else {
            Outcome::Success
        }
    }

    /// The verdict for `code`, with pushback read from `metadata` (headers or trailers).
    pub fn verdict(&self, code: Code, metadata: Option<&HeaderMap>) -> Verdict {
        let outcome = self.outcome(code);
        if outcome == Outcome::Success || self.retryable & code.bit() == 0 {
            return Verdict::new(outcome);
        }
        let pushback = metadata
            .and_then(|m| m.get(GRPC_RETRY_PUSHBACK_MS))
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.trim().parse::<i64>().ok());
        let retry = match pushback {
            Some(ms) if ms < 0 => RetryHint::Never,
            Some(ms) => {
                RetryHint::After(RetryAfter::Delay(Duration::from_millis(ms.unsigned_abs())))
            }
            None => RetryHint::Retryable,
        };
        Verdict::new(outcome).with_retry(retry)
    }

    /// The status code carried by `metadata`, `Unknown` when missing or malformed.
    pub fn code_of(metadata: Option<&HeaderMap>) -> Code {
        match metadata.and_then(|m| m.get(GRPC_STATUS)) {
            Some(value) => Code::parse(value.as_bytes()),
            None => Code::Unknown,
        }
    }
}

impl Classifier for GrpcClassifier {
    fn classify_response(
        &self,
        _call: &Call<'_>,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Classified {
        if status != StatusCode::OK {
            return Classified::Ready(self.verdict(Code::from_http(status), Some(headers)));
        }
        match headers.get(GRPC_STATUS) {
            // A trailers-only response: the status is in the headers.
            Some(value) => {
                Classified::Ready(self.verdict(Code::parse(value.as_bytes()), Some(headers)))
            }
            None => Classified::AtEndOfStream,
        }
    }

    fn classify_eos(&self, _call: &Call<'_>, trailers: Option<&HeaderMap>) -> Verdict {
        self.verdict(Self::code_of(trailers), trailers)
    }

    fn inherit(&mut self, default: &Self) {
        GrpcClassifier::inherit(self, default);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::RouteId;
    use http::{HeaderValue, Method};

    fn call() -> Call<'static> {
        Call::new(RouteId::DEFAULT, "/pkg.Svc/M", &Method::POST, false)
    }

    fn trailers(status: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(GRPC_STATUS, HeaderValue::from_static(status));
        h
    }

    #[test]
    fn parse_codes() {
        assert_eq!(Code::parse(b"0"), Code::Ok);
        assert_eq!(Code::parse(b"14"), Code::Unavailable);
        assert_eq!(Code::parse(b"16"), Code::Unauthenticated);
        for bad in [&b""[..], b"17", b"-1", b"x", b"1 4", b"0000", b"999"] {
            assert_eq!(Code::parse(bad), Code::Unknown, "{bad:?}");
        }
    }

    #[test]
    fn defaults() {
        let c = GrpcClassifier::new();
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::Internal,
            Code::Unknown,
            Code::DataLoss,
        ] {
            assert_eq!(c.outcome(code), Outcome::Failure, "{code:?}");
        }
        for code in [
            Code::Ok,
            Code::NotFound,
            Code::InvalidArgument,
            Code::PermissionDenied,
        ] {
            assert_eq!(c.outcome(code), Outcome::Success, "{code:?}");
        }
        assert_eq!(c.outcome(Code::ResourceExhausted), Outcome::Ignored);
        assert_eq!(c.outcome(Code::Cancelled), Outcome::Ignored);
        assert_eq!(
            c.count_resource_exhausted(true)
                .outcome(Code::ResourceExhausted),
            Outcome::Failure
        );
    }

    #[test]
    fn trailers_only_and_end_of_stream() {
        let c = GrpcClassifier::new();
        assert_eq!(
            c.classify_response(&call(), StatusCode::OK, &trailers("14")),
            Classified::Ready(Verdict::FAILURE.with_retry(RetryHint::Retryable))
        );
        assert_eq!(
            c.classify_response(&call(), StatusCode::OK, &HeaderMap::new()),
            Classified::AtEndOfStream
        );
        assert_eq!(
            c.classify_eos(&call(), Some(&trailers("0"))),
            Verdict::SUCCESS
        );
        assert_eq!(
            c.classify_eos(&call(), Some(&trailers("13"))),
            Verdict::FAILURE
        );
        // Missing trailers, missing or malformed status: UNKNOWN, a failure.
        assert_eq!(c.classify_eos(&call(), None), Verdict::FAILURE);
        assert_eq!(
            c.classify_eos(&call(), Some(&HeaderMap::new())),
            Verdict::FAILURE
        );
        assert_eq!(
            c.classify_eos(&call(), Some(&trailers("OK"))),
            Verdict::FAILURE
        );
        // A proxy's 503 in front of a gRPC service.
        assert!(matches!(
            c.classify_response(&call(), StatusCode::SERVICE_UNAVAILABLE, &HeaderMap::new()),
            Classified::Ready(v) if v.is_failure()
        ));
    }

    #[test]
    fn pushback() {
        let c = GrpcClassifier::new();
        let mut t = trailers("14");
        t.insert(GRPC_RETRY_PUSHBACK_MS, HeaderValue::from_static("250"));
        assert_eq!(
            c.classify_eos(&call(), Some(&t)).retry(),
            RetryHint::After(RetryAfter::Delay(Duration::from_millis(250)))
        );
        t.insert(GRPC_RETRY_PUSHBACK_MS, HeaderValue::from_static("-1"));
        assert_eq!(c.classify_eos(&call(), Some(&t)).retry(), RetryHint::Never);
        t.insert(GRPC_RETRY_PUSHBACK_MS, HeaderValue::from_static("soon"));
        assert_eq!(
            c.classify_eos(&call(), Some(&t)).retry(),
            RetryHint::Retryable
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]

        /// Arbitrary bytes: no panic; a code other than UNKNOWN only from 1 to 3 digits
        /// naming it.
        #[test]
        fn grpc_status_from_arbitrary_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..8)) {
            let code = Code::parse(&bytes);
            if code != Code::Unknown {
                proptest::prop_assert!((1..=3).contains(&bytes.len()));
                let n: i32 = std::str::from_utf8(&bytes).unwrap().parse().unwrap();
                proptest::prop_assert_eq!(Code::from_i32(n), code);
            }
        }

        /// Numbers: 0..=16 are their code, anything larger (however large) UNKNOWN.
        #[test]
        fn grpc_status_near_valid(n in proptest::prelude::any::<u64>(), small in 0u8..=16, zeros in 0usize..3) {
            let text = n.to_string();
            let expected = if n <= 16 { Code::from_i32(n as i32) } else { Code::Unknown };
            proptest::prop_assert_eq!(Code::parse(text.as_bytes()), expected);
            let padded = format!("{}{small}", "0".repeat(zeros));
            let expected = if padded.len() <= 3 { Code::from_i32(i32::from(small)) } else { Code::Unknown };
            proptest::prop_assert_eq!(Code::parse(padded.as_bytes()), expected);
        }

        /// `grpc-retry-pushback-ms` of any value: no panic; a number of milliseconds is a
        /// delay, a negative one means never, anything else an ordinary retry.
        #[test]
        fn pushback_of_any_value(ms in proptest::prelude::any::<i64>(), bytes in proptest::collection::vec(0x20u8..0x7f, 0..24)) {
            let c = GrpcClassifier::new();
            let mut t = trailers("14");
            t.insert(GRPC_RETRY_PUSHBACK_MS, HeaderValue::from_str(&ms.to_string()).unwrap());
            let expected = if ms < 0 {
                RetryHint::Never
            } else {
                RetryHint::After(RetryAfter::Delay(Duration::from_millis(ms.unsigned_abs())))
            };
            proptest::prop_assert_eq!(c.classify_eos(&call(), Some(&t)).retry(), expected);
            t.insert(GRPC_RETRY_PUSHBACK_MS, HeaderValue::from_bytes(&bytes).unwrap());
            let v = c.classify_eos(&call(), Some(&t));
            proptest::prop_assert!(v.is_failure());
        }

        /// `grpc-message` says nothing about health: whatever it holds, the verdict is the
        /// status's.
        #[test]
        fn grpc_message_never_changes_the_verdict(status in 0u8..=20, bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let c = GrpcClassifier::new();
            let mut t = HeaderMap::new();
            t.insert(GRPC_STATUS, HeaderValue::from_str(&status.to_string()).unwrap());
            let plain = c.classify_eos(&call(), Some(&t));
            if let Ok(message) = HeaderValue::from_bytes(&bytes) {
                t.insert("grpc-message", message);
                proptest::prop_assert_eq!(c.classify_eos(&call(), Some(&t)), plain);
            }
        }
    }
}
