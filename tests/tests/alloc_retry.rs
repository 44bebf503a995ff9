//! A healthy call through fusebox's Retry allocates nothing when the request's body is empty.
//!
//! Its own test binary, because it installs a counting global allocator (stats_alloc's: the
//! workspace forbids `unsafe`, which a hand-written `GlobalAlloc` needs). The calls run on a
//! current-thread runtime on this thread; after a warm-up (which fills lazily grown buffers
//! such as the runtime's), every allocation made during the measured calls is a failure.
//!
//! What the layer does per call here: a budget deposit (and, every 64th call, placing the
//! pending deposits under a short lock), a route lookup, a clone of the request head kept for
//! a possible retry, the empty replay body, the per-attempt span (disabled: no subscriber),
//! the classification of the answer. Requests are built before counting with absolute URIs,
//! as a client sends them (building a request allocates). Cloning a head that carries headers
//! or extensions allocates their copies, as any retry layer's must (tower's `clone_request`
//! does the same); the head here has none.

use bytes::Bytes;
use fusebox_classify::{Route, RouteTable};
use fusebox_retry::{ReplayBody, RetryBudgetLayer, RetryConfig};
use fusebox_tests::alloc::{self, INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use std::alloc::System;
use std::convert::Infallible;
use tower::{Layer, Service, ServiceExt};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const CALLS: usize = 10_000;
const WARM_UP: usize = 1_000;

type Body = Empty<Bytes>;

fn config() -> RetryConfig {
    RetryConfig::builder()
        .seed(Some(1))
        .build()
        .expect("a valid config")
}

fn layer(routes: RouteTable) -> RetryBudgetLayer {
    RetryBudgetLayer::builder(config())
        .routes(routes)
        .build()
        .expect("the layer builds")
}

fn routed() -> RouteTable {
    RouteTable::builder(Route::default())
        .route("GET /users/{id}", Route::default())
        .route("/pkg.Ledger/{*method}", Route::default().retry(false))
        .build()
        .expect("a valid table")
}

/// A table of 21 routes (a service's whole API).
fn wide_routes() -> RouteTable {
    let mut table = RouteTable::builder(Route::default());
    for i in 0..20 {
        table = table.route(
            format!("GET /api/v1/resource{i}/{{id}}"),
            Route::default().retry(i % 2 == 0),
        );
    }
    table.build().expect("a valid table")
}

/// Empty-body requests for every kind of route (matched with a parameter, matched with
/// retries off, unmatched) and methods (GET, DELETE, a POST that is never repeated).
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

fn ok(_: Request<ReplayBody<Body>>) -> std::future::Ready<Result<Response<Body>, Infallible>> {
    std::future::ready(Ok(Response::new(Empty::new())))
}

/// What building a retry layer allocates besides its per-thread leases: the budget and the
/// layer's metric handles.
const BUILD_EXTRA: usize = 16;

#[test]
fn healthy_calls_with_empty_bodies_allocate_nothing() {
    // The inner call is ready at once.
    assert_no_allocations(
        layer(RouteTable::default()).layer(tower::service_fn(ok)),
        "default routes",
    );
    assert_no_allocations(layer(routed()).layer(tower::service_fn(ok)), "three routes");

    // The inner call yields once before answering.
    let pending_once = tower::service_fn(|_: Request<ReplayBody<Body>>| async {
        tokio::task::yield_now().await;
        Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
    });
    assert_no_allocations(layer(routed()).layer(pending_once), "inner pending once");

    // Building the layer over a table of 21 routes makes its budget (one set of per-thread
    // deposit counters) and little else, and layering is free: a service makes its leases
    // (and keeps its spare) at its first call or its first clone, not when it is built.
    // Nothing is made per route: over 21 routes the build allocates as often as over the
    // default table. Besides the leases, a build makes its budget and its metric handles
    // (labelled with the layer's name): a handful, whatever the routes.
    let build = |routes: RouteTable| {
        let config = config();
        let region = Region::new(GLOBAL);
        let layer = RetryBudgetLayer::builder(config)
            .routes(routes)
            .build()
            .expect("the layer builds");
        (layer, region.change().allocations)
    };
    let (_, single) = build(RouteTable::default());
    let (wide, built) = build(wide_routes());
    let shards = fusebox_classify::shard::shard_count();
    assert_eq!(
        built, single,
        "building the layer over 21 routes allocated {built} times, over one {single}"
    );
    assert!(
        built <= shards + BUILD_EXTRA,
        "building the layer over 21 routes allocated {built} times ({shards} shards)"
    );
    let mut services = Vec::with_capacity(16);
    let region = Region::new(GLOBAL);
    for _ in 0..8 {
        services.push(wide.layer(tower::service_fn(ok)));
    }
    let layered = region.change().allocations;
    assert_eq!(layered, 0, "layering 8 services allocated {layered} times");
    // Their healthy calls allocate nothing once warm, through a clone too (the first
    // clone makes the service's leases, which the clone then shares).
    for service in services.drain(..) {
        assert_no_allocations(service.clone(), "a service layered over 21 routes");
    }
    // With a `tracing` subscriber installed at INFO: the attempts' spans and the refusals'
    // events are DEBUG, off, and cost nothing.
    alloc::with_info_subscriber(|| {
        assert_no_allocations(
            layer(routed()).layer(tower::service_fn(ok)),
            "three routes, subscriber at INFO",
        );
    });

    // The counter really counts: a retry (a 503 first) boxes its backoff timer.
    // (One test function: the counter is global, and tests in one binary run in parallel.)
    let rt = alloc::runtime();
    rt.block_on(async {
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let flaky = tower::service_fn(|_: Request<ReplayBody<Body>>| {
            let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut response = Response::new(Empty::<Bytes>::new());
            if n == 0 {
                *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            }
            std::future::ready(Ok::<_, Infallible>(response))
        });
        let service = layer(RouteTable::default()).layer(flaky);
        let request = requests(1).pop().expect("a request");
        let region = Region::new(GLOBAL);
        let response = service.oneshot(request).await.expect("an answer");
        assert_eq!(response.status(), StatusCode::OK);
        assert!(region.change().allocations > 0);
    });
}
