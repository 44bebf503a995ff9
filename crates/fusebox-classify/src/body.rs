//! A response body that reports how its stream ended, exactly once.
//!
//! gRPC puts its status in the trailers, so a layer can only classify such a call at the
//! end of the stream. [`ClassifiedBody`] wraps a response body and hands an
//! [`OnEndOfStream`] callback the stream's end: its trailers (or none), an error, or the
//! body being dropped before the end (the caller gave up: ignored). Every fusebox layer uses
//! it for its own bookkeeping: the breaker records the verdict, the limit releases its
//! permit, the timeout stops its body timer.
//!
//! A gRPC-Web response ([`ClassifiedBody::for_response`] tells by its content type) carries
//! its status in a trailer frame at the end of the body instead of in HTTP trailers. Its
//! body is scanned as it streams past ([`grpc_web`]), and a stream that
//! ends without HTTP trailers reports the trailer frame's `grpc-status` (and
//! `grpc-retry-pushback-ms`) as its trailers, so that every classifier and callback reads
//! gRPC-Web as it reads native gRPC. The scan copies nothing and allocates nothing per
//! frame; its state is boxed once per gRPC-Web response, so that the bodies of every other
//! response stay as small as they were.

use crate::error::BoxError;
use crate::grpc_web::{self, Encoding, TrailerScanner};
use crate::verdict::SharedVerdict;
use bytes::Buf;
use http::{HeaderMap, Response};
use http_body::{Body, Frame, SizeHint};
use pin_project::pin_project;
use std::error::Error;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

/// How a response stream ended.
///
/// Closed: a body ends, fails or is dropped, and nothing else.
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

    /// The stream ended as `end` says, and `verdict` is the end's verdict shared with the
    /// other callbacks told the same end (a pair tells both with one): a callback that
    /// classifies the end asks it ([`SharedVerdict::classify`]), so that the trailers are
    /// classified once however many callbacks wait for them. The default is
    /// [`on_end`](Self::on_end), which classifies on its own.
    #[inline]
    fn on_end_shared(self, end: StreamEnd<'_>, verdict: &SharedVerdict)
    where
        Self: Sized,
    {
        let _ = verdict;
        self.on_end(end);
    }
}

/// Two callbacks in one: `A` is told first, then `B`, sharing one verdict on the end.
impl<A: OnEndOfStream, B: OnEndOfStream> OnEndOfStream for (A, B) {
    fn on_end(self, end: StreamEnd<'_>) {
        self.on_end_shared(end, &SharedVerdict::new());
    }

