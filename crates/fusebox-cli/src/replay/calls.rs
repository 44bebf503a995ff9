//! Reading recorded calls: CSV or JSON lines, fast.
//!
//! A day of traffic is tens of millions of lines, so the reader scans each line once, in
//! place, without allocating: fields are byte slices of the file, numbers are parsed by
//! hand, and a route is resolved by comparing bytes with the routes seen before (see
//! [`super::Resolver`]). Anything it does not understand is an error naming the file, the
//! line and the reason.
//!
//! # CSV
//!
//! ```text
//! timestamp,route,status,latency_ms
//! 2024-05-01T12:00:00.120Z,GET /orders/{id},200,12.5
//! 2024-05-01T12:00:00.180Z,GET /orders/{id},503,3
//! 2024-05-01T12:00:00.190Z,POST /charges,timeout,800
//! ```
//!
//! The header is optional (without it the columns are in this order). Recognised columns:
//! `timestamp` (or `ts`, `time`), `route`, `status` (or `outcome`, `result`), `error`
//! (used when `status` is empty), and the latency as `latency_ms`, `latency_us`,
//! `latency_s`, `latency_ns` or `latency` (milliseconds unless the value has a unit:
//! `12.5ms`, `1.2s`, `800us`). Lines that are empty or start with `#` are skipped;
//! fields may be double-quoted (without quotes inside).
//!
//! # JSON lines
//!
//! One object per line with the same fields: `{"timestamp": "2024-05-01T12:00:00.120Z",
//! "route": "GET /orders/{id}", "status": 200, "latency_ms": 12.5}`; `"error": "timeout"`
//! in place of `status` (an error kind is read only when there is no status). `null` is
//! the same as leaving a field out. Other fields are ignored.
//!
//! Lines as one serializer writes them — flat, no escapes, numbers without sign or
//! exponent — are read in place in one pass: keys compared with the names above as
//! constants, timestamps in the minute of the line before read by their seconds, statuses
//! and latencies parsed where they stand, the line's end found by the object's end. Any
//! other line goes to a full JSON parser, which reads it to the same call.
//!
//! # Values
//!
//! - **timestamp**: RFC 3339 (`2024-05-01T12:00:00.120Z`, `...+02:00`) or seconds since
//!   the Unix epoch with up to nine decimals (`1714564800.120`; small numbers are fine for
//!   crafted logs). Calls must be in order of their timestamps (the time a call started).
//! - **status**: an HTTP status (100–999), a gRPC status (`grpc:UNAVAILABLE` or
//!   `grpc:14`), or an error kind: `timeout`, `reset`, `refused`, `connect_timeout`,
//!   `connect_error`, `tls`, `eof`, `error` (failures), `cancelled` (ignored: the caller
//!   gave up), `circuit_open`, `overloaded`, `deadline_exceeded`, `rejected` (ignored: a
//!   local rejection that never reached the dependency).
//! - **latency**: how long the call took; it completes at timestamp + latency.

use crate::input::InputError;

/// A parse error on its way out (boxed: see [`CallReader::bad`]).
type Bad = Box<InputError>;

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

/// How the file wrote its timestamps (reports answer in kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeStyle {
    /// RFC 3339.
    #[default]
    Rfc3339,
    /// Seconds since the epoch.
    Seconds,
}

/// The two formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Comma-separated values.
    Csv,
    /// One JSON object per line.
    JsonLines,
}

impl Format {
    /// From the file's extension, else from its first meaningful character.
    pub fn detect(path: &str, data: &[u8]) -> Format {
        let lower = path.to_ascii_lowercase();
        if lower.ends_with(".jsonl") || lower.ends_with(".ndjson") || lower.ends_with(".json") {
            return Format::JsonLines;
        }
        if lower.ends_with(".csv") {
            return Format::Csv;
        }
        match data.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => Format::JsonLines,
            _ => Format::Csv,
        }
    }
}

/// The fields of one line, as they are read.
#[derive(Debug, Default)]
struct Fields<'a> {
    at: Option<u64>,
    route: Option<&'a [u8]>,
    status: Option<&'a [u8]>,
    error: Option<&'a [u8]>,
    latency: Option<u64>,
}

/// One recorded call, as read: the route is still the file's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawCall<'a> {
    /// Start, nanoseconds since the Unix epoch.
    pub at: u64,
    /// The route as written.
    pub route: &'a [u8],
    /// The result code (HTTP status, error kind or gRPC code).
    pub result: u16,
    /// Latency, nanoseconds.
    pub latency: u64,
}

/// A field of a call, as a CSV column or a JSON key names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Column {
    Timestamp,
    Route,
    Status,
    Error,
    /// A latency in this many nanoseconds.
    Latency(u64),
    /// Anything else: skipped.
    Other,
}

/// Reads calls one at a time from a file in memory.
#[derive(Debug)]
pub struct CallReader<'a> {
    file: &'a str,
    data: &'a [u8],
    pos: usize,
    line: u32,
    format: Format,
    columns: Vec<Column>,
    header_done: bool,
    last_at: u64,
    style: Option<TimeStyle>,
    minute: MinuteCache,
}

/// The last RFC 3339 timestamp's minute: consecutive calls share their date, hour, minute
/// and zone, so only the seconds need reading.
#[derive(Debug, Clone, Default)]
struct MinuteCache {
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
    fn get(&self, s: &[u8]) -> Option<u64> {
        self.get_prefix(s)
            .and_then(|(at, len)| (len == s.len()).then_some(at))
    }

    /// A timestamp in the cached minute at the start of `s` (which may go on: a JSON
    /// line's closing quote and the rest), and its length.
    // Always inlined: called once per line, and outlined (as the reading loop grew) the
    // call and its result through memory cost ~5 % of reading a line (callgrind).
    #[inline(always)]
    fn get_prefix(&self, s: &[u8]) -> Option<(u64, usize)> {
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
        let secs = u64::try_from(self.minute_secs).ok()? + second.min(59);
        Some((secs * 1_000_000_000 + nanos, zone_end))
    }

    fn set(&mut self, s: &[u8], minute_secs: i64, zone_start: usize) {
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

/// Powers of ten, 10⁰ to 10⁹.
const POW10: [u64; 10] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
];

/// The nanoseconds of an optional `.fraction` at `i`, and where it ends.
#[inline]
fn fraction(s: &[u8], mut i: usize) -> Option<(u64, usize)> {
    let mut nanos: u64 = 0;
    if s.get(i) == Some(&b'.') {
        i += 1;
        let mut digits = 0;
        while i < s.len() && s[i].is_ascii_digit() {
            if digits < 9 {
                nanos = nanos * 10 + u64::from(s[i] - b'0');
                digits += 1;
            }
            i += 1;
        }
        if digits == 0 {
            return None;
        }
        nanos *= POW10[9 - digits];
    }
    Some((nanos, i))
}

impl<'a> CallReader<'a> {
    /// A reader of `data`, which came from `file`.
    pub fn new(file: &'a str, data: &'a [u8], format: Format) -> Self {
        CallReader {
            file,
            data,
            pos: 0,
            line: 0,
            format,
            columns: vec![
                Column::Timestamp,
                Column::Route,
                Column::Status,
                Column::Latency(1_000_000),
            ],
            header_done: false,
            last_at: 0,
            style: None,
            minute: MinuteCache::default(),
        }
    }

    /// The line of the call last returned (1-based).
    pub fn line(&self) -> u32 {
        self.line
    }

    /// The file's name.
    pub fn file(&self) -> &'a str {
        self.file
    }

    /// How the file writes timestamps (RFC 3339 until a call says otherwise).
    pub fn time_style(&self) -> TimeStyle {
        self.style.unwrap_or_default()
    }

