//! A healthy gRPC-Web stream's trailer frame is found without allocating per frame.
//!
//! The body of a gRPC-Web response is scanned for its trailer frame as it streams through
//! a [`ClassifiedBody`]: frames are read in place, and the healthy status is told from a
//! shared map. The scan's state is boxed once per gRPC-Web response (so that no other
//! response's body grows): a stream of one message and one of 64 must cost the same single
//! allocation, with the verdict a success.
//!
//! Its own test binary, because it installs a counting global allocator; one test, because
//! that allocator sees every thread.

use bytes::Bytes;
use fusebox_classify::{ClassifiedBody, OnEndOfStream, StreamEnd};
use fusebox_tests::alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use fusebox_tests::grpc_web::frame;
use http::{HeaderValue, Response, header};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use std::alloc::System;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const RESPONSES: usize = 200;

type Chunks = std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>;
type WebBody = StreamBody<futures_util::stream::Iter<Chunks>>;

/// Counts the streams that ended with `grpc-status: 0`.
#[derive(Clone)]
struct CountOk(Arc<AtomicUsize>);

impl OnEndOfStream for CountOk {
    fn on_end(self, end: StreamEnd<'_>) {
        if let StreamEnd::Trailers(Some(t)) = end
            && t.get("grpc-status").is_some_and(|v| v == "0")
        {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `n` responses of `messages` messages each, every frame a chunk of its own, the trailer
/// frame split in two; built before counting.
fn responses(n: usize, messages: usize) -> Vec<Response<WebBody>> {
    (0..n)
        .map(|_| {
            let mut chunks: Vec<Result<Frame<Bytes>, Infallible>> = (0..messages)
                .map(|_| Ok(Frame::data(Bytes::from(frame(0, b"\x0a\x05hello")))))
                .collect();
            let trailer = Bytes::from(frame(0x80, b"grpc-status: 0\r\ngrpc-message: \r\n"));
            chunks.push(Ok(Frame::data(trailer.slice(..4))));
            chunks.push(Ok(Frame::data(trailer.slice(4..))));
            let mut response = Response::new(StreamBody::new(futures_util::stream::iter(chunks)));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/grpc-web+proto"),
            );
            response
        })
        .collect()
}

/// Allocations per response while each is wrapped and read to its end.
fn per_response(rt: &tokio::runtime::Runtime, messages: usize) -> usize {
    let ok = CountOk(Arc::new(AtomicUsize::new(0)));
    let warm = responses(10, messages);
    let measured = responses(RESPONSES, messages);
    let allocations = rt.block_on(async {
        for response in warm {
            let body = ClassifiedBody::for_response(response, ok.clone()).into_body();
            body.collect().await.expect("infallible");
        }
        let region = Region::new(GLOBAL);
        for response in measured {
            let mut body = ClassifiedBody::for_response(response, ok.clone()).into_body();
            while let Some(frame) = body.frame().await {
                std::hint::black_box(frame.expect("infallible"));
            }
        }
        region.change().allocations
    });
    assert_eq!(
        ok.0.load(Ordering::Relaxed),
        10 + RESPONSES,
        "every stream ended with grpc-status 0"
    );
    assert_eq!(allocations % RESPONSES, 0, "{allocations} allocations");
    allocations / RESPONSES
}

#[test]
fn the_trailer_frame_scan_allocates_once_per_response_not_per_frame() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let one = per_response(&rt, 1);
    let many = per_response(&rt, 64);
    assert_eq!(one, 1, "the scan's boxed state, and nothing else");
    assert_eq!(many, one, "64 messages cost what one does");
}
