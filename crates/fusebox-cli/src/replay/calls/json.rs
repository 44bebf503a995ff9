//! The JSON-lines side of the reader: a one-pass path for flat lines as serializers write
//! them, read in place, and the full JSON parser for every other line.
//!
//! Errors are placed at the value they are about (inside its quotes, for a string); a
//! line that lacks a field, at its opening brace; invalid JSON, where the parser stopped.

use super::number::{Decimal, decimal};
use super::time::MinuteCache;
use super::{Bad, CallReader, Column, RawCall};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

impl<'a> CallReader<'a> {
    pub(super) fn json_line(&mut self, line: &'a [u8]) -> Result<RawCall<'a>, Bad> {
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
    pub(super) fn json_fast(&mut self, s: &'a [u8]) -> Result<Option<(RawCall<'a>, usize)>, Bad> {
        self.cur = s;
        let mut p = JsonCursor { s, i: 0 };
        p.ws();
        if !p.eat(b'{') {
            return Err(self.bad_at(&s[p.i..], "expected a JSON object ({...}) on each line"));
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

    /// The error for a line without some of the fields every call needs: at the
    /// object's opening brace.
    #[cold]
    fn missing(&self, fields: [(bool, &str); 4]) -> Bad {
        let missing: Vec<&str> = fields.iter().filter(|m| m.0).map(|m| m.1).collect();
        let brace = self.cur.iter().position(|&b| b == b'{').unwrap_or(0);
        self.bad_at(
            &self.cur[brace..],
            format!("missing {}", missing.join(", ")),
        )
    }

    /// Lines the fast path declines: parsed fully, and read in line order. The route
    /// must then be a plain string of the file (escaped routes are rejected: route keys
    /// never need escapes).
    #[cold]
    pub(super) fn json_slow(&mut self, line: &'a [u8]) -> Result<RawCall<'a>, Bad> {
        self.cur = line;
        let entries = entries(line).map_err(|e| self.invalid(line, &e))?;
        let mut fields = JsonFields::default();
        let mut error = None;
        for (key, raw) in entries {
            let column = Column::named(&key);
            if column == Column::Other {
                continue;
            }
            let place = value_place(raw);
            let value: serde_json::Value = serde_json::from_str(raw.get())
                .map_err(|e| self.bad_at(place, format!("invalid JSON: {}", message(&e))))?;
            let text = match value {
                serde_json::Value::String(s) => s,
                serde_json::Value::Number(n) => n.to_string(),
                // Null reads as an absent field.
                serde_json::Value::Null => continue,
                _ => {
                    return Err(self.bad_at(place, format!("{key} must be a string or a number")));
                }
            };
            let t = text.as_bytes();
            // The text was unescaped, so errors about it are placed at the value.
            let column_here = self.column_of(place);
            let here = move |e: Bad| Box::new(e.with_column(column_here));
            match column {
                Column::Timestamp => fields.at = Some(self.timestamp(t).map_err(here)?),
                Column::Route => fields.route = Some(self.plain_route(raw, place)?),
                Column::Status => fields.status = Some(self.result(t).map_err(here)?),
                Column::Error => error = Some((t.to_vec(), place)),
                Column::Latency(unit) => {
                    fields.latency = Some(self.latency(t, unit).map_err(here)?)
                }
                Column::Other => {}
            }
        }
        if let (None, Some((e, place))) = (fields.status, error) {
            let column_here = self.column_of(place);
            let here = move |e: Bad| Box::new(e.with_column(column_here));
            fields.status = Some(self.result(&e).map_err(here)?);
        }
        self.complete(fields)
    }

    /// The route as the file writes it: a string without escapes (its text, borrowed
    /// from the line), or a number.
    #[cold]
    fn plain_route(&self, raw: &'a RawValue, place: &'a [u8]) -> Result<&'a [u8], Bad> {
        let written = raw.get().as_bytes();
        match written.first() {
            Some(b'"') if !written.contains(&b'\\') => Ok(&written[1..written.len() - 1]),
            Some(b'"') => {
                Err(self.bad_at(place, "the route contains JSON escapes; write it plainly"))
            }
            _ => Ok(written),
        }
    }

    /// Invalid JSON, placed where the parser stopped (a line that is JSON but not an
    /// object, at its start).
    #[cold]
    fn invalid(&self, line: &'a [u8], e: &serde_json::Error) -> Bad {
        if e.is_data() {
            let start = line
                .iter()
                .position(|b| !b.is_ascii_whitespace())
                .unwrap_or(0);
            return self.bad_at(
                &line[start..],
                "expected a JSON object ({...}) on each line",
            );
        }
        // The parser counts bytes from 1, at the byte it stopped at.
        let offset = e.column().saturating_sub(1).min(line.len());
        self.bad_at(&line[offset..], format!("invalid JSON: {}", message(e)))
    }
}

/// A JSON parser's message without its position (the error carries the line and column).
fn message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    match text.strip_suffix(&position) {
        Some(message) => message.to_owned(),
        None => text,
    }
}

/// The keys and values of the JSON object `line` holds, in line order, each value as it
/// is written there.
pub(super) fn entries(line: &[u8]) -> Result<Vec<(String, &RawValue)>, serde_json::Error> {
    /// An object's entries, borrowed from the text.
    struct Entries<'a>(Vec<(String, &'a RawValue)>);

    impl<'de> Deserialize<'de> for Entries<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Object;

            impl<'de> Visitor<'de> for Object {
                type Value = Entries<'de>;

                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }

                fn visit_map<A: MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Entries<'de>, A::Error> {
                    let mut entries = Vec::new();
                    while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                        entries.push(entry);
                    }
                    Ok(Entries(entries))
                }
            }

            d.deserialize_map(Object)
        }
    }

    serde_json::from_slice::<Entries<'_>>(line).map(|e| e.0)
}

/// Where a value's text starts: inside its quotes, for a string.
pub(super) fn value_place(raw: &RawValue) -> &[u8] {
    let written = raw.get().as_bytes();
    written.strip_prefix(b"\"").unwrap_or(written)
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
    use super::super::tests::all;
    use super::super::time::parse_rfc3339;
    use super::super::{ERROR_BASE, Format};
    use super::*;

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
                .starts_with("c.jsonl:0:31: bad status \"bogus\"")
        );
        assert!(
            fast_as_slow(r#"{"ts":1,"route":"/a","status":200.0,"latency":1}"#)
                .unwrap_err()
                .starts_with("c.jsonl:0:31: bad status \"200.0\"")
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
                .starts_with("c.jsonl:3:8: bad timestamp \"x\"")
        );
        // An object does not run on past its line, and a line with more is read whole.
        assert!(
            all(
                "c.jsonl",
                "{\"ts\":1,\"route\":\"/a\",\n\"status\":200,\"latency\":1}\n"
            )
            .unwrap_err()
            .starts_with("c.jsonl:1:21: invalid JSON")
        );
        assert!(
            all(
                "c.jsonl",
                "{\"ts\":1,\"route\":\"/a\",\"status\":200,\"latency\":1} {}\n"
            )
            .unwrap_err()
            .starts_with("c.jsonl:1:48: invalid JSON: trailing characters")
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
                err.starts_with(&format!("c.jsonl:0:15: bad timestamp {ts:?}: {why}")),
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
