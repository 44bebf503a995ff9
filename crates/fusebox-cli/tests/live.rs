//! Replay and the live breaker agree: a recorded call log replayed, and the same calls sent
//! through a real `CircuitBreakerLayer` built from the same policy on paused time, give the
//! same transitions at the same records.

use bytes::Bytes;
use fusebox_breaker::{CircuitBreakerLayer, EventKind};
use fusebox_classify::BoxError;
use fusebox_classify::error::{CircuitOpen, Elapsed, Overloaded};
use fusebox_cli::config::load_policy_file;
use fusebox_cli::input::SourceFile;
use fusebox_cli::replay::{ReplayOptions, replay};
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

/// Shed calls count (`count_overloaded`), `GET /throttled` counts its 429s, `GET /plain`
/// ignores them, `GET /stock` counts its 409s, the gRPC route judges by `grpc-status`, and
/// every call of 100 ms or more is slow.
const POLICY: &str = r#"
[policies.api.breaker]
count_window = 20
minimum_calls = 10
failure_rate_threshold = 50
slow_call_rate_threshold = 50
open_wait = "500ms"
open_wait_jitter = "0s"
permitted_probes = 3
count_overloaded = true

[policies.api.default_route]
slow_call_duration = "100ms"

[policies.api.routes."GET /plain"]

[policies.api.routes."GET /throttled"]
count_throttling = true

[policies.api.routes."GET /stock"]
failure_statuses = [409]

[policies.api.routes."/ledger.Ledger/Post"]
protocol = "grpc"
"#;

/// The routes the calls take.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Route {
    Plain,
    Throttled,
    Stock,
    Grpc,
}

impl Route {
    /// As the log writes it.
    fn key(self) -> &'static str {
        match self {
            Route::Plain => "GET /plain",
            Route::Throttled => "GET /throttled",
            Route::Stock => "GET /stock",
            Route::Grpc => "/ledger.Ledger/Post",
        }
    }
}

