//! What the tonic tests share: `test.Feed`, a hand-written gRPC service over
//! `tonic::server::Grpc` and prost messages (no codegen, no protoc), a server for it on
//! 127.0.0.1 (behind a `ServerLayer` when given), a lazy channel to it, and the two calls.

#![allow(dead_code, unreachable_pub)]

use fusebox::Deadline;
use fusebox::tonic::ServerLayer;
use http::uri::PathAndQuery;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::body::Body;
use tonic::transport::{Channel, Server};
use tonic::{Code, Status};
use tonic_prost::ProstCodec;
use tower::Service;

/// The one message of the test service.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Tick {
    #[prost(uint64, tag = "1")]
    pub n: u64,
}

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
pub type TickStream = Pin<Box<dyn futures_util::Stream<Item = Result<Tick, Status>> + Send>>;

/// `test.Feed`: `Watch` streams `n` ticks and ends with the configured status; `Deadline`
/// answers the milliseconds left of the request's fusebox `Deadline` (0 without one);
/// `Slow` answers after a second. For the retry tests, each counting its calls in `calls`:
/// `Flaky` answers `UNAVAILABLE` to its first `unavailable` calls, then the request's `n`;
/// `Stall` answers its first call after a minute and every later one at once, with the
/// call's number; `Count` (client-streaming) answers `UNAVAILABLE` without reading its
/// request stream.
#[derive(Clone)]
pub struct Feed {
    pub end: Arc<Mutex<Code>>,
    pub watches: Arc<AtomicUsize>,
    pub calls: Arc<AtomicUsize>,
    pub unavailable: Arc<AtomicUsize>,
}

impl Feed {
    pub fn new(end: Code) -> Feed {
        Feed {
            end: Arc::new(Mutex::new(end)),
            watches: Arc::new(AtomicUsize::new(0)),
            calls: Arc::new(AtomicUsize::new(0)),
            unavailable: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl tonic::server::NamedService for Feed {
    const NAME: &'static str = "test.Feed";
}

impl Service<http::Request<Body>> for Feed {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let feed = self.clone();
        let codec = ProstCodec::<Tick, Tick>::default();
        match request.uri().path() {
            "/test.Feed/Watch" => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(codec);
                Ok(grpc.server_streaming(Watch(feed), request).await)
            }),
            "/test.Feed/Deadline" => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(codec);
                Ok(grpc.unary(Unary::Deadline, request).await)
            }),
            "/test.Feed/Slow" => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(codec);
                Ok(grpc.unary(Unary::Slow, request).await)
            }),
            "/test.Feed/Flaky" => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(codec);
                Ok(grpc.unary(Unary::Flaky(feed), request).await)
            }),
            "/test.Feed/Stall" => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(codec);
                Ok(grpc.unary(Unary::Stall(feed), request).await)
            }),
            "/test.Feed/Count" => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(codec);
                Ok(grpc.client_streaming(Count(feed), request).await)
            }),
            _ => Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) }),
        }
    }
}

pub struct Watch(pub Feed);

impl tonic::server::ServerStreamingService<Tick> for Watch {
    type Response = Tick;
    type ResponseStream = TickStream;
    type Future = BoxFuture<Result<tonic::Response<TickStream>, Status>>;

    fn call(&mut self, request: tonic::Request<Tick>) -> Self::Future {
        self.0.watches.fetch_add(1, Ordering::SeqCst);
        let n = request.into_inner().n;
        let end = *self.0.end.lock().expect("not poisoned");
        let mut items: Vec<Result<Tick, Status>> = (0..n).map(|n| Ok(Tick { n })).collect();
        if end != Code::Ok {
            items.push(Err(Status::new(end, "the feed broke")));
        }
        Box::pin(async move {
            let stream: TickStream = Box::pin(futures_util::stream::iter(items));
            Ok(tonic::Response::new(stream))
        })
    }
}

pub enum Unary {
    Deadline,
    Slow,
    Flaky(Feed),
    Stall(Feed),
}

/// `Count`: a client-streaming call answered `UNAVAILABLE` at once.
pub struct Count(pub Feed);

