//! The result codes of recorded calls: an HTTP status, an error kind or a gRPC code, each
//! one number below [`RESULT_CODES`], and the words a log writes them with.

/// Result codes: HTTP statuses are themselves; error kinds and gRPC codes come after.
pub(crate) const ERROR_BASE: u16 = 1000;
/// gRPC codes are `GRPC_BASE + code`.
pub(crate) const GRPC_BASE: u16 = 1100;
/// One past the largest result code.
pub(crate) const RESULT_CODES: usize = GRPC_BASE as usize + 17;

/// The error kinds a log may name, in code order, and whether each is a failure of the
/// dependency (`true`) or says nothing about it (`false`: ignored).
pub(crate) const ERROR_KINDS: [(&str, bool); 13] = [
    ("timeout", true),
    ("reset", true),
    ("refused", true),
    ("connect_timeout", true),
    ("connect_error", true),
    ("tls", true),
    ("eof", true),
    ("error", true),
    ("cancelled", false),
    ("circuit_open", false),
    ("overloaded", false),
    ("deadline_exceeded", false),
    ("rejected", false),
];

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
