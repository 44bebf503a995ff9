//! A healthy call through fusebox's circuit breaker allocates nothing.
//!
//! Its own test binary, because it installs a counting global allocator: stats_alloc's
//! `StatsAlloc` wrapping `System` (the workspace forbids `unsafe`, which a hand-written
//! `GlobalAlloc` needs). Counting is armed only inside a `Region`, around the measured calls;
//! everything is one `#[test]` so that no other test allocates on another thread meanwhile.
//! The calls run on a current-thread runtime on this thread. After a warm-up — which fills
//! the breaker's count window (a full window of fast successes is what makes a success
//! free to record) and lazily grown buffers such as the runtime's — every allocation made
//! during the measured calls is a failure.

use bytes::Bytes;
use fusebox_breaker::{AnswerKeyed, ByHost, CircuitBreakerConfig, CircuitBreakerLayer, State};
use fusebox_classify::{Route, RouteTable};
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
const WINDOW: u32 = 100;

fn config() -> CircuitBreakerConfig {
    CircuitBreakerConfig::builder()
        .name("alloc")
        .count_window(WINDOW)
        .minimum_calls(WINDOW)
        .failure_rate_threshold(50)
        .slow_call_rate_threshold(50)
        .build()
        .expect("a valid breaker config")
}

/// What building a breaker layer may allocate besides its leases, whatever its routes: the
/// configuration, the store, the breaker and its slow-call thresholds, and the event sink
/// (its channel, its metric handles and their labels). 27 today.
const BUILD_EXTRA: usize = 32;

/// A table of 21 routes (a service's whole API), every other one measuring slowness.
fn wide_routes() -> RouteTable {
    let mut table = RouteTable::builder(Route::default());
    for i in 0..20 {
        let route = if i % 2 == 0 {
            Route::default().slow_call_duration(Duration::from_millis(100 + i))
        } else {
            Route::default()
        };
        table = table.route(format!("GET /api/v1/resource{i}/{{id}}"), route);
    }
    table.build().expect("a valid table")
}

/// Requests built before counting (building one is allocation-free too, but the test
/// measures the breaker, not `http`).
fn requests(n: usize) -> Vec<Request<()>> {
    let targets = &[
        (http::Method::GET, "/users/42"),
        (http::Method::PUT, "/users/42"),
    ];
    alloc::requests(targets, n, || ())
}

fn ok() -> Response<Empty<Bytes>> {
    Response::new(Empty::new())
}

/// Warms `service` up, then asserts that `CALLS` more calls allocate nothing.
fn assert_no_allocations<S>(rt: &tokio::runtime::Runtime, service: S, what: &str)
where
    S: Service<Request<()>>,
    S::Error: std::fmt::Debug,
{
    alloc::assert_no_allocations(
        GLOBAL,
        rt,
        service,
        requests(WARM_UP),
        requests(CALLS),
        alloc::discard,
        what,
    );
}

