//! A tonic client behind a Policy costs each call no allocation of its own, unless the call
//! may be retried.
//!
//! Unary calls to a real gRPC server on 127.0.0.1, in one process: the allocations counted
//! are the client's and the server's together, so the check is a comparison, not zero. A
//! channel behind a Policy (breaker, limit, timeout; and with a retry budget on a route
//! whose retries are off) must allocate exactly as the bare channel does per call. In
//! particular the glue must hand the channel tonic's own request body back, not box the
//! retry layer's wrapper around it.
//!
//! A unary call on a route that retries is kept whole so that it can be sent again, and
//! that costs what replaying costs, bounded per call whatever the traffic: the copy of the
//! request head every attempt is sent with (as any retry layer's), the replayed message
//! boxed into tonic's request body (tonic boxes every body it sends), and the retry layer's
//! buffering of a request body (the ready service moved into the call's future, a fresh
//! clone of it left in its place), as for any HTTP request with a body.
//!
//! Its own test binary, because it installs a counting global allocator; one test, because
//! that allocator sees every thread.

mod tonic_common;

use fusebox::{CircuitBreakerConfig, Policy, RetryConfig, Route, RouteTable};
use fusebox_tests::alloc::{self, INSTRUMENTED_SYSTEM, StatsAlloc};
use std::alloc::System;
use std::time::Duration;
use tonic::Code;
use tonic_common::{Feed, Tick, lazy_channel, serve, unary};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const CALLS: usize = 1_000;
const WARM_UP: usize = 200;

/// Allocations per unary call through `grpc` (after a warm-up), as (allocations,
/// reallocations), rounded to whole calls.
async fn per_call<S>(mut grpc: tonic::client::Grpc<S>) -> (usize, usize)
where
    S: tonic::client::GrpcService<tonic::body::Body>,
    S::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <S::ResponseBody as http_body::Body>::Error: Into<fusebox::BoxError>,
    S::Error: Into<fusebox::BoxError>,
{
    let mut once = async || {
        unary(
            &mut grpc,
            "/test.Feed/Deadline",
            tonic::Request::new(Tick { n: 1 }),
        )
        .await
        .expect("a healthy call");
    };
    for _ in 0..WARM_UP {
        once().await;
    }
    alloc::per_call(GLOBAL, CALLS, once).await
}

#[test]
fn a_policy_around_a_channel_allocates_nothing_of_its_own() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let addr = serve(Feed::new(Code::Ok), None).await;
        let bare = per_call(tonic::client::Grpc::new(lazy_channel(addr))).await;

        let policy = Policy::builder("feed")
            .circuit_breaker(CircuitBreakerConfig::builder().name("feed"))
            .concurrency_limit(64)
            .timeout(Duration::from_secs(5))
            .build()
            .expect("a valid policy");
        let channel = fusebox::tonic::channel(&policy, lazy_channel(addr));
        let with_policy = per_call(tonic::client::Grpc::new(channel)).await;
        assert_eq!(
            with_policy, bare,
            "breaker, limit and timeout: allocations per call vs the bare channel"
        );

        let retry_policy = |retry: bool| {
            Policy::builder("feed-retry")
                .routes(
                    RouteTable::builder(Route::default())
                        .route("/test.Feed/{*method}", Route::default().retry(retry))
                        .build()
                        .expect("a valid table"),
                )
                .circuit_breaker(CircuitBreakerConfig::builder().name("feed-retry"))
                .retry_budget(RetryConfig::builder().name("feed-retry"))
                .build()
                .expect("a valid policy")
        };
        let policy = retry_policy(false);
        let channel = fusebox::tonic::channel(&policy, lazy_channel(addr));
        let retries_off = per_call(tonic::client::Grpc::new(channel)).await;
        assert_eq!(
            retries_off, bare,
            "breaker and retry budget, on a route without retries: allocations per call vs the bare channel"
        );

        // Kept for a replay (the module docs list what that costs): more than the bare
        // channel, and a fixed few more per call, whatever the traffic.
        let policy = retry_policy(true);
        let channel = fusebox::tonic::channel(&policy, lazy_channel(addr));
        let with_retry = per_call(tonic::client::Grpc::new(channel)).await;
        assert!(
            with_retry.0 > bare.0 && with_retry.0 <= bare.0 + 8 && with_retry.1 <= bare.1 + 1,
            "breaker and retry budget, replayable calls: {with_retry:?} allocations per call vs {bare:?} bare"
        );
    });
}
