//! A response body that reports how its stream ended, exactly once.
//!
//! gRPC puts its status in the trailers, so a layer can only classify such a call at the
//! end of the stream. [`ClassifiedBody`] wraps a response body and hands an
//! [`OnEndOfStream`] callback the stream's end: its trailers (or none), an error, or the
//! body being dropped before the end (the caller gave up: ignored). Every fusebox layer uses
//! it for its own bookkeeping: the breaker records the verdict, the limit releases its
//! permit, the timeout stops its body timer.

use crate::error::BoxError;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project::pin_project;
use std::error::Error;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

/// How a response stream ended.
#[derive(Debug, Clone, Copy)]
pub enum StreamEnd<'a> {
    /// The stream ended normally, with these trailers (or none).
    Trailers(Option<&'a HeaderMap>),
    /// The body failed mid-stream.
    Error(&'a (dyn Error + 'static)),
    /// The body was dropped before its end: the caller cancelled.
    Dropped,
}

/// Told how a [`ClassifiedBody`]'s stream ended. Called at most once.
pub trait OnEndOfStream: Send + 'static {
    /// The stream ended as `end` says.
    fn on_end(self, end: StreamEnd<'_>);
}

/// Two callbacks in one: `A` is told first, then `B`.
impl<A: OnEndOfStream, B: OnEndOfStream> OnEndOfStream for (A, B) {
    fn on_end(self, end: StreamEnd<'_>) {
        let second = match &end {
            StreamEnd::Trailers(t) => StreamEnd::Trailers(*t),
            StreamEnd::Error(e) => StreamEnd::Error(*e),
            StreamEnd::Dropped => StreamEnd::Dropped,
        };
        self.0.on_end(end);
        self.1.on_end(second);
    }
}

/// A response body that tells its callback how the stream ended.
///
/// Without a callback (`ClassifiedBody::passthrough`) it only forwards frames: layers use
/// that when the verdict was already known from the response head, so that their response
/// type stays one type. Errors are converted to [`BoxError`] (only on the error path).
#[pin_project]
#[derive(Debug)]
pub struct ClassifiedBody<B, E: OnEndOfStream> {
    #[pin]
    inner: B,
    on_end: Pending<E>,
}

/// The callback still waiting for the end of the stream; told [`StreamEnd::Dropped`] if
/// the body is dropped first.
///
/// The drop lives in this field, not on [`ClassifiedBody`] itself, so that a body whose
/// callback has already been told (or never had one) can give its inner body back
/// ([`ClassifiedBody::into_inner`]).
#[derive(Debug)]
struct Pending<E: OnEndOfStream>(Option<E>);

impl<E: OnEndOfStream> Pending<E> {
    #[inline]
    fn take(&mut self) -> Option<E> {
        self.0.take()
    }

    #[inline]
    fn is_some(&self) -> bool {
        self.0.is_some()
    }
}

impl<E: OnEndOfStream> Drop for Pending<E> {
    fn drop(&mut self) {
        if let Some(cb) = self.0.take() {
            cb.on_end(StreamEnd::Dropped);
        }
    }
}

impl<B: Body, E: OnEndOfStream> ClassifiedBody<B, E> {
    /// Wraps `inner`; `on_end` is told how it ends. A body that is already at its end
    /// (empty) reports at once: servers may never poll it.
    pub fn new(inner: B, on_end: E) -> Self {
        if inner.is_end_stream() {
            on_end.on_end(StreamEnd::Trailers(None));
            return ClassifiedBody {
                inner,
                on_end: Pending(None),
            };
        }
        ClassifiedBody {
            inner,
            on_end: Pending(Some(on_end)),
        }
    }
}

impl<B, E: OnEndOfStream> ClassifiedBody<B, E> {
    /// Wraps `inner` with no callback.
    pub fn passthrough(inner: B) -> Self {
        ClassifiedBody {
            inner,
            on_end: Pending(None),
        }
    }