#[test]
fn closed_healthy_calls_allocate_nothing() {
    let rt = alloc::runtime();
    let _guard = rt.enter();

    // Count window, no slow-call threshold: the clock is never read.
    let layer = CircuitBreakerLayer::new(config());
    let handle = layer.handle();
    let ready = tower::service_fn(|_: Request<()>| async { Ok::<_, Infallible>(ok()) });
    assert_no_allocations(&rt, layer.layer(ready), "count window");
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().window.calls, WINDOW, "the window is full");

    // Count window with slow-call tracking: two clock reads per call, still nothing on
    // the heap.
    let layer = CircuitBreakerLayer::builder(config())
        .routes(RouteTable::single(
            Route::default().slow_call_duration(Duration::from_secs(1)),
        ))
        .build()
        .expect("an in-memory breaker always builds");
    let handle = layer.handle();
    let ready = tower::service_fn(|_: Request<()>| async { Ok::<_, Infallible>(ok()) });
    assert_no_allocations(&rt, layer.layer(ready), "count window, slow-call tracking");
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().window.slow, 0);

    // An inner call that is pending once (it goes through the scheduler) allocates nothing
    // either.
    let layer = CircuitBreakerLayer::new(config());
    let pending_once = tower::service_fn(|_: Request<()>| async {
        tokio::task::yield_now().await;
        Ok::<_, Infallible>(ok())
    });
    assert_no_allocations(&rt, layer.layer(pending_once), "inner service pending once");

    // A plain breaker (any request type: here a `u64` lookup), with and without slow-call
    // tracking.
    for slow in [None, Some(Duration::from_secs(1))] {
        let route = match slow {
            Some(threshold) => Route::default().slow_call_duration(threshold),
            None => Route::default(),
        };
        let layer = CircuitBreakerLayer::builder(config())
            .routes(RouteTable::single(route))
            .build()
            .expect("an in-memory breaker always builds")
            .plain();
        let handle = layer.handle();
        let lookup = tower::service_fn(|key: u64| async move { Ok::<_, Infallible>(key * 2) });
        alloc::assert_no_allocations(
            GLOBAL,
            &rt,
            layer.layer(lookup),
            (0..WARM_UP as u64).collect(),
            (0..CALLS as u64).collect(),
            alloc::discard,
            "plain breaker",
        );
        assert_eq!(handle.snapshot().window.calls, WINDOW, "the window is full");
    }

    // A breaker per host (`ByHost`): looking up a known host's breaker allocates nothing,
    // whether the host comes from the URI or from the `Host` header, IPv6 literals included
    // (hosts up to 23 bytes are kept inline).
    let layer = CircuitBreakerLayer::builder(config())
        .build_keyed(ByHost)
        .expect("a valid keyed breaker");
    let handle = layer.handle();
    let ready = tower::service_fn(|_: Request<()>| async { Ok::<_, Infallible>(ok()) });
    let by_host = |n: usize| -> Vec<Request<()>> {
        (0..n)
            .map(|i| {
                let builder = match i % 3 {
                    0 => Request::get("http://API.example.com/users/42"),
                    1 => Request::get("/users/42").header("host", "[2001:db8::1]:8080"),
                    _ => Request::get("/users/42").header("host", "[2001:db8::2]"),
                };
                builder.body(()).expect("a request")
            })
            .collect()
    };
    alloc::assert_no_allocations(
        GLOBAL,
        &rt,
        layer.layer(ready),
        by_host(WARM_UP),
        by_host(CALLS),
        alloc::discard,
        "breakers keyed by host",
    );
    assert_eq!(handle.len(), 3, "one breaker per host: {:?}", handle.keys());

    // A breaker per shard whose answers may name the shard they count against
    // (`AnswerKeyed`): an answer naming the request's own shard, one naming another known
    // shard (the call moves to that shard's breaker) and one naming none allocate nothing.
    // The answers are built before counting (a header costs the map an allocation) and
    // handed out one per call.
    let shard = http::HeaderName::from_static("x-shard");
    let by_shard = |head: &fusebox_breaker::RequestHead<'_>| -> smol_str::SmolStr {
        head.headers()
            .get("x-shard")
            .and_then(|v| v.to_str().ok())
            .map(smol_str::SmolStr::new)
            .unwrap_or_default()
    };
    let layer = CircuitBreakerLayer::builder(config())
        .build_keyed(AnswerKeyed::new(by_shard, shard.clone()))
        .expect("a valid keyed breaker");
    let handle = layer.handle();
    let shards = ["s-0", "s-1", "s-2"];
    let answers = |n: usize| -> Vec<Response<Empty<Bytes>>> {
        (0..n)
            .map(|i| {
                let mut response = ok();
                match i % 3 {
                    0 => {}
                    named => {
                        let value = http::HeaderValue::from_static(shards[(i + named) % 3]);
                        response.headers_mut().insert(shard.clone(), value);
                    }
                }
                response
            })
            .collect()
    };
    let mut queued = answers(WARM_UP + CALLS);
    queued.reverse();
    let queued = std::sync::Mutex::new(queued);
    let answering = tower::service_fn(|_: Request<()>| {
        let response = queued
            .lock()
            .expect("unpoisoned")
            .pop()
            .expect("an answer per call");
        async move { Ok::<_, Infallible>(response) }
    });
    let for_shards = |n: usize| -> Vec<Request<()>> {
        (0..n)
            .map(|i| {
                Request::get("/users/42")
                    .header("x-shard", shards[i % 3])
                    .body(())
                    .expect("a request")
            })
            .collect()
    };
    alloc::assert_no_allocations(
        GLOBAL,
        &rt,
        layer.layer(answering),
        for_shards(WARM_UP),
        for_shards(CALLS),
        alloc::discard,
        "breakers keyed by shard, named by answers",
    );
    assert_eq!(
        handle.len(),
        3,
        "one breaker per shard: {:?}",
        handle.keys()
    );
    let moved: u32 = shards
        .iter()
        .map(|s| {
            handle
                .get(&(*s).into())
                .expect("a shard's breaker")
                .snapshot()
                .window
                .calls
        })
        .sum();
    assert_eq!(moved, 3 * WINDOW, "every shard's window is full");

    // Building a layer makes the breaker and its per-thread leases once, and nothing per
    // route: over a table of 21 routes it allocates as often as over the default table.
    // Layering is free: every service the layer builds, HTTP or plain, shares them, and a
    // keyed layer's services share its table of keys.
    let build = |routes: RouteTable| {
        let config = config();
        let region = Region::new(GLOBAL);
        let layer = CircuitBreakerLayer::builder(config)
            .routes(routes)
            .build()
            .expect("an in-memory breaker always builds");
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
        "building the layer allocated {built} times ({shards} leases)"
    );
    let plain = wide.plain();
    let keyed = CircuitBreakerLayer::builder(config())
        .build_keyed(ByHost)
        .expect("a valid keyed breaker");
    let (mut http, mut plains, mut keyeds) = (
        Vec::with_capacity(8),
        Vec::with_capacity(8),
        Vec::with_capacity(8),
    );
    let region = Region::new(GLOBAL);
    for _ in 0..8 {
        let ready = tower::service_fn(|_: Request<()>| async { Ok::<_, Infallible>(ok()) });
        http.push(wide.layer(ready));
        let lookup = tower::service_fn(|key: u64| async move { Ok::<_, Infallible>(key) });
        plains.push(plain.layer(lookup));
        let ready = tower::service_fn(|_: Request<()>| async { Ok::<_, Infallible>(ok()) });
        keyeds.push(keyed.layer(ready));
    }
    let layered = region.change().allocations;
    black_box((http, plains, keyeds));
    assert_eq!(layered, 0, "layering 24 services allocated {layered} times");
    // With a `tracing` subscriber installed at INFO: the transitions' events are enabled,
    // and a closed breaker's healthy calls make none.
    alloc::with_info_subscriber(|| {
        let layer = CircuitBreakerLayer::new(config());
        let ready = tower::service_fn(|_: Request<()>| async { Ok::<_, Infallible>(ok()) });
        assert_no_allocations(&rt, layer.layer(ready), "count window, subscriber at INFO");
        let layer = CircuitBreakerLayer::builder(config())
            .build_keyed(ByHost)
            .expect("a valid keyed breaker");
        let ready = tower::service_fn(|_: Request<()>| async { Ok::<_, Infallible>(ok()) });
        alloc::assert_no_allocations(
            GLOBAL,
            &rt,
            layer.layer(ready),
            by_host(WARM_UP),
            by_host(CALLS),
            alloc::discard,
            "breakers keyed by host, subscriber at INFO",
        );
    });

    // The counter really counts: an allocation inside an armed region is seen...
    let region = Region::new(GLOBAL);
    black_box(Box::new(black_box(7_u64)));
    assert!(
        region.change().allocations >= 1,
        "the counting allocator must see a Box made while armed"
    );

    // ...the helper fails when a call allocates (here: an inner service that boxes)...
    let layer = CircuitBreakerLayer::new(config());
    let boxing = tower::service_fn(|_: Request<()>| async {
        black_box(Box::new(black_box([0_u8; 64])));
        Ok::<_, Infallible>(ok())
    });
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert_no_allocations(&rt, layer.layer(boxing), "an allocating inner service")
    }));
    assert!(
        failed.is_err(),
        "an allocation per call must fail the zero-allocation check"
    );

    // ...and so is one on the breaker's own path: a rejection while forced open boxes its
    // `CircuitOpen` error, and the helper above would fail on it.
    let layer = CircuitBreakerLayer::new(config());
    layer.handle().force_open();
    let mut open = layer.layer(tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(ok())
    }));
    rt.block_on(async {
        let request = Request::get("/users/42").body(()).expect("a request");
        let region = Region::new(GLOBAL);
        let result = open.ready().await.expect("ready").call(request).await;
        let allocations = region.change().allocations;
        assert!(result.is_err(), "a forced-open breaker rejects");
        assert!(
            allocations >= 1,
            "a rejection allocates its boxed error, and the counter sees it"
        );
    });
}
