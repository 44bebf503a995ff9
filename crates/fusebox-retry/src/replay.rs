//! Request bodies that can be sent more than once.
//!
//! A retry must send the same bytes again, but an `http_body::Body` can be read only once.
//! The retry layer therefore reads a small body (its size hint promises at most
//! `max_replay_body_bytes`) into a buffer before the first attempt and gives every
//! attempt a [`ReplayBody`] that plays the buffer back. Chunks are kept as the body's own
//! data type and cloned per attempt: for `Bytes` that is a reference count, not a copy.
//!
//! A body with no size bound, or a larger one, is *streaming*: it is passed through
//! untouched, exactly once, and the request is not retried (buffering it would hold an
//! unbounded amount of memory, or hold back a stream the server may be answering as it
//! reads). An empty body needs no buffer at all and allocates nothing.
//!
//! Which requests are buffered: every request on a route that allows retries (and with
//! `max_attempts` above 1) whose body is small enough — including non-idempotent ones,
//! because a request that was never sent (connection refused) may be repeated whatever its
//! method, and its body is needed for that. Requests on routes with retries off, or with
//! `max_attempts(1)`, are passed through untouched and never buffered. For `Bytes` data,
//! buffering holds a reference to the caller's chunk; it copies nothing.

use bytes::Buf;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project::pin_project;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The chunks of a buffered body. One chunk (the common case) is kept without a `Vec`.
#[derive(Clone)]
enum Chunks<D> {
    Zero,
    One(D),
    Many(Vec<D>),
}

/// A request body read into memory so that it can be replayed.
#[derive(Clone)]
pub(crate) struct Buffered<D> {
    chunks: Chunks<D>,
    // Boxed: request trailers are rare, and this travels in every retryable request's future.
    trailers: Option<Box<HeaderMap>>,
    len: u64,
}

impl<D> fmt::Debug for Buffered<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffered").field("len", &self.len).finish()
    }
}

impl<D> Default for Buffered<D> {
    fn default() -> Self {
        Buffered {
            chunks: Chunks::Zero,
            trailers: None,
            len: 0,
        }
    }
}

impl<D: Buf + Clone> Buffered<D> {
    /// Adds a data chunk; returns the total length so far.
    pub(crate) fn push(&mut self, chunk: D) -> u64 {
        let n = chunk.remaining() as u64;
        if n == 0 {
            return self.len;
        }
        self.len = self.len.saturating_add(n);
        self.chunks = match std::mem::replace(&mut self.chunks, Chunks::Zero) {
            Chunks::Zero => Chunks::One(chunk),
            Chunks::One(first) => Chunks::Many(vec![first, chunk]),
            Chunks::Many(mut all) => {
                all.push(chunk);
                Chunks::Many(all)
            }
        };
        self.len
    }

    /// Sets the trailers.
    pub(crate) fn set_trailers(&mut self, trailers: HeaderMap) {
        self.trailers = Some(Box::new(trailers));
    }

    /// A body that plays the buffer back.
    pub(crate) fn replay<B: Body<Data = D>>(&self) -> ReplayBody<B> {
        if self.len == 0 && self.trailers.is_none() {
            return ReplayBody::empty();
        }
        let chunks = match &self.chunks {
            Chunks::Zero => Replaying::Done,
            Chunks::One(c) => Replaying::One(c.clone()),
            Chunks::Many(all) => Replaying::Many(all.clone().into_iter()),
        };
        ReplayBody {
            kind: Kind::Replay {
                chunks,
                trailers: self.trailers.clone(),
                remaining: self.len,
            },
        }
    }
}

enum Replaying<D> {
    Done,
    One(D),
    Many(std::vec::IntoIter<D>),
}

impl<D> Replaying<D> {
    fn next(&mut self) -> Option<D> {
        match std::mem::replace(self, Replaying::Done) {
            Replaying::Done => None,
            Replaying::One(c) => Some(c),
            Replaying::Many(mut it) => {
                let next = it.next();
                if it.len() > 0 {
                    *self = Replaying::Many(it);
                }
                next
            }
        }
    }

    fn is_done(&self) -> bool {
        matches!(self, Replaying::Done)
    }
}

/// The request body each attempt of the retry layer sends: empty, a replay of a buffered
/// body, or the original body passed through once (streaming).
///
/// Data and errors are those of the original body `B`.
#[pin_project]
pub struct ReplayBody<B: Body> {
    #[pin]
    kind: Kind<B>,
}

#[pin_project(project = KindProj)]
enum Kind<B: Body> {
    Empty,
    Replay {
        chunks: Replaying<B::Data>,
        trailers: Option<Box<HeaderMap>>,
        remaining: u64,
    },
    Streaming {
        #[pin]
        body: B,
    },
}

impl<B: Body> ReplayBody<B> {
    /// An empty body (allocates nothing).
    pub fn empty() -> Self {
        ReplayBody { kind: Kind::Empty }
    }

    /// `body` passed through once.
    pub fn streaming(body: B) -> Self {
        ReplayBody {
            kind: Kind::Streaming { body },
        }
    }

    /// Whether this body replays a buffer (a retry, or a first attempt whose body was
    /// buffered), rather than being empty or streaming.
    pub fn is_replay(&self) -> bool {
        matches!(self.kind, Kind::Replay { .. })
    }

