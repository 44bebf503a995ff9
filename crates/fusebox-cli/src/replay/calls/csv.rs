//! The CSV side of the reader: the header, and each line split at its commas in place.

use super::{Bad, CallReader, Column, Fields, RawCall, trim};

impl<'a> CallReader<'a> {
    pub(super) fn read_header(&mut self, line: &[u8]) -> Result<(), Bad> {
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
    pub(super) fn csv_line(&mut self, line: &'a [u8]) -> Result<RawCall<'a>, Bad> {
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
}