    /// An error at the current line.
    pub fn error(&self, reason: impl Into<String>) -> InputError {
        InputError::at(self.file, self.line, 1, reason)
    }

    /// The same, boxed: the parsing functions return it through every field of every
    /// line, and a small `Result` is cheaper to move than a large one.
    #[cold]
    fn bad(&self, reason: impl Into<String>) -> Bad {
        Box::new(self.error(reason))
    }

    /// The next call, `None` at the end.
    #[inline]
    pub fn next_call(&mut self) -> Result<Option<RawCall<'a>>, InputError> {
        loop {
            if self.pos >= self.data.len() {
                return Ok(None);
            }
            let rest = &self.data[self.pos..];
            // A JSON line that opens its object at once is read straight from the rest of
            // the file: the object's end is the line's end, with no search for it first.
            // Anything else (a comment, a line for the full parser) is split off first.
            if self.format == Format::JsonLines && rest[0] == b'{' {
                self.line += 1;
                if let Some((call, end)) = self.json_fast(rest).map_err(|b| *b)? {
                    self.pos += end + 1;
                    return self.in_order(call);
                }
                self.line -= 1;
            }
            let len = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
            let line = &rest[..len];
            self.pos += len + 1;
            self.line += 1;
            let line = trim_cr(line);
            if line.is_empty() || line[0] == b'#' || line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let call = match self.format {
                Format::Csv => {
                    if !self.header_done {
                        self.header_done = true;
                        if !line[0].is_ascii_digit() && line[0] != b'"' {
                            self.read_header(line).map_err(|b| *b)?;
                            continue;
                        }
                    }
                    self.csv_line(line).map_err(|b| *b)?
                }
                Format::JsonLines => self.json_line(line).map_err(|b| *b)?,
            };
            return self.in_order(call);
        }
    }

    /// `call`, if it starts no earlier than the one before it.
    #[inline]
    fn in_order(&mut self, call: RawCall<'a>) -> Result<Option<RawCall<'a>>, InputError> {
        if call.at < self.last_at {
            return Err(self.error(format!(
                "timestamps go backwards: this call starts {} before the one above it; sort the file by timestamp",
                crate::config::fmt_duration(std::time::Duration::from_nanos(
                    self.last_at - call.at
                ))
            )));
        }
        self.last_at = call.at;
        Ok(Some(call))
    }

    fn read_header(&mut self, line: &[u8]) -> Result<(), Bad> {
        let text = std::str::from_utf8(line).map_err(|_| self.bad("the header is not UTF-8"))?;
        let mut columns = Vec::new();
        for name in text.split(',') {
            let name = name.trim().trim_matches('"').to_ascii_lowercase();
            let column = match name.as_str() {
                "timestamp" | "ts" | "time" | "start" => Column::Timestamp,
                "route" => Column::Route,
                "status" | "outcome" | "result" => Column::Status,
                "error" | "error_kind" => Column::Error,
                "latency_ms" | "duration_ms" | "latency" | "duration" => Column::Latency(1_000_000),
                "latency_us" | "duration_us" => Column::Latency(1_000),
                "latency_ns" | "duration_ns" => Column::Latency(1),
                "latency_s" | "duration_s" => Column::Latency(1_000_000_000),
                _ => Column::Other,
            };
            columns.push(column);
        }
        let has = |c: fn(&Column) -> bool| columns.iter().any(c);
        let mut missing = Vec::new();
        if !has(|c| *c == Column::Timestamp) {
            missing.push("timestamp");
        }
        if !has(|c| *c == Column::Route) {
            missing.push("route");
        }
        if !has(|c| matches!(c, Column::Status | Column::Error)) {
            missing.push("status");
        }
        if !has(|c| matches!(c, Column::Latency(_))) {
            missing.push("latency_ms");
        }
        if !missing.is_empty() {
            return Err(self.bad(format!(
                "the header lacks the column{} {} (expected timestamp, route, status, latency_ms)",
                if missing.len() > 1 { "s" } else { "" },
                missing.join(", ")
            )));
        }
        self.columns = columns;
        Ok(())
    }

    #[inline]
    fn csv_line(&mut self, line: &'a [u8]) -> Result<RawCall<'a>, Bad> {
        let mut fields = Fields::default();
        // Fields are short: a plain loop finds each comma faster than a vectorised search
        // sets up. A field that opens with a quote sends the line to the careful split.
        let mut start = 0;
        let mut count = 0;
        loop {
            let end = line[start..]
                .iter()
                .position(|&b| b == b',')
                .map(|p| start + p);
            let field = &line[start..end.unwrap_or(line.len())];
            if field.first() == Some(&b'"') {
                return self.csv_line_quoted(line);
            }
            self.field(&mut fields, count, field)?;
            count += 1;
            match end {
                Some(p) => start = p + 1,
                None => break,
            }
        }
        self.finish_line(fields, count)
    }

    /// A line with quoted fields, split carefully.
    #[cold]
    fn csv_line_quoted(&mut self, line: &'a [u8]) -> Result<RawCall<'a>, Bad> {
        let mut fields = Fields::default();
        let mut i = 0;
        let mut count = 0;
        loop {
            let (field, next) = if line.get(i) == Some(&b'"') {
                let start = i + 1;
                let end = match line[start..].iter().position(|&b| b == b'"') {
                    Some(p) => start + p,
                    None => return Err(self.bad("a quoted field has no closing quote")),
                };
                let after = end + 1;
                match line.get(after) {
                    None => (&line[start..end], None),
                    Some(b',') => (&line[start..end], Some(after + 1)),
                    Some(_) => return Err(self.bad("a closing quote must end its field")),
                }
            } else {
                match line[i..].iter().position(|&b| b == b',') {
                    Some(p) => (&line[i..i + p], Some(i + p + 1)),
                    None => (&line[i..], None),
                }
            };
            self.field(&mut fields, count, field)?;
            count += 1;
            match next {
                Some(n) => i = n,
                None => return self.finish_line(fields, count),
            }
        }
    }

    /// Reads field `k` of a line into `fields`.
    #[inline]
    fn field(&mut self, fields: &mut Fields<'a>, k: usize, field: &'a [u8]) -> Result<(), Bad> {
        match self.columns.get(k) {
            Some(Column::Timestamp) => fields.at = Some(self.timestamp(trim(field))?),
            Some(Column::Route) => fields.route = Some(trim(field)),
            Some(Column::Status) => fields.status = Some(trim(field)),
            Some(Column::Error) => fields.error = Some(trim(field)),
            Some(Column::Latency(unit)) => fields.latency = Some(self.latency(trim(field), *unit)?),
            Some(Column::Other) => {}
            None => {
                return Err(self.bad(format!("too many fields: expected {}", self.columns.len())));
            }
        }
        Ok(())
    }

    fn finish_line(&self, f: Fields<'a>, count: usize) -> Result<RawCall<'a>, Bad> {
        if count < self.columns.len() {
            return Err(self.bad(format!(
                "too few fields: expected {}, got {count}",
                self.columns.len()
            )));
        }
        let route = f.route.unwrap_or_default();
        if route.is_empty() {
            return Err(self.bad("the route is empty"));
        }
        let result = match (f.status.filter(|s| !s.is_empty()), f.error) {
            (Some(s), _) => self.result(s)?,
            (None, Some(e)) if !e.is_empty() => self.result(e)?,
            _ => return Err(self.bad("no status or error kind")),
        };
        Ok(RawCall {
            at: f.at.unwrap_or_default(),
            route,
            result,
            latency: f.latency.unwrap_or_default(),
        })
    }

    fn json_line(&mut self, line: &'a [u8]) -> Result<RawCall<'a>, Bad> {
        match self.json_fast(line) {
            Ok(Some((call, _))) => Ok(call),
            Ok(None) => self.json_slow(line),
            Err(e) => Err(e),
        }
    }

    /// A flat object of strings without escapes, plain numbers, booleans and nulls,
    /// parsed in place, and where its line ends: `s` is the line, or the rest of the file
    /// from the line's start (the read never crosses a line break, and the object must be
    /// all its line holds). `Ok(None)` sends the line to the full JSON parser (escapes,
    /// nested values, numbers with a sign or an exponent), which reads it to the same
    /// call: null is an absent field, an error kind counts only without a status, and
    /// keys may come in any order.
    ///
    /// The work per line is one pass: a key is told by its first byte and compared whole
    /// with the few names that start with it (see [`JsonCursor::key`]); the values
    /// fusebox reads are parsed where they lie — a timestamp in the minute of the one
    /// before by its seconds alone, a three-digit status, a latency's digits — and other
    /// strings are crossed eight bytes at a time.
    #[inline]
    fn json_fast(&mut self, s: &'a [u8]) -> Result<Option<(RawCall<'a>, usize)>, Bad> {
        let mut p = JsonCursor { s, i: 0 };
        p.ws();
        if !p.eat(b'{') {
            return Err(self.bad("expected a JSON object ({...}) on each line"));
        }
        let mut fields = JsonFields::default();
        p.ws();
        if !p.eat(b'}') {
            loop {
                p.ws();
                let Some(key) = p.key() else {
                    return Ok(None);
                };
                p.ws();
                if !p.eat(b':') {
                    return Ok(None);
                }
                p.ws();
                if !self.json_value(&mut p, key, &mut fields)? {
                    return Ok(None);
                }
                p.ws();
                if p.eat(b',') {
                    continue;
                }
                if p.eat(b'}') {
                    break;
                }
                return Ok(None);
            }
        }
        p.ws();
        if p.i != s.len() && s[p.i] != b'\n' {
            return Ok(None);
        }
        self.complete(fields).map(|call| Some((call, p.i)))
    }

    /// Reads the value of `key` at the cursor into `fields`; `Ok(false)` if it is one the
    /// full parser must read.
    #[inline]
    fn json_value(
        &mut self,
        p: &mut JsonCursor<'a>,
        key: Column,
        fields: &mut JsonFields<'a>,
    ) -> Result<bool, Bad> {
        let value = match key {
            Column::Other => return Ok(p.skip_value()),
            Column::Timestamp => {
                if let Some(at) = p.cached_timestamp(&self.minute) {
                    fields.at = Some(at);
                    return Ok(true);
                }
                p.field()
            }
            Column::Status => {
                if let Some(code) = p.three_digits() {
                    fields.status = Some(code);
                    return Ok(true);
                }
                p.field()
            }
            Column::Latency(unit) => {
                let start = p.i;
                if let Some(d) = p.plain_number() {
                    fields.latency = Some(match d.scale(unit) {
                        Some(ns) => ns,
                        None => self.latency(&p.s[start..p.i], unit)?,
                    });
                    return Ok(true);
                }
                p.field()
            }
            Column::Route | Column::Error => p.field(),
        };
        // Null reads as an absent field.
        let Some(value) = value else {
            return Ok(false);
        };
        let Some(v) = value else {
            return Ok(true);
        };
        match key {
            Column::Timestamp => fields.at = Some(self.timestamp(v)?),
            Column::Route => fields.route = Some(v),
            Column::Status => fields.status = Some(self.result(v)?),
            Column::Error => fields.error = Some(v),
            Column::Latency(unit) => fields.latency = Some(self.latency(v, unit)?),
            Column::Other => {}
        }
        Ok(true)
    }

    /// The call a JSON line describes, or what it lacks. An error kind is read only when
    /// there is no status, wherever either stands on the line.
    #[inline]
    fn complete(&self, f: JsonFields<'a>) -> Result<RawCall<'a>, Bad> {
        let status = match (f.status, f.error) {
            (Some(s), _) => Some(s),
            (None, Some(e)) => Some(self.result(e)?),
            (None, None) => None,
        };
        match (f.at, f.route, status, f.latency) {
            (Some(at), Some(route), Some(result), Some(latency)) if !route.is_empty() => {
                Ok(RawCall {
                    at,
                    route,
                    result,
                    latency,
                })
            }
            (at, route, status, latency) => Err(self.missing([
                (at.is_none(), "timestamp"),
                (route.is_none_or(<[u8]>::is_empty), "route"),
                (status.is_none(), "status (or error)"),
                (latency.is_none(), "latency_ms"),
            ])),
        }
    }

    /// The error for a line without some of the fields every call needs.
    #[cold]
    fn missing(&self, fields: [(bool, &str); 4]) -> Bad {
        let missing: Vec<&str> = fields.iter().filter(|m| m.0).map(|m| m.1).collect();
        self.bad(format!("missing {}", missing.join(", ")))
    }

    /// Lines the fast path declines: parsed fully. The route must then be a plain string
    /// of the file (escaped routes are rejected: route keys never need escapes).
    #[cold]
    fn json_slow(&mut self, line: &'a [u8]) -> Result<RawCall<'a>, Bad> {
        let value: serde_json::Value =
            serde_json::from_slice(line).map_err(|e| self.bad(format!("invalid JSON: {e}")))?;
        let Some(object) = value.as_object() else {
            return Err(self.bad("expected a JSON object ({...}) on each line"));
        };
        let text = |v: &serde_json::Value| match v {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        };
        let mut fields = JsonFields::default();
        let mut error = None;
        for (key, v) in object {
            let Some(t) = text(v) else {
                if v.is_null() {
                    continue;
                }
                if matches!(
                    key.as_str(),
                    "timestamp" | "route" | "status" | "error" | "latency_ms" | "latency"
                ) {
                    return Err(self.bad(format!("{key} must be a string or a number")));
                }
                continue;
            };
            let t = t.as_bytes();
            match key.as_str() {
                "timestamp" | "ts" | "time" | "start" => fields.at = Some(self.timestamp(t)?),
                // Borrow the route from the line: find it as written.
                "route" if t.is_empty() => fields.route = Some(&line[..0]),
                "route" => {
                    fields.route = Some(find_in(line, t).ok_or_else(|| {
                        self.bad("the route contains JSON escapes; write it plainly")
                    })?);
                }
                "status" | "outcome" | "result" => fields.status = Some(self.result(t)?),
                "error" | "error_kind" => error = Some(t.to_vec()),
                "latency_ms" | "duration_ms" | "latency" | "duration" => {
                    fields.latency = Some(self.latency(t, 1_000_000)?)
                }
                "latency_us" | "duration_us" => fields.latency = Some(self.latency(t, 1_000)?),
                "latency_ns" | "duration_ns" => fields.latency = Some(self.latency(t, 1)?),
                "latency_s" | "duration_s" => {
                    fields.latency = Some(self.latency(t, 1_000_000_000)?)
                }
                _ => {}
            }
        }
        if let (None, Some(e)) = (fields.status, error) {
            fields.status = Some(self.result(&e)?);
        }
        self.complete(fields)
    }

    // Always inlined: called once per line, and outlined (as the reading loop grew) the
    // call and its result through memory cost ~5 % of reading a line (callgrind).
    #[inline(always)]
    fn timestamp(&mut self, s: &[u8]) -> Result<u64, Bad> {
        let parsed = if s.len() >= 19 && s[4] == b'-' {
            if let Some(at) = self.minute.get(s) {
                return Ok(at);
            }
            self.note_style(TimeStyle::Rfc3339);
            rfc3339_parts(s).map(|p| {
                self.minute.set(s, p.minute_secs, p.zone_start);
                p.at
            })
        } else {
            self.note_style(TimeStyle::Seconds);
            parse_seconds(s).ok_or("expected RFC 3339 or seconds since the epoch")
        };
        parsed.map_err(|why| {
            self.bad(format!(
                "bad timestamp {:?}: {why}",
                String::from_utf8_lossy(s)
            ))
        })
    }

    #[inline]
    fn note_style(&mut self, style: TimeStyle) {
        if self.style.is_none() {
            self.style = Some(style);
        }
    }

    #[inline]
    fn latency(&self, s: &[u8], unit_ns: u64) -> Result<u64, Bad> {
        parse_latency(s, unit_ns).ok_or_else(|| {
            self.bad(format!(
                "bad latency {:?}: expected a number of milliseconds (or with a unit: 12ms, 1.5s, 800us)",
                String::from_utf8_lossy(s)
            ))
        })
    }

    #[inline]
    fn result(&self, s: &[u8]) -> Result<u16, Bad> {
        parse_result(s).ok_or_else(|| {
            self.bad(format!(
                "bad status {:?}: expected an HTTP status (100-999), grpc:CODE, or one of: {}",
                String::from_utf8_lossy(s),
                ERROR_KINDS.map(|k| k.0).join(", ")
            ))
        })
    }
}

#[inline]
fn trim_cr(s: &[u8]) -> &[u8] {
    match s.last() {
        Some(b'\r') => &s[..s.len() - 1],
        _ => s,
    }
}

#[inline]
fn trim(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &s[start..end]
}

fn find_in<'a>(hay: &'a [u8], needle: &[u8]) -> Option<&'a [u8]> {
    if needle.is_empty() {
        return None;
    }
    hay.windows(needle.len())
        .position(|w| w == needle)
        .map(|p| &hay[p..p + needle.len()])
}

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

/// Seconds since the epoch, with up to nine decimals, to nanoseconds.
#[inline]
pub(crate) fn parse_seconds(s: &[u8]) -> Option<u64> {
    let mut i = 0;
    let mut secs: u64 = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        secs = secs.checked_mul(10)?.checked_add(u64::from(s[i] - b'0'))?;
        i += 1;
    }
    if i == 0 {
        return None;
    }
    let mut nanos: u64 = 0;
    if i < s.len() {
        if s[i] != b'.' {
            return None;
        }
        i += 1;
        let mut digits = 0;
        while i < s.len() && s[i].is_ascii_digit() {
            if digits < 9 {
                nanos = nanos * 10 + u64::from(s[i] - b'0');
                digits += 1;
            }
            i += 1;
        }
        if i != s.len() {
            return None;
        }
        nanos *= POW10[9 - digits];
    }
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// A latency: a decimal number of `unit_ns`, or with its own unit (`ns`, `us`, `µs`,
/// `ms`, `s`).
// Always inlined: called once per line, and outlined (as the reading loop grew) the
// call and its result through memory cost ~5 % of reading a line (callgrind).
#[inline(always)]
pub(crate) fn parse_latency(s: &[u8], unit_ns: u64) -> Option<u64> {
    let d = decimal(s)?;
    let unit = match &s[d.end..] {
        b"" => unit_ns,
        b"ns" => 1,
        b"us" | b"\xc2\xb5s" => 1_000,
        b"ms" => 1_000_000,
        b"s" => 1_000_000_000,
        _ => return None,
    };
    d.scale(unit)
}

/// A decimal number as written: its integer part, the first nine digits of its
/// fraction, and where it ends.
#[derive(Debug, Clone, Copy)]
struct Decimal {
    int: u64,
    int_digits: usize,
    frac: u64,
    frac_digits: usize,
    end: usize,
}

/// The decimal number at the start of `s` (`12`, `12.5`, `.5`, `5.`); `None` without a
/// digit, or past `u64`.
#[inline]
fn decimal(s: &[u8]) -> Option<Decimal> {
    let mut i = 0;
    let mut int: u64 = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        int = int.checked_mul(10)?.checked_add(u64::from(s[i] - b'0'))?;
        i += 1;
    }
    let int_digits = i;
    let mut frac: u64 = 0;
    let mut frac_digits = 0usize;
    if i < s.len() && s[i] == b'.' {
        i += 1;
        while i < s.len() && s[i].is_ascii_digit() {
            if frac_digits < 9 {
                frac = frac * 10 + u64::from(s[i] - b'0');
                frac_digits += 1;
            }
            i += 1;
        }
    }
    if int_digits == 0 && frac_digits == 0 {
        return None;
    }
    Some(Decimal {
        int,
        int_digits,
        frac,
        frac_digits,
        end: i,
    })
}

impl Decimal {
    /// The number, in units of `unit` nanoseconds (a power of ten), in nanoseconds.
    #[inline]
    fn scale(self, unit: u64) -> Option<u64> {
        let whole = self.int.checked_mul(unit)?;
        let unit_digits = match unit {
            1 => 0,
            1_000 => 3,
            1_000_000 => 6,
            1_000_000_000 => 9,
            _ => POW10.iter().position(|&p| p == unit).unwrap_or(0),
        };
        // frac / 10^digits of a unit; units are powers of ten, so this is a shift of
        // decimals.
        let part = if unit_digits >= self.frac_digits {
            self.frac * POW10[unit_digits - self.frac_digits]
        } else {
            self.frac / POW10[self.frac_digits - unit_digits]
        };
        whole.checked_add(part)
    }
}

/// RFC 3339 (`2024-05-01T12:00:00.120Z`, a space for the `T`, an offset for the `Z`) to
/// nanoseconds since the epoch.
pub(crate) fn parse_rfc3339(s: &[u8]) -> Result<u64, &'static str> {
    rfc3339_parts(s).map(|p| p.at)
}

struct Rfc3339 {
    at: u64,
    minute_secs: i64,
    zone_start: usize,
}

fn rfc3339_parts(s: &[u8]) -> Result<Rfc3339, &'static str> {
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
        at: secs * 1_000_000_000 + nanos,
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

/// What a JSON line said, as it is read.
#[derive(Debug, Default)]
struct JsonFields<'a> {
    at: Option<u64>,
    route: Option<&'a [u8]>,
    status: Option<u16>,
    /// The error kind as written: read only if there is no status.
    error: Option<&'a [u8]>,
    latency: Option<u64>,
}

/// A byte repeated in every byte of a word.
const fn splat(b: u8) -> u64 {
    0x0101_0101_0101_0101 * b as u64
}

/// The high bit of every byte of `w` that is zero (and maybe of bytes above the first:
/// only the lowest set bit is exact).
#[inline]
fn zero_bytes(w: u64) -> u64 {
    w.wrapping_sub(splat(1)) & !w & splat(0x80)
}

/// A cursor over one JSON line.
struct JsonCursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> JsonCursor<'a> {
    /// Skips whitespace — but not a line break: it ends the line.
    #[inline]
    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\r') {
            self.i += 1;
        }
    }

    #[inline]
    fn eat(&mut self, b: u8) -> bool {
        if self.s.get(self.i) == Some(&b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    /// `word` (`true`, `false`, `null`) at the cursor, crossed.
    #[inline]
    fn literal(&mut self, word: &[u8]) -> bool {
        if self.s[self.i.min(self.s.len())..].starts_with(word) {
            self.i += word.len();
            true
        } else {
            false
        }
    }

    /// The key at the cursor. A name fusebox reads is told by its first byte and
    /// compared whole, closing quote included, with the few names that start with it:
    /// comparisons with constants, and a match holds no escape. Any other key is crossed
    /// as a string and skipped. `None` for a key with escapes, or no key.
    #[inline]
    fn key(&mut self) -> Option<Column> {
        let name = self.s.get(self.i..)?.strip_prefix(b"\"")?;
        macro_rules! pick {
            ($($text:literal => $key:expr),+ $(,)?) => {{
                $(
                    if name.starts_with($text) {
                        self.i += 1 + $text.len();
                        return Some($key);
                    }
                )+
            }};
        }
        const MS: Column = Column::Latency(1_000_000);
        const US: Column = Column::Latency(1_000);
        const NS: Column = Column::Latency(1);
        const S: Column = Column::Latency(1_000_000_000);
        match name.first() {
            Some(b't') => pick!(
                b"timestamp\"" => Column::Timestamp,
                b"ts\"" => Column::Timestamp,
                b"time\"" => Column::Timestamp,
            ),
            Some(b'r') => pick!(b"route\"" => Column::Route, b"result\"" => Column::Status),
            Some(b's') => pick!(b"status\"" => Column::Status, b"start\"" => Column::Timestamp),
            Some(b'o') => pick!(b"outcome\"" => Column::Status),
            Some(b'e') => pick!(b"error\"" => Column::Error, b"error_kind\"" => Column::Error),
            Some(b'l') => pick!(
                b"latency_ms\"" => MS,
                b"latency\"" => MS,
                b"latency_us\"" => US,
                b"latency_ns\"" => NS,
                b"latency_s\"" => S,
            ),
            Some(b'd') => pick!(
                b"duration_ms\"" => MS,
                b"duration\"" => MS,
                b"duration_us\"" => US,
                b"duration_ns\"" => NS,
                b"duration_s\"" => S,
            ),
            _ => {}
        }
        self.plain_string().map(|_| Column::Other)
    }

    /// A string without escapes (nor a line break, which JSON does not allow in one and
    /// which ends the line), its closing quote found eight bytes at a time.
    #[inline]
    fn plain_string(&mut self) -> Option<&'a [u8]> {
        if !self.eat(b'"') {
            return None;
        }
        let (s, start) = (self.s, self.i);
        let mut i = start;
        while let Some(chunk) = s.get(i..i + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let w = u64::from_le_bytes(word);
            let hits = zero_bytes(w ^ splat(b'"'))
                | zero_bytes(w ^ splat(b'\\'))
                | zero_bytes(w ^ splat(b'\n'));
            if hits != 0 {
                i += (hits.trailing_zeros() / 8) as usize;
                return self.close_string(start, i);
            }
            i += 8;
        }
        while i < s.len() {
            if matches!(s[i], b'"' | b'\\' | b'\n') {
                return self.close_string(start, i);
            }
            i += 1;
        }
        None
    }

    /// The string from `start` to `end`, if a quote (not an escape) ends it there.
    #[inline]
    fn close_string(&mut self, start: usize, end: usize) -> Option<&'a [u8]> {
        if self.s[end] != b'"' {
            return None;
        }
        self.i = end + 1;
        Some(&self.s[start..end])
    }

    /// A number as JSON writes it without sign or exponent (`0`, `12`, `12.5`), read in
    /// place. `None`, the cursor unmoved, for anything else: the full parser reads a
    /// sign or an exponent, and rejects a leading zero or a bare point.
    #[inline]
    fn plain_number(&mut self) -> Option<Decimal> {
        let rest = self.s.get(self.i..)?;
        let d = decimal(rest)?;
        let leading_zero = rest[0] == b'0' && d.int_digits > 1;
        if d.int_digits == 0 || leading_zero || rest[d.end - 1] == b'.' {
            return None;
        }
        if matches!(
            rest.get(d.end),
            Some(b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
        ) {
            return None;
        }
        self.i += d.end;
        Some(d)
    }

    /// A timestamp string in the minute of the one before it, read in place by its
    /// seconds; `None`, the cursor unmoved, for any other value.
    #[inline]
    fn cached_timestamp(&mut self, minute: &MinuteCache) -> Option<u64> {
        let text = self.s.get(self.i..)?.strip_prefix(b"\"")?;
        let (at, len) = minute.get_prefix(text)?;
        if text.get(len) != Some(&b'"') {
            return None;
        }
        self.i += len + 2;
        Some(at)
    }

    /// A status of three digits, quoted (`"503"`) or not (`503`), read in place; `None`,
    /// the cursor unmoved, for any other value.
    #[inline]
    fn three_digits(&mut self) -> Option<u16> {
        let rest = self.s.get(self.i..)?;
        let quote = usize::from(rest.first() == Some(&b'"'));
        let digits = rest.get(quote..quote + 3)?;
        let after = rest.get(quote + 3);
        let closed = if quote == 1 {
            after == Some(&b'"')
        } else {
            !matches!(after, Some(b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-'))
        };
        if !closed || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = digits
            .iter()
            .fold(0u16, |n, &d| n * 10 + u16::from(d - b'0'));
        if n < 100 {
            return None;
        }
        self.i += 3 + 2 * quote;
        Some(n)
    }

    /// The value of a field fusebox reads, as written: `Some(Some(..))` for a string
    /// without escapes or a plain number, `Some(None)` for null. `None` for anything
    /// else (the full parser reads it).
    #[inline]
    fn field(&mut self) -> Option<Option<&'a [u8]>> {
        match *self.s.get(self.i)? {
            b'"' => self.plain_string().map(Some),
            b'n' => self.literal(b"null").then_some(None),
            _ => {
                let start = self.i;
                self.plain_number()?;
                Some(Some(&self.s[start..self.i]))
            }
        }
    }

    /// Crosses the value of a key fusebox does not read: a string without escapes, a
    /// plain number, `true`, `false` or `null`. `false` for anything else (an object, an
    /// array, an escape): the full parser reads the line.
    #[inline]
    fn skip_value(&mut self) -> bool {
        match self.s.get(self.i) {
            Some(b'"') => self.plain_string().is_some(),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(_) => self.plain_number().is_some(),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(name: &str, text: &str) -> Result<Vec<(u64, String, u16, u64)>, String> {
        let format = Format::detect(name, text.as_bytes());
        let mut r = CallReader::new(name, text.as_bytes(), format);
        let mut out = Vec::new();
        while let Some(c) = r.next_call().map_err(|e| e.to_string())? {
            out.push((
                c.at,
                String::from_utf8(c.route.to_vec()).unwrap(),
                c.result,
                c.latency,
            ));
        }
        Ok(out)
    }

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
        assert_eq!(parse_seconds(b"12.5"), Some(12_500_000_000));
        assert_eq!(parse_seconds(b"7"), Some(7_000_000_000));
        assert_eq!(parse_seconds(b"1.0000000019"), Some(1_000_000_001));
        assert_eq!(parse_seconds(b"1e3"), None);
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

    #[test]
    fn the_minute_cache_reads_like_the_full_parse() {
        let mut r = CallReader::new("c.csv", b"", Format::Csv);
        for text in [
            "2024-05-01T12:00:00.120Z",
            "2024-05-01T12:00:07Z",
            "2024-05-01T12:00:59.999999999Z",
            "2024-05-01T12:01:00Z",
            "2024-05-01T14:01:00.5+02:00",
            "2024-05-01T14:01:01+02:00",
            "2024-05-01T14:01:01-02:00",
        ] {
            let expected = parse_rfc3339(text.as_bytes()).unwrap();
            assert_eq!(r.timestamp(text.as_bytes()), Ok(expected), "{text}");
        }
        // A bad second after a good one is still caught.
        assert!(r.timestamp(b"2024-05-01T14:01:x1-02:00").is_err());
    }

    #[test]
    fn latencies_and_results() {
        assert_eq!(parse_latency(b"12.5", 1_000_000), Some(12_500_000));
        assert_eq!(parse_latency(b"1.2s", 1_000_000), Some(1_200_000_000));
        assert_eq!(parse_latency(b"800us", 1_000_000), Some(800_000));
        assert_eq!(parse_latency(b".5", 1_000_000), Some(500_000));
        assert_eq!(parse_latency(b"3", 1_000), Some(3_000));
        assert_eq!(parse_latency(b"", 1), None);
        assert_eq!(parse_latency(b"12 parsecs", 1), None);
        assert_eq!(parse_result(b"503"), Some(503));
        assert_eq!(parse_result(b"099"), None);
        assert_eq!(parse_result(b"timeout"), Some(ERROR_BASE));
        assert_eq!(parse_result(b"grpc:UNAVAILABLE"), Some(GRPC_BASE + 14));
        assert_eq!(parse_result(b"grpc:14"), Some(GRPC_BASE + 14));
        assert_eq!(parse_result(b"grpc:17"), None);
        assert_eq!(parse_result(b"teapot"), None);
    }

    #[test]
    fn csv_with_and_without_header() {
        let rows = all(
            "c.csv",
            "# recorded\nlatency_ms,route,status,ts\n5,GET /a,200,1.5\r\n\n7.25,\"GET /b\",timeout,2\n",
        )
        .unwrap();
        assert_eq!(
            rows,
            [
                (1_500_000_000, "GET /a".into(), 200, 5_000_000),
                (2_000_000_000, "GET /b".into(), ERROR_BASE, 7_250_000)
            ]
        );
        let rows = all("c.csv", "1,GET /a,503,2s\n").unwrap();
        assert_eq!(rows, [(1_000_000_000, "GET /a".into(), 503, 2_000_000_000)]);
        let rows = all(
            "c.csv",
            "ts,route,status,error,latency_us\n1,/a,,reset,10\n",
        )
        .unwrap();
        assert_eq!(rows, [(1_000_000_000, "/a".into(), ERROR_BASE + 1, 10_000)]);
    }

    #[test]
    fn json_lines_fast_and_slow() {
        let rows = all(
            "c.jsonl",
            concat!(
                "{\"timestamp\": \"2024-05-01T12:00:00.120Z\", \"route\": \"GET /a\", \"status\": 200, \"latency_ms\": 12.5}\n",
                "{\"ts\":1714564801,\"route\":\"GET /a\",\"error\":\"timeout\",\"latency_ms\":800,\"extra\":{\"x\":[1,2]}}\n",
                "{\"ts\":1714564802,\"note\":\"a \\\"quoted\\\" word\",\"route\":\"GET /a\",\"status\":\"grpc:unavailable\",\"latency_s\":0.25}\n",
            ),
        )
        .unwrap();
        assert_eq!(
            rows,
            [
                (1_714_564_800_120_000_000, "GET /a".into(), 200, 12_500_000),
                (
                    1_714_564_801_000_000_000,
                    "GET /a".into(),
                    ERROR_BASE,
                    800_000_000
                ),
                (
                    1_714_564_802_000_000_000,
                    "GET /a".into(),
                    GRPC_BASE + 14,
                    250_000_000
                ),
            ]
        );
    }

    #[test]
    fn errors_name_the_line_and_reason() {
        let e = |name: &str, text: &str| all(name, text).unwrap_err();
        assert_eq!(
            e("c.csv", "1,/a,200,5\n2024-13-01T00:00:00Z,/a,200,5\n"),
            "c.csv:2:1: bad timestamp \"2024-13-01T00:00:00Z\": the month is out of range"
        );
        assert_eq!(
            e("c.csv", "1,/a,200\n"),
            "c.csv:1:1: too few fields: expected 4, got 3"
        );
        assert_eq!(
            e("c.csv", "1,/a,200,5,6\n"),
            "c.csv:1:1: too many fields: expected 4"
        );
        assert!(e("c.csv", "1,/a,teapot,5\n").starts_with("c.csv:1:1: bad status \"teapot\""));
        assert!(e("c.csv", "1,/a,200,fast\n").starts_with("c.csv:1:1: bad latency \"fast\""));
        assert_eq!(
            e("c.csv", "2,/a,200,5\n1,/a,200,5\n"),
            "c.csv:2:1: timestamps go backwards: this call starts 1s before the one above it; sort the file by timestamp"
        );
        assert_eq!(
            e("c.csv", "timestamp,route,latency_ms\n"),
            "c.csv:1:1: the header lacks the column status (expected timestamp, route, status, latency_ms)"
        );
        assert!(
            e("c.jsonl", "{\"ts\":1,\"route\":\"/a\"\n").starts_with("c.jsonl:1:1: invalid JSON")
        );
        assert_eq!(
            e("c.jsonl", "{\"ts\":1,\"route\":\"/a\",\"status\":200}\n"),
            "c.jsonl:1:1: missing latency_ms"
        );
        assert_eq!(
            e("c.jsonl", "[1]\n"),
            "c.jsonl:1:1: expected a JSON object ({...}) on each line"
        );
    }

    /// The fast path's call for one line, and the full parser's, each from its own reader.
    fn both(
        line: &str,
    ) -> (
        Result<Option<RawCall<'_>>, String>,
        Result<RawCall<'_>, String>,
    ) {
        let mut fast = CallReader::new("c.jsonl", b"", Format::JsonLines);
        let mut slow = CallReader::new("c.jsonl", b"", Format::JsonLines);
        (
            fast.json_fast(line.as_bytes())
                .map(|read| read.map(|(call, _)| call))
                .map_err(|e| e.to_string()),
            slow.json_slow(line.as_bytes()).map_err(|e| e.to_string()),
        )
    }

    /// `line` is read by the fast path, to the full parser's call (or error).
    #[track_caller]
    fn fast_as_slow(line: &str) -> Result<RawCall<'_>, String> {
        match both(line) {
            (Ok(Some(fast)), slow) => {
                assert_eq!(Ok(fast), slow, "{line}");
                Ok(fast)
            }
            (Ok(None), _) => panic!("the fast path declined {line}"),
            (Err(fast), slow) => {
                assert_eq!(Err(fast.clone()), slow, "{line}");
                Err(fast)
            }
        }
    }

    /// `line` goes to the full parser.
    #[track_caller]
    fn declined(line: &str) {
        assert!(matches!(both(line).0, Ok(None)), "{line}");
    }

    fn call(at: u64, route: &[u8], result: u16, latency: u64) -> RawCall<'_> {
        RawCall {
            at,
            route,
            result,
            latency,
        }
    }

    #[test]
    fn json_fast_path_branches_read_as_the_full_parser() {
        let at = 1_714_564_800_120_000_000;
        // Any key order, whitespace anywhere, other keys of every plain kind skipped.
        assert_eq!(
            fast_as_slow(
                " {\t\"latency_us\" : 800 ,\"x\":true,\"route\":\"GET /a\", \"y\": false, \"z\":null, \"n\": 0.5, \"status\":\"503\" , \"timestamp\":\"2024-05-01T12:00:00.120Z\" } "
            ),
            Ok(call(at, b"GET /a", 503, 800_000))
        );
        // Near-miss names are other keys, not the fields they resemble.
        assert_eq!(
            fast_as_slow(
                r#"{"ts":1,"tss":"x","timestamp_ns":"x","routes":"x","status_code":"x","latency_total":"x","route":"/a","status":200,"latency_s":0.25}"#
            ),
            Ok(call(1_000_000_000, b"/a", 200, 250_000_000))
        );
        // Numbers and strings: a status or latency either way, a latency with its unit.
        for line in [
            r#"{"ts":"1","route":"/a","status":"200","latency":"12.5"}"#,
            r#"{"ts":1,"route":"/a","status":200,"latency":12.5}"#,
            r#"{"start":1.0,"route":"/a","result":200,"duration":"12500us"}"#,
        ] {
            assert_eq!(
                fast_as_slow(line),
                Ok(call(1_000_000_000, b"/a", 200, 12_500_000)),
                "{line}"
            );
        }
        // Null is an absent field; an error kind counts only without a status, in any
        // order (a bad one is then not read).
        assert_eq!(
            fast_as_slow(
                r#"{"ts":1,"latency_ms":null,"route":"/a","error":"bogus","status":200,"latency_ns":5}"#
            ),
            Ok(call(1_000_000_000, b"/a", 200, 5))
        );
        assert_eq!(
            fast_as_slow(r#"{"status":null,"ts":1,"route":"/a","error_kind":"reset","latency":1}"#),
            Ok(call(1_000_000_000, b"/a", ERROR_BASE + 1, 1_000_000))
        );
        assert_eq!(
            fast_as_slow(r#"{"ts":null,"route":null,"status":null,"latency":null}"#),
            Err("c.jsonl:0:1: missing timestamp, route, status (or error), latency_ms".into())
        );
        assert_eq!(
            fast_as_slow(r#"{"ts":1,"route":"","outcome":"grpc:14","latency":1}"#),
            Err("c.jsonl:0:1: missing route".into())
        );
        assert!(
            fast_as_slow(r#"{"ts":1,"route":"/a","error":"bogus","latency":1}"#)
                .unwrap_err()
                .starts_with("c.jsonl:0:1: bad status \"bogus\"")
        );
        assert!(
            fast_as_slow(r#"{"ts":1,"route":"/a","status":200.0,"latency":1}"#)
                .unwrap_err()
                .starts_with("c.jsonl:0:1: bad status \"200.0\"")
        );
        // Escapes in keys or values, nested values, numbers with a sign or an exponent
        // and invalid JSON go to the full parser.
        for line in [
            r#"{"ts":1,"\u0072oute":"/a","status":200,"latency":1}"#,
            r#"{"ts":1,"route":"/a","note":"a \"quoted\" word","status":200,"latency":1}"#,
            r#"{"ts":1,"route":"/a","extra":{"x":[1]},"status":200,"latency":1}"#,
            r#"{"ts":1,"route":"/a","status":200,"latency":1e3}"#,
            r#"{"ts":1,"route":"/a","status":200,"latency":-5}"#,
            r#"{"ts":1,"route":"/a","status":200,"latency":05}"#,
            r#"{"ts":1,"route":"/a","status":200,"latency":5.}"#,
            r#"{"ts":1,"route":"/a","status":200,"latency":true}"#,
            r#"{"ts":1,"route":"/a","status":200,"latency":1} x"#,
            r#"{"ts":1,"route":"/a","status":200,"latency":1,}"#,
        ] {
            declined(line);
        }
        // ... which reads them as JSON says.
        let mut r = CallReader::new("c.jsonl", b"", Format::JsonLines);
        assert_eq!(
            r.json_line(br#"{"ts":1,"\u0072oute":"/a","status":200,"latency":1e3}"#)
                .map_err(|e| e.to_string()),
            Ok(call(1_000_000_000, b"/a", 200, 1_000_000_000))
        );
    }

    #[test]
    fn json_lines_read_from_the_rest_of_the_file_as_one_by_one() {
        let text = concat!(
            "{\"ts\":1,\"route\":\"/a\",\"status\":200,\"latency\":1}\n",
            "\n",
            "# a comment\n",
            "{\"ts\":2,\"route\":\"/b\",\"status\":503,\"latency\":2} \r\n",
            "  {\"ts\":3,\"route\":\"/a\",\"status\":200,\"latency\":3}\n",
            "{\"ts\":4,\"route\":\"/a\",\"note\":\"\\\"\",\"status\":200,\"latency\":4}\n",
            "{\"ts\":5,\"route\":\"/a\",\"status\":200,\"latency\":5}",
        );
        let expected: Vec<(u64, String, u16, u64)> = [1u64, 2, 3, 4, 5]
            .iter()
            .map(|&n| {
                let route = if n == 2 { "/b" } else { "/a" };
                let status = if n == 2 { 503 } else { 200 };
                (n * 1_000_000_000, route.into(), status, n * 1_000_000)
            })
            .collect();
        assert_eq!(all("c.jsonl", text), Ok(expected));
        // Lines are still counted where the object's end found the line's end.
        assert!(
            all("c.jsonl", "{\"ts\":1,\"route\":\"/a\",\"status\":200,\"latency\":1}\n\n{\"ts\":\"x\",\"route\":\"/a\",\"status\":200,\"latency\":1}\n")
                .unwrap_err()
                .starts_with("c.jsonl:3:1: bad timestamp \"x\"")
        );
        // An object does not run on past its line, and a line with more is read whole.
        assert!(
            all(
                "c.jsonl",
                "{\"ts\":1,\"route\":\"/a\",\n\"status\":200,\"latency\":1}\n"
            )
            .unwrap_err()
            .starts_with("c.jsonl:1:1: invalid JSON")
        );
        assert!(
            all(
                "c.jsonl",
                "{\"ts\":1,\"route\":\"/a\",\"status\":200,\"latency\":1} {}\n"
            )
            .unwrap_err()
            .starts_with("c.jsonl:1:1: invalid JSON")
        );
    }

    #[test]
    fn json_timestamps_in_place_read_as_the_full_parse() {
        let line =
            |ts: &str| format!(r#"{{"timestamp":"{ts}","route":"/a","status":200,"latency":1}}"#);
        let good = [
            "2024-05-01T12:00:00.120Z",
            "2024-05-01T12:00:07Z",
            "2024-05-01T12:00:59.999999999Z",
            "2024-05-01T12:00:60Z",
            "2024-05-01T12:00:08.5z",
            "2024-05-01T12:01:00Z",
            "2024-05-01 12:01:00+02:00",
            "2024-05-01T12:01:03+02:00",
        ];
        // In the cached minute, a bad second or zone is still the full parse's error.
        let bad = [
            (
                "2024-05-01T12:01:61+02:00",
                "the time of day is out of range",
            ),
            ("2024-05-01T12:01:0x+02:00", "expected RFC 3339"),
            ("2024-05-01T12:01:03+02:0", "expected a time zone"),
            (
                "2024-05-01T12:01:03.+02:00",
                "expected digits after the decimal point",
            ),
        ];
        let texts: Vec<String> = good
            .iter()
            .chain(bad.iter().map(|b| &b.0))
            .map(|ts| line(ts))
            .collect();
        let mut r = CallReader::new("c.jsonl", b"", Format::JsonLines);
        for (ts, text) in good.iter().zip(&texts) {
            let expected = parse_rfc3339(ts.as_bytes()).unwrap();
            let got = r.json_fast(text.as_bytes()).map_err(|e| e.to_string());
            assert_eq!(
                got.map(|c| c.map(|(c, _)| c.at)),
                Ok(Some(expected)),
                "{ts}"
            );
        }
        for ((ts, why), text) in bad.iter().zip(&texts[good.len()..]) {
            let err = r.json_fast(text.as_bytes()).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("c.jsonl:0:1: bad timestamp {ts:?}: {why}")),
                "{err}"
            );
        }
    }

    /// Choices that build a JSON line; 0 is the plainest (and what a shrunk case tends to).
    struct Choices<'c>(std::slice::Iter<'c, u8>);

    impl Choices<'_> {
        fn pick(&mut self, n: usize) -> usize {
            self.0.next().map_or(0, |&c| usize::from(c) % n)
        }

        fn ws(&mut self) -> &'static str {
            ["", "", " ", "\t", "  "][self.pick(5)]
        }
    }

    /// Value `k` of `table` (text, and whether the fast path reads it); clears `fast` if
    /// not.
    fn from_table(table: &[(&str, bool)], k: usize, fast: &mut bool) -> String {
        let (text, plain) = table[k];
        *fast &= plain;
        text.into()
    }

    /// A JSON line from `c`, and whether the fast path must take it (no escapes, nested
    /// values, or numbers with a sign or an exponent). At most one value is bad, so both
    /// parsers must report the same error.
    fn json_line_from(c: &mut Choices<'_>, minute: usize) -> (String, bool) {
        let mut fast = true;
        let mut bad = false;
        let mut bad_once = |c: &mut Choices<'_>, n: usize, good: usize| {
            let k = c.pick(n);
            if k >= good {
                if bad {
                    return 0;
                }
                bad = true;
            }
            k
        };
        let mut fields: Vec<(String, String)> = Vec::new();
        // The timestamp: RFC 3339 in one of a few minutes (so the cache is hit and
        // missed), seconds as a number or a string, null, or bad.
        if c.pick(8) != 0 {
            let key = ["timestamp", "ts", "time", "start"][c.pick(4)];
            let digits: String = (0..c.pick(10))
                .map(|i| char::from(b'0' + ((i * 7 + minute) % 10) as u8))
                .collect();
            let fraction = if digits.is_empty() {
                String::new()
            } else {
                format!(".{digits}")
            };
            let zone = ["Z", "+02:00", "-05:30", "z"][c.pick(4)];
            let sep = ["T", "T", " ", "t"][c.pick(4)];
            let second = c.pick(61);
            let value = match bad_once(c, 9, 5) {
                0 | 1 => format!("\"2024-05-01{sep}12:0{minute}:{second:02}{fraction}{zone}\""),
                2 => format!("{}.{}", 1_714_564_800 + second, c.pick(256)),
                3 => format!("\"{}{fraction}\"", 1_714_564_800 + second),
                4 => "null".into(),
                5 => format!("\"2024-05-01T12:0{minute}:{}Z\"", 61 + second % 39),
                6 => "\"2024-13-01T00:00:00Z\"".into(),
                7 => "\"yesterday\"".into(),
                _ => {
                    fast = false;
                    "1.7145648e9".into()
                }
            };
            fields.push((key.into(), value));
        }
        // The route.
        if c.pick(8) != 0 {
            // An escaped route is an error of the full parser's (routes are plain).
            let value = match bad_once(c, 8, 7) {
                0 | 1 => "\"GET /orders/{id}\"".into(),
                2 => "\"POST /charges\"".into(),
                3 => "\"  /a \"".into(),
                4 => "\"\"".into(),
                5 => "null".into(),
                6 => "123".into(),
                _ => {
                    fast = false;
                    "\"GET \\/a\"".into()
                }
            };
            let key = if c.pick(6) == 0 {
                fast = false;
                "\\u0072oute"
            } else {
                "route"
            };
            fields.push((key.into(), value));
        }
        // The status and the error kind, either, both or neither.
        if c.pick(6) != 0 {
            let key = ["status", "outcome", "result"][c.pick(3)];
            let value = [
                "\"200\"",
                "503",
                "\"503\"",
                "\"timeout\"",
                "\"grpc:UNAVAILABLE\"",
                "\"grpc:14\"",
                "null",
                "\"teapot\"",
                "\"099\"",
                "99",
                "200.0",
                "1000",
            ][bad_once(c, 12, 7)];
            fields.push((key.into(), value.into()));
        }
        if c.pick(3) == 0 {
            let key = ["error", "error_kind"][c.pick(2)];
            let value =
                ["\"reset\"", "\"cancelled\"", "null", "\"\"", "\"bogus\""][bad_once(c, 5, 3)];
            fields.push((key.into(), value.into()));
        }
        // The latency, in any unit.
        if c.pick(8) != 0 {
            let key = [
                "latency_ms",
                "latency",
                "latency_us",
                "latency_ns",
                "latency_s",
                "duration_ms",
                "duration",
                "duration_us",
                "duration_ns",
                "duration_s",
            ][c.pick(10)];
            // Plain numbers first; then the rest, bad from "fast" on.
            let k = bad_once(c, 12, 9);
            let value = match k {
                0 | 1 => format!("{}", c.pick(256) * 7),
                2 => format!("{}.{}", c.pick(100), c.pick(256)),
                _ => from_table(
                    &[
                        ("0", true),
                        ("\"12ms\"", true),
                        ("\"1.5s\"", true),
                        ("\"800us\"", true),
                        ("null", true),
                        ("\"12.25\"", true),
                        ("\"fast\"", true),
                        ("-5", false),
                        ("1e3", false),
                    ],
                    k - 3,
                    &mut fast,
                ),
            };
            fields.push((key.into(), value));
        }
        // Keys fusebox does not read, some named like the ones it does.
        for _ in 0..c.pick(3) {
            let key = [
                "note",
                "tss",
                "timestamp_ns",
                "routes",
                "statuses",
                "latency_total",
                "s",
                "e",
            ][c.pick(8)];
            let value = from_table(
                &[
                    ("\"text\"", true),
                    ("42", true),
                    ("4.5", true),
                    ("true", true),
                    ("false", true),
                    ("null", true),
                    ("\"\"", true),
                    ("{\"a\":[1,2]}", false),
                    ("\"a \\\"q\\\"\"", false),
                    ("-3", false),
                ],
                c.pick(10),
                &mut fast,
            );
            // Each field once: a second value for the same key would be read in line
            // order by one parser and in key order by the other.
            if !fields.iter().any(|(k, _)| k == key) {
                fields.push((key.into(), value));
            }
        }
        // Any order.
        for i in (1..fields.len()).rev() {
            fields.swap(i, c.pick(i + 1));
        }
        let mut line = format!("{}{{", c.ws());
        for (i, (k, v)) in fields.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            line += &format!("{sep}{}\"{k}\"{}:{}{v}{}", c.ws(), c.ws(), c.ws(), c.ws());
        }
        line += &format!("{}}}{}", c.ws(), c.ws());
        (line, fast)
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(2048))]

        /// Generated JSON lines (keys in any order, whitespace, escapes, numbers and
        /// strings, nulls, other keys) read to the same call or the same error on the
        /// fast path as through the full parser, one reader each over the same lines
        /// (so the timestamp cache is hit and missed).
        #[test]
        fn json_fast_path_reads_as_the_full_parser(
            lines in proptest::collection::vec(
                (0..4usize, proptest::collection::vec(proptest::num::u8::ANY, 40)),
                1..12,
            )
        ) {
            let lines: Vec<(String, bool)> = lines
                .iter()
                .map(|(minute, choices)| json_line_from(&mut Choices(choices.iter()), *minute))
                .collect();
            // The lines as a file: the fast path reads a line alone, or from the rest of
            // the file, and must find the line's end there.
            let file = lines.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>().join("\n");
            let mut fast_reader = CallReader::new("c.jsonl", b"", Format::JsonLines);
            let mut rest_reader = CallReader::new("c.jsonl", b"", Format::JsonLines);
            let mut slow_reader = CallReader::new("c.jsonl", b"", Format::JsonLines);
            let mut start = 0;
            for (line, must_be_fast) in &lines {
                let must_be_fast = *must_be_fast;
                let rest = &file.as_bytes()[start..];
                start += line.len() + 1;
                let fast = fast_reader.json_fast(line.as_bytes()).map_err(|e| e.to_string());
                let from_rest = rest_reader.json_fast(rest).map_err(|e| e.to_string());
                proptest::prop_assert_eq!(&from_rest, &fast, "{}", line);
                let slow = slow_reader.json_slow(line.as_bytes()).map_err(|e| e.to_string());
                match fast {
                    Ok(Some((call, end))) => {
                        proptest::prop_assert_eq!(end, line.len(), "{}", line);
                        proptest::prop_assert_eq!(Ok(call), slow, "{}", line)
                    }
                    Ok(None) => proptest::prop_assert!(!must_be_fast, "the fast path declined {}", line),
                    Err(e) => proptest::prop_assert_eq!(Err(e), slow, "{}", line),
                }
            }
        }
    }
}
