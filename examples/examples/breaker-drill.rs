//! Run with: cargo run -p fusebox-examples --example breaker-drill
//!
//! A circuit breaker drill against a real, flaky HTTP dependency on 127.0.0.1.
//!
//! The dependency is healthy for 3 s, then fails for 4 s (mostly 503s, some answers that
//! take 400 ms where 250 ms is already slow), then recovers. A hyper client behind a
//! fusebox `CircuitBreakerLayer` calls it 20 times a second. Watch the breaker open on the
//! failure rate, reject calls without sending them while open, probe the dependency after
//! its open wait (re-opening while the dependency is still down), and close once three
//! probes in a row succeed. One line per second shows the traffic; every transition is
//! printed as it happens, with the evidence behind it.
//!
//! The drill stops by itself after 13 s (or on Ctrl-C) and exits 0 only if the breaker
//! opened, probed and closed again — so it doubles as a smoke test.

// The example's output is its point.
#![allow(clippy::print_stdout)]

use bytes::Bytes;
use fusebox::breaker::{BreakerEvent, EventKind, State, Transition};
use fusebox::error::CircuitOpen;
use fusebox::{CircuitBreakerConfig, CircuitBreakerLayer, Route, RouteTable};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tower::{ServiceBuilder, ServiceExt};

/// The dependency answers well until then...
const FAILS_AT: Duration = Duration::from_secs(3);
/// ... fails until then, and is healthy again afterwards.
const RECOVERS_AT: Duration = Duration::from_secs(7);
/// How long the drill runs.
const RUN_FOR: Duration = Duration::from_secs(13);
/// Calls at or above this latency are slow.
const SLOW_CALL: Duration = Duration::from_millis(250);
/// Time between two calls (20 calls a second).
const CALL_EVERY: Duration = Duration::from_millis(50);

