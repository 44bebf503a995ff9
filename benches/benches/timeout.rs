//! Healthy-path overhead of fusebox's `Timeout` against tower's own `Timeout` and a bare
//! service, in the same run.
//!
//! Run with: `cargo bench -p fusebox-benches --bench timeout`
//!
//! Every variant builds its request, checks readiness, calls, and awaits a response that is
//! ready at once, on one current-thread runtime built once (`iter_custom`). What differs is
//! only the middleware: none; tower's `Timeout` (one clock read and a `Sleep` per call);
//! fusebox's `Timeout` with a single-route table (the same, plus the route lookup and a
//! look into the request's extensions); the same with a `BodyTimeoutLayer` and a body
//! timeout (a second clock read and `Sleep`, when the headers arrive, and a bigger
//! response); and fusebox's `Timeout` with a three-route table (adds path matching). No
//! deadline: the healthy path. The figure to compare with tower's is `fusebox`.
//!
//! Time is the benchmark thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), not wall time: the
//! machines this project runs on are shared (two cores, other builds running), and wall
//! time would count the slices other processes hold the core. The loop never blocks, so
//! on a quiet machine the two agree.

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use fusebox_classify::{Route, RouteTable};
use fusebox_timeout::{TimeoutConfig, TimeoutLayer};
use http::{Request, Response};
use http_body_util::Empty;
use std::convert::Infallible;
use std::hint::black_box;
use std::time::Duration;
use tokio::runtime::Runtime;
use tower::{Layer, Service, ServiceExt};

const TIMEOUT: Duration = Duration::from_secs(1);

type Reply = Result<Response<Empty<Bytes>>, Infallible>;

/// The bare service: answers at once, allocates nothing.
fn bare() -> impl Service<
    Request<()>,
    Response = Response<Empty<Bytes>>,
    Error = Infallible,
    Future = std::future::Ready<Reply>,
> + Clone {
    tower::service_fn(|_: Request<()>| std::future::ready(Ok(Response::new(Empty::new()))))
}

/// Times `iters` calls of `service`, each with a fresh request for `path`.
fn run<S>(rt: &Runtime, service: &S, path: &'static str, iters: u64) -> Duration
where
    S: Service<Request<()>> + Clone,
    S::Error: std::fmt::Debug,
{
    let mut service = service.clone();
    // Parsed once: cloning a static `Uri` copies pointers, so the loop measures the
    // middleware rather than URI parsing.
    let uri = http::Uri::from_static(path);
    rt.block_on(async {
        let start = thread_cpu_time();
        for _ in 0..iters {
            let mut request = Request::new(());
            *request.uri_mut() = uri.clone();
            let ready = service.ready().await.expect("ready");
            let response = ready
                .call(black_box(request))
                .await
                .expect("a healthy call");
            black_box(response);
        }
        thread_cpu_time().saturating_sub(start)
    })
}

/// CPU time this thread has used.
fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

fn timeout(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    // Layers are applied inside the runtime: tower's and fusebox's timers need its clock.
    let _guard = rt.enter();

    let config = TimeoutConfig::builder()
        .default_timeout(TIMEOUT)
        .build()
        .expect("a valid config");
    let single = TimeoutLayer::builder(config.clone())
        .routes(RouteTable::default())
        .build()
        .expect("the layer builds")
        .layer(bare());
    let bodies = TimeoutLayer::builder(
        TimeoutConfig::builder()
            .default_timeout(TIMEOUT)
            .body_timeout(TIMEOUT)
            .build()
            .expect("a valid config"),
    )
    .routes(RouteTable::default())
    .build()
    .expect("the layer builds");
    let with_body = bodies.body_layer().layer(bodies.layer(bare()));
    let routed = TimeoutLayer::builder(config)
        .routes(
            RouteTable::builder(Route::default())
                .route("GET /users/{id}", Route::default().timeout(TIMEOUT))
                .route("POST /charge", Route::default().timeout(TIMEOUT))
                .route("/pkg.Ledger/{*method}", Route::default().timeout(TIMEOUT))
                .build()
                .expect("a valid table"),
        )
        .build()
        .expect("the layer builds")
        .layer(bare());
    let tower_timeout = tower::timeout::TimeoutLayer::new(TIMEOUT).layer(bare());

    let mut group = c.benchmark_group("timeout");
    let base = bare();
    group.bench_function("bare", |b| {
        b.iter_custom(|iters| run(&rt, &base, "/users/42", iters))
    });
    group.bench_function("tower", |b| {
        b.iter_custom(|iters| run(&rt, &tower_timeout, "/users/42", iters))
    });
    group.bench_function("fusebox", |b| {
        b.iter_custom(|iters| run(&rt, &single, "/users/42", iters))
    });
    group.bench_function("fusebox_with_body_timeout", |b| {
        b.iter_custom(|iters| run(&rt, &with_body, "/users/42", iters))
    });
    group.bench_function("fusebox_3_routes", |b| {
        b.iter_custom(|iters| run(&rt, &routed, "/users/42", iters))
    });
    group.finish();
}

criterion_group!(benches, timeout);
criterion_main!(benches);
