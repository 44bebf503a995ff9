//! The healthy path of a full fusebox `Policy` (retry budget → circuit breaker →
//! concurrency limit → timeout) against a bare call and two peer stacks, in the same run.
//!
//! Run with: `cargo bench -p fusebox-benches --bench policy`
//!
//! Every variant builds its request (an empty-body GET with an absolute URI, as a client
//! sends), checks readiness, calls, and awaits a 200 that is ready at once, on one
//! current-thread runtime built once (`iter_custom`). What differs is only the middleware:
//!
//! - `bare`: none;
//! - `fusebox_policy`: `Policy` with all four layers (count-window breaker, fixed limit of
//!   1000, a 1 s timeout, the retry budget's defaults);
//! - `tower_stack`: tower's own `Retry` with a `TpsBudget` policy (tower's documented
//!   pattern: clone the request up front, deposit on success, withdraw on a 5xx) →
//!   fusebox's `CircuitBreakerLayer` → tower's `ConcurrencyLimit` → tower's `Timeout`;
//! - `tower_resilience`: tower-resilience's retry → circuit breaker → bulkhead → time
//!   limiter, each with its builder's defaults except the sizes above.
//!
//! A second group, `policy_layers`, times a policy with each layer alone, and with none
//! (every stage passed through), to show what each stage costs when on and when off; and
//! the full policy with a route table of four routes (`with_routes`: every call matches
//! `GET /users/{id}`), to show what per-route settings cost.
//!
//! A third group, `policy_floors`, times what a Policy cannot skip (a clock read, a tokio
//! `Sleep`, the retry's copy of the request head) and tower's own timeout, limit and retry
//! layers each alone, to show what the targets below leave room for (see `floors`).
//!
//! Times are thread CPU time, not wall time (see `run`). Targets: the policy at
//! most 1.2× the tower stack, and at least 5× faster than the tower-resilience stack.

use bytes::Bytes;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use fusebox::retry::ReplayBody;
use fusebox::{CircuitBreakerConfig, CircuitBreakerLayer, Policy, RetryConfig};
use fusebox_benches::services::{TowerRetryPolicy, URI, ready_ok};
use fusebox_benches::thread_cpu_time;
use http::{Request, Uri};
use http_body_util::Empty;
use std::convert::Infallible;
use std::hint::black_box;
use std::time::Duration;
use tokio::runtime::Runtime;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

fn breaker_config() -> CircuitBreakerConfig {
    CircuitBreakerConfig::builder()
        .name("bench")
        .count_window(100)
        .minimum_calls(20)
        .build()
        .expect("a valid breaker config")
}