    /// The wrapped body.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }

    /// Whether a callback still waits for the end of the stream.
    pub fn is_pending(&self) -> bool {
        self.on_end.is_some()
    }

    /// The wrapped body, when no callback waits for its end (a pass-through body, or one
    /// whose callback was already told); else the body itself, unchanged.
    ///
    /// For glue that must hand a body on as another type: a body with nothing left to
    /// report can be unwrapped instead of boxed.
    pub fn into_inner(self) -> Result<B, Self> {
        if self.on_end.is_some() {
            return Err(self);
        }
        let ClassifiedBody { inner, .. } = self;
        Ok(inner)
    }
}

impl<B, E> Body for ClassifiedBody<B, E>
where
    B: Body,
    B::Error: Into<BoxError>,
    E: OnEndOfStream,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        match ready!(this.inner.as_mut().poll_frame(cx)) {
            Some(Ok(frame)) => {
                if this.on_end.is_some() {
                    if let Some(trailers) = frame.trailers_ref() {
                        if let Some(cb) = this.on_end.take() {
                            cb.on_end(StreamEnd::Trailers(Some(trailers)));
                        }
                    } else if this.inner.is_end_stream() {
                        // The last data frame: hyper may drop the body without polling again.
                        if let Some(cb) = this.on_end.take() {
                            cb.on_end(StreamEnd::Trailers(None));
                        }
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(err)) => {
                let err: BoxError = err.into();
                if let Some(cb) = this.on_end.take() {
                    cb.on_end(StreamEnd::Error(&*err));
                }
                Poll::Ready(Some(Err(err)))
            }
            None => {
                if let Some(cb) = this.on_end.take() {
                    cb.on_end(StreamEnd::Trailers(None));
                }
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::HeaderValue;
    use http_body_util::{BodyExt, Empty, Full, StreamBody};
    use std::sync::{Arc, Mutex};

    #[derive(Debug, Clone, PartialEq)]
    enum Seen {
        Trailers(Option<String>),
        Error(String),
        Dropped,
    }

    #[derive(Debug, Clone, Default)]
    struct Record(Arc<Mutex<Vec<Seen>>>);

    impl OnEndOfStream for Record {
        fn on_end(self, end: StreamEnd<'_>) {
            let seen = match end {
                StreamEnd::Trailers(t) => Seen::Trailers(
                    t.and_then(|t| t.get("grpc-status"))
                        .map(|v| v.to_str().unwrap().to_owned()),
                ),
                StreamEnd::Error(e) => Seen::Error(e.to_string()),
                StreamEnd::Dropped => Seen::Dropped,
            };
            self.0.lock().unwrap().push(seen);
        }
    }

    impl Record {
        fn seen(&self) -> Vec<Seen> {
            self.0.lock().unwrap().clone()
        }
    }

    type Item = Result<Frame<Bytes>, std::io::Error>;
    type Frames = Vec<Item>;
    type FrameStream = StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Item>>>;

    fn stream(frames: Frames) -> FrameStream {
        StreamBody::new(futures_util::stream::iter(frames))
    }

    #[tokio::test]
    async fn trailers_are_reported_once() {
        let rec = Record::default();
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("14"));
        let body = ClassifiedBody::new(
            stream(vec![
                Ok(Frame::data(Bytes::from_static(b"x"))),
                Ok(Frame::trailers(trailers)),
            ]),
            rec.clone(),
        );
        let collected = body.collect().await.unwrap();
        assert_eq!(collected.trailers().unwrap()["grpc-status"], "14");
        assert_eq!(rec.seen(), vec![Seen::Trailers(Some("14".into()))]);
    }

    #[tokio::test]
    async fn errors_are_reported_and_passed_on() {
        let rec = Record::default();
        let body = ClassifiedBody::new(
            stream(vec![
                Ok(Frame::data(Bytes::from_static(b"x"))),
                Err(std::io::Error::other("reset mid-stream")),
            ]),
            rec.clone(),
        );
        let err = body.collect().await.unwrap_err();
        assert_eq!(err.to_string(), "reset mid-stream");
        assert_eq!(rec.seen(), vec![Seen::Error("reset mid-stream".into())]);
    }

    #[tokio::test]
    async fn dropped_bodies_are_cancellations() {
        let rec = Record::default();
        let mut body = ClassifiedBody::new(
            stream(vec![
                Ok(Frame::data(Bytes::from_static(b"a"))),
                Ok(Frame::data(Bytes::from_static(b"b"))),
            ]),
            rec.clone(),
        );
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "a");
        drop(body);
        assert_eq!(rec.seen(), vec![Seen::Dropped]);
    }

    #[tokio::test]
    async fn finished_bodies_report_without_being_polled_again() {
        // An empty body is finished at once.
        let rec = Record::default();
        let body = ClassifiedBody::new(Empty::<Bytes>::new(), rec.clone());
        assert_eq!(rec.seen(), vec![Seen::Trailers(None)]);
        drop(body);
        assert_eq!(rec.seen().len(), 1);

        // A full body is finished after its one data frame.
        let rec = Record::default();
        let mut body = ClassifiedBody::new(Full::new(Bytes::from_static(b"hi")), rec.clone());
        let _ = body.frame().await.unwrap().unwrap();
        assert_eq!(rec.seen(), vec![Seen::Trailers(None)]);
        drop(body);
        assert_eq!(rec.seen().len(), 1);
    }

    #[tokio::test]
    async fn plain_end_of_stream() {
        let rec = Record::default();
        let body = ClassifiedBody::new(
            stream(vec![Ok(Frame::data(Bytes::from_static(b"a")))]),
            rec.clone(),
        );
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(bytes, "a");
        assert_eq!(rec.seen(), vec![Seen::Trailers(None)]);
    }

    #[tokio::test]
    async fn only_bodies_with_nothing_to_report_give_their_inner_body_back() {
        // A pass-through body unwraps.
        let body: ClassifiedBody<_, Record> =
            ClassifiedBody::passthrough(Full::new(Bytes::from_static(b"hi")));
        assert!(!body.is_pending());
        let inner = body.into_inner().expect("nothing to report");
        assert_eq!(inner.collect().await.unwrap().to_bytes(), "hi");

        // A body whose callback still waits does not, and loses nothing: the callback is
        // told when the body it gave back ends.
        let rec = Record::default();
        let body = ClassifiedBody::new(Full::new(Bytes::from_static(b"hi")), rec.clone());
        assert!(body.is_pending());
        let body = body.into_inner().expect_err("the callback waits");
        assert!(rec.seen().is_empty());
        assert_eq!(body.collect().await.unwrap().to_bytes(), "hi");
        assert_eq!(rec.seen(), vec![Seen::Trailers(None)]);

        // A body whose callback was told (here: at once, empty) unwraps, and unwrapping
        // or dropping it reports nothing more.
        let rec = Record::default();
        let body = ClassifiedBody::new(Empty::<Bytes>::new(), rec.clone());
        assert!(!body.is_pending());
        let inner = body.into_inner().expect("already told");
        assert!(inner.is_end_stream());
        assert_eq!(rec.seen(), vec![Seen::Trailers(None)]);

        // Dropped while pending: cancelled, exactly once.
        let rec = Record::default();
        let body = ClassifiedBody::new(Full::new(Bytes::from_static(b"hi")), rec.clone());
        drop(body.into_inner().expect_err("the callback waits"));
        assert_eq!(rec.seen(), vec![Seen::Dropped]);
    }

    #[test]
    fn pairs_tell_both() {
        let (a, b) = (Record::default(), Record::default());
        (a.clone(), b.clone()).on_end(StreamEnd::Dropped);
        assert_eq!(a.seen(), vec![Seen::Dropped]);
        assert_eq!(b.seen(), vec![Seen::Dropped]);
    }
}
