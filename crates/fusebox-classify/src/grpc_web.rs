//! gRPC-Web: the status of a call travels in the body, not in HTTP trailers.
//!
//! A gRPC-Web server (`content-type: application/grpc-web`, `application/grpc-web+proto`,
//! `+json`, or the base64 `application/grpc-web-text` forms) cannot count on HTTP trailers
//! reaching a browser, so it ends the body with a *trailer frame*: the same five-byte frame
//! header as a message (a flag byte, then a big-endian length), with the flag's top bit
//! (`0x80`) set, and a block of HTTP/1-style header lines (`grpc-status: 0\r\n`) as its
//! payload. Such a stream ends with no HTTP trailers at all; read as native gRPC it would be
//! a missing status, `UNKNOWN`, a failure.
//!
//! [`TrailerScanner`] finds that frame while the body streams past, without copying it and
//! without allocating: it reads each frame header and skips message payloads by their
//! length, decodes base64 four characters at a time for the text forms, and keeps only the
//! two values the classification needs from the trailer block — `grpc-status` and
//! `grpc-retry-pushback-ms` — in fixed-size buffers. [`ClassifiedBody`](crate::ClassifiedBody)
//! runs it for gRPC-Web responses ([`encoding`]) and hands the classifier those values as
//! the stream's trailers. A trailers-only gRPC-Web answer (its status in the response
//! headers) needs none of this: it is classified from its headers, as native gRPC is.
//!
//! # Malformed bodies
//!
//! What is not a well-formed trailer frame never yields a status: a body that ends before
//! its trailer frame is complete, invalid base64, or a body whose bytes the scanner could
//! not see ([`TrailerScanner::lose`]) has no trailers, and is classified as a gRPC stream
//! without a status (`UNKNOWN`). A trailer frame without a `grpc-status` line, or with a
//! value that is not a status, is `UNKNOWN` too. Lines the scanner does not need
//! (`grpc-message`, custom metadata) are skipped whatever they hold.

use crate::grpc::{Code, GRPC_RETRY_PUSHBACK_MS, GRPC_STATUS};
use http::{HeaderMap, HeaderValue, header};
use std::sync::LazyLock;

/// How a gRPC-Web body is encoded.
///
/// Closed: gRPC-Web has these two encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `application/grpc-web`, `application/grpc-web+proto`, `application/grpc-web+json`:
    /// frames as bytes.
    Binary,
    /// `application/grpc-web-text` (and `-text+proto`): the frames in base64.
    Text,
}

/// The gRPC-Web encoding a response's `content-type` names; `None` for anything else
/// (native gRPC included).
pub fn encoding(headers: &HeaderMap) -> Option<Encoding> {
    encoding_of(headers.get(header::CONTENT_TYPE)?.as_bytes())
}

/// The gRPC-Web encoding of a `content-type` value (case-insensitive; a subtype suffix
/// such as `+proto` and parameters after `;` are allowed).
pub fn encoding_of(content_type: &[u8]) -> Option<Encoding> {
    const WEB: &[u8] = b"application/grpc-web";
    const TEXT: &[u8] = b"-text";
    let prefix = content_type.get(..WEB.len())?;
    if !prefix.eq_ignore_ascii_case(WEB) {
        return None;
    }
    let rest = &content_type[WEB.len()..];
    let (encoding, rest) = match rest.get(..TEXT.len()) {
        Some(t) if t.eq_ignore_ascii_case(TEXT) => (Encoding::Text, &rest[TEXT.len()..]),
        _ => (Encoding::Binary, rest),
    };
    match rest.first() {
        None | Some(b'+' | b';' | b' ' | b'\t') => Some(encoding),
        Some(_) => None,
    }
}

/// What a gRPC-Web trailer frame said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebTrailers {
    code: Code,
    pushback: Option<Value>,
}

impl WebTrailers {
    /// The `grpc-status` (`UNKNOWN` when the frame had none, or a malformed one).
    pub fn code(&self) -> Code {
        self.code
    }

