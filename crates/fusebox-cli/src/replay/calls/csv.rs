//! The CSV side of the reader: the header, and each line split at its commas in place.
//!
//! Errors are placed at the field they are about (inside its quotes, for a quoted field).

use super::{Bad, CallReader, Column, Fields, RawCall, trim};

impl<'a> CallReader<'a> {
    pub(super) fn read_header(&mut self, line: &'a [u8]) -> Result<(), Bad> {
        self.cur = line;
        let text = std::str::from_utf8(line)
            .map_err(|e| self.bad_at(&line[e.valid_up_to()..], "the header is not UTF-8"))?;
        let mut columns = Vec::new();
        for name in text.split(',') {
            let name = name.trim().trim_matches('"').to_ascii_lowercase();
            columns.push(Column::named(&name));
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
            return Err(self.bad_at(line, format!(
                "the header lacks the column{} {} (expected timestamp, route, status, latency_ms)",
                if missing.len() > 1 { "s" } else { "" },
                missing.join(", ")
            )));
        }
        self.columns = columns;
        Ok(())
    }

    #[inline]
    pub(super) fn csv_line(&mut self, line: &'a [u8]) -> Result<RawCall<'a>, Bad> {
        self.cur = line;
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
        let mut count = 0;
        for field in self::fields(line) {
            let field = field.map_err(|(place, why)| self.bad_at(place, why))?;
            self.field(&mut fields, count, field)?;
            count += 1;
        }
        self.finish_line(fields, count)
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
                return Err(self.bad_at(
                    field,
                    format!("too many fields: expected {}", self.columns.len()),
                ));
            }
        }
        Ok(())
    }

    fn finish_line(&self, f: Fields<'a>, count: usize) -> Result<RawCall<'a>, Bad> {
        if count < self.columns.len() {
            // Where the missing field would start: the end of the line.
            let end = &self.cur[self.cur.len()..];
            return Err(self.bad_at(
                end,
                format!(
                    "too few fields: expected {}, got {count}",
                    self.columns.len()
                ),
            ));
        }
        let route = f.route.unwrap_or_default();
        if route.is_empty() {
            return Err(self.bad_at(route, "the route is empty"));
        }
        let result = match (f.status.filter(|s| !s.is_empty()), f.error) {
            (Some(s), _) => self.result(s)?,
            (None, Some(e)) if !e.is_empty() => self.result(e)?,
            _ => {
                let place = f.status.or(f.error).unwrap_or_default();
                return Err(self.bad_at(place, "no status or error kind"));
            }
        };
        Ok(RawCall {
            at: f.at.unwrap_or_default(),
            route,
            result,
            latency: f.latency.unwrap_or_default(),
        })
    }
}

/// The fields of a CSV line: a field that opens with a quote runs to the next quote (no
/// quotes inside), which must end it. A field is its text (inside its quotes); an error is
/// where it is and what is wrong, and ends the line.
pub(super) fn fields(line: &[u8]) -> impl Iterator<Item = Result<&[u8], (&[u8], &'static str)>> {
    let mut rest = Some(line);
    std::iter::from_fn(move || {
        let s = rest?;
        if s.first() == Some(&b'"') {
            let inner = &s[1..];
            let Some(close) = inner.iter().position(|&b| b == b'"') else {
                rest = None;
                return Some(Err((s, "a quoted field has no closing quote")));
            };
            let after = &inner[close + 1..];
            match after.first() {
                None => rest = None,
                Some(b',') => rest = Some(&after[1..]),
                Some(_) => {
                    rest = None;
                    return Some(Err((after, "a closing quote must end its field")));
                }
            }
            return Some(Ok(&inner[..close]));
        }
        match s.iter().position(|&b| b == b',') {
            Some(p) => {
                rest = Some(&s[p + 1..]);
                Some(Ok(&s[..p]))
            }
            None => {
                rest = None;
                Some(Ok(s))
            }
        }
    })
}
