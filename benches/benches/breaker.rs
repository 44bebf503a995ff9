//! Per-call cost of fusebox's circuit breaker on the healthy CLOSED path, against a bare
//! service, the clock reads slow-call detection needs, and three peer breakers
//! (tower-resilience 0.13, failsafe 1.3, recloser 1.4), all in the same run.
//!
//! Run with:
//! `cargo bench -p fusebox-benches --bench breaker -- --warm-up-time 1 --measurement-time 3`
//!
//! Every variant calls the same inner service — a `tower::service_fn` that answers
//! `200 OK` with an empty body at once — through its breaker: readiness, a fresh request,
//! the call, and awaiting the response. The breakers are configured closed and healthy
//! (fusebox and tower-resilience: a window of the last 100 calls at a 50 % failure-rate
//! threshold; recloser: the same ring of 100; failsafe: its default policy) and warmed up
//! with full windows before they are measured.
//!
//! Two scenarios, one criterion group each so that the figures inside a group compare:
//! - `breaker_1_task`: one task on a current-thread runtime;
//! - `breaker_2_tasks`: two tasks sharing one breaker (each with its own service clone) on
//!   a two-worker multi-thread runtime. They start together behind a barrier; the figure is
//!   the wall time from the first start to the last finish divided by the calls of both.
//!
//! and a third, `breaker_open`: a call rejected by a forced-open fusebox breaker next to a
//! healthy call through the same kind of breaker.
//!
//! Runtimes are built once, outside the measurement (`iter_custom`). With
//! `FUSEBOX_BENCH_CPU_TIME=1` in the environment the figures are the process's CPU time per
//! call instead of wall time (groups suffixed `_cpu`): steadier on a machine shared with
//! other work.

use bytes::Bytes;
use cpu_time::ProcessTime;
use criterion::{Criterion, criterion_group, criterion_main};
use fusebox_breaker::{CircuitBreakerConfig, CircuitBreakerLayer};
use fusebox_classify::{Route, RouteTable};
use http::{Request, Response};
use http_body_util::Empty;
use recloser::{AsyncRecloser, Recloser};
use std::convert::Infallible;
use std::fmt::Debug;
use std::future::Future;
use std::hint::black_box;
use std::sync::{Arc, Barrier, OnceLock};
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

/// What the inner service answers.
type Reply = Result<Response<Empty<Bytes>>, Infallible>;

/// The inner service of every variant: answers at once, allocates nothing.
///
/// Its future is an `async` block that builds the response when polled, so it is a byte or
/// two, like a real client's (hyper's is a boxed future: one pointer). A
/// `std::future::ready(response)` would carry the 112-byte response inside the future and
/// make every wrapper's future larger than the 128 bytes the compiler still moves with
/// inline copies: each move would then be a `memcpy` call, which costs more on this kind of
/// machine than a whole healthy breaker call's bookkeeping.
fn bare() -> impl Service<
    Request<()>,
    Response = Response<Empty<Bytes>>,
    Error = Infallible,
    Future = impl Future<Output = Reply> + Send + 'static,
> + Clone
+ Send
+ 'static {
    tower::service_fn(|_: Request<()>| async { Ok(Response::new(Empty::new())) })
}

/// A fresh request, opaque to the optimizer (`black_box` by reference: the compiler must
/// assume any of its fields was changed, without an extra copy of the whole request).
#[inline(always)]
fn request() -> Request<()> {
    let mut request = Request::new(());
    black_box(&mut request);
    request
}

/// Calls made before measuring: fills every window (fusebox's count window is then "clean").
const WARM_UP_CALLS: u64 = 1_000;

/// One way of making calls. Each task gets its own clone (its own service clone; the
/// breaker inside is shared).
trait Client: Clone + Send + 'static {
    /// Makes one call and consumes its result.
    fn once(&mut self) -> impl Future<Output = ()> + Send;
}

/// Any tower service of ours: bare, fusebox, tower-resilience.
#[derive(Clone)]
struct Tower<S>(S);

impl<S> Client for Tower<S>
where
    S: Service<Request<()>> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    S::Error: Debug + Send,
{
    async fn once(&mut self) {
        let service = self.0.ready().await.expect("the service is ready");
        let result = service.call(request()).await;
        black_box(&result);
    }
}

/// failsafe's futures API around the inner service's future.
#[derive(Clone)]
struct Failsafe<B, S> {
    breaker: B,
    inner: S,
}

impl<B, S> Client for Failsafe<B, S>
where
    B: failsafe::futures::CircuitBreaker + Clone + Send + Sync + 'static,
    S: Service<Request<()>, Response = Response<Empty<Bytes>>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    async fn once(&mut self) {
        let inner = self.inner.ready().await.expect("the service is ready");
        let future = inner.call(request());
        let result = self.breaker.call(future).await;
        black_box(&result);
    }
}