    /// The `grpc-retry-pushback-ms` value as it was written (surrounding whitespace
    /// removed), if the frame had one and it fit [`VALUE_LEN`] bytes.
    pub fn pushback(&self) -> Option<&[u8]> {
        self.pushback.as_ref().and_then(Value::get)
    }

    /// These trailers as the HTTP trailers a native gRPC stream would have carried, for
    /// [`Classifier::classify_eos`](crate::Classifier::classify_eos). Without a pushback
    /// this borrows a shared map (no allocation); with one it builds a map.
    pub fn with_header_map<R>(&self, f: impl FnOnce(&HeaderMap) -> R) -> R {
        match self
            .pushback()
            .and_then(|v| HeaderValue::from_bytes(v).ok())
        {
            None => f(&STATUS_ONLY[self.code as usize]),
            Some(pushback) => {
                let mut map = STATUS_ONLY[self.code as usize].clone();
                map.insert(GRPC_RETRY_PUSHBACK_MS, pushback);
                f(&map)
            }
        }
    }
}

/// One `grpc-status` trailer map per code, built once.
static STATUS_ONLY: LazyLock<[HeaderMap; 17]> = LazyLock::new(|| {
    const VALUES: [&str; 17] = [
        "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
    ];
    VALUES.map(|v| {
        let mut map = HeaderMap::with_capacity(1);
        map.insert(GRPC_STATUS, HeaderValue::from_static(v));
        map
    })
});

/// The longest header name or value the scanner keeps; longer ones are not the values it
/// looks for (a status has at most 2 digits, a pushback in milliseconds fits in 20).
pub const VALUE_LEN: usize = 24;

/// A short byte string kept inline; `None` inside when it overflowed [`VALUE_LEN`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Value {
    bytes: [u8; VALUE_LEN],
    len: Option<u8>,
}

impl Value {
    const EMPTY: Value = Value {
        bytes: [0; VALUE_LEN],
        len: Some(0),
    };

    #[inline]
    fn push(&mut self, b: u8) {
        if let Some(len) = self.len {
            match self.bytes.get_mut(usize::from(len)) {
                Some(slot) => {
                    *slot = b;
                    self.len = Some(len + 1);
                }
                None => self.len = None,
            }
        }
    }

    /// The bytes, whitespace trimmed; `None` when they overflowed.
    fn get(&self) -> Option<&[u8]> {
        let len = usize::from(self.len?);
        Some(self.bytes[..len].trim_ascii())
    }
}

/// Where the trailer block's line parser is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// Reading a header name (lower-cased).
    Name,
    /// Reading the value of the header named so far.
    Value,
}

/// The trailer block's parser: one header line at a time.
#[derive(Debug, Clone)]
struct Block {
    line: Line,
    name: Value,
    value: Value,
    status: Option<Code>,
    pushback: Option<Value>,
}

impl Block {
    fn new() -> Self {
        Block {
            line: Line::Name,
            name: Value::EMPTY,
            value: Value::EMPTY,
            status: None,
            pushback: None,
        }
    }

    #[inline]
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            match (self.line, b) {
                (_, b'\n') => self.end_line(),
                (Line::Name, b':') => self.line = Line::Value,
                (Line::Name, b) => self.name.push(b.to_ascii_lowercase()),
                (Line::Value, b) => self.value.push(b),
            }
        }
    }

    /// Ends the current line: keeps its value if it is one of the two looked for (the
    /// first of each wins).
    fn end_line(&mut self) {
        if self.line == Line::Value {
            match self.name.get() {
                Some(name) if name == GRPC_STATUS.as_bytes() && self.status.is_none() => {
                    self.status = Some(match self.value.get() {
                        Some(v) => Code::parse(v),
                        None => Code::Unknown,
                    });
                }
                Some(name)
                    if name == GRPC_RETRY_PUSHBACK_MS.as_bytes() && self.pushback.is_none() =>
                {
                    self.pushback = Some(self.value);
                }
                _ => {}
            }
        }
        self.line = Line::Name;
        self.name = Value::EMPTY;
        self.value = Value::EMPTY;
    }
}