    fn on_end_shared(self, end: StreamEnd<'_>, verdict: &SharedVerdict) {
        self.0.on_end_shared(end, verdict);
        self.1.on_end_shared(end, verdict);
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
struct Pending<E: OnEndOfStream>(Waiter<E>);

/// What a [`Pending`] holds.
#[derive(Debug)]
enum Waiter<E> {
    /// Nothing to tell: a pass-through body, or one whose callback was told.
    Told,
    /// Waiting for the end of the stream.
    Waiting(E),
    /// Waiting for the end of a gRPC-Web stream, scanning it for its trailer frame. Boxed:
    /// only gRPC-Web responses have one, and inline it would make every body larger.
    Scanning(Box<Scanning<E>>),
}

#[derive(Debug)]
struct Scanning<E> {
    on_end: E,
    scanner: TrailerScanner,
}

impl<E: OnEndOfStream> Pending<E> {
    #[inline]
    fn is_some(&self) -> bool {
        !matches!(self.0, Waiter::Told)
    }

    #[inline]
    fn take(&mut self) -> Waiter<E> {
        std::mem::replace(&mut self.0, Waiter::Told)
    }

    /// Reads a data chunk, for a gRPC-Web stream (nothing to do for any other).
    #[inline]
    fn scan<D: Buf>(&mut self, data: &D) {
        if let Waiter::Scanning(scanning) = &mut self.0 {
            // The chunk's bytes in place, without consuming or copying them. A buffer of
            // more pieces than this holds (never `Bytes`: one piece) cannot be scanned.
            let mut pieces = [IoSlice::new(&[]); 16];
            let n = data.chunks_vectored(&mut pieces);
            let mut seen = 0;
            for piece in &pieces[..n] {
                scanning.scanner.feed(piece);
                seen += piece.len();
            }
            if seen < data.remaining() {
                scanning.scanner.lose();
            }
        }
    }

    /// Tells the callback `end`.
    #[inline]
    fn tell(&mut self, end: StreamEnd<'_>) {
        match self.take() {
            Waiter::Told => {}
            Waiter::Waiting(cb) => cb.on_end(end),
            Waiter::Scanning(scanning) => scanning.on_end.on_end(end),
        }
    }

    /// Tells the callback that the stream ended without HTTP trailers: a gRPC-Web stream
    /// reports its trailer frame's values as its trailers, if it had a whole one.
    #[inline]
    fn tell_end(&mut self) {
        match self.take() {
            Waiter::Told => {}
            Waiter::Waiting(cb) => cb.on_end(StreamEnd::Trailers(None)),
            Waiter::Scanning(scanning) => {
                let Scanning { on_end, scanner } = *scanning;
                match scanner.finish() {
                    Some(trailers) => trailers
                        .with_header_map(|map| on_end.on_end(StreamEnd::Trailers(Some(map)))),
                    None => on_end.on_end(StreamEnd::Trailers(None)),
                }
            }
        }
    }
}

impl<E: OnEndOfStream> Drop for Pending<E> {
    fn drop(&mut self) {
        self.tell(StreamEnd::Dropped);
    }
}

impl<B: Body, E: OnEndOfStream> ClassifiedBody<B, E> {
    /// Wraps `inner`; `on_end` is told how it ends. A body that is already at its end
    /// (empty) reports at once: servers may never poll it.
    pub fn new(inner: B, on_end: E) -> Self {
        Self::with_encoding(inner, None, on_end)
    }

    /// Wraps `response`'s body as [`new`](ClassifiedBody::new) does; a gRPC-Web response
    /// (by its `content-type`: [`grpc_web::encoding`]) has its body scanned for the trailer
    /// frame that carries its status (see the [module docs](self)).
    pub fn for_response(response: Response<B>, on_end: E) -> Response<Self> {
        let web = grpc_web::encoding(response.headers());
        response.map(|body| Self::with_encoding(body, web, on_end))
    }

    /// Wraps `inner`, scanning it as a gRPC-Web body in `web` encoding (or not at all).
    pub fn with_encoding(inner: B, web: Option<Encoding>, on_end: E) -> Self {
        let mut on_end = Pending(match web {
            None => Waiter::Waiting(on_end),
            Some(encoding) => Waiter::Scanning(Box::new(Scanning {
                on_end,
                scanner: TrailerScanner::new(encoding),
            })),
        });
        if inner.is_end_stream() {
            on_end.tell_end();
        }
        ClassifiedBody { inner, on_end }
    }
}

impl<B, E: OnEndOfStream> ClassifiedBody<B, E> {
    /// Wraps `inner` with no callback.
    pub fn passthrough(inner: B) -> Self {
        ClassifiedBody {
            inner,
            on_end: Pending(Waiter::Told),
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
                        this.on_end.tell(StreamEnd::Trailers(Some(trailers)));
                    } else {
                        if let Some(data) = frame.data_ref() {
                            this.on_end.scan(data);
                        }
                        if this.inner.is_end_stream() {
                            // The last data frame: hyper may drop the body without polling
                            // again.
                            this.on_end.tell_end();
                        }
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(err)) => {
                let err: BoxError = err.into();
                this.on_end.tell(StreamEnd::Error(&*err));
                Poll::Ready(Some(Err(err)))
            }
            None => {
                this.on_end.tell_end();
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
    use http::{HeaderValue, Response};
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

    fn web_frame(flags: u8, payload: &[u8]) -> Bytes {
        Bytes::from(crate::grpc_web::tests::frame(flags, payload))
    }

    fn web_response(content_type: &'static str, frames: Frames) -> Response<FrameStream> {
        let mut response = Response::new(stream(frames));
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(content_type),
        );
        response
    }

    #[tokio::test]
    async fn grpc_web_statuses_come_from_the_trailer_frame() {
        for (status, content_type) in [
            ("0", "application/grpc-web+proto"),
            ("14", "application/grpc-web"),
            ("0", "application/grpc-web+json"),
        ] {
            let rec = Record::default();
            let trailer = format!("grpc-status: {status}\r\n");
            let mut frames = vec![Ok(Frame::data(web_frame(0, b"message")))];
            // The trailer frame split across two chunks.
            let t = web_frame(0x80, trailer.as_bytes());
            frames.push(Ok(Frame::data(t.slice(..3))));
            frames.push(Ok(Frame::data(t.slice(3..))));
            let body =
                ClassifiedBody::for_response(web_response(content_type, frames), rec.clone());
            let bytes = body.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(bytes.len(), 12 + t.len(), "the body passes through whole");
            assert_eq!(rec.seen(), vec![Seen::Trailers(Some(status.into()))]);
        }
        // No trailer frame: no trailers (UNKNOWN to a gRPC classifier).
        let rec = Record::default();
        let frames = vec![Ok(Frame::data(web_frame(0, b"m")))];
        let body =
            ClassifiedBody::for_response(web_response("application/grpc-web", frames), rec.clone());
        body.into_body().collect().await.unwrap();
        assert_eq!(rec.seen(), vec![Seen::Trailers(None)]);
        // Native gRPC is not scanned: its trailer-like bytes are only data.
        let rec = Record::default();
        let frames = vec![Ok(Frame::data(web_frame(0x80, b"grpc-status: 0\r\n")))];
        let body =
            ClassifiedBody::for_response(web_response("application/grpc", frames), rec.clone());
        body.into_body().collect().await.unwrap();
        assert_eq!(rec.seen(), vec![Seen::Trailers(None)]);
        // HTTP trailers, where a proxy added them, are told as they are.
        let rec = Record::default();
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("13"));
        let frames = vec![
            Ok(Frame::data(web_frame(0x80, b"grpc-status: 0\r\n"))),
            Ok(Frame::trailers(trailers)),
        ];
        let body =
            ClassifiedBody::for_response(web_response("application/grpc-web", frames), rec.clone());
        body.into_body().collect().await.unwrap();
        assert_eq!(rec.seen(), vec![Seen::Trailers(Some("13".into()))]);
        // Dropped mid-stream: cancelled, once.
        let rec = Record::default();
        let frames = vec![
            Ok(Frame::data(web_frame(0, b"a"))),
            Ok(Frame::data(web_frame(0x80, b"grpc-status: 0\r\n"))),
        ];
        let mut body =
            ClassifiedBody::for_response(web_response("application/grpc-web", frames), rec.clone())
                .into_body();
        body.frame().await.unwrap().unwrap();
        drop(body);
        assert_eq!(rec.seen(), vec![Seen::Dropped]);
        // An empty gRPC-Web body is finished at once, without a status.
        let rec = Record::default();
        let mut response = Response::new(Empty::<Bytes>::new());
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc-web"),
        );
        let _body = ClassifiedBody::for_response(response, rec.clone());
        assert_eq!(rec.seen(), vec![Seen::Trailers(None)]);
    }

    #[test]
    fn pairs_tell_both() {
        let (a, b) = (Record::default(), Record::default());
        (a.clone(), b.clone()).on_end(StreamEnd::Dropped);
        assert_eq!(a.seen(), vec![Seen::Dropped]);
        assert_eq!(b.seen(), vec![Seen::Dropped]);
    }
}
