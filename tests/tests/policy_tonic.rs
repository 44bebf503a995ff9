//! A fusebox Policy with tonic, against a real gRPC server on 127.0.0.1 (hand-written
//! services over `tonic::server::Grpc` and prost messages: no codegen, no protoc): status
//! codes read from the trailers of a server-streaming call, fusebox's errors as statuses,
//! deadlines from `grpc-timeout`, and a policy in `Server::builder().layer(..)`.
//! Paused time.

use fusebox::tonic::{RETRY_PUSHBACK_MS, ServerLayer};
use fusebox::{CircuitBreakerConfig, Deadline, Policy, Route, RouteTable};
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
struct Tick {
    #[prost(uint64, tag = "1")]
    n: u64,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type TickStream = Pin<Box<dyn futures_util::Stream<Item = Result<Tick, Status>> + Send>>;

/// `test.Feed`: `Watch` streams `n` ticks and ends with the configured status; `Deadline`
/// answers the milliseconds left of the request's fusebox `Deadline` (0 without one);
/// `Slow` answers after a second.
#[derive(Clone)]
struct Feed {
    end: Arc<Mutex<Code>>,
    watches: Arc<AtomicUsize>,
}

impl Feed {
    fn new(end: Code) -> Feed {
        Feed {
            end: Arc::new(Mutex::new(end)),
            watches: Arc::new(AtomicUsize::new(0)),
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
            _ => Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) }),
        }
    }
}

struct Watch(Feed);

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

enum Unary {
    Deadline,
    Slow,
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
        }
    }
}

/// Serves `feed` on 127.0.0.1, behind `layer` when given.
async fn serve(feed: Feed, layer: Option<ServerLayer>) -> SocketAddr {
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
fn tokio_stream_of(
    listener: TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures_util::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    })
}

fn lazy_channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("a valid URI")
        .connect_lazy()
}

async fn watch<S>(grpc: &mut tonic::client::Grpc<S>, n: u64) -> Result<Vec<u64>, Status>
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

async fn unary<S>(
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

fn breaker() -> fusebox::breaker::CircuitBreakerConfigBuilder {
    CircuitBreakerConfig::builder("feed")
        .count_window(4)
        .minimum_calls(4)
        .open_wait(Duration::from_secs(30))
        .open_wait_jitter(Duration::ZERO)
}

/// The status of a streaming call is in its trailers, after the messages: the policy's
/// breaker reads it there, at the end of each stream.
#[tokio::test(start_paused = true)]
async fn statuses_in_the_trailers_of_a_stream_open_the_breaker() {
    let feed = Feed::new(Code::Unavailable);
    let addr = serve(feed.clone(), None).await;
    let policy = Policy::builder("feed")
        .circuit_breaker(breaker())
        .build()
        .unwrap();
    let handle = policy.breaker_handle().unwrap();
    let mut grpc = tonic::client::Grpc::new(fusebox::tonic::channel(&policy, lazy_channel(addr)));

    // A stream that ends well is a success, recorded at its end.
    *feed.end.lock().unwrap() = Code::Ok;
    assert_eq!(watch(&mut grpc, 2).await.unwrap(), [0, 1]);
    assert_eq!(handle.snapshot().window.calls, 1);
    assert_eq!(handle.snapshot().window.failures, 0);

    // Streams that end with UNAVAILABLE after their messages are failures.
    *feed.end.lock().unwrap() = Code::Unavailable;
    for _ in 0..3 {
        let err = watch(&mut grpc, 3).await.unwrap_err();
        assert_eq!(err.code(), Code::Unavailable);
        assert_eq!(err.message(), "the feed broke");
    }
    // 3 failures of 4 calls: open.
    assert_eq!(handle.state(), fusebox::breaker::State::Open);
    assert_eq!(handle.snapshot().window.failures, 3);

    // Now the breaker answers, as a gRPC status with a retry hint; nothing is sent.
    let err = watch(&mut grpc, 3).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert!(
        err.message().contains("circuit breaker `feed`"),
        "{}",
        err.message()
    );
    assert_eq!(err.metadata().get(RETRY_PUSHBACK_MS).unwrap(), "30000");
    assert_eq!(feed.watches.load(Ordering::SeqCst), 4);
}

/// RESOURCE_EXHAUSTED counts only on the routes that say so.
#[tokio::test(start_paused = true)]
async fn resource_exhausted_counts_on_the_routes_that_opt_in() {
    let feed = Feed::new(Code::ResourceExhausted);
    let addr = serve(feed.clone(), None).await;
    let ignoring = Policy::builder("feed")
        .circuit_breaker(breaker())
        .build()
        .unwrap();
    let counting = Policy::builder("feed")
        .routes(
            RouteTable::builder(Route::default())
                .route(
                    "/test.Feed/{*method}",
                    Route::new(fusebox::StandardClassifier::new().count_throttling(true)),
                )
                .build()
                .unwrap(),
        )
        .circuit_breaker(breaker())
        .build()
        .unwrap();
    for (policy, opens) in [(ignoring, false), (counting, true)] {
        let mut grpc =
            tonic::client::Grpc::new(fusebox::tonic::channel(&policy, lazy_channel(addr)));
        for _ in 0..4 {
            let err = watch(&mut grpc, 1).await.unwrap_err();
            assert_eq!(err.code(), Code::ResourceExhausted);
        }
        let state = policy.breaker_handle().unwrap().state();
        assert_eq!(state == fusebox::breaker::State::Open, opens, "{state:?}");
    }
}

/// The policy's timeout becomes DEADLINE_EXCEEDED.
#[tokio::test(start_paused = true)]
async fn a_timeout_is_deadline_exceeded() {
    let addr = serve(Feed::new(Code::Ok), None).await;
    let policy = Policy::builder("feed")
        .timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(fusebox::tonic::channel(&policy, lazy_channel(addr)));
    let err = unary(
        &mut grpc,
        "/test.Feed/Slow",
        tonic::Request::new(Tick { n: 0 }),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded);
    assert!(err.message().contains("timed out"), "{}", err.message());
}

/// A policy in `Server::builder().layer(..)`: the caller's `grpc-timeout` becomes a
/// `Deadline` the service sees, and an open server-side breaker answers UNAVAILABLE.
#[tokio::test(start_paused = true)]
async fn a_server_layer_reads_deadlines_and_answers_with_statuses() {
    let policy = Policy::builder("server")
        .circuit_breaker(breaker())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let handle = policy.breaker_handle().unwrap();
    let feed = Feed::new(Code::Ok);
    let addr = serve(feed.clone(), Some(ServerLayer::new(policy))).await;
    let mut grpc = tonic::client::Grpc::new(lazy_channel(addr));

    let mut request = tonic::Request::new(Tick { n: 0 });
    request.set_timeout(Duration::from_millis(800));
    let left = unary(&mut grpc, "/test.Feed/Deadline", request)
        .await
        .unwrap();
    assert!((700..=800).contains(&left), "{left} ms left");
    let none = unary(
        &mut grpc,
        "/test.Feed/Deadline",
        tonic::Request::new(Tick { n: 0 }),
    )
    .await
    .unwrap();
    assert_eq!(none, 0);

    handle.force_open();
    let err = watch(&mut grpc, 2).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert!(err.metadata().get(RETRY_PUSHBACK_MS).is_some());
    assert_eq!(feed.watches.load(Ordering::SeqCst), 0);
}