/// Where the frame parser is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    /// Reading a frame header: `have` of its five bytes so far.
    Header { have: u8 },
    /// Skipping a message's payload.
    Message { remaining: u32 },
    /// Reading the trailer frame's payload.
    Trailer { remaining: u32 },
    /// The trailer frame is complete: the rest of the body is not looked at.
    Done,
    /// The body is not a well-formed gRPC-Web body, or bytes were lost: no status.
    Broken,
}

/// The base64 decoder of the text forms: up to three sextets waiting for a fourth.
#[derive(Debug, Clone, Copy)]
struct Base64 {
    quantum: [u8; 4],
    have: u8,
}

/// Finds a gRPC-Web body's trailer frame as the body streams past (see the
/// [module docs](self)). Feed it every data chunk in order, then ask [`finish`](Self::finish).
#[derive(Debug, Clone)]
pub struct TrailerScanner {
    frame: Frame,
    header: [u8; 5],
    block: Block,
    text: Option<Base64>,
}

impl TrailerScanner {
    /// A scanner for a body in `encoding`.
    pub fn new(encoding: Encoding) -> Self {
        TrailerScanner {
            frame: Frame::Header { have: 0 },
            header: [0; 5],
            block: Block::new(),
            text: match encoding {
                Encoding::Binary => None,
                Encoding::Text => Some(Base64 {
                    quantum: [0; 4],
                    have: 0,
                }),
            },
        }
    }

    /// Reads the next bytes of the body.
    pub fn feed(&mut self, bytes: &[u8]) {
        if matches!(self.frame, Frame::Done | Frame::Broken) {
            return;
        }
        match self.text {
            None => self.feed_binary(bytes),
            Some(_) => self.feed_text(bytes),
        }
    }

    /// Says that some of the body's bytes could not be read: the scan cannot find a
    /// trailer frame it can trust, unless it already has one.
    pub fn lose(&mut self) {
        if self.frame != Frame::Done {
            self.frame = Frame::Broken;
        }
    }

    /// The trailer frame's values, once a whole trailer frame was read; `None` before,
    /// and for a body that is not well-formed.
    pub fn finish(&self) -> Option<WebTrailers> {
        (self.frame == Frame::Done).then(|| WebTrailers {
            code: self.block.status.unwrap_or(Code::Unknown),
            pushback: self.block.pushback,
        })
    }