/// One recorded call.
#[derive(Debug, Clone, Copy)]
struct Record {
    /// Start, microseconds from the first call.
    at_us: u64,
    route: Route,
    result: Recorded,
    latency_us: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Recorded {
    Status(u16),
    /// A gRPC status (`grpc:N` in the log).
    Grpc(u16),
    /// The word a log writes for the error.
    Error(&'static str),
}

/// A stretch of the log: its calls, their mix of results by weight, the share of them
/// (percent) that are slow, and the routes they take by weight.
struct Phase {
    calls: usize,
    mix: &'static [(u32, Recorded)],
    slow_pct: u32,
    routes: &'static [(u32, Route)],
}

/// Most calls take the plain route.
const MOSTLY_PLAIN: &[(u32, Route)] = &[(3, Route::Plain), (1, Route::Throttled)];

const fn phase(calls: usize, mix: &'static [(u32, Recorded)], slow_pct: u32) -> Phase {
    on(calls, mix, slow_pct, MOSTLY_PLAIN)
}

const fn on(
    calls: usize,
    mix: &'static [(u32, Recorded)],
    slow_pct: u32,
    routes: &'static [(u32, Route)],
) -> Phase {
    Phase {
        calls,
        mix,
        slow_pct,
        routes,
    }
}

/// One of `weighted`, by weight.
fn pick<T: Copy>(rng: &mut SmallRng, weighted: &[(u32, T)]) -> T {
    let total: u32 = weighted.iter().map(|w| w.0).sum();
    let mut at = rng.random_range(0..total);
    for (w, item) in weighted {
        if at < *w {
            return *item;
        }
        at -= w;
    }
    weighted[0].1
}

/// What the dependency does over time.
const PHASES: &[Phase] = &[
    phase(
        150,
        &[(95, Recorded::Status(200)), (5, Recorded::Status(503))],
        5,
    ),
    // Failures of every kind that counts.
    phase(
        120,
        &[
            (30, Recorded::Status(200)),
            (30, Recorded::Status(503)),
            (20, Recorded::Error("timeout")),
            (20, Recorded::Error("reset")),
        ],
        5,
    ),
    phase(150, &[(100, Recorded::Status(200))], 0),
    // Shed calls: they open the breaker only because it counts them.
    phase(
        150,
        &[
            (35, Recorded::Status(200)),
            (65, Recorded::Error("overloaded")),
        ],
        0,
    ),
    phase(150, &[(100, Recorded::Status(200))], 0),
    // 429s: they count on the throttled route only.
    on(
        200,
        &[(20, Recorded::Status(200)), (80, Recorded::Status(429))],
        0,
        &[(1, Route::Plain), (3, Route::Throttled)],
    ),
    phase(150, &[(100, Recorded::Status(200))], 0),
    // Slow calls.
    phase(150, &[(100, Recorded::Status(200))], 70),
    phase(150, &[(100, Recorded::Status(200))], 0),
    // What never counts: cancellations and other breakers' rejections.
    phase(
        150,
        &[
            (40, Recorded::Status(200)),
            (30, Recorded::Error("cancelled")),
            (30, Recorded::Error("circuit_open")),
        ],
        0,
    ),
    // 409s: they count on the stock route only.
    on(
        200,
        &[(20, Recorded::Status(200)), (80, Recorded::Status(409))],
        0,
        &[(1, Route::Plain), (3, Route::Stock)],
    ),
    phase(150, &[(100, Recorded::Status(200))], 0),
    // gRPC statuses: UNAVAILABLE counts, NOT_FOUND is an answer, RESOURCE_EXHAUSTED is
    // ignored (the route does not count throttling).
    on(
        200,
        &[
            (25, Recorded::Grpc(0)),
            (45, Recorded::Grpc(14)),
            (15, Recorded::Grpc(5)),
            (15, Recorded::Grpc(8)),
        ],
        0,
        &[(1, Route::Grpc)],
    ),
    on(150, &[(100, Recorded::Grpc(0))], 0, &[(1, Route::Grpc)]),
];

/// The calls before the phase `i` starts.
fn phase_start(i: usize) -> usize {
    PHASES.iter().take(i).map(|p| p.calls).sum()
}

/// A call every 5 ms, each taking whole milliseconds; no completion at the instant of a
/// start or of another completion (so that the order of events at one instant cannot
/// differ).
fn call_log(seed: u64) -> Vec<Record> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut ends = HashSet::new();
    let mut out = Vec::new();
    for phase in PHASES {
        for _ in 0..phase.calls {
            let at_us = out.len() as u64 * 5_000;
            let result = pick(&mut rng, phase.mix);
            // Whole milliseconds: paused time moves timers by milliseconds.
            let mut latency_us = 1_000
                * if rng.random_range(0..100) < phase.slow_pct {
                    rng.random_range(120..300)
                } else {
                    rng.random_range(1..40)
                };
            while (at_us + latency_us).is_multiple_of(5_000) || !ends.insert(at_us + latency_us) {
                latency_us += 1_000;
            }
            let route = pick(&mut rng, phase.routes);
            out.push(Record {
                at_us,
                route,
                result,
                latency_us,
            });
        }
    }
    out
}

fn csv(log: &[Record]) -> String {
    let mut s = String::from("timestamp,route,status,latency_us\n");
    for r in log {
        let result = match r.result {
            Recorded::Status(code) => code.to_string(),
            Recorded::Grpc(code) => format!("grpc:{code}"),
            Recorded::Error(word) => word.to_owned(),
        };
        s += &format!(
            "{}.{:06},{},{result},{}\n",
            r.at_us / 1_000_000,
            r.at_us % 1_000_000,
            r.route.key(),
            r.latency_us
        );
    }
    s
}

/// A transition: the record (0-based) that made it, when (ns from the first call), from,
/// to, why.
type Move = (usize, u64, String, String, String);

fn replayed(log: &[Record]) -> Vec<Move> {
    let policies = load_policy_file(&SourceFile::new("p.toml", POLICY)).expect("a valid policy");
    let report = replay(
        &policies,
        "calls.csv",
        csv(log).as_bytes(),
        &ReplayOptions::default(),
    )
    .expect("the log replays");
    assert_eq!(report.breakers.len(), 1);
    report.breakers[0]
        .transitions
        .iter()
        .map(|t| {
            // Line 1 is the header.
            let record = t.line as usize - 2;
            (
                record,
                t.at,
                t.from.to_owned(),
                t.to.to_owned(),
                t.reason.to_owned(),
            )
        })
        .collect()
}

/// Sets the record being polled, so that a transition the poll makes is that record's.
struct Attributed<F> {
    record: usize,
    current: Arc<AtomicUsize>,
    future: Pin<Box<F>>,
}

impl<F: Future> Future for Attributed<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.current.store(self.record, Ordering::SeqCst);
        self.future.as_mut().poll(cx)
    }
}

/// The dependency's answer to record `r`, after its latency.
async fn answer(r: Record) -> Result<Response<Empty<Bytes>>, BoxError> {
    let latency = Duration::from_micros(r.latency_us);
    if r.result == Recorded::Error("cancelled") {
        // Never answers: the caller gives up after the latency.
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(latency).await;
    let error: BoxError = match r.result {
        Recorded::Status(code) => {
            let mut response = Response::new(Empty::new());
            *response.status_mut() = StatusCode::from_u16(code).expect("a status");
            return Ok(response);
        }
        Recorded::Grpc(code) => {
            // A trailers-only answer: the status in the headers.
            let mut response = Response::new(Empty::new());
            let headers = response.headers_mut();
            headers.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/grpc"),
            );
            headers.insert("grpc-status", http::HeaderValue::from(code));
            return Ok(response);
        }
        Recorded::Error("timeout") => Box::new(Elapsed::new(r.route.key().into(), latency)),
        Recorded::Error("reset") => {
            Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
        }
        Recorded::Error("overloaded") => Box::new(Overloaded::new(64, Duration::ZERO)),
        Recorded::Error("circuit_open") => Box::new(CircuitOpen::new(
            "another".into(),
            None,
            Duration::ZERO,
            false,
        )),
        Recorded::Error(other) => panic!("no live error for {other}"),
    };
    Err(error)
}

