//! A healthy call through fusebox's Timeout allocates nothing.
//!
//! Its own test binary, because it installs a counting global allocator (stats_alloc's:
//! the workspace forbids `unsafe`, which a hand-written `GlobalAlloc` needs). The calls run
//! on a current-thread runtime on this thread; after a warm-up (which fills lazily grown
//! buffers such as the runtime's), every allocation made during the measured calls is a
//! failure.

use bytes::Bytes;
use fusebox_classify::{Route, RouteTable};
use fusebox_tests::alloc::{self, INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use fusebox_timeout::{TimeoutConfig, TimeoutLayer};
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

fn layer() -> TimeoutLayer {
    let routes = RouteTable::builder(Route::default())
        .route(
            "GET /users/{id}",
            Route::default().timeout(Duration::from_millis(100)),
        )
        .route(
            "/pkg.Ledger/{*method}",
            Route::default().timeout(Duration::from_secs(1)),
        )
        .build()
        .expect("a valid table");
    let config = TimeoutConfig::builder()
        .default_timeout(Duration::from_millis(250))
        // Configured, but only written for calls that carry a deadline: none here.
        .deadline_header("x-request-timeout-ms")
        .build()
        .expect("a valid config");
    TimeoutLayer::builder(config)
        .routes(routes)
        .build()
        .expect("the layer builds")
}

fn layer_with_body_timeout() -> TimeoutLayer {
    let config = TimeoutConfig::builder()
        .default_timeout(Duration::from_millis(250))
        .body_timeout(Duration::from_secs(5))
        .build()
        .expect("a valid config");
    TimeoutLayer::builder(config)
        .routes(layer().routes().clone())
        .build()
        .expect("the layer builds")
}

/// A table of 21 routes (a service's whole API).
fn wide_routes() -> RouteTable {
    let mut table = RouteTable::builder(Route::default());
    for i in 0..20 {
        table = table.route(
            format!("GET /api/v1/resource{i}/{{id}}"),
            Route::default().timeout(Duration::from_millis(100 + i)),
        );
    }
    table.build().expect("a valid table")
}

/// Requests for every kind of route (matched with a parameter, matched by prefix, and
/// unmatched), built before counting: building a request with a URI allocates.
fn requests(n: usize) -> Vec<Request<()>> {
    let targets = &[
        (http::Method::GET, "/users/42"),
        (http::Method::GET, "/pkg.Ledger/Post"),
        (http::Method::GET, "/health"),
    ];
    alloc::requests(targets, n, || ())
}

fn assert_no_allocations<S>(service: S, what: &str)
where
    S: Service<Request<()>>,
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

#[test]
fn healthy_calls_without_a_deadline_allocate_nothing() {
    // The inner call is ready at once: the timer is created and dropped, never registered.
    let ready = tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
    });
    assert_no_allocations(layer().layer(ready), "ready inner service");

    // The inner call yields once: the timer is registered with the timer wheel, then
    // cancelled when the call completes.
    let pending_once = tower::service_fn(|_: Request<()>| async {
        tokio::task::yield_now().await;
        Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
    });
    assert_no_allocations(layer().layer(pending_once), "inner service pending once");

    // With the body layer and a body timeout: the body's timer is a `Sleep` inside the
    // body, started when the headers arrive; still nothing on the heap.
    let bounded = layer_with_body_timeout();
    let ready = tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
    });
    let service = bounded.body_layer().layer(bounded.layer(ready));
    assert_no_allocations(service, "timeout and body timeout");

    // With a `tracing` subscriber installed at INFO: the timeout's events are DEBUG (and
    // happen on no healthy call).
    alloc::with_info_subscriber(|| {
        let pending_once = tower::service_fn(|_: Request<()>| async {
            tokio::task::yield_now().await;
            Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
        });
        assert_no_allocations(
            layer().layer(pending_once),
            "inner service pending once, subscriber at INFO",
        );
    });

    // Building the layer over a table of 21 routes makes one set of per-thread leases on
    // the routes' names, and layering is free: every service the layer builds shares them.
    let routes = wide_routes();
    let config = TimeoutConfig::builder()
        .default_timeout(Duration::from_millis(250))
        .build()
        .expect("a valid config");
    let region = Region::new(GLOBAL);
    let wide = TimeoutLayer::builder(config)
        .routes(routes)
        .build()
        .expect("the layer builds");
    let built = region.change().allocations;
    let leases = fusebox_classify::shard::shard_count();
    // The leases and four more for the names (a list, its leases' list, their `Arc`s), and
    // the default table the builder starts from: nothing per route.
    assert!(
        built <= leases + 8,
        "building the layer over 21 routes allocated {built} times ({leases} leases)"
    );
    let mut services = Vec::with_capacity(16);
    let region = Region::new(GLOBAL);
    for _ in 0..8 {
        let inner = tower::service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
        });
        services.push(wide.body_layer().layer(wide.layer(inner)));
    }
    let layered = region.change().allocations;
    black_box(services);
    assert_eq!(layered, 0, "layering 8 services allocated {layered} times");

    // The counter really counts: a call that carries a deadline formats headers.
    // (One test function: the counter is global, and tests in one binary run in parallel.)
    let rt = alloc::runtime();
    rt.block_on(async {
        let inner = tower::service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
        });
        let mut service = layer().layer(inner);
        let mut request = Request::get("/users/42").body(()).expect("a request");
        request
            .extensions_mut()
            .insert(fusebox_classify::Deadline::after(Duration::from_secs(1)));
        let region = Region::new(GLOBAL);
        let response = service.ready().await.expect("ready").call(request).await;
        black_box(response.expect("a call"));
        assert!(region.change().allocations > 0);
    });
}
