//! With a metrics recorder installed, a healthy call through a full Policy — unkeyed, and
//! with breakers keyed by route — records its metrics and still allocates nothing: every
//! layer records through handles it registered when it was built (a keyed breaker: when it
//! made the key's breaker), never through a lookup by name and labels.
//!
//! Its own test binary: it installs a counting global allocator and the global recorder.
//! The recorder is the test's own, of atomics, so that what is counted is fusebox's
//! recording and not an exporter's storage (a Prometheus exporter's histogram buffers
//! samples in blocks it allocates as they fill).

use bytes::Bytes;
use fusebox::{CircuitBreakerConfig, KeyBy, Policy, RetryConfig, Route, RouteTable};
use fusebox_retry::ReplayBody;
use fusebox_tests::alloc::{self, INSTRUMENTED_SYSTEM, StatsAlloc};
use http::{Request, Response};
use http_body_util::Empty;
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use std::alloc::System;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::Layer;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const CALLS: usize = 5_000;
const WARM_UP: usize = 500;

type Body = Empty<Bytes>;

/// A counter, gauge or histogram: one atomic (a histogram counts its samples).
#[derive(Debug, Default)]
struct Cell(AtomicU64);

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::Relaxed);
    }
}

impl GaugeFn for Cell {
    fn increment(&self, value: f64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some((f64::from_bits(b) + value).to_bits())
            });
    }
    fn decrement(&self, value: f64) {
        GaugeFn::increment(self, -value);
    }
    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }
}

impl HistogramFn for Cell {
    fn record(&self, _: f64) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Every handle registered, by its key.
#[derive(Debug, Default)]
struct Cells(Mutex<Vec<(Key, Arc<Cell>)>>);

impl Cells {
    fn cell(&self, key: &Key) -> Arc<Cell> {
        let mut cells = self.0.lock().expect("not poisoned");
        if let Some((_, cell)) = cells.iter().find(|(k, _)| k == key) {
            return Arc::clone(cell);
        }
        let cell = Arc::new(Cell::default());
        cells.push((key.clone(), Arc::clone(&cell)));
        cell
    }

    /// The value of the series named `name` whose labels include every one of `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let cells = self.0.lock().expect("not poisoned");
        cells
            .iter()
            .filter(|(k, _)| {
                k.name() == name
                    && labels
                        .iter()
                        .all(|(l, v)| k.labels().any(|x| x.key() == *l && x.value() == *v))
            })
            .map(|(_, c)| c.0.load(Ordering::Relaxed))
            .sum()
    }
}

#[derive(Debug)]
struct Atomics(Arc<Cells>);

impl Recorder for Atomics {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.0.cell(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.0.cell(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.0.cell(key))
    }
}

fn routes() -> RouteTable {
    RouteTable::builder(Route::default().slow_call_duration(Duration::from_millis(500)))
        .route(
            "GET /users/{id}",
            Route::default().timeout(Duration::from_millis(100)),
        )
        .build()
        .expect("a valid table")
}

fn full(name: &str) -> fusebox::PolicyBuilder {
    Policy::builder(name)
        .routes(routes())
        .timeout(Duration::from_millis(250))
        .concurrency_limit(64)
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .count_window(100)
                .minimum_calls(20),
        )
        .retry_budget(RetryConfig::builder().seed(Some(1)))
}

fn requests(n: usize) -> Vec<Request<Body>> {
    let targets = &[
        (http::Method::GET, "http://127.0.0.1:8080/users/42"),
        (http::Method::DELETE, "http://127.0.0.1:8080/health"),
    ];
    alloc::requests(targets, n, Empty::new)
}

fn ready() -> impl tower::Service<
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
fn healthy_calls_record_their_metrics_without_allocating() {
    let cells = Arc::new(Cells::default());
    metrics::set_global_recorder(Atomics(Arc::clone(&cells))).expect("the only recorder");
    let rt = alloc::runtime();

    for (name, policy) in [
        ("unkeyed", full("unkeyed").build().expect("a valid policy")),
        (
            "keyed",
            full("keyed")
                .breaker_key(KeyBy::Route)
                .build()
                .expect("a valid policy"),
        ),
    ] {
        alloc::assert_no_allocations(
            GLOBAL,
            &rt,
            policy.layer(ready()),
            requests(WARM_UP),
            requests(CALLS),
            alloc::discard,
            name,
        );
        let calls = (WARM_UP + CALLS) as u64;
        let dependency = ("dependency", name);
        // Every call counted once by each layer that counts calls, and timed by the
        // breaker (both routes have a slow-call threshold).
        assert_eq!(
            cells.value(
                "fusebox_breaker_calls_total",
                &[dependency, ("kind", "successful")]
            ),
            calls,
            "{name}"
        );
        assert_eq!(
            cells.value("fusebox_breaker_call_duration_seconds", &[dependency]),
            calls,
            "{name}"
        );
        assert_eq!(
            cells.value(
                "fusebox_limit_calls_total",
                &[dependency, ("kind", "admitted")]
            ),
            calls,
            "{name}"
        );
        assert_eq!(
            cells.value("fusebox_retry_attempts_total", &[dependency]),
            calls,
            "{name}"
        );
    }
    // The keyed breaker's calls went to its keys' series, one per route.
    assert_eq!(
        cells.value(
            "fusebox_breaker_calls_total",
            &[("dependency", "keyed"), ("key", "GET /users/{id}")]
        ),
        (WARM_UP + CALLS).div_ceil(2) as u64
    );
}
