//! A fusebox Policy with tonic, against a real gRPC server on 127.0.0.1 (hand-written
//! services over `tonic::server::Grpc` and prost messages: no codegen, no protoc): status
//! codes read from the trailers of a server-streaming call, fusebox's errors as statuses,
//! deadlines from `grpc-timeout`, and a policy in `Server::builder().layer(..)`.
//! Paused time.

mod tonic_common;

use fusebox::tonic::{RETRY_PUSHBACK_MS, ServerLayer};
use fusebox::{CircuitBreakerConfig, Policy, Route, RouteTable};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tonic::Code;
use tonic_common::{Feed, Tick, lazy_channel, serve, unary, watch};

fn breaker() -> fusebox::breaker::CircuitBreakerConfigBuilder {
    CircuitBreakerConfig::builder()
        .name("feed")
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
