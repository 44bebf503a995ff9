//! A healthy call through fusebox's concurrency limit allocates nothing.
//!
//! Its own test binary, because it installs a counting global allocator (stats_alloc's: the
//! workspace forbids `unsafe`, which a hand-written `GlobalAlloc` needs). The calls run on a
//! current-thread runtime on this thread, in one test function (the counter is global, and
//! tests in one binary run in parallel). After a warm-up, every allocation made during the
//! measured calls is a failure.

use bytes::Bytes;
use fusebox_limit::{
    AimdConfig, ConcurrencyLimitConfig, ConcurrencyLimitConfigBuilder, ConcurrencyLimitLayer,
    Partitions, Release,
};
use fusebox_tests::alloc::{self, INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use std::alloc::System;
use std::convert::Infallible;
use std::hint::black_box;
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const CALLS: usize = 10_000;
const WARM_UP: usize = 1_000;

fn config() -> ConcurrencyLimitConfigBuilder {
    ConcurrencyLimitConfig::builder().name("alloc")
}

/// Requests built before counting: building a request with a URI allocates.
fn requests(n: usize) -> Vec<Request<()>> {
    let targets = &[
        (http::Method::GET, "/checkout"),
        (http::Method::GET, "/search"),
        (http::Method::GET, "/other"),
    ];
    alloc::requests(targets, n, || ())
}

fn inner()
-> impl Service<Request<()>, Response = Response<Full<Bytes>>, Error = Infallible, Future = impl Send>
+ Clone {
    tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    })
}

fn assert_no_allocations<S, B>(service: S, what: &str)
where
    S: Service<Request<()>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
    B: http_body::Body + Unpin,
    B::Error: std::fmt::Debug,
{
    alloc::assert_no_allocations(
        GLOBAL,
        &alloc::runtime(),
        service,
        requests(WARM_UP),
        requests(CALLS),
        // Read the body to its end (what gives a body-held permit back), without
        // collecting it into a buffer.
        async |response: Response<B>| {
            let mut body = response.into_body();
            while let Some(frame) = body.frame().await {
                black_box(frame.expect("a frame"));
            }
        },
        what,
    );
}

#[test]
fn healthy_calls_allocate_nothing() {
    let fixed = ConcurrencyLimitLayer::new(config().max_concurrency(64).build().unwrap());
    assert_no_allocations(fixed.layer(inner()), "fixed limit");

    let queued = ConcurrencyLimitLayer::new(
        config()
            .max_concurrency(64)
            .queue(128, Duration::from_millis(50))
            .build()
            .unwrap(),
    );
    assert_no_allocations(queued.layer(inner()), "fixed limit with a queue");

    let held = ConcurrencyLimitLayer::new(
        config()
            .max_concurrency(64)
            .release(Release::AtEndOfBody)
            .build()
            .unwrap(),
    );
    assert_no_allocations(held.layer(inner()), "permits held to the end of the body");

    let partitions = Partitions::builder(|r: &Request<()>| r.uri().path() == "/checkout")
        .partition(true, 0.5)
        .build()
        .unwrap();
    let partitioned = ConcurrencyLimitLayer::new(config().max_concurrency(64).build().unwrap())
        .partitioned(partitions);
    assert_no_allocations(partitioned.layer(inner()), "partitioned limit");

    let adaptive = ConcurrencyLimitLayer::new(
        config()
            .aimd(AimdConfig::new().initial_limit(16))
            .build()
            .unwrap(),
    );
    assert_no_allocations(adaptive.layer(inner()), "adaptive limit");

    // With a `tracing` subscriber installed at INFO: an adaptive limit's INFO event is
    // enabled, and a healthy call (which moves the limit by less than its log step) emits
    // none.
    alloc::with_info_subscriber(|| {
        let adaptive = ConcurrencyLimitLayer::new(
            config()
                .aimd(AimdConfig::new().initial_limit(16))
                .build()
                .unwrap(),
        );
        assert_no_allocations(
            adaptive.layer(inner()),
            "adaptive limit, subscriber at INFO",
        );
    });

    // The counter really counts: a shed call boxes its error.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let full = ConcurrencyLimitLayer::new(config().max_concurrency(1).build().unwrap());
        let mut service = full.layer(inner());
        let held = service.ready().await.unwrap().call(Request::new(()));
        let region = Region::new(GLOBAL);
        let shed = service.ready().await.unwrap().call(Request::new(())).await;
        assert!(shed.is_err());
        assert!(region.change().allocations > 0);
        drop(held);
    });
}