async fn live(log: &[Record]) -> Vec<Move> {
    let policies = load_policy_file(&SourceFile::new("p.toml", POLICY)).expect("a valid policy");
    let spec = policies.get("api").expect("the policy");
    let config = spec.breaker().expect("a breaker").clone();
    let moves: Arc<Mutex<Vec<Move>>> = Arc::default();
    let current = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let (seen, by) = (Arc::clone(&moves), Arc::clone(&current));
    let layer = CircuitBreakerLayer::builder(config)
        .routes(spec.routes().clone())
        .on_event(move |ev| {
            if let EventKind::Transition(t) = &ev.kind {
                let at = Instant::now().duration_since(start).as_nanos() as u64;
                seen.lock().expect("not poisoned").push((
                    by.load(Ordering::SeqCst),
                    at,
                    t.from.as_str().to_owned(),
                    t.to.as_str().to_owned(),
                    t.reason.as_str().to_owned(),
                ));
            }
        })
        .build()
        .expect("the breaker builds");
    let records: Arc<Vec<Record>> = Arc::new(log.to_vec());
    let inner = {
        let records = Arc::clone(&records);
        tower::service_fn(move |req: Request<()>| {
            let r = records[*req.extensions().get::<usize>().expect("the record")];
            answer(r)
        })
    };
    let service = layer.layer(inner);
    let mut calls = tokio::task::JoinSet::new();
    for (i, r) in log.iter().copied().enumerate() {
        let mut service = service.clone();
        let current = Arc::clone(&current);
        calls.spawn(async move {
            tokio::time::sleep_until(start + Duration::from_micros(r.at_us)).await;
            let call = async move {
                let mut request = match r.route.key().split_once(' ') {
                    Some((_, path)) => Request::get(path),
                    None => Request::post(r.route.key()),
                }
                .body(())
                .expect("a request");
                request.extensions_mut().insert(i);
                let ready = service.ready().await.expect("always ready");
                let call = ready.call(request);
                if r.result == Recorded::Error("cancelled") {
                    // The caller drops the call after its latency.
                    let latency = Duration::from_micros(r.latency_us);
                    let _ = tokio::time::timeout(latency, call).await;
                } else {
                    let _ = call.await;
                }
            };
            Attributed {
                record: i,
                current,
                future: Box::pin(call),
            }
            .await;
        });
    }
    while let Some(done) = calls.join_next().await {
        done.expect("no call panics");
    }
    moves.lock().expect("not poisoned").clone()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn replay_and_the_live_breaker_make_the_same_transitions_at_the_same_records() {
    for seed in [1, 2, 3] {
        let log = call_log(seed);
        let replayed = replayed(&log);
        let live = live(&log).await;
        assert_eq!(replayed, live, "seed {seed}");

        // The log exercises what the two could disagree on.
        let opened_in = |phase: usize| {
            let range = phase_start(phase)..phase_start(phase + 1);
            replayed
                .iter()
                .filter(|m| m.2 == "closed" && m.3 == "open" && range.contains(&m.0))
                .map(|m| m.4.as_str())
                .collect::<Vec<_>>()
        };
        assert!(
            opened_in(1).contains(&"failure_rate"),
            "seed {seed}: {replayed:?}"
        );
        assert!(
            opened_in(3).contains(&"failure_rate"),
            "seed {seed}: shed calls count: {replayed:?}"
        );
        assert!(
            opened_in(5).contains(&"failure_rate"),
            "seed {seed}: the throttled route's 429s count: {replayed:?}"
        );
        assert!(
            opened_in(7).contains(&"slow_call_rate"),
            "seed {seed}: {replayed:?}"
        );
        assert!(
            opened_in(9).is_empty(),
            "seed {seed}: cancellations and rejections count nothing: {replayed:?}"
        );
        assert!(
            opened_in(10).contains(&"failure_rate"),
            "seed {seed}: the stock route's 409s count: {replayed:?}"
        );
        assert!(
            opened_in(12).contains(&"failure_rate"),
            "seed {seed}: gRPC UNAVAILABLE counts: {replayed:?}"
        );
        assert!(
            replayed
                .iter()
                .any(|m| m.2 == "half_open" && m.3 == "closed"),
            "seed {seed}: {replayed:?}"
        );
    }
}