impl tonic::server::ClientStreamingService<Tick> for Count {
    type Response = Tick;
    type Future = BoxFuture<Result<tonic::Response<Tick>, Status>>;

    fn call(&mut self, _request: tonic::Request<tonic::Streaming<Tick>>) -> Self::Future {
        self.0.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Err(Status::unavailable("not now")) })
    }
}

impl tonic::server::UnaryService<Tick> for Unary {
    type Response = Tick;
    type Future = BoxFuture<Result<tonic::Response<Tick>, Status>>;

    fn call(&mut self, request: tonic::Request<Tick>) -> Self::Future {
        match self {
            Unary::Deadline => {
                let left = request
                    .extensions()
                    .get::<Deadline>()
                    .map_or(0, |d| d.remaining().as_millis() as u64);
                Box::pin(async move { Ok(tonic::Response::new(Tick { n: left })) })
            }
            Unary::Slow => Box::pin(async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok(tonic::Response::new(Tick { n: 1 }))
            }),
            Unary::Flaky(feed) => {
                let call = feed.calls.fetch_add(1, Ordering::SeqCst);
                let n = request.into_inner().n;
                let unavailable = feed.unavailable.load(Ordering::SeqCst);
                Box::pin(async move {
                    if call < unavailable {
                        Err(Status::unavailable("try again"))
                    } else {
                        Ok(tonic::Response::new(Tick { n }))
                    }
                })
            }
            Unary::Stall(feed) => {
                let call = feed.calls.fetch_add(1, Ordering::SeqCst);
                Box::pin(async move {
                    if call == 0 {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                    }
                    Ok(tonic::Response::new(Tick { n: call as u64 }))
                })
            }
        }
    }
}

/// Serves `feed` on 127.0.0.1, behind `layer` when given.
pub async fn serve(feed: Feed, layer: Option<ServerLayer>) -> SocketAddr {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("bound address");
    let incoming = tokio_stream_of(listener);
    match layer {
        Some(layer) => {
            // The bounds users hit: a Policy in `Server::builder().layer(..)`.
            let server = Server::builder().layer(layer).add_service(feed);
            tokio::spawn(server.serve_with_incoming(incoming));
        }
        None => {
            let server = Server::builder().add_service(feed);
            tokio::spawn(server.serve_with_incoming(incoming));
        }
    }
    addr
}

/// The listener's connections as the stream tonic's `serve_with_incoming` takes.
pub fn tokio_stream_of(
    listener: TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures_util::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    })
}

pub fn lazy_channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("a valid URI")
        .connect_lazy()
}

pub async fn watch<S>(grpc: &mut tonic::client::Grpc<S>, n: u64) -> Result<Vec<u64>, Status>
where
    S: tonic::client::GrpcService<Body>,
    S::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <S::ResponseBody as http_body::Body>::Error: Into<fusebox::BoxError>,
    S::Error: Into<fusebox::BoxError>,
{
    grpc.ready()
        .await
        .map_err(|e| Status::from_error(e.into()))?;
    let response = grpc
        .server_streaming(
            tonic::Request::new(Tick { n }),
            PathAndQuery::from_static("/test.Feed/Watch"),
            ProstCodec::<Tick, Tick>::default(),
        )
        .await?;
    let mut stream = response.into_inner();
    let mut seen = Vec::new();
    while let Some(tick) = stream.message().await? {
        seen.push(tick.n);
    }
    Ok(seen)
}

pub async fn unary<S>(
    grpc: &mut tonic::client::Grpc<S>,
    method: &'static str,
    request: tonic::Request<Tick>,
) -> Result<u64, Status>
where
    S: tonic::client::GrpcService<Body>,
    S::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <S::ResponseBody as http_body::Body>::Error: Into<fusebox::BoxError>,
    S::Error: Into<fusebox::BoxError>,
{
    grpc.ready()
        .await
        .map_err(|e| Status::from_error(e.into()))?;
    let response = grpc
        .unary(
            request,
            PathAndQuery::from_static(method),
            ProstCodec::<Tick, Tick>::default(),
        )
        .await?;
    Ok(response.into_inner().n)
}