/// recloser's async API around the inner service's future.
#[derive(Clone)]
struct Reclose<S> {
    breaker: AsyncRecloser,
    inner: S,
}

impl<S> Client for Reclose<S>
where
    S: Service<Request<()>, Response = Response<Empty<Bytes>>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    async fn once(&mut self) {
        let inner = self.inner.ready().await.expect("the service is ready");
        let future = inner.call(request());
        let result = self.breaker.call(future).await;
        black_box(&result);
    }
}

/// `N` clock reads, the way the breaker reads its clock (`tokio::time::Instant::now`), and
/// no call.
#[derive(Clone)]
struct ClockReads<const N: usize>;

impl<const N: usize> Client for ClockReads<N> {
    async fn once(&mut self) {
        for _ in 0..N {
            black_box(Instant::now());
        }
    }
}

/// The bare call with a clock read before and after it: the floor for any breaker that
/// measures each call's latency.
#[derive(Clone)]
struct Timed<S>(S);

impl<S> Client for Timed<S>
where
    S: Service<Request<()>> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    S::Error: Debug + Send,
{
    async fn once(&mut self) {
        let start = black_box(Instant::now());
        let service = self.0.ready().await.expect("the service is ready");
        let result = service.call(request()).await;
        black_box(&result);
        black_box(Instant::now().saturating_duration_since(start));
    }
}

/// Set (to anything) to measure the CPU time the process spent instead of wall time.
///
/// On a machine shared with other work, wall time counts the moments the benchmark waits
/// for a core; CPU time does not. With two tasks it is the CPU of both (waiting on a
/// contended cache line is CPU time too), so per call it is about twice the wall figure
/// when the two really run in parallel. Groups then carry a `_cpu` suffix.
const CPU_TIME_VAR: &str = "FUSEBOX_BENCH_CPU_TIME";

fn cpu_time() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(CPU_TIME_VAR).is_some())
}

fn group_name(base: &str) -> String {
    if cpu_time() {
        format!("{base}_cpu")
    } else {
        base.to_owned()
    }
}

/// `iters` calls by one task on the current-thread runtime `rt`.
fn one_task<C: Client>(rt: &Runtime, client: &C, iters: u64) -> Duration {
    let mut client = client.clone();
    rt.block_on(async move {
        let cpu = cpu_time().then(ProcessTime::now);
        let start = Instant::now();
        for _ in 0..iters {
            client.once().await;
        }
        let wall = start.elapsed();
        cpu.map_or(wall, |cpu| cpu.elapsed())
    })
}

/// `iters` calls split between two tasks on the two-worker runtime `rt`, started together.
/// The blocking barrier holds the first task's worker until the second task runs on the
/// other worker, so the two really run in parallel.
fn two_tasks<C: Client>(rt: &Runtime, client: &C, iters: u64) -> Duration {
    let cpu = cpu_time().then(ProcessTime::now);
    let barrier = Arc::new(Barrier::new(2));
    let handles = [iters.div_ceil(2), iters / 2].map(|calls| {
        let mut client = client.clone();
        let barrier = Arc::clone(&barrier);
        rt.spawn(async move {
            barrier.wait();
            let start = Instant::now();
            for _ in 0..calls {
                client.once().await;
            }
            (start, Instant::now())
        })
    });
    let wall = rt.block_on(async move {
        let mut first_start = None::<Instant>;
        let mut last_end = None::<Instant>;
        for handle in handles {
            let (start, end) = handle.await.expect("a bench task finished");
            first_start = Some(first_start.map_or(start, |s| s.min(start)));
            last_end = Some(last_end.map_or(end, |e| e.max(end)));
        }
        match (first_start, last_end) {
            (Some(start), Some(end)) => end.saturating_duration_since(start),
            _ => Duration::ZERO,
        }
    });
    cpu.map_or(wall, |cpu| cpu.elapsed())
}

fn current_thread() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime")
}

fn two_workers() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a two-worker runtime")
}

/// fusebox, count window of 100, default route (no slow-call threshold: no clock read).
fn fusebox_count() -> CircuitBreakerLayer {
    CircuitBreakerLayer::new(
        CircuitBreakerConfig::builder("bench")
            .count_window(100)
            .minimum_calls(100)
            .failure_rate_threshold(50)
            .build()
            .expect("a valid breaker config"),
    )
}

/// fusebox, count window of 100, slow-call tracking on (two clock reads per call).
fn fusebox_count_slow() -> CircuitBreakerLayer {
    CircuitBreakerLayer::builder(
        CircuitBreakerConfig::builder("bench")
            .count_window(100)
            .minimum_calls(100)
            .failure_rate_threshold(50)
            .slow_call_rate_threshold(50)
            .build()
            .expect("a valid breaker config"),
    )
    .routes(RouteTable::single(
        Route::default().slow_call_duration(Duration::from_secs(1)),
    ))
    .build()
}

