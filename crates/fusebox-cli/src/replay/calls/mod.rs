//! Reading recorded calls: CSV or JSON lines, fast.
//!
//! A day of traffic is tens of millions of lines, so the reader scans each line once, in
//! place, without allocating: fields are byte slices of the file, numbers are parsed by
//! hand, and a route is resolved by comparing bytes with the routes seen before (see
//! [`super::Resolver`]). Anything it does not understand is an error naming the file, the
//! line, the column of the field in question (counted in characters, inside a quoted
//! field's quotes) and the reason. A byte-order mark at the start of the file (as
//! spreadsheets export) is skipped.
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
//!   Times are nanoseconds since the epoch in 64 bits: a timestamp after
//!   2554-07-21T23:34:33.709551615Z, or a call that would end after it, is an error.
//! - **status**: an HTTP status (100–999), a gRPC status (`grpc:UNAVAILABLE` or
//!   `grpc:14`), or an error kind: `timeout`, `reset`, `refused`, `connect_timeout`,
//!   `connect_error`, `tls`, `eof`, `error` (failures), `cancelled` (ignored: the caller
//!   gave up), `circuit_open`, `overloaded`, `deadline_exceeded`, `rejected` (ignored: a
//!   local rejection that never reached the dependency).
//! - **latency**: how long the call took; it completes at timestamp + latency.

mod codes;
mod csv;
mod json;
mod number;
mod time;

#[cfg(test)]
pub(crate) use codes::{ERROR_BASE, GRPC_BASE};
pub(crate) use codes::{ERROR_KINDS, RESULT_CODES, judge_result, parse_result};
use number::{latency_problem, parse_latency};
pub use time::format_rfc3339;
pub(crate) use time::{LATEST, TOO_LATE, parse_rfc3339, parse_seconds};
use time::{MinuteCache, rfc3339_parts};

use crate::input::{BOM, InputError, chars, saturating_u32};

