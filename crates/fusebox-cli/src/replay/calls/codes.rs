//! The result codes of recorded calls: an HTTP status, an error kind or a gRPC code, each
//! one number below [`RESULT_CODES`], the words a log writes them with, and the answer each
//! stands for, which the breaker judges ([`judge_result`]) as it judges a live call.

use fusebox_breaker::judge::{Answer, Judged, judge};
use fusebox_classify::error::{
    BudgetExhausted, CircuitOpen, DeadlineExceeded, Elapsed, Overloaded,
};
use fusebox_classify::{BoxError, Call, Route, StandardClassifier};
use http::{HeaderMap, HeaderValue, StatusCode};
use std::io;
use std::time::Duration;

/// Result codes: HTTP statuses are themselves; error kinds and gRPC codes come after.
pub(crate) const ERROR_BASE: u16 = 1000;
/// gRPC codes are `GRPC_BASE + code`.
pub(crate) const GRPC_BASE: u16 = 1100;
/// One past the largest result code.
pub(crate) const RESULT_CODES: usize = GRPC_BASE as usize + 17;

/// How a call that a log records as an error kind ended, as the breaker saw it.
pub(crate) enum Ending {
    /// The service the breaker wraps answered with this error.
    Error(BoxError),
    /// The caller gave up.
    Cancelled,
}

fn io_error(kind: io::ErrorKind) -> Ending {
    Ending::Error(Box::new(io::Error::from(kind)))
}

/// Makes the ending an error kind stands for.
type MakeEnding = fn() -> Ending;

/// The error kinds a log may name, in code order, each with the error the breaker would
/// have seen: fusebox's own errors for its own rejections and timeouts, the `io::Error`
/// of a transport failure, and a plain error for anything else.
pub(crate) const ERROR_KINDS: [(&str, MakeEnding); 13] = [
    ("timeout", || {
        Ending::Error(Box::new(Elapsed::new("recorded".into(), Duration::ZERO)))
    }),
    ("reset", || io_error(io::ErrorKind::ConnectionReset)),
    ("refused", || io_error(io::ErrorKind::ConnectionRefused)),
    ("connect_timeout", || io_error(io::ErrorKind::TimedOut)),
    ("connect_error", || {
        Ending::Error(Box::new(io::Error::other("cannot connect")))
    }),
    ("tls", || Ending::Error("TLS handshake failed".into())),
    ("eof", || io_error(io::ErrorKind::UnexpectedEof)),
    ("error", || Ending::Error("the call failed".into())),
    ("cancelled", || Ending::Cancelled),
    ("circuit_open", || {
        Ending::Error(Box::new(CircuitOpen::new(
            "recorded".into(),
            None,
            Duration::ZERO,
            false,
        )))
    }),
    ("overloaded", || {
        Ending::Error(Box::new(Overloaded::new(0, Duration::ZERO)))
    }),
    ("deadline_exceeded", || {
        Ending::Error(Box::new(DeadlineExceeded::new()))
    }),
    // A retry budget with nothing left: the one local rejection without a word of its own.
    ("rejected", || {
        Ending::Error(Box::new(BudgetExhausted::new(Box::new(
            DeadlineExceeded::new(),
        ))))
    }),
];

/// How the breaker judges a call on `route` recorded with result `code` (slowness aside:
/// the call takes no time here), with `count_overloaded`; `None` for a number that is no
/// result code. An HTTP status is a response with that status and no headers, a gRPC code
/// a trailers-only gRPC response with that `grpc-status`, an error kind its error.
pub(crate) fn judge_result(
    code: u16,
    route: &Route<StandardClassifier>,
    call: &Call<'_>,
    count_overloaded: bool,
) -> Option<Judged> {
    let judged = |answer: Answer<'_>| judge(route, call, answer, Duration::ZERO, count_overloaded);
    if code < ERROR_BASE {
        let status = StatusCode::from_u16(code).ok()?;
        let headers = HeaderMap::new();
        return Some(judged(Answer::Response {
            status,
            headers: &headers,
            trailers: None,
        }));
    }
    if code >= GRPC_BASE {
        let n = code - GRPC_BASE;
        if usize::from(n) >= GRPC_NAMES.len() {
            return None;
        }
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        headers.insert("grpc-status", HeaderValue::from(n));
        return Some(judged(Answer::Response {
            status: StatusCode::OK,
            headers: &headers,
            trailers: None,
        }));
    }
    let (_, ending) = ERROR_KINDS.get(usize::from(code - ERROR_BASE))?;
    Some(match ending() {
        Ending::Error(error) => judged(Answer::Error(&*error)),
        Ending::Cancelled => judged(Answer::Cancelled),
    })
}

const GRPC_NAMES: [&str; 17] = [
    "ok",
    "cancelled",
    "unknown",
    "invalid_argument",
    "deadline_exceeded",
    "not_found",
    "already_exists",
    "permission_denied",
    "resource_exhausted",
    "failed_precondition",
    "aborted",
    "out_of_range",
    "unimplemented",
    "internal",
    "unavailable",
    "data_loss",
    "unauthenticated",
];

/// A result code from its text.
#[inline]
pub(crate) fn parse_result(s: &[u8]) -> Option<u16> {
    if s.len() == 3 && s.iter().all(u8::is_ascii_digit) {
        let n = u16::from(s[0] - b'0') * 100 + u16::from(s[1] - b'0') * 10 + u16::from(s[2] - b'0');
        return (n >= 100).then_some(n);
    }
    parse_result_word(s)
}

#[cold]
fn parse_result_word(s: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(s).ok()?.trim().to_ascii_lowercase();
    if let Some(code) = text.strip_prefix("grpc:") {
        if let Ok(n) = code.parse::<u16>() {
            return (n <= 16).then_some(GRPC_BASE + n);
        }
        let code = code.replace('-', "_");
        return GRPC_NAMES
            .iter()
            .position(|n| *n == code)
            .map(|i| GRPC_BASE + i as u16);
    }
    ERROR_KINDS
        .iter()
        .position(|k| k.0 == text)
        .map(|i| ERROR_BASE + i as u16)
}