    /// Whether this body passes the original body through (sent once, never retried).
    pub fn is_streaming(&self) -> bool {
        matches!(self.kind, Kind::Streaming { .. })
    }

    /// Whether this body is empty (it sends no frame at all).
    pub fn is_empty(&self) -> bool {
        matches!(self.kind, Kind::Empty)
    }

    /// The original body, when this one passes it through ([`is_streaming`]); else this
    /// body, unchanged.
    ///
    /// For glue that must hand the body on as another type: the original body can then be
    /// handed on as it is instead of wrapped.
    ///
    /// [`is_streaming`]: ReplayBody::is_streaming
    pub fn into_streaming(self) -> Result<B, Self> {
        match self.kind {
            Kind::Streaming { body } => Ok(body),
            kind => Err(ReplayBody { kind }),
        }
    }
}

impl<B: Body> fmt::Debug for ReplayBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Empty => "empty",
            Kind::Replay { .. } => "replay",
            Kind::Streaming { .. } => "streaming",
        };
        f.debug_struct("ReplayBody").field("kind", &kind).finish()
    }
}

impl<B: Body> Body for ReplayBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Empty => Poll::Ready(None),
            KindProj::Replay {
                chunks,
                trailers,
                remaining,
            } => {
                if let Some(chunk) = chunks.next() {
                    *remaining = remaining.saturating_sub(chunk.remaining() as u64);
                    return Poll::Ready(Some(Ok(Frame::data(chunk))));
                }
                Poll::Ready(trailers.take().map(|t| Ok(Frame::trailers(*t))))
            }
            KindProj::Streaming { body } => body.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Empty => true,
            Kind::Replay {
                chunks, trailers, ..
            } => chunks.is_done() && trailers.is_none(),
            Kind::Streaming { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Empty => SizeHint::with_exact(0),
            Kind::Replay { remaining, .. } => SizeHint::with_exact(*remaining),
            Kind::Streaming { body } => body.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::HeaderValue;
    use http_body_util::{BodyExt, Full, StreamBody};

    type Stream = StreamBody<
        futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, std::io::Error>>>,
    >;

    fn buffer(chunks: &[&'static [u8]], trailers: Option<HeaderMap>) -> Buffered<Bytes> {
        let mut b = Buffered::default();
        for c in chunks {
            b.push(Bytes::from_static(c));
        }
        if let Some(t) = trailers {
            b.set_trailers(t);
        }
        b
    }

    #[tokio::test]
    async fn only_streaming_bodies_give_the_original_back() {
        let body = ReplayBody::streaming(Full::new(Bytes::from_static(b"once")));
        let original = body.into_streaming().expect("a streaming body");
        assert_eq!(original.collect().await.unwrap().to_bytes(), "once");

        let empty = ReplayBody::<Full<Bytes>>::empty();
        assert!(empty.is_empty());
        let empty = empty.into_streaming().expect_err("nothing to give back");
        assert!(empty.is_empty() && empty.is_end_stream());

        let replay: ReplayBody<Full<Bytes>> = buffer(&[b"again"], None).replay();
        let replay = replay.into_streaming().expect_err("a replay");
        assert!(replay.is_replay());
        assert_eq!(replay.collect().await.unwrap().to_bytes(), "again");
    }

    #[tokio::test]
    async fn replays_are_byte_identical_every_time() {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-checksum", HeaderValue::from_static("abc"));
        let b = buffer(&[b"hello ", b"", b"wor", b"ld"], Some(trailers));
        for _ in 0..3 {
            let body: ReplayBody<Full<Bytes>> = b.replay();
            assert!(body.is_replay());
            assert_eq!(body.size_hint().exact(), Some(11));
            assert!(!body.is_end_stream());
            let collected = body.collect().await.unwrap();
            assert_eq!(collected.trailers().unwrap()["x-checksum"], "abc");
            assert_eq!(collected.to_bytes(), "hello world");
        }
    }

    #[tokio::test]
    async fn one_chunk_and_no_chunk() {
        let one = buffer(&[b"x"], None);
        let mut body: ReplayBody<Full<Bytes>> = one.replay();
        assert_eq!(
            body.frame().await.unwrap().unwrap().into_data().unwrap(),
            "x"
        );
        assert!(body.is_end_stream());
        assert_eq!(body.size_hint().exact(), Some(0));
        assert!(body.frame().await.is_none());

        let none: ReplayBody<Full<Bytes>> = buffer(&[], None).replay();
        assert!(
            !none.is_replay(),
            "an empty buffer replays as the empty body"
        );
        assert!(none.is_end_stream());
        assert_eq!(none.size_hint().exact(), Some(0));
    }

    #[tokio::test]
    async fn streaming_bodies_pass_through_once() {
        let frames = vec![
            Ok(Frame::data(Bytes::from_static(b"a"))),
            Ok(Frame::data(Bytes::from_static(b"b"))),
        ];
        let body: ReplayBody<Stream> =
            ReplayBody::streaming(StreamBody::new(futures_util::stream::iter(frames)));
        assert!(body.is_streaming());
        assert!(format!("{body:?}").contains("streaming"));
        assert_eq!(body.collect().await.unwrap().to_bytes(), "ab");
        let empty = ReplayBody::<Full<Bytes>>::empty();
        assert!(empty.is_end_stream());
        assert_eq!(empty.collect().await.unwrap().to_bytes(), "");
    }
}