/// The CPU time of `iters` calls of `service`, each with a fresh request. Thread CPU time,
/// not wall time: a busy machine (other builds on two cores) deschedules the benchmark, and
/// that must not count against any variant.
fn run<S>(rt: &Runtime, service: &S, iters: u64) -> Duration
where
    S: Service<Request<Empty<Bytes>>> + Clone,
    S::Error: std::fmt::Debug,
{
    let mut service = service.clone();
    rt.block_on(async {
        let start = thread_cpu_time();
        for _ in 0..iters {
            let mut request = Request::new(Empty::new());
            *request.uri_mut() = Uri::from_static(URI);
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

/// Adds `name` to `group`: calls of `service`, timed by [`run`].
fn time<S>(group: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, name: &str, service: &S)
where
    S: Service<Request<Empty<Bytes>>> + Clone,
    S::Error: std::fmt::Debug,
{
    group.bench_function(name, |b| b.iter_custom(|iters| run(rt, service, iters)));
}

/// All four layers, as the `policy` group measures them.
fn all_layers(builder: fusebox::PolicyBuilder) -> fusebox::PolicyBuilder {
    builder
        .timeout(Duration::from_secs(1))
        .concurrency_limit(1000)
        .circuit_breaker(breaker_config())
        .retry_budget(RetryConfig::builder().name("bench"))
}

fn policy(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let _guard = rt.enter();

    let fusebox_policy = all_layers(Policy::builder("bench"))
        .build()
        .expect("a valid policy")
        .layer(ready_ok::<ReplayBody<Empty<Bytes>>>());

    let tower_stack = ServiceBuilder::new()
        .layer(tower::retry::RetryLayer::new(TowerRetryPolicy::new()))
        .layer(CircuitBreakerLayer::new(breaker_config()))
        .layer(tower::limit::ConcurrencyLimitLayer::new(1000))
        .layer(tower::timeout::TimeoutLayer::new(Duration::from_secs(1)))
        .service(ready_ok::<Empty<Bytes>>());

    let resilience_stack = {
        use tower_resilience::bulkhead::BulkheadLayer;
        use tower_resilience::circuitbreaker::CircuitBreakerLayer as TrCircuitBreakerLayer;
        use tower_resilience::retry::RetryLayer;
        use tower_resilience::timelimiter::TimeLimiterLayer;
        let limited = TimeLimiterLayer::builder()
            .timeout_duration(Duration::from_secs(1))
            .build()
            .layer(ready_ok::<Empty<Bytes>>());
        let bulkhead = BulkheadLayer::builder()
            .max_concurrent_calls(1000)
            .name("bench")
            .build()
            .expect("a valid bulkhead")
            .layer(limited);
        let breaker = TrCircuitBreakerLayer::builder()
            .name("bench")
            .sliding_window_size(100)
            .minimum_number_of_calls(20)
            .failure_rate_threshold(0.5)
            .build()
            .expect("a valid circuit breaker")
            .layer(bulkhead);
        RetryLayer::builder()
            .max_attempts(3)
            .exponential_backoff(Duration::from_millis(25))
            .build()
            .layer(breaker)
    };

    // Each layer alone, and none: what a stage costs on, and off.
    let alone = |b: fusebox::PolicyBuilder| {
        b.build()
            .expect("a valid policy")
            .layer(ready_ok::<ReplayBody<Empty<Bytes>>>())
    };
    let layers = [
        ("no_layer", alone(Policy::builder("bench"))),
        (
            "retry_only",
            alone(Policy::builder("bench").retry_budget(RetryConfig::builder().name("bench"))),
        ),
        (
            "breaker_only",
            alone(Policy::builder("bench").circuit_breaker(breaker_config())),
        ),
        (
            "limit_only",
            alone(Policy::builder("bench").concurrency_limit(1000)),
        ),
        (
            "timeout_only",
            alone(Policy::builder("bench").timeout(Duration::from_secs(1))),
        ),
    ];
    let routes = fusebox::RouteTable::builder(fusebox::Route::default())
        .route(
            "GET /users/{id}",
            fusebox::Route::default().timeout(Duration::from_millis(800)),
        )
        .route("POST /users", fusebox::Route::default())
        .route("GET /orders/{id}", fusebox::Route::default())
        .route(
            "/pkg.Ledger/{*method}",
            fusebox::Route::default().retry(false),
        )
        .build()
        .expect("a valid route table");
    let with_routes = alone(all_layers(Policy::builder("bench").routes(routes)));

    let mut group = c.benchmark_group("policy_layers");
    time(&mut group, &rt, "with_routes", &with_routes);
    for (name, service) in &layers {
        time(&mut group, &rt, name, service);
    }
    group.finish();

    let mut group = c.benchmark_group("policy");
    let base = ready_ok::<Empty<Bytes>>();
    time(&mut group, &rt, "bare", &base);
    time(&mut group, &rt, "fusebox_policy", &fusebox_policy);
    time(&mut group, &rt, "tower_stack", &tower_stack);
    time(&mut group, &rt, "tower_resilience", &resilience_stack);
    group.finish();
}

/// What the target "at least 5x faster than the tower-resilience stack" leaves a Policy:
/// a fifth of that stack's time, of which the bare call takes most. Each variant here is
/// the bare call plus one thing a full Policy cannot skip, or one of tower's own layers
/// alone, timed in the same way as the `policy` group (same binary, same run):
///
/// - `clock_read`: one `tokio::time::Instant::now()`, the clock every fusebox layer reads
///   (a timeout's deadline is now + its duration);
/// - `tokio_sleep`: building (not polling) the tokio `Sleep` a timeout races the call
///   against;
/// - `head_copy`: the copy of the request head that a retry must keep, because the request
///   itself is moved into the service (`into_parts`, `Parts::clone`, `from_parts`);
/// - `tower_timeout`, `tower_limit`, `tower_retry`: tower's `Timeout`, `ConcurrencyLimit`
///   and `Retry` (with the `TpsBudget` policy of the `policy` group), each alone.
fn floors(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let _guard = rt.enter();

    // The bare service, after `work` on the request.
    fn bare_after(
        work: fn(Request<Empty<Bytes>>),
    ) -> impl Service<
        Request<Empty<Bytes>>,
        Response = http::Response<Empty<Bytes>>,
        Error = Infallible,
    > + Clone {
        tower::service_fn(move |request| {
            work(request);
            std::future::ready(Ok(http::Response::new(Empty::new())))
        })
    }
    let clock_read = bare_after(|request| {
        black_box(tokio::time::Instant::now());
        black_box(request);
    });
    let tokio_sleep = bare_after(|request| {
        black_box(request);
        black_box(&tokio::time::sleep(Duration::from_secs(1)));
    });
    let head_copy = bare_after(|request| {
        let (parts, body) = request.into_parts();
        let kept = parts.clone();
        black_box(Request::from_parts(parts, body));
        black_box(kept);
    });
    let tower_timeout =
        tower::timeout::TimeoutLayer::new(Duration::from_secs(1)).layer(ready_ok::<Empty<Bytes>>());
    let tower_limit =
        tower::limit::ConcurrencyLimitLayer::new(1000).layer(ready_ok::<Empty<Bytes>>());
    let tower_retry =
        tower::retry::RetryLayer::new(TowerRetryPolicy::new()).layer(ready_ok::<Empty<Bytes>>());

    let mut group = c.benchmark_group("policy_floors");
    let base = ready_ok::<Empty<Bytes>>();
    time(&mut group, &rt, "bare", &base);
    time(&mut group, &rt, "clock_read", &clock_read);
    time(&mut group, &rt, "tokio_sleep", &tokio_sleep);
    time(&mut group, &rt, "head_copy", &head_copy);
    time(&mut group, &rt, "tower_timeout", &tower_timeout);
    time(&mut group, &rt, "tower_limit", &tower_limit);
    time(&mut group, &rt, "tower_retry", &tower_retry);
    group.finish();
}

criterion_group!(benches, policy, floors);
criterion_main!(benches);
