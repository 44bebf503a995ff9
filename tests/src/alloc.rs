//! The zero-allocation check shared by the `alloc_*` test binaries.
//!
//! Each binary installs a counting global allocator (stats_alloc's: the workspace forbids
//! `unsafe`, which a hand-written `GlobalAlloc` needs) and hands it here. The calls run on a
//! current-thread runtime on the test's thread; after a warm-up, which fills lazily grown
//! buffers such as the runtime's, every allocation or reallocation made during the measured
//! calls fails the check.

use std::alloc::System;
use std::fmt::Debug;
use std::hint::black_box;
use tokio::runtime::Runtime;
use tower::{Service, ServiceExt};

pub use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

/// A current-thread runtime with time enabled.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
}

/// Consumes a response by dropping it (through `black_box`, so it is not optimised away).
pub async fn discard<T>(response: T) {
    black_box(response);
}

/// Calls `service` with each request in turn and hands each response to `consume`.
pub async fn drive<S, Req>(
    service: &mut S,
    requests: Vec<Req>,
    consume: &mut impl AsyncFnMut(S::Response),
) where
    S: Service<Req>,
    S::Error: Debug,
{
    for request in requests {
        let response = service
            .ready()
            .await
            .expect("ready")
            .call(request)
            .await
            .expect("a healthy call");
        consume(response).await;
    }
}

/// Drives `service` through `warm_up`, then asserts that the `measured` calls (with
/// `consume` run on each response) allocate and reallocate nothing, as counted by `global`.
pub fn assert_no_allocations<S, Req>(
    global: &'static StatsAlloc<System>,
    rt: &Runtime,
    mut service: S,
    warm_up: Vec<Req>,
    measured: Vec<Req>,
    mut consume: impl AsyncFnMut(S::Response),
    what: &str,
) where
    S: Service<Req>,
    S::Error: Debug,
{
    let calls = measured.len();
    rt.block_on(async {
        drive(&mut service, warm_up, &mut consume).await;
        let region = Region::new(global);
        drive(&mut service, measured, &mut consume).await;
        let change = region.change();
        assert_eq!(
            (change.allocations, change.reallocations),
            (0, 0),
            "{what}: {} allocations and {} reallocations ({} bytes) over {calls} calls",
            change.allocations,
            change.reallocations,
            change.bytes_allocated,
        );
    });
}

/// `n` requests cycling through `targets` (method and URI), each with a body from `body`.
/// Built before counting: building a request with a URI allocates.
pub fn requests<B>(
    targets: &[(http::Method, &str)],
    n: usize,
    body: impl Fn() -> B,
) -> Vec<http::Request<B>> {
    (0..n)
        .map(|i| {
            let (method, uri) = &targets[i % targets.len()];
            http::Request::builder()
                .method(method.clone())
                .uri(*uri)
                .body(body())
                .expect("a valid request")
        })
        .collect()
}

/// Allocations and reallocations per call, as counted by `global` while `call` runs
/// `calls` times, rounded to whole calls. For comparing two stacks whose calls also
/// allocate a fixed amount of their own (a real client and server in one process, where
/// connection upkeep adds a fraction of an allocation per call).
pub async fn per_call(
    global: &'static StatsAlloc<System>,
    calls: usize,
    mut call: impl AsyncFnMut(),
) -> (usize, usize) {
    let region = Region::new(global);
    for _ in 0..calls {
        call().await;
    }
    let change = region.change();
    (
        (change.allocations + calls / 2) / calls,
        (change.reallocations + calls / 2) / calls,
    )
}

/// Runs `checks` with a `tracing` subscriber installed as the thread's default, as a
/// service in production runs one: `fmt` at `INFO`, writing to nowhere. fusebox's `DEBUG`
/// span of a policy call and its layers' `DEBUG` events are off under it, and must cost a
/// healthy call nothing; its `INFO` and `WARN` events (breaker transitions, limit moves)
/// are on, and happen on no healthy call.
pub fn with_info_subscriber<R>(checks: impl FnOnce() -> R) -> R {
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_writer(std::io::sink)
        .finish();
    tracing::subscriber::with_default(subscriber, checks)
}