#[tokio::main]
async fn main() -> ExitCode {
    let started = Instant::now();
    let addr = match start_flaky_dependency(started).await {
        Ok(addr) => addr,
        Err(e) => {
            println!("cannot start the dependency on 127.0.0.1: {e}");
            return ExitCode::FAILURE;
        }
    };

    // The breaker: judge the last 20 calls once 10 are in; open at 50 % failed or 50 %
    // slow; stay open 2 s (plus up to 250 ms of jitter); then let 3 probes through.
    let config = CircuitBreakerConfig::builder()
        .name("flaky-dependency")
        .count_window(20)
        .minimum_calls(10)
        .failure_rate_threshold(50)
        .slow_call_rate_threshold(50)
        .open_wait(Duration::from_secs(2))
        .open_wait_jitter(Duration::from_millis(250))
        .permitted_probes(3)
        .max_half_open_wait(Some(Duration::from_secs(5)))
        .build();
    let routes = RouteTable::builder(Route::default().slow_call_duration(SLOW_CALL)).build();
    let (config, routes) = match (config, routes) {
        (Ok(config), Ok(routes)) => (config, routes),
        (Err(e), _) | (_, Err(e)) => {
            println!("invalid configuration: {e}");
            return ExitCode::FAILURE;
        }
    };
    let layer = CircuitBreakerLayer::builder(config)
        .routes(routes)
        .build()
        .expect("an in-memory breaker always builds");
    let handle = layer.handle();
    let printer = tokio::spawn(print_transitions(handle.subscribe(), started));

    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let svc = ServiceBuilder::new().layer(layer).service(client);

    println!(
        "dependency on http://{addr}: healthy until {FAILS_AT:?}, failing until {RECOVERS_AT:?}, then healthy"
    );
    println!(
        "{:>5}  {:>5}  {:>6}  {:>4}  {:>4}  {:>8}  {:>6}  state",
        "t", "calls", "served", "2xx", "5xx", "rejected", "errors"
    );

    let stats = Arc::new(Stats::default());
    let mut in_flight = JoinSet::new();
    let mut next_call = tokio::time::interval(CALL_EVERY);
    next_call.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut next_report =
        tokio::time::interval_at(started + Duration::from_secs(1), Duration::from_secs(1));
    let stop = tokio::time::sleep_until(started + RUN_FOR);
    tokio::pin!(stop);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut last = Counts::default();
    let interrupted = loop {
        tokio::select! {
            _ = next_call.tick() => {
                let (svc, stats) = (svc.clone(), Arc::clone(&stats));
                let request = Request::get(format!("http://{addr}/quote")).body(Empty::new());
                in_flight.spawn(async move {
                    let Ok(request) = request else { return };
                    stats.calls.fetch_add(1, Ordering::Relaxed);
                    match svc.oneshot(request).await {
                        Ok(response) => {
                            let status = response.status();
                            // Read the body so the connection goes back to the pool.
                            let _ = response.into_body().collect().await;
                            let served = if status.is_success() { &stats.ok } else { &stats.not_ok };
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if e.is::<CircuitOpen>() => {
                            stats.rejected.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            stats.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
                while in_flight.try_join_next().is_some() {}
            }
            _ = next_report.tick() => {
                let now = stats.counts();
                let d = now.since(&last);
                last = now;
                let snapshot = handle.snapshot();
                println!(
                    "{:>4}s  {:>5}  {:>6}  {:>4}  {:>4}  {:>8}  {:>6}  {} (window: {} calls, {:.0} % failed, {:.0} % slow)",
                    started.elapsed().as_secs(),
                    d.calls,
                    d.ok + d.not_ok,
                    d.ok,
                    d.not_ok,
                    d.rejected,
                    d.errors,
                    snapshot.state,
                    snapshot.window.calls,
                    snapshot.failure_rate,
                    snapshot.slow_call_rate,
                );
            }
            _ = &mut stop => break false,
            _ = &mut ctrl_c => break true,
        }
    };
    if interrupted {
        println!("interrupted");
    }

    // Let the calls in flight finish, then close the event stream by dropping the breaker.
    while in_flight.join_next().await.is_some() {}
    let final_state = handle.state();
    drop((svc, handle));
    let transitions = printer.await.unwrap_or_default();

    let total = stats.counts();
    println!(
        "{} calls: {} served ({} 2xx, {} other), {} rejected by the breaker, {} errors; final state {final_state}",
        total.calls,
        total.ok + total.not_ok,
        total.ok,
        total.not_ok,
        total.rejected,
        total.errors
    );
    if opened_probed_and_closed(&transitions) && final_state == State::Closed {
        println!("ok: the breaker opened, probed and closed");
        ExitCode::SUCCESS
    } else {
        println!("FAILED: expected the breaker to open, probe and close");
        ExitCode::FAILURE
    }
}

/// What the flaky dependency does with its `n`-th request, `t` into the drill: a status and
/// how long to take.
fn behaviour(t: Duration, n: u64) -> (StatusCode, Duration) {
    let quick = Duration::from_millis(5);
    if t < FAILS_AT || t >= RECOVERS_AT {
        return (StatusCode::OK, quick);
    }
    match n % 10 {
        0..=6 => (StatusCode::SERVICE_UNAVAILABLE, quick),
        7 | 8 => (StatusCode::OK, Duration::from_millis(400)),
        _ => (StatusCode::OK, quick),
    }
}

/// Starts the dependency on a free port of 127.0.0.1; it serves until the program ends.
async fn start_flaky_dependency(started: Instant) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let arrivals = Arc::new(AtomicU64::new(0));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let arrivals = Arc::clone(&arrivals);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_: Request<Incoming>| {
                    let n = arrivals.fetch_add(1, Ordering::Relaxed);
                    let (status, latency) = behaviour(started.elapsed(), n);
                    async move {
                        tokio::time::sleep(latency).await;
                        let mut response = Response::new(Full::new(Bytes::from_static(b"{}")));
                        *response.status_mut() = status;
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

/// Prints every transition as it happens; returns them all once the breaker is gone.
async fn print_transitions(
    mut events: broadcast::Receiver<BreakerEvent>,
    started: Instant,
) -> Vec<Transition> {
    let mut seen = Vec::new();
    loop {
        let t = match events.recv().await {
            Ok(BreakerEvent {
                kind: EventKind::Transition(t),
                ..
            }) => t,
            Ok(_) => continue,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                println!("  (missed {n} events)");
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return seen,
        };
        let w = t.window;
        let mut line = format!(
            "{:>6.2}s  >>> {} -> {} ({}): window {} calls, {} failed, {} slow ({:.0} % failed, {:.0} % slow)",
            started.elapsed().as_secs_f64(),
            t.from,
            t.to,
            t.reason,
            w.calls,
            w.failures,
            w.slow,
            w.failure_rate(),
            w.slow_rate(),
        );
        if let (Some(open_for), Some(jitter)) = (t.open_for, t.jitter) {
            line.push_str(&format!(
                "; open for {:.3} s (jitter {} ms)",
                open_for.as_secs_f64(),
                jitter.as_millis()
            ));
        }
        println!("{line}");
        seen.push(t);
    }
}

/// Whether the breaker opened, then probed, then closed, in that order.
fn opened_probed_and_closed(transitions: &[Transition]) -> bool {
    let after = |from: usize, pred: &dyn Fn(&Transition) -> bool| {
        transitions[from..]
            .iter()
            .position(pred)
            .map(|i| from + i + 1)
    };
    after(0, &|t| t.from == State::Closed && t.to == State::Open)
        .and_then(|i| after(i, &|t| t.to == State::HalfOpen))
        .and_then(|i| after(i, &|t| t.from == State::HalfOpen && t.to == State::Closed))
        .is_some()
}

/// What the calls came to, counted as they finish.
#[derive(Default)]
struct Stats {
    calls: AtomicU64,
    ok: AtomicU64,
    not_ok: AtomicU64,
    rejected: AtomicU64,
    errors: AtomicU64,
}

impl Stats {
    fn counts(&self) -> Counts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Counts {
            calls: get(&self.calls),
            ok: get(&self.ok),
            not_ok: get(&self.not_ok),
            rejected: get(&self.rejected),
            errors: get(&self.errors),
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    calls: u64,
    ok: u64,
    not_ok: u64,
    rejected: u64,
    errors: u64,
}

impl Counts {
    fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            calls: self.calls - earlier.calls,
            ok: self.ok - earlier.ok,
            not_ok: self.not_ok - earlier.not_ok,
            rejected: self.rejected - earlier.rejected,
            errors: self.errors - earlier.errors,
        }
    }
}