/// A parse error on its way out (boxed: see [`CallReader::bad`]).
type Bad = Box<InputError>;

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
    /// From the file's extension, else from its first meaningful character (after a
    /// byte-order mark, if any).
    pub fn detect(path: &str, data: &[u8]) -> Format {
        let lower = path.to_ascii_lowercase();
        if lower.ends_with(".jsonl") || lower.ends_with(".ndjson") || lower.ends_with(".json") {
            return Format::JsonLines;
        }
        if lower.ends_with(".csv") {
            return Format::Csv;
        }
        let data = data.strip_prefix(BOM.as_bytes()).unwrap_or(data);
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

impl Column {
    /// The field a CSV column or a JSON key of this name holds (names as written,
    /// lowercase).
    fn named(name: &str) -> Column {
        match name {
            "timestamp" | "ts" | "time" | "start" => Column::Timestamp,
            "route" => Column::Route,
            "status" | "outcome" | "result" => Column::Status,
            "error" | "error_kind" => Column::Error,
            "latency_ms" | "duration_ms" | "latency" | "duration" => Column::Latency(1_000_000),
            "latency_us" | "duration_us" => Column::Latency(1_000),
            "latency_ns" | "duration_ns" => Column::Latency(1),
            "latency_s" | "duration_s" => Column::Latency(1_000_000_000),
            _ => Column::Other,
        }
    }
}

/// Reads calls one at a time from a file in memory.
#[derive(Debug)]
pub struct CallReader<'a> {
    file: &'a str,
    data: &'a [u8],
    pos: usize,
    line: u32,
    /// The current line from its first byte (and, on the JSON path that reads a line from
    /// the rest of the file, what follows it): columns are counted from its start.
    cur: &'a [u8],
    format: Format,
    columns: Vec<Column>,
    header_done: bool,
    last_at: u64,
    style: Option<TimeStyle>,
    minute: MinuteCache,
}
impl<'a> CallReader<'a> {
    /// A reader of `data`, which came from `file`. A byte-order mark at the start of
    /// `data` is skipped.
    pub fn new(file: &'a str, data: &'a [u8], format: Format) -> Self {
        CallReader {
            file,
            data,
            pos: if data.starts_with(BOM.as_bytes()) {
                BOM.len()
            } else {
                0
            },
            line: 0,
            cur: &data[..0],
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

    /// An error about the current line as a whole (at its first column).
    pub fn error(&self, reason: impl Into<String>) -> InputError {
        InputError::at(self.file, self.line, 1, reason)
    }

    /// An error at `part` of the current line — a field, or the route of the call last
    /// returned: at the column where `part` starts (characters, 1-based). A slice from
    /// anywhere else is placed at column 1.
    pub fn error_at(&self, part: &[u8], reason: impl Into<String>) -> InputError {
        InputError::at(self.file, self.line, self.column_of(part), reason)
    }

    /// The column where `part` starts, if it is a slice of the current line; else 1.
    #[cold]
    fn column_of(&self, part: &[u8]) -> u32 {
        let start = self.cur.as_ptr().addr();
        match part.as_ptr().addr().checked_sub(start) {
            Some(offset) if offset <= self.cur.len() => {
                saturating_u32(chars(&self.cur[..offset]).saturating_add(1))
            }
            _ => 1,
        }
    }

    /// [`error_at`](Self::error_at), boxed: the parsing functions return it through every
    /// field of every line, and a small `Result` is cheaper to move than a large one.
    #[cold]
    fn bad_at(&self, part: &[u8], reason: impl Into<String>) -> Bad {
        Box::new(self.error_at(part, reason))
    }

    /// The next call, `None` at the end.
    #[inline]
    pub fn next_call(&mut self) -> Result<Option<RawCall<'a>>, InputError> {
        loop {
            if self.pos >= self.data.len() {
                return Ok(None);
            }
            if self.line == u32::MAX {
                return Err(self.too_long());
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

    #[cold]
    fn too_long(&self) -> InputError {
        InputError::in_file(
            self.file,
            format!("the file has more than {} lines", u32::MAX),
        )
    }

    /// `call`, if it starts no earlier than the one before it and ends at a time a
    /// replay can count (nanoseconds since the epoch in 64 bits: up to
    /// [`LATEST`]).
    #[inline]
    fn in_order(&mut self, call: RawCall<'a>) -> Result<Option<RawCall<'a>>, InputError> {
        if call.at < self.last_at {
            return Err(self.backwards(call.at));
        }
        if call.at.checked_add(call.latency).is_none() {
            return Err(self.ends_too_late(call.latency));
        }
        self.last_at = call.at;
        Ok(Some(call))
    }

    #[cold]
    fn backwards(&self, at: u64) -> InputError {
        let reason = format!(
            "timestamps go backwards: this call starts {} before the one above it; sort the file by timestamp",
            fusebox_classify::section::format_duration(std::time::Duration::from_nanos(
                self.last_at - at
            ))
        );
        match self.place_of(|c| c == Column::Timestamp) {
            Some(place) => self.error_at(place, reason),
            None => self.error(reason),
        }
    }

    #[cold]
    fn ends_too_late(&self, latency: u64) -> InputError {
        let place = self.place_of(|c| matches!(c, Column::Latency(_)));
        let reason = format!(
            "bad latency {:?}: the call would end after {LATEST}, the latest time a replay can count",
            place.map_or_else(
                || format!("{latency}ns"),
                |p| String::from_utf8_lossy(p).into_owned()
            )
        );
        match place {
            Some(place) => self.error_at(place, reason),
            None => self.error(reason),
        }
    }

    /// Where the current line writes the field `wanted` picks (its last one, as the
    /// reading takes the last), found again for an error about the call as a whole.
    #[cold]
    fn place_of(&self, wanted: impl Fn(Column) -> bool) -> Option<&'a [u8]> {
        let cur = self.cur;
        let line = trim_cr(&cur[..memchr::memchr(b'\n', cur).unwrap_or(cur.len())]);
        match self.format {
            Format::Csv => csv::fields(line)
                .zip(&self.columns)
                .filter(|(_, c)| wanted(**c))
                .filter_map(|(f, _)| f.ok())
                .last()
                .map(trim),
            Format::JsonLines => json::entries(line)
                .ok()?
                .into_iter()
                .filter(|(key, _)| wanted(Column::named(key)))
                .last()
                .map(|(_, raw)| json::value_place(raw)),
        }
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
            parse_seconds(s)
        };
        parsed.map_err(|why| {
            self.bad_at(
                s,
                format!("bad timestamp {:?}: {why}", String::from_utf8_lossy(s)),
            )
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
            self.bad_at(
                s,
                format!(
                    "bad latency {:?}: {}",
                    String::from_utf8_lossy(s),
                    latency_problem(s)
                ),
            )
        })
    }

    #[inline]
    fn result(&self, s: &[u8]) -> Result<u16, Bad> {
        parse_result(s).ok_or_else(|| {
            self.bad_at(
                s,
                format!(
                    "bad status {:?}: expected an HTTP status (100-999), grpc:CODE, or one of: {}",
                    String::from_utf8_lossy(s),
                    ERROR_KINDS.map(|(word, _)| word).join(", ")
                ),
            )
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

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn all(name: &str, text: &str) -> Result<Vec<(u64, String, u16, u64)>, String> {
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
            "c.csv:1:9: too few fields: expected 4, got 3"
        );
        assert_eq!(
            e("c.csv", "1,/a,200,5,6\n"),
            "c.csv:1:12: too many fields: expected 4"
        );
        assert!(e("c.csv", "1,/a,teapot,5\n").starts_with("c.csv:1:6: bad status \"teapot\""));
        assert!(e("c.csv", "1,/a,200,fast\n").starts_with("c.csv:1:10: bad latency \"fast\""));
        assert_eq!(
            e("c.csv", "2,/a,200,5\n1,/a,200,5\n"),
            "c.csv:2:1: timestamps go backwards: this call starts 1s before the one above it; sort the file by timestamp"
        );
        assert_eq!(
            e("c.csv", "timestamp,route,latency_ms\n"),
            "c.csv:1:1: the header lacks the column status (expected timestamp, route, status, latency_ms)"
        );
        assert!(
            e("c.jsonl", "{\"ts\":1,\"route\":\"/a\"\n").starts_with("c.jsonl:1:20: invalid JSON")
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

    #[test]
    fn errors_carry_the_column_of_their_field() {
        // Columns count characters from 1, past a byte-order mark; a CSV field's column
        // is its text's (inside quotes, after spaces); a JSON value's likewise, on the
        // fast path and through the full parser.
        let cases = [
            (
                "c.csv",
                "ts,route,status,latency_ms\n1,/\u{e9},200,fast\n",
                "c.csv:2:10: bad latency \"fast\": expected a number",
            ),
            (
                "c.csv",
                "1,\"/a\",\"teapot\",5\n",
                "c.csv:1:9: bad status \"teapot\"",
            ),
            (
                "c.csv",
                "1, /a ,200, 5x\n",
                "c.csv:1:13: bad latency \"5x\"",
            ),
            (
                "c.csv",
                "1,\"/a,200,5\n",
                "c.csv:1:3: a quoted field has no closing quote",
            ),
            (
                "c.csv",
                "1,\"/a\"x,200,5\n",
                "c.csv:1:7: a closing quote must end its field",
            ),
            ("c.csv", "1,,200,5\n", "c.csv:1:3: the route is empty"),
            (
                "c.csv",
                "ts,route,status,error,latency_ms\n1,/a,,,5\n",
                "c.csv:2:6: no status or error kind",
            ),
            (
                "c.csv",
                "latency_ms,route,status,ts\n5,/a,200,2\n5,/a,200,1\n",
                "c.csv:3:10: timestamps go backwards",
            ),
            (
                "c.csv",
                "\u{feff}1,/a,2000,5\n",
                "c.csv:1:6: bad status \"2000\"",
            ),
            (
                "c.jsonl",
                "{\"ts\":2,\"route\":\"/a\",\"status\":200,\"latency\":1}\n{\"route\":\"/a\",\"ts\":1,\"status\":200,\"latency\":1}\n",
                "c.jsonl:2:20: timestamps go backwards",
            ),
            (
                "c.jsonl",
                "{\"note\":\"\\\"\",\"ts\":\"x\",\"route\":\"/a\",\"status\":200,\"latency\":1}\n",
                "c.jsonl:1:20: bad timestamp \"x\"",
            ),
            (
                "c.jsonl",
                "{\"ts\":1,\"route\":\"GET \\/a\",\"status\":200,\"latency\":1}\n",
                "c.jsonl:1:18: the route contains JSON escapes",
            ),
            (
                "c.jsonl",
                "{\"ts\":\"\\u0031\",\"route\":\"/a\",\"status\":200,\"latency\":\"x\"}\n",
                "c.jsonl:1:53: bad latency \"x\"",
            ),
            (
                "c.jsonl",
                "{\"route\":\"/\u{e9}\",\"ts\":\"x\",\"status\":200,\"latency\":1}\n",
                "c.jsonl:1:21: bad timestamp \"x\"",
            ),
            (
                "c.jsonl",
                "  {\"ts\":\"x\",\"route\":\"/a\",\"status\":200,\"latency\":1}\n",
                "c.jsonl:1:10: bad timestamp \"x\"",
            ),
            (
                "c.jsonl",
                "\u{feff}{\"ts\":\"x\",\"route\":\"/a\",\"status\":200,\"latency\":1}\n",
                "c.jsonl:1:8: bad timestamp \"x\"",
            ),
            (
                "c.jsonl",
                "{\"ts\":1,\"route\":\"/a\",\"status\":200,\"latency\":1,\"x\":[}\n",
                "c.jsonl:1:52: invalid JSON: expected value",
            ),
        ];
        for (name, text, expected) in cases {
            let err = all(name, text).unwrap_err();
            assert!(err.starts_with(expected), "{text:?}\n{err}\nnot {expected}");
        }
    }

    #[test]
    fn a_leading_byte_order_mark_is_skipped() {
        let csv = "\u{feff}timestamp,route,status,latency_ms\n1,GET /a,200,5\n";
        assert_eq!(
            all("c.csv", csv),
            Ok(vec![(1_000_000_000, "GET /a".into(), 200, 5_000_000)])
        );
        let jsonl = "\u{feff}{\"ts\":1,\"route\":\"GET /a\",\"status\":200,\"latency\":5}\n";
        assert_eq!(
            all("c.jsonl", jsonl),
            Ok(vec![(1_000_000_000, "GET /a".into(), 200, 5_000_000)])
        );
        // Found as JSON lines by its content, too.
        assert_eq!(
            Format::detect("calls.log", jsonl.as_bytes()),
            Format::JsonLines
        );
    }

    #[test]
    fn times_past_the_latest_a_replay_counts_are_errors_at_their_column() {
        // u64::MAX nanoseconds since the epoch is the latest instant; one more is refused.
        assert_eq!(
            all("c.csv", &format!("{LATEST},/a,200,0\n")),
            Ok(vec![(u64::MAX, "/a".into(), 200, 0)])
        );
        let cases = [
            (
                "0,/a,200,5\n9999-12-31T23:59:59Z,/a,200,5\n",
                "c.csv:2:1: bad timestamp \"9999-12-31T23:59:59Z\": out of range: the latest time a replay can count is 2554-07-21T23:34:33.709551615Z",
            ),
            (
                "2554-07-21T23:34:33.709551616Z,/a,200,0\n",
                "c.csv:1:1: bad timestamp \"2554-07-21T23:34:33.709551616Z\": out of range",
            ),
            (
                // In the minute of the line before, read by its seconds alone.
                "2554-07-21T23:34:00Z,/a,200,0\n2554-07-21T23:34:59Z,/a,200,0\n",
                "c.csv:2:1: bad timestamp \"2554-07-21T23:34:59Z\": out of range",
            ),
            (
                "18446744074,/a,200,0\n",
                "c.csv:1:1: bad timestamp \"18446744074\": out of range",
            ),
            (
                "1000,/a,200,18446744073709\n",
                "c.csv:1:13: bad latency \"18446744073709\": the call would end after 2554-07-21T23:34:33.709551615Z, the latest time a replay can count",
            ),
            (
                "0,/a,200,18446744073709552ms\n",
                "c.csv:1:10: bad latency \"18446744073709552ms\": too long",
            ),
        ];
        for (text, expected) in cases {
            let err = all("c.csv", text).unwrap_err();
            assert!(err.starts_with(expected), "{text:?}\n{err}\nnot {expected}");
        }
        let err = all(
            "c.jsonl",
            "{\"ts\":\"2024-05-01T00:00:00Z\",\"route\":\"/a\",\"status\":200,\"latency\":18446744073709}\n",
        )
        .unwrap_err();
        assert!(
            err.starts_with(
                "c.jsonl:1:66: bad latency \"18446744073709\": the call would end after"
            ),
            "{err}"
        );
    }
}
