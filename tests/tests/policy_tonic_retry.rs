//! The retry budget of a Policy around a tonic `Channel`, against a real gRPC server on
//! 127.0.0.1: a unary call answered `UNAVAILABLE` is retried on a route marked idempotent
//! (two calls reach the server, the caller gets the answer), and hedged where the budget
//! hedges; a client-streaming call whose stream is still open is sent once. Paused time.

mod tonic_common;

use bytes::Bytes;
use fusebox::{Policy, RetryConfig, Route, RouteTable};
use http::uri::PathAndQuery;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tonic::Code;
use tonic_common::{Feed, Tick, lazy_channel, serve, unary};
use tonic_prost::ProstCodec;

/// Every `test.Feed` method on one route, marked idempotent (gRPC calls are POSTs).
fn routes(idempotent: bool) -> RouteTable {
    RouteTable::builder(Route::default())
        .route(
            "/test.Feed/{*method}",
            Route::default().idempotent(idempotent),
        )
        .build()
        .expect("a valid table")
}

fn retry() -> fusebox_retry::RetryConfigBuilder {
    RetryConfig::builder()
        .name("feed")
        .seed(Some(1))
        .max_attempts(3)
        .base_delay(Duration::from_millis(10))
        .max_delay(Duration::from_millis(50))
}

type Client = tonic::client::Grpc<fusebox::tonic::PolicyChannel<tonic::transport::Channel>>;

/// A `test.Feed` server answering `UNAVAILABLE` to its first `unavailable` calls, and a
/// client behind a policy with `retry` on a route marked idempotent or not.
async fn setup(
    unavailable: usize,
    idempotent: bool,
    retry: fusebox_retry::RetryConfigBuilder,
) -> (Feed, Policy, Client) {
    let feed = Feed::new(Code::Ok);
    feed.unavailable.store(unavailable, Ordering::SeqCst);
    let addr = serve(feed.clone(), None).await;
    let policy = Policy::builder("feed")
        .routes(routes(idempotent))
        .retry_budget(retry)
        .build()
        .expect("a valid policy");
    let grpc = tonic::client::Grpc::new(fusebox::tonic::channel(&policy, lazy_channel(addr)));
    (feed, policy, grpc)
}

#[tokio::test(start_paused = true)]
async fn an_unavailable_unary_call_is_retried_on_an_idempotent_route() {
    let (feed, policy, mut grpc) = setup(1, true, retry()).await;

    let answer = unary(
        &mut grpc,
        "/test.Feed/Flaky",
        tonic::Request::new(Tick { n: 7 }),
    )
    .await
    .expect("the retry succeeds");
    assert_eq!(answer, 7, "the replayed request carried the same message");
    assert_eq!(feed.calls.load(Ordering::SeqCst), 2, "sent twice");
    let budget = policy.retry_budget().expect("a budget").snapshot();
    assert_eq!(budget.retries, 1);

    // Always unavailable: three attempts, then the caller gets UNAVAILABLE.
    feed.calls.store(0, Ordering::SeqCst);
    feed.unavailable.store(usize::MAX, Ordering::SeqCst);
    let status = unary(
        &mut grpc,
        "/test.Feed/Flaky",
        tonic::Request::new(Tick { n: 1 }),
    )
    .await
    .expect_err("unavailable");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(feed.calls.load(Ordering::SeqCst), 3, "max_attempts");
}

#[tokio::test(start_paused = true)]
async fn a_route_not_marked_idempotent_is_not_retried() {
    let (feed, _policy, mut grpc) = setup(1, false, retry()).await;
    let status = unary(
        &mut grpc,
        "/test.Feed/Flaky",
        tonic::Request::new(Tick { n: 7 }),
    )
    .await
    .expect_err("not retried");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(feed.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_unary_call_is_hedged() {
    let hedged = retry().hedge_delay(Some(Duration::from_millis(50)));
    let (feed, policy, mut grpc) = setup(0, true, hedged).await;
    let started = tokio::time::Instant::now();
    let answer = unary(
        &mut grpc,
        "/test.Feed/Stall",
        tonic::Request::new(Tick { n: 0 }),
    )
    .await
    .expect("the hedge answers");
    assert_eq!(answer, 1, "the second call (the hedge) answered");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "not the stalled first call: {:?}",
        started.elapsed()
    );
    assert_eq!(feed.calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        policy.retry_budget().expect("a budget").snapshot().retries,
        1
    );
}

/// A client-streaming call whose request stream is still open (a first message ready, the
/// rest to come) cannot be replayed: it is sent once, even on an idempotent route.
#[tokio::test(start_paused = true)]
async fn a_streaming_call_is_sent_once() {
    let (feed, policy, mut grpc) = setup(0, true, retry()).await;
    for first_ready in [true, false] {
        feed.calls.store(0, Ordering::SeqCst);
        let first: Vec<Tick> = if first_ready {
            vec![Tick { n: 1 }]
        } else {
            Vec::new()
        };
        let open = futures_util::StreamExt::chain(
            futures_util::stream::iter(first),
            futures_util::stream::pending::<Tick>(),
        );
        grpc.ready().await.expect("ready");
        let status = grpc
            .client_streaming(
                tonic::Request::new(open),
                PathAndQuery::from_static("/test.Feed/Count"),
                ProstCodec::<Tick, Tick>::default(),
            )
            .await
            .expect_err("unavailable");
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(
            feed.calls.load(Ordering::SeqCst),
            1,
            "sent once (first message ready: {first_ready})"
        );
    }
    assert_eq!(
        policy.retry_budget().expect("a budget").snapshot().retries,
        0
    );
}

/// The request body as the policy's layers see it: a unary call's is read whole (an exact
/// size), a stream still open is not.
#[test]
fn unary_request_bodies_are_complete_when_the_call_is_made() {
    use fusebox::tonic::RequestBody;
    use http_body::Body as _;
    let whole = tonic::body::Body::new(http_body_util::Full::new(Bytes::from_static(b"abc")));
    let body = RequestBody::read_ahead(whole, 64);
    assert!(body.is_complete());
    assert_eq!(body.size_hint().exact(), Some(3));
    let too_big = tonic::body::Body::new(http_body_util::Full::new(Bytes::from_static(b"abc")));
    let body = RequestBody::read_ahead(too_big, 2);
    assert!(!body.is_complete(), "larger than the cap: not kept");
    assert_eq!(body.size_hint().upper(), None);
    let open = tonic::body::Body::new(http_body_util::StreamBody::new(
        futures_util::stream::pending::<Result<http_body::Frame<Bytes>, tonic::Status>>(),
    ));
    let body = RequestBody::read_ahead(open, 64);
    assert!(!body.is_complete());
    assert!(
        body.into_tonic().is_ok(),
        "nothing was ready: tonic's own body, untouched"
    );
}
