//! Errors in what the user gave us, located to the file, line and column.
//!
//! Every command reads files a person wrote or a system recorded: scenario and policy files
//! (TOML) and call logs (CSV or JSON lines). A mistake in one of them must be found at once
//! and told precisely — `calls.csv:4812:1: bad timestamp "2024-13-01T00:00:00Z": month 13
//! is out of range` — never as a panic or a bare "invalid input". [`InputError`] carries the
//! position; [`SourceFile`] turns byte offsets (from the TOML parser's spans, or the call
//! parser's cursor) into lines and columns.

use std::fmt;
use std::ops::Range;
use std::path::Path;

/// The UTF-8 byte-order mark that some tools (spreadsheets, editors on Windows) write at
/// the start of a text file. Every reader skips it: it is not part of the first line.
pub const BOM: &str = "\u{feff}";

/// A problem in an input file or flag: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    file: Option<String>,
    line: Option<u32>,
    column: Option<u32>,
    reason: String,
}

impl InputError {
    /// A problem that belongs to no file (a flag, a missing feature).
    pub fn new(reason: impl Into<String>) -> Self {
        InputError {
            file: None,
            line: None,
            column: None,
            reason: reason.into(),
        }
    }

    /// A problem with a whole file (it cannot be read, it is empty).
    pub fn in_file(file: impl Into<String>, reason: impl Into<String>) -> Self {
        InputError {
            file: Some(file.into()),
            line: None,
            column: None,
            reason: reason.into(),
        }
    }

    /// A problem at a line (1-based) and column (1-based) of a file.
    pub fn at(file: impl Into<String>, line: u32, column: u32, reason: impl Into<String>) -> Self {
        InputError {
            file: Some(file.into()),
            line: Some(line),
            column: Some(column),
            reason: reason.into(),
        }
    }

    /// The file, if the problem is in one.
    pub fn file(&self) -> Option<&str> {
        self.file.as_deref()
    }

    /// The line (1-based), if known.
    pub fn line(&self) -> Option<u32> {
        self.line
    }

    /// The column (1-based), if known.
    pub fn column(&self) -> Option<u32> {
        self.column
    }

    /// What is wrong.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The same problem at another column of its line.
    pub(crate) fn with_column(mut self, column: u32) -> Self {
        if self.line.is_some() {
            self.column = Some(column);
        }
        self
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.line, self.column) {
            (Some(file), Some(line), Some(col)) => {
                write!(f, "{file}:{line}:{col}: {}", self.reason)
            }
            (Some(file), Some(line), None) => write!(f, "{file}:{line}: {}", self.reason),
            (Some(file), None, _) => write!(f, "{file}: {}", self.reason),
            (None, _, _) => f.write_str(&self.reason),
        }
    }
}

impl std::error::Error for InputError {}

/// A text file in memory, with what it takes to turn a byte offset into a line and column.
#[derive(Debug, Clone)]
pub struct SourceFile {
    name: String,
    text: String,
    line_starts: Vec<usize>,
}

impl SourceFile {
    /// Reads `path` (UTF-8 text, with or without a byte-order mark).
    pub fn read(path: &Path) -> Result<SourceFile, InputError> {
        let name = path.display().to_string();
        let bytes = std::fs::read(path)
            .map_err(|e| InputError::in_file(&name, format!("cannot read the file: {e}")))?;
        SourceFile::from_bytes(name, bytes)
    }

    /// A file from its bytes, which must be UTF-8 text (with or without a byte-order
    /// mark); `name` is what errors call it.
    pub fn from_bytes(name: impl Into<String>, bytes: Vec<u8>) -> Result<SourceFile, InputError> {
        let name = name.into();
        match String::from_utf8(bytes) {
            Ok(text) => Ok(SourceFile::new(name, text)),
            Err(e) => {
                let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
                let valid = valid.strip_prefix(BOM.as_bytes()).unwrap_or(valid);
                let line = 1 + valid.iter().filter(|&&b| b == b'\n').count();
                let last = valid.rsplit(|&b| b == b'\n').next().unwrap_or_default();
                Err(InputError::at(
                    &name,
                    saturating_u32(line),
                    saturating_u32(1 + chars(last)),
                    "the file is not UTF-8 text",
                ))
            }
        }
    }

    /// A file from text already in memory (built-in scenarios, tests); `name` is what
    /// errors call it. A leading byte-order mark ([`BOM`]) is dropped, so that positions
    /// on the first line count from its first character.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> SourceFile {
        let mut text = text.into();
        if text.starts_with(BOM) {
            text.drain(..BOM.len());
        }
        let mut line_starts = vec![0];
        line_starts.extend(
            text.bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| i + 1),
        );
        SourceFile {
            name: name.into(),
            text,
            line_starts,
        }
    }

    /// The name errors use (the path as given).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The line and column (both 1-based; the column counts characters) of a byte offset.
    pub fn position(&self, offset: usize) -> (u32, u32) {
        let offset = offset.min(self.text.len());
        let line = match self.line_starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let start = self.line_starts[line];
        let column = chars(&self.text.as_bytes()[start..offset]);
        (saturating_u32(line + 1), saturating_u32(column + 1))
    }

    /// An error at the start of `span`.
    pub fn error_at(&self, span: Range<usize>, reason: impl Into<String>) -> InputError {
        let (line, column) = self.position(span.start);
        InputError::at(&self.name, line, column, reason)
    }

    /// An error for the whole file.
    pub fn error(&self, reason: impl Into<String>) -> InputError {
        InputError::in_file(&self.name, reason)
    }

    /// Turns a TOML parse or type error into an error at its position.
    pub fn toml_error(&self, e: &toml::de::Error) -> InputError {
        let reason = e.message().trim().to_owned();
        match e.span() {
            Some(span) => self.error_at(span, reason),
            None => self.error(reason),
        }
    }
}

/// The characters in `bytes`: UTF-8 text, or a slice of it that may end inside a
/// character (a byte offset from a parser), whose bytes are counted up to it.
pub(crate) fn chars(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b & 0xc0 != 0x80).count()
}

/// `n` as a line or column number, at most `u32::MAX`.
pub(crate) fn saturating_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_lines_and_characters() {
        let f = SourceFile::new("a.toml", "ab\nc\u{e9}d\n\nx");
        assert_eq!(f.position(0), (1, 1));
        assert_eq!(f.position(1), (1, 2));
        assert_eq!(f.position(3), (2, 1));
        // "é" is two bytes, one column.
        assert_eq!(f.position(6), (2, 3));
        assert_eq!(f.position(8), (3, 1));
        assert_eq!(f.position(9), (4, 1));
        assert_eq!(f.position(100), (4, 2));
        let e = f.error_at(3..4, "bad");
        assert_eq!(e.to_string(), "a.toml:2:1: bad");
        assert_eq!(f.error("empty").to_string(), "a.toml: empty");
        assert_eq!(InputError::new("no file").to_string(), "no file");
    }

    #[test]
    fn files_that_are_not_utf8_are_located_in_characters_past_a_byte_order_mark() {
        let bytes = b"\xef\xbb\xbfa = 1\nb = \"\xc3\xa9\xff\"\n".to_vec();
        let e = SourceFile::from_bytes("f.toml", bytes).unwrap_err();
        assert_eq!(e.to_string(), "f.toml:2:7: the file is not UTF-8 text");
        let f = SourceFile::from_bytes("f.toml", b"\xef\xbb\xbfa = 1\n".to_vec()).unwrap();
        assert_eq!((f.text(), f.position(0)), ("a = 1\n", (1, 1)));
    }
}