/// fusebox, time window of the last 60 s in 60 buckets, no slow-call threshold.
fn fusebox_time() -> CircuitBreakerLayer {
    CircuitBreakerLayer::new(
        CircuitBreakerConfig::builder("bench")
            .time_window(Duration::from_secs(60), 60)
            .minimum_calls(100)
            .failure_rate_threshold(50)
            .build()
            .expect("a valid breaker config"),
    )
}

/// tower-resilience's breaker: count window of 100, 50 % failure-rate threshold, one
/// breaker shared by every clone of the service.
fn tower_resilience<S>(inner: S) -> impl Client
where
    S: Service<Request<()>, Response = Response<Empty<Bytes>>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let layer = tower_resilience::circuitbreaker::CircuitBreakerLayer::builder()
        .name("bench")
        .sliding_window_size(100)
        .minimum_number_of_calls(100)
        .failure_rate_threshold(0.5)
        .build()
        .expect("a valid tower-resilience config");
    Tower(layer.layer(inner))
}

fn failsafe<S>(inner: S) -> impl Client
where
    S: Service<Request<()>, Response = Response<Empty<Bytes>>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    Failsafe {
        breaker: failsafe::Config::new().build(),
        inner,
    }
}

fn recloser<S>(inner: S) -> impl Client
where
    S: Service<Request<()>, Response = Response<Empty<Bytes>>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    Reclose {
        breaker: AsyncRecloser::from(Recloser::custom().closed_len(100).error_rate(0.5).build()),
        inner,
    }
}

/// Warms `client` up (full windows, lazily grown buffers) on the current-thread runtime.
fn warmed<C: Client>(rt: &Runtime, client: C) -> C {
    one_task(rt, &client, WARM_UP_CALLS);
    client
}

/// How the calls of one measurement are made.
#[derive(Clone, Copy)]
enum Tasks {
    /// One task on a current-thread runtime.
    One,
    /// Two tasks on a two-worker runtime, sharing the breaker.
    Two,
}

/// Times `iters` calls of `client` on `rt`, made as `tasks` says.
fn measure<C: Client>(rt: &Runtime, tasks: Tasks, client: &C, iters: u64) -> Duration {
    match tasks {
        Tasks::One => one_task(rt, client, iters),
        Tasks::Two => two_tasks(rt, client, iters),
    }
}

/// Every variant, in the order reported, in one group.
fn scenario(c: &mut Criterion, group: &str, rt: &Runtime, tasks: Tasks) {
    let warm = current_thread();
    let _guard = rt.enter();
    let mut g = c.benchmark_group(group_name(group));

    macro_rules! variant {
        ($name:literal, $client:expr) => {{
            let client = warmed(&warm, $client);
            g.bench_function($name, |b| {
                b.iter_custom(|iters| measure(rt, tasks, &client, iters))
            });
        }};
    }

    variant!("bare", Tower(bare()));
    variant!("clock_read_x1", ClockReads::<1>);
    variant!("clock_read_x2", ClockReads::<2>);
    variant!("bare_plus_2_clock_reads", Timed(bare()));
    variant!(
        "fusebox_count_slow_off",
        Tower(fusebox_count().layer(bare()))
    );
    variant!(
        "fusebox_count_slow_on",
        Tower(fusebox_count_slow().layer(bare()))
    );
    variant!("fusebox_time_window", Tower(fusebox_time().layer(bare())));
    variant!("tower_resilience", tower_resilience(bare()));
    variant!("failsafe", failsafe(bare()));
    variant!("recloser", recloser(bare()));
    g.finish();
}

fn one_task_group(c: &mut Criterion) {
    scenario(c, "breaker_1_task", &current_thread(), Tasks::One);
}

fn two_tasks_group(c: &mut Criterion) {
    scenario(c, "breaker_2_tasks", &two_workers(), Tasks::Two);
}

/// A rejection while forced open, next to a healthy call, one task.
fn open_group(c: &mut Criterion) {
    let rt = current_thread();
    let _guard = rt.enter();
    let healthy = warmed(&rt, Tower(fusebox_count().layer(bare())));
    let open_layer = fusebox_count();
    open_layer.handle().force_open();
    let open = warmed(&rt, Tower(open_layer.layer(bare())));

    let mut g = c.benchmark_group(group_name("breaker_open"));
    g.bench_function("fusebox_closed_healthy", |b| {
        b.iter_custom(|iters| one_task(&rt, &healthy, iters))
    });
    g.bench_function("fusebox_open_reject", |b| {
        b.iter_custom(|iters| one_task(&rt, &open, iters))
    });
    g.finish();
}

criterion_group!(benches, one_task_group, two_tasks_group, open_group);
criterion_main!(benches);