    fn feed_text(&mut self, bytes: &[u8]) {
        for &c in bytes {
            let Some(b64) = self.text.as_mut() else {
                return;
            };
            let sextet = match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a' + 26,
                b'0'..=b'9' => c - b'0' + 52,
                b'+' => 62,
                b'/' => 63,
                b'=' => 64,
                b'\r' | b'\n' | b' ' | b'\t' => continue,
                _ => {
                    self.frame = Frame::Broken;
                    return;
                }
            };
            b64.quantum[usize::from(b64.have)] = sextet;
            b64.have += 1;
            if b64.have < 4 {
                continue;
            }
            b64.have = 0;
            let q = b64.quantum;
            // Padding ends a quantum early: `xx==` is one byte, `xxx=` two. Each chunk of
            // a text body may be padded on its own, so decoding goes on after it.
            let (n, valid) = match (q[0], q[1], q[2], q[3]) {
                (a, b, c, d) if a < 64 && b < 64 && c < 64 && d < 64 => (3, true),
                (a, b, c, 64) if a < 64 && b < 64 && c < 64 => (2, true),
                (a, b, 64, 64) if a < 64 && b < 64 => (1, true),
                _ => (0, false),
            };
            if !valid {
                self.frame = Frame::Broken;
                return;
            }
            let s = |i: usize| u32::from(q[i] & 63);
            let word = (s(0) << 18) | (s(1) << 12) | (s(2) << 6) | s(3);
            let decoded = [(word >> 16) as u8, (word >> 8) as u8, word as u8];
            self.feed_binary(&decoded[..n]);
            if matches!(self.frame, Frame::Done | Frame::Broken) {
                return;
            }
        }
    }

    fn feed_binary(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match self.frame {
                Frame::Header { have } => {
                    let have = usize::from(have);
                    let take = (5 - have).min(bytes.len());
                    self.header[have..have + take].copy_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if have + take < 5 {
                        self.frame = Frame::Header {
                            have: (have + take) as u8,
                        };
                        continue;
                    }
                    let [flags, l0, l1, l2, l3] = self.header;
                    let remaining = u32::from_be_bytes([l0, l1, l2, l3]);
                    self.frame = if flags & 0x80 != 0 {
                        Frame::Trailer { remaining }
                    } else {
                        Frame::Message { remaining }
                    };
                    self.end_of_payload();
                }
                Frame::Message { remaining } => {
                    let skip = bytes.len().min(remaining as usize);
                    bytes = &bytes[skip..];
                    // `skip` is at most `remaining`, a u32.
                    self.frame = Frame::Message {
                        remaining: remaining - skip as u32,
                    };
                    self.end_of_payload();
                }
                Frame::Trailer { remaining } => {
                    let take = bytes.len().min(remaining as usize);
                    self.block.feed(&bytes[..take]);
                    bytes = &bytes[take..];
                    self.frame = Frame::Trailer {
                        remaining: remaining - take as u32,
                    };
                    self.end_of_payload();
                }
                Frame::Done | Frame::Broken => return,
            }
        }
    }

    /// Moves on from a payload that has been read to its end.
    fn end_of_payload(&mut self) {
        match self.frame {
            Frame::Message { remaining: 0 } => self.frame = Frame::Header { have: 0 },
            Frame::Trailer { remaining: 0 } => {
                // The block's last line may lack its line break.
                self.block.end_line();
                self.frame = Frame::Done;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A gRPC-Web frame: `flags`, the payload's length, the payload.
    pub(crate) fn frame(flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![flags];
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn body(messages: &[&[u8]], trailer: &[u8]) -> Vec<u8> {
        let mut b: Vec<u8> = messages.iter().flat_map(|m| frame(0, m)).collect();
        b.extend(frame(0x80, trailer));
        b
    }

    fn scan(encoding: Encoding, chunks: &[&[u8]]) -> Option<WebTrailers> {
        let mut s = TrailerScanner::new(encoding);
        for c in chunks {
            s.feed(c);
        }
        s.finish()
    }

    /// Standard base64 with padding, as gRPC-Web text bodies are written.
    fn base64(bytes: &[u8]) -> Vec<u8> {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .encode(bytes)
            .into_bytes()
    }

    #[test]
    fn content_types() {
        for (ct, enc) in [
            (&b"application/grpc-web"[..], Some(Encoding::Binary)),
            (b"application/grpc-web+proto", Some(Encoding::Binary)),
            (b"application/grpc-web+json", Some(Encoding::Binary)),
            (b"Application/GRPC-Web+proto", Some(Encoding::Binary)),
            (
                b"application/grpc-web; charset=utf-8",
                Some(Encoding::Binary),
            ),
            (b"application/grpc-web-text", Some(Encoding::Text)),
            (b"application/grpc-web-text+proto", Some(Encoding::Text)),
            (b"application/grpc", None),
            (b"application/grpc+proto", None),
            (b"application/grpc-webx", None),
            (b"application/grpc-web-textual", None),
            (b"text/plain", None),
            (b"", None),
        ] {
            assert_eq!(encoding_of(ct), enc, "{:?}", String::from_utf8_lossy(ct));
        }
    }

    #[test]
    fn healthy_and_failed_streams() {
        let ok = body(&[b"hello", b""], b"grpc-status: 0\r\ngrpc-message: \r\n");
        let t = scan(Encoding::Binary, &[&ok]).unwrap();
        assert_eq!(t.code(), Code::Ok);
        assert_eq!(t.pushback(), None);

        let unavailable = body(
            &[b"partial"],
            b"grpc-message: try%20again\r\nGrpc-Status:14\r\ngrpc-retry-pushback-ms: 250\r\n",
        );
        let t = scan(Encoding::Binary, &[&unavailable]).unwrap();
        assert_eq!(t.code(), Code::Unavailable);
        assert_eq!(t.pushback(), Some(&b"250"[..]));
        t.with_header_map(|m| {
            assert_eq!(m[GRPC_STATUS], "14");
            assert_eq!(m[GRPC_RETRY_PUSHBACK_MS], "250");
        });
        // The last line may lack its line break; a frame without a status is UNKNOWN.
        let t = scan(Encoding::Binary, &[&body(&[], b"grpc-status: 5")]).unwrap();
        assert_eq!(t.code(), Code::NotFound);
        let t = scan(Encoding::Binary, &[&body(&[], b"grpc-message: x\r\n")]).unwrap();
        assert_eq!(t.code(), Code::Unknown);
        let t = scan(Encoding::Binary, &[&body(&[], b"grpc-status: OK\r\n")]).unwrap();
        assert_eq!(t.code(), Code::Unknown);
        // No trailer frame, or one cut short: no trailers at all.
        assert_eq!(
            scan(Encoding::Binary, &[&frame(0, b"only a message")]),
            None
        );
        let cut = body(&[b"m"], b"grpc-status: 0\r\n");
        assert_eq!(scan(Encoding::Binary, &[&cut[..cut.len() - 1]]), None);
        assert_eq!(scan(Encoding::Binary, &[]), None);
    }

    #[test]
    fn every_split_of_the_body_scans_alike() {
        let ok = body(&[b"first message", b"second"], b"grpc-status: 0\r\n");
        for at in 0..=ok.len() {
            let (a, b) = ok.split_at(at);
            assert_eq!(
                scan(Encoding::Binary, &[a, b]).unwrap().code(),
                Code::Ok,
                "{at}"
            );
        }
        let bytes: Vec<&[u8]> = ok.chunks(1).collect();
        assert_eq!(scan(Encoding::Binary, &bytes).unwrap().code(), Code::Ok);
    }

    #[test]
    fn text_bodies_are_base64_padded_per_chunk() {
        let b = body(&[b"msg"], b"grpc-status: 14\r\n");
        let whole = base64(&b);
        assert_eq!(
            scan(Encoding::Text, &[&whole]).unwrap().code(),
            Code::Unavailable
        );
        // Each frame encoded (and padded) on its own, as servers may send them.
        let mut per_frame = base64(&frame(0, b"msg"));
        per_frame.extend(base64(&frame(0x80, b"grpc-status: 0\r\n")));
        let t = scan(Encoding::Text, &[&per_frame]).unwrap();
        assert_eq!(t.code(), Code::Ok);
        for at in 0..=per_frame.len() {
            let (x, y) = per_frame.split_at(at);
            assert_eq!(scan(Encoding::Text, &[x, y]).unwrap().code(), Code::Ok);
        }
        // Not base64: no status.
        assert_eq!(scan(Encoding::Text, &[b"!!!!"]), None);
        assert_eq!(scan(Encoding::Text, &[b"A==="]), None);
        // The binary body read as text is not base64 either.
        assert_eq!(scan(Encoding::Text, &[&b]), None);
    }

    #[test]
    fn lost_bytes_lose_the_status_unless_it_was_read() {
        let ok = body(&[b"m"], b"grpc-status: 0\r\n");
        let mut s = TrailerScanner::new(Encoding::Binary);
        s.feed(&ok[..3]);
        s.lose();
        s.feed(&ok[3..]);
        assert_eq!(s.finish(), None);
        let mut s = TrailerScanner::new(Encoding::Binary);
        s.feed(&ok);
        s.lose();
        assert_eq!(s.finish().unwrap().code(), Code::Ok);
    }

    /// A valid gRPC-Web body: its bytes, where its message payloads lie, and the status and
    /// pushback its trailer frame says.
    #[derive(Debug, Clone)]
    struct Valid {
        bytes: Vec<u8>,
        payloads: Vec<std::ops::Range<usize>>,
        status: u8,
        pushback: Option<i64>,
    }

    fn valid() -> impl proptest::strategy::Strategy<Value = Valid> {
        use proptest::prelude::*;
        (
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..24), 0..4),
            0u8..=20,
            proptest::option::of(any::<i64>()),
            proptest::collection::vec(32u8..127, 0..16),
            any::<bool>(),
        )
            .prop_map(|(messages, status, pushback, message, upper)| {
                let mut bytes = Vec::new();
                let mut payloads = Vec::new();
                for m in &messages {
                    bytes.extend(frame(0, m));
                    payloads.push(bytes.len() - m.len()..bytes.len());
                }
                let name = if upper { "Grpc-Status" } else { "grpc-status" };
                let mut block = format!(
                    "grpc-message: {}\r\n{name}: {status}\r\n",
                    String::from_utf8(message).unwrap()
                );
                if let Some(ms) = pushback {
                    block.push_str(&format!("grpc-retry-pushback-ms: {ms}\r\n"));
                }
                bytes.extend(frame(0x80, block.as_bytes()));
                Valid {
                    bytes,
                    payloads,
                    status,
                    pushback,
                }
            })
    }

    fn scan_chunked(encoding: Encoding, bytes: &[u8], chunk: usize) -> Option<WebTrailers> {
        let mut s = TrailerScanner::new(encoding);
        for c in bytes.chunks(chunk.max(1)) {
            s.feed(c);
        }
        s.finish()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]

        /// Arbitrary bytes, in either encoding, however split: no panic, and the same
        /// answer as in one piece.
        #[test]
        fn arbitrary_bytes_scan_alike_however_split(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            chunk in 1usize..32,
            text in proptest::prelude::any::<bool>(),
        ) {
            let encoding = if text { Encoding::Text } else { Encoding::Binary };
            let whole = scan_chunked(encoding, &bytes, bytes.len());
            proptest::prop_assert_eq!(scan_chunked(encoding, &bytes, chunk), whole);
        }

        /// Valid bodies, binary or base64, in any chunking, give their status and pushback;
        /// a status outside 0..=16 is UNKNOWN.
        #[test]
        fn valid_bodies_give_their_status(v in valid(), chunk in 1usize..40, text in proptest::prelude::any::<bool>()) {
            let (encoding, bytes) = if text { (Encoding::Text, base64(&v.bytes)) } else { (Encoding::Binary, v.bytes.clone()) };
            let t = scan_chunked(encoding, &bytes, chunk).expect("a whole trailer frame");
            proptest::prop_assert_eq!(t.code(), Code::from_i32(i32::from(v.status)));
            let pushback = v.pushback.map(|ms| ms.to_string());
            proptest::prop_assert_eq!(t.pushback(), pushback.as_deref().map(str::as_bytes));
        }

        /// One byte changed: no panic; a change inside a message payload changes nothing.
        #[test]
        fn near_valid_bodies(v in valid(), at in 0usize..400, byte in proptest::prelude::any::<u8>(), chunk in 1usize..40) {
            let at = at % v.bytes.len();
            let mut mutated = v.bytes.clone();
            mutated[at] = byte;
            let got = scan_chunked(Encoding::Binary, &mutated, chunk);
            if v.payloads.iter().any(|p| p.contains(&at)) {
                proptest::prop_assert_eq!(got, scan_chunked(Encoding::Binary, &v.bytes, chunk));
            }
            let _ = scan_chunked(Encoding::Text, &base64(&mutated), chunk);
        }

        /// Limits: lengths up to u32::MAX never overflow; a frame longer than the body
        /// leaves no status.
        #[test]
        fn huge_lengths(len in proptest::prelude::any::<u32>(), flags in proptest::prelude::any::<u8>(), tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let mut bytes = vec![flags];
            bytes.extend_from_slice(&len.to_be_bytes());
            bytes.extend_from_slice(&tail);
            let got = scan_chunked(Encoding::Binary, &bytes, 7);
            if (len as usize) > tail.len() {
                proptest::prop_assert_eq!(got, None);
            }
        }
    }
}
