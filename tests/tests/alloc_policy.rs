//! A healthy, bodiless call through a full fusebox Policy — retry budget, circuit breaker,
//! concurrency limit, timeout — allocates nothing.
//!
//! Its own test binary, because it installs a counting global allocator (stats_alloc's: the
//! workspace forbids `unsafe`, which a hand-written `GlobalAlloc` needs). The calls run on a
//! current-thread runtime on this thread; after a warm-up (which fills lazily grown buffers
//! such as the runtime's), every allocation made during the measured calls is a failure.
//! Requests are built before counting, with absolute URIs as a client sends them and no
//! headers: building a request allocates, and the retry layer keeps a copy of the request
//! head for a possible retry, which copies headers a request carries (as any retry layer
//! must).

use bytes::Bytes;
use fusebox::{
    CircuitBreakerConfig, Fallback, KeyBy, KeySpread, Policy, RecoveryRamp, RetryConfig, Route,
    RouteTable,
};
use fusebox_retry::ReplayBody;
use fusebox_tests::alloc::{self, INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use http::{Request, Response};
use http_body_util::Empty;
use std::alloc::System;
use std::convert::Infallible;
use std::hint::black_box;
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const CALLS: usize = 10_000;
const WARM_UP: usize = 1_000;

type Body = Empty<Bytes>;

fn routes() -> RouteTable {
    RouteTable::builder(Route::default().slow_call_duration(Duration::from_millis(500)))
        .route(
            "GET /users/{id}",
            Route::default().timeout(Duration::from_millis(100)),
        )
        .route("/pkg.Ledger/{*method}", Route::default().retry(false))
        .build()
        .expect("a valid table")
}

/// All four layers.
fn full() -> fusebox::PolicyBuilder {
    Policy::builder("alloc")
        .routes(routes())
        .timeout(Duration::from_millis(250))
        .concurrency_limit(64)
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .name("alloc")
                .count_window(100)
                .minimum_calls(20),
        )
        .retry_budget(RetryConfig::builder().name("alloc").seed(Some(1)))
}

fn requests(n: usize) -> Vec<Request<Body>> {
    let targets = &[
        (http::Method::GET, "http://127.0.0.1:8080/users/42"),
        (http::Method::POST, "http://127.0.0.1:8080/pkg.Ledger/Post"),
        (http::Method::DELETE, "http://127.0.0.1:8080/health"),
    ];
    alloc::requests(targets, n, Empty::new)
}

fn assert_no_allocations<S>(service: S, what: &str)
where
    S: Service<Request<Body>>,
    S::Error: std::fmt::Debug,
{
    alloc::assert_no_allocations(
        GLOBAL,
        &alloc::runtime(),
        service,
        requests(WARM_UP),
        requests(CALLS),
        alloc::discard,
        what,
    );
}

fn ready() -> impl Service<
    Request<ReplayBody<Body>>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>>,
> + Clone {
    tower::service_fn(|_: Request<ReplayBody<Body>>| async {
        Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
    })
}

#[test]
fn healthy_bodiless_calls_through_a_full_policy_allocate_nothing() {
    let policy = full().build().expect("a valid policy");
    assert_no_allocations(policy.layer(ready()), "retry, breaker, limit, timeout");

    // The inner call yields once: the timeout's timer is registered, then cancelled.
    let pending_once = tower::service_fn(|_: Request<ReplayBody<Body>>| async {
        tokio::task::yield_now().await;
        Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
    });
    let policy = full().build().expect("a valid policy");
    assert_no_allocations(policy.layer(pending_once), "inner service pending once");

    // With a fallback on one route (its route is resolved per call) and an idle recovery
    // ramp (one atomic load per call).
    let policy = full()
        .fallback(
            Fallback::new(|_| Response::new(Bytes::from_static(b"stale"))).route("GET /users/{id}"),
        )
        .recovery_ramp(RecoveryRamp::new(4, Duration::from_secs(10)))
        .build()
        .expect("a valid policy");
    assert_no_allocations(policy.layer(ready()), "with a fallback and a ramp");

    // One breaker per route: a lookup in the keyed map, no allocation for known keys.
    let policy = full()
        .breaker_key(KeyBy::Route)
        .build()
        .expect("a valid policy");
    assert_no_allocations(policy.layer(ready()), "breakers keyed by route");

    // Keyed, with a dependency-wide breaker gated by the keys' spread: its permit in the
    // keyed breaker's guard, and the spread read only when a call fails.
    let policy = full()
        .breaker_key(KeyBy::Route)
        .key_spread(KeySpread::default())
        .build()
        .expect("a valid policy");
    assert_no_allocations(
        policy.layer(ready()),
        "breakers keyed by route, with a spread",
    );

    // No layer at all: the pass-through stages.
    let policy = Policy::builder("bare").build().expect("a valid policy");
    assert_no_allocations(policy.layer(ready()), "no layers");

    // With a `tracing` subscriber installed at INFO, as in production: the call's span
    // (`policy_call`) and the layers' events are DEBUG, off, and cost nothing.
    alloc::with_info_subscriber(|| {
        let policy = full().build().expect("a valid policy");
        assert_no_allocations(policy.layer(ready()), "full policy, subscriber at INFO");
        let pending_once = tower::service_fn(|_: Request<ReplayBody<Body>>| async {
            tokio::task::yield_now().await;
            Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
        });
        let policy = full().build().expect("a valid policy");
        assert_no_allocations(
            policy.layer(pending_once),
            "inner service pending once, subscriber at INFO",
        );
        let policy = full()
            .breaker_key(KeyBy::Host)
            .fallback(
                Fallback::new(|_| Response::new(Bytes::from_static(b"stale")))
                    .route("GET /users/{id}"),
            )
            .build()
            .expect("a valid policy");
        assert_no_allocations(
            policy.layer(ready()),
            "keyed by host, with a fallback, subscriber at INFO",
        );
        let policy = full()
            .breaker_key(KeyBy::Host)
            .key_spread(KeySpread::default())
            .build()
            .expect("a valid policy");
        assert_no_allocations(
            policy.layer(ready()),
            "keyed by host, with a spread, subscriber at INFO",
        );
        let policy = Policy::builder("bare").build().expect("a valid policy");
        assert_no_allocations(policy.layer(ready()), "no layers, subscriber at INFO");
    });

    // The counter really counts: a call carrying headers copies them for a retry.
    let rt = alloc::runtime();
    rt.block_on(async {
        let mut service = full().build().expect("a valid policy").layer(ready());
        let request = Request::get("http://127.0.0.1:8080/users/42")
            .header("x-request-id", "42")
            .body(Empty::<Bytes>::new())
            .expect("a request");
        let region = Region::new(GLOBAL);
        let response = service.ready().await.expect("ready").call(request).await;
        black_box(response.expect("a call"));
        assert!(region.change().allocations > 0);
    });
}
