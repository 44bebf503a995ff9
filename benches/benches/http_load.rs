//! End to end over loopback: what a fusebox `Policy` costs a real HTTP server and a real
//! HTTP client, in throughput and in tail latency.
//!
//! Run with: `cargo bench -p fusebox-benches --bench http_load`
//!
//! Two comparisons, each in alternating rounds (bare, policy, bare, policy, ...) in one run,
//! so that whatever drifts on the machine meanwhile hits both sides equally:
//!
//! - `server`: an axum hello-world (`GET /` answers `Hello, World!`) without, and with, a
//!   Policy on its route (`fusebox::axum::PolicyLayer`: retry budget, count-window breaker,
//!   fixed limit of 1000, 1 s timeout). Both servers listen on 127.0.0.1 for the whole run;
//!   the load generator opens `FUSEBOX_LOAD_CONNECTIONS` keep-alive HTTP/1 connections
//!   (hyper's client connection API) per round, each sending its next request as soon as
//!   the previous answer has been read;
//! - `client`: the same number of tasks, each calling a bare hello-world server through a
//!   hyper-util pooled client: the bare client, and the same client behind a Policy
//!   (`fusebox::hyper::wrap`).
//!
//! With `FUSEBOX_LOAD_TOWER=1` each comparison also runs a third side in every round, for
//! reference: the same work done by tower's own layers — on the server, fusebox's breaker
//! and tower's `ConcurrencyLimit` and `Timeout` under axum's `HandleErrorLayer` (tower's
//! `Retry` cannot take axum's request bodies, which are not `Clone`); on the client,
//! tower's `Retry` with a `TpsBudget` policy, fusebox's breaker, `ConcurrencyLimit` and
//! `Timeout`, as in the `policy` bench. It shows what a stack of tower's layers costs on
//! the same machine and load. With `FUSEBOX_LOAD_LAYERS` the tower side does the work of
//! the layers named, where tower has a stack for them: `breaker,limit,timeout` (no
//! retry, on the client too) or `timeout` (tower's `Timeout` alone); for any other set the
//! tower side is left out.
//!
//! With `FUSEBOX_LOAD_FLOOR=1` a further side runs in every round: the floor of the
//! Policy's layers, the least their work takes per request and nothing more. With the
//! retry and the timeout among the layers it is a copy of the request's head kept until
//! the answer is in ([`fusebox_benches::services::KeepHead`]: what a retry needs to send
//! the request again) over tower's `Timeout` (a tokio timer per request); with the timeout
//! and no retry, tower's `Timeout` alone; without the timeout there is no floor. No
//! breaker, no limit, no budget, no classification: a Policy with these layers can only
//! cost more, so where the floor itself misses a target, no Policy can meet it.
//!
//! Every request's latency (send to end of body) goes into a log-linear histogram
//! ([`fusebox_benches::Histogram`], within 3 %). Each round first runs a warm-up that is not
//! recorded (connections open, windows fill). The summary reports, per side, throughput
//! (requests ÷ measured seconds, all rounds) and p50 / p99 / p99.9 over all rounds, and the
//! ratios policy ÷ bare: over all rounds, and per pair with their median (a burst of other
//! work on the machine spoils one pair, not the median). Targets: throughput with the
//! Policy at least 97 % of bare, p99 at most 1.1× bare.
//!
//! Each round also reads the CPU time of the worker thread that runs the side under test
//! (the server's in the server comparison, the client's in the client comparison; only
//! with one worker, the default) over its measured seconds, and the summary gives it per
//! request, with the share of the round the thread was busy, and as ratios: each side
//! against bare, and the Policy against every other side. A side whose thread is busy
//! all the round (the client's is, at 16 tasks) serves as many requests as its CPU time
//! per request allows, so there the CPU ratio is the throughput ratio without the time the
//! thread waited for a core; the machine's other work still moves it (it shares the
//! caches and the memory bus), so it needs pairs and medians as throughput does.
//!
//! Settings (environment):
//! - `FUSEBOX_LOAD_ROUND_SECS` (default 3): measured seconds per round;
//! - `FUSEBOX_LOAD_WARMUP_SECS` (default 0.5): unrecorded seconds before each round;
//! - `FUSEBOX_LOAD_PAIRS` (default 3): bare/policy pairs per comparison;
//! - `FUSEBOX_LOAD_CONNECTIONS` (default 16): connections (server) or tasks (client);
//! - `FUSEBOX_LOAD_SERVER_THREADS` / `FUSEBOX_LOAD_CLIENT_THREADS` (default 1 each): the
//!   worker threads of the server's and the load generator's runtimes (two cores: one each);
//! - `FUSEBOX_LOAD_ONLY` (`server` or `client`): run one comparison only;
//! - `FUSEBOX_LOAD_LAYERS` (default `retry,breaker,limit,timeout`): the Policy's layers;
//! - `FUSEBOX_LOAD_TOWER` (`1`): add the tower reference side;
//! - `FUSEBOX_LOAD_FLOOR` (`1`): add the floor side.
//!
//! Without `--bench` (as `cargo test --benches` runs it) it makes one short round of every
//! side of each comparison (the tower and floor sides included), to show it works;
//! `--list` (test runners listing tests) lists nothing.
#![allow(clippy::print_stdout, reason = "a load generator reports on stdout")]

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::routing::get;
use bytes::Bytes;
use cpu_time::ThreadTime;
use fusebox::axum::PolicyLayer;
use fusebox::{CircuitBreakerConfig, CircuitBreakerLayer, Policy, RetryConfig};
use fusebox_benches::services::{KeepHeadLayer, TowerRetryPolicy};
use fusebox_benches::{Histogram, env_secs, env_usize};
use http::StatusCode;
use http::{Request, Response, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How a run is shaped.
#[derive(Debug, Clone, Copy)]
struct Settings {
    round: Duration,
    warm_up: Duration,
    pairs: usize,
    connections: usize,
}

/// The policy both comparisons put on their path: all four layers, or those named in
/// `FUSEBOX_LOAD_LAYERS` (comma-separated: `retry`, `breaker`, `limit`, `timeout`; an empty
/// list is a Policy with no layer) — to find which layer a gap comes from.
fn policy() -> Policy {
    let on = layer_on;
    let mut b = Policy::builder("load");
    if on("timeout") {
        b = b.timeout(Duration::from_secs(1));
    }
    if on("limit") {
        b = b.concurrency_limit(1000);
    }
    if on("breaker") {
        b = b.circuit_breaker(breaker_config());
    }
    if on("retry") {
        b = b.retry_budget(RetryConfig::builder().name("load"));
    }
    b.build().expect("a valid policy")
}

/// The floor side's work (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Floor {
    /// A copy of the request's head kept over tower's `Timeout`: a retry and a timeout.
    HeadAndTimer,
    /// tower's `Timeout` alone: a timeout.
    Timer,
}

impl Floor {
    /// The floor of the layers `FUSEBOX_LOAD_LAYERS` names, if they have one.
    fn for_layers() -> Option<Floor> {
        match (layer_on("retry"), layer_on("timeout")) {
            (true, true) => Some(Floor::HeadAndTimer),
            (false, true) => Some(Floor::Timer),
            (_, false) => None,
        }
    }
}

/// The client's tower sides, one per [`TowerStack`].
struct TowerClients<F, G, T> {
    full: F,
    guarded: G,
    timeout: T,
}

/// Whether `FUSEBOX_LOAD_LAYERS` (default: all four) names `layer`.
fn layer_on(layer: &str) -> bool {
    let layers = std::env::var("FUSEBOX_LOAD_LAYERS")
        .unwrap_or_else(|_| "retry,breaker,limit,timeout".to_owned());
    layers.split(',').any(|l| l.trim() == layer)
}

/// Which of tower's stacks the tower side runs: the one doing the work of the Policy's
/// layers, where tower has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TowerStack {
    /// `Retry` → fusebox's breaker → `ConcurrencyLimit` → `Timeout` (the server, whose
    /// request bodies tower's `Retry` cannot clone, leaves the retry out).
    Full,
    /// Fusebox's breaker → `ConcurrencyLimit` → `Timeout`.
    Guarded,
    /// `Timeout` alone.
    Timeout,
}

impl TowerStack {
    /// The stack matching `FUSEBOX_LOAD_LAYERS`, if tower has one.
    fn for_layers() -> Option<TowerStack> {
        let [retry, breaker, limit, timeout] =
            ["retry", "breaker", "limit", "timeout"].map(layer_on);
        match (retry, breaker, limit, timeout) {
            (true, true, true, true) => Some(TowerStack::Full),
            (false, true, true, true) => Some(TowerStack::Guarded),
            (false, false, false, true) => Some(TowerStack::Timeout),
            _ => None,
        }
    }
}

async fn hello() -> &'static str {
    "Hello, World!"
}

/// What sits between the caller and the dependency in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stack {
    /// Nothing.
    Bare,
    /// A fusebox Policy.
    Policy,
    /// tower's own layers (see the module docs).
    Tower,
    /// The floor of the Policy's layers (see the module docs and [`Floor`]).
    Floor,
}

impl Stack {
    fn label(self) -> &'static str {
        match self {
            Stack::Bare => "bare",
            Stack::Policy => "policy",
            Stack::Tower => "tower",
            Stack::Floor => "floor",
        }
    }
}

fn breaker_config() -> CircuitBreakerConfig {
    CircuitBreakerConfig::builder()
        .name("load")
        .count_window(100)
        .minimum_calls(20)
        .build()
        .expect("a valid breaker config")
}

/// The hello-world app, bare or with `stack` on its route.
fn app(stack: Stack) -> Router {
    let router = Router::new().route("/", get(hello));
    match stack {
        Stack::Bare => router,
        Stack::Policy => router.route_layer(PolicyLayer::new(policy())),
        Stack::Floor => {
            let errors = HandleErrorLayer::new(|e: BoxError| async move {
                (StatusCode::SERVICE_UNAVAILABLE, e.to_string())
            });
            let timeout = tower::timeout::TimeoutLayer::new(Duration::from_secs(1));
            if Floor::for_layers() == Some(Floor::HeadAndTimer) {
                router.route_layer(
                    ServiceBuilder::new()
                        .layer(errors)
                        .layer(KeepHeadLayer)
                        .layer(timeout),
                )
            } else {
                router.route_layer(ServiceBuilder::new().layer(errors).layer(timeout))
            }
        }
        Stack::Tower => {
            let errors = HandleErrorLayer::new(|e: BoxError| async move {
                (StatusCode::SERVICE_UNAVAILABLE, e.to_string())
            });
            let timeout = tower::timeout::TimeoutLayer::new(Duration::from_secs(1));
            if TowerStack::for_layers() == Some(TowerStack::Timeout) {
                router.route_layer(ServiceBuilder::new().layer(errors).layer(timeout))
            } else {
                router.route_layer(
                    ServiceBuilder::new()
                        .layer(errors)
                        .layer(CircuitBreakerLayer::new(breaker_config()))
                        .layer(tower::limit::ConcurrencyLimitLayer::new(1000))
                        .layer(timeout),
                )
            }
        }
    }
}

/// Serves `app` on a fresh port of 127.0.0.1 on `rt`, for the rest of the process.
fn serve(rt: &Runtime, app: Router) -> SocketAddr {
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let addr = listener.local_addr().expect("a bound address");
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                println!("server on {addr} stopped: {e}");
            }
        });
        addr
    })
}

fn request(uri: &Uri) -> Request<Empty<Bytes>> {
    let mut request = Request::new(Empty::new());
    *request.uri_mut() = uri.clone();
    request
}

/// What one round measured.
struct Round {
    histogram: Histogram,
    measured: Duration,
    errors: u64,
    /// The CPU time the measured side's worker thread spent in the measured window, when
    /// its runtime has one worker ([`worker_cpu`]).
    cpu: Option<Duration>,
}

/// The CPU time the one worker of `rt` spends from `start` to `end`, read by a task
/// spawned on it: with one worker, every task of the runtime (callers, connections, the
/// layers' timers) runs on that thread, so this is what the side under test costs the
/// thread that runs it — in a round where that thread is busy all the time, the figure
/// that bounds its throughput, without the time the thread waited for a core.
/// `None` if the runtime has more than one worker, or the task moved between threads.
fn worker_cpu(
    rt: &Runtime,
    start: Instant,
    end: Instant,
) -> tokio::task::JoinHandle<Option<Duration>> {
    let one_worker = rt.metrics().num_workers() == 1;
    rt.spawn(async move {
        tokio::time::sleep_until(start).await;
        let (thread, from) = (std::thread::current().id(), ThreadTime::now().as_duration());
        tokio::time::sleep_until(end).await;
        let to = ThreadTime::now().as_duration();
        (one_worker && std::thread::current().id() == thread).then(|| to.saturating_sub(from))
    })
}

/// Reads a whole response body; whether it arrived whole.
async fn consume<B: http_body::Body>(response: Response<B>) -> bool {
    response.status().is_success() && response.into_body().collect().await.is_ok()
}

/// One connection of the server comparison: sends requests back to back until `end`,
/// recording those sent from `start` on.
async fn connection(addr: SocketAddr, start: Instant, end: Instant) -> Result<Round, BoxError> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let driver = tokio::spawn(conn);
    let uri: Uri = format!("http://{addr}/").parse()?;
    let mut round = Round {
        histogram: Histogram::new(),
        measured: end.saturating_duration_since(start),
        errors: 0,
        cpu: None,
    };
    loop {
        let sent = Instant::now();
        if sent >= end {
            break;
        }
        sender.ready().await?;
        let ok = match sender.send_request(request(&uri)).await {
            Ok(response) => consume(response).await,
            Err(_) => false,
        };
        if sent >= start {
            if ok {
                round.histogram.record(sent.elapsed());
            } else {
                round.errors += 1;
            }
        }
    }
    drop(sender);
    let _ = driver.await;
    Ok(round)
}

/// One task of the client comparison: calls `client` back to back until `end`, recording
/// the calls made from `start` on.
async fn caller<S, B>(mut client: S, uri: Uri, start: Instant, end: Instant) -> Round
where
    S: Service<Request<Empty<Bytes>>, Response = Response<B>>,
    B: http_body::Body,
{
    let mut round = Round {
        histogram: Histogram::new(),
        measured: end.saturating_duration_since(start),
        errors: 0,
        cpu: None,
    };
    loop {
        let sent = Instant::now();
        if sent >= end {
            break;
        }
        let ok = match client.ready().await {
            Ok(ready) => match ready.call(request(&uri)).await {
                Ok(response) => consume(response).await,
                Err(_) => false,
            },
            Err(_) => false,
        };
        if sent >= start {
            if ok {
                round.histogram.record(sent.elapsed());
            } else {
                round.errors += 1;
            }
        }
    }
    round
}

/// Merges the rounds of all tasks of one round.
fn merge(rounds: impl IntoIterator<Item = Round>) -> Round {
    let mut all = Round {
        histogram: Histogram::new(),
        measured: Duration::ZERO,
        errors: 0,
        cpu: None,
    };
    for r in rounds {
        all.histogram.merge(&r.histogram);
        all.measured = all.measured.max(r.measured);
        all.errors += r.errors;
    }
    all
}

/// One round of the server comparison against `addr`: the load from `rt`, the CPU time
/// read on `server`'s worker.
fn server_round(rt: &Runtime, server: &Runtime, addr: SocketAddr, s: Settings) -> Round {
    rt.block_on(async {
        let start = Instant::now() + s.warm_up;
        let end = start + s.round;
        let cpu = worker_cpu(server, start, end);
        let tasks: Vec<_> = (0..s.connections)
            .map(|_| tokio::spawn(connection(addr, start, end)))
            .collect();
        let mut rounds = Vec::with_capacity(tasks.len());
        for t in tasks {
            match t.await {
                Ok(Ok(round)) => rounds.push(round),
                Ok(Err(e)) => println!("a connection failed: {e}"),
                Err(e) => println!("a connection task failed: {e}"),
            }
        }
        Round {
            cpu: cpu.await.ok().flatten(),
            ..merge(rounds)
        }
    })
}

/// One round of the client comparison: `s.connections` tasks sharing `client`.
fn client_round<S, B>(rt: &Runtime, client: &S, uri: &Uri, s: Settings) -> Round
where
    S: Service<Request<Empty<Bytes>>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Send,
{
    rt.block_on(async {
        let start = Instant::now() + s.warm_up;
        let end = start + s.round;
        let cpu = worker_cpu(rt, start, end);
        let tasks: Vec<_> = (0..s.connections)
            .map(|_| tokio::spawn(caller(client.clone(), uri.clone(), start, end)))
            .collect();
        let mut rounds = Vec::with_capacity(tasks.len());
        for t in tasks {
            match t.await {
                Ok(round) => rounds.push(round),
                Err(e) => println!("a caller task failed: {e}"),
            }
        }
        Round {
            cpu: cpu.await.ok().flatten(),
            ..merge(rounds)
        }
    })
}

/// Every round of one side of a comparison.
#[derive(Default)]
struct Side {
    histogram: Histogram,
    measured: Duration,
    errors: u64,
    per_round: Vec<f64>,
    p99_per_round: Vec<f64>,
    /// The measured worker's CPU time, requests and seconds over the rounds that read it.
    cpu: Duration,
    cpu_requests: u64,
    cpu_measured: Duration,
    /// Each round's CPU time per request, in µs (`NaN` where the round has none).
    cpu_per_round: Vec<f64>,
}

impl Side {
    fn add(&mut self, r: Round) -> f64 {
        let rps = r.histogram.count() as f64 / r.measured.as_secs_f64().max(1e-9);
        self.p99_per_round
            .push(r.histogram.quantile(0.99).as_secs_f64());
        let cpu_per_request = match r.cpu {
            Some(cpu) if r.histogram.count() > 0 => {
                self.cpu += cpu;
                self.cpu_requests += r.histogram.count();
                self.cpu_measured += r.measured;
                us(cpu) / r.histogram.count() as f64
            }
            _ => f64::NAN,
        };
        self.cpu_per_round.push(cpu_per_request);
        self.histogram.merge(&r.histogram);
        self.measured += r.measured;
        self.errors += r.errors;
        self.per_round.push(rps);
        rps
    }

    fn rps(&self) -> f64 {
        self.histogram.count() as f64 / self.measured.as_secs_f64().max(1e-9)
    }

    /// The measured worker's CPU time per request over all rounds, in µs (`NaN` if none
    /// was read).
    fn cpu_per_request(&self) -> f64 {
        if self.cpu_requests == 0 {
            return f64::NAN;
        }
        us(self.cpu) / self.cpu_requests as f64
    }

    /// The share of the measured seconds the worker was on a CPU (`NaN` if never read).
    fn busy(&self) -> f64 {
        self.cpu.as_secs_f64() / self.cpu_measured.as_secs_f64()
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Runs the alternating rounds of one comparison (`stacks[0]` is the baseline) and prints
/// them and their summary: every other side against the baseline.
fn compare(name: &str, s: Settings, stacks: &[Stack], mut round: impl FnMut(Stack) -> Round) {
    println!(
        "\n== {name}: {} rounds of {:.1} s per side (+{:.1} s warm-up), {} connections",
        s.pairs,
        s.round.as_secs_f64(),
        s.warm_up.as_secs_f64(),
        s.connections
    );
    let mut sides: Vec<Side> = stacks.iter().map(|_| Side::default()).collect();
    for pair in 0..s.pairs {
        for (i, stack) in stacks.iter().enumerate() {
            let r = round(*stack);
            let (p50, p99) = (r.histogram.quantile(0.5), r.histogram.quantile(0.99));
            let rps = sides[i].add(r);
            let cpu = sides[i].cpu_per_round.last().copied().unwrap_or(f64::NAN);
            println!(
                "round {:>2} {:<6}: {:>9.0} req/s  p50 {:>7.1} us  p99 {:>7.1} us  cpu {:>6.2} us/req",
                pair + 1,
                stack.label(),
                rps,
                us(p50),
                us(p99),
                cpu,
            );
        }
    }
    println!(
        "{:<12} {:>10} {:>9} {:>9} {:>9} {:>9} {:>7} {:>11} {:>7}",
        "side", "req/s", "p50 us", "p99 us", "p99.9 us", "max us", "errors", "cpu us/req", "busy %"
    );
    for (stack, side) in stacks.iter().zip(&sides) {
        let h = &side.histogram;
        println!(
            "{:<12} {:>10.0} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7} {:>11.3} {:>7.1}",
            stack.label(),
            side.rps(),
            us(h.quantile(0.5)),
            us(h.quantile(0.99)),
            us(h.quantile(0.999)),
            us(h.max()),
            side.errors,
            side.cpu_per_request(),
            side.busy() * 100.0,
        );
    }
    let bare = &sides[0];
    let per_pair = |b: &[f64], w: &[f64]| -> Vec<f64> {
        b.iter().zip(w).map(|(b, w)| w / b.max(1e-12)).collect()
    };
    let list = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    for (stack, with) in stacks.iter().zip(&sides).skip(1) {
        let ratio = |f: fn(&Histogram) -> Duration| {
            f(&with.histogram).as_secs_f64() / f(&bare.histogram).as_secs_f64().max(1e-12)
        };
        let throughput_pairs = per_pair(&bare.per_round, &with.per_round);
        let p99_pairs = per_pair(&bare.p99_per_round, &with.p99_per_round);
        let label = stack.label();
        println!(
            "{name}: throughput {label}/bare = {:.3} over all rounds, median of pairs {:.3} (target >= 0.97; pairs: {}); p99 {label}/bare = {:.3} over all rounds, median of pairs {:.3} (target <= 1.10; pairs: {}); p50 ratio {:.3}, p99.9 ratio {:.3}",
            with.rps() / bare.rps().max(1e-9),
            median(&throughput_pairs),
            list(&throughput_pairs),
            ratio(|h| h.quantile(0.99)),
            median(&p99_pairs),
            list(&p99_pairs),
            ratio(|h| h.quantile(0.5)),
            ratio(|h| h.quantile(0.999)),
        );
    }
    // The worker's CPU time per request: each side against bare, and the Policy against
    // every other side (a side whose worker is busy all the round runs as fast as its CPU
    // time per request lets it).
    let policy = stacks.iter().position(|s| *s == Stack::Policy);
    for (i, (stack, with)) in stacks.iter().zip(&sides).enumerate().skip(1) {
        let against: Vec<usize> = if Some(i) == policy {
            (0..stacks.len()).filter(|j| *j != i).collect()
        } else {
            vec![0]
        };
        for j in against {
            let base = &sides[j];
            if with.cpu_requests == 0 || base.cpu_requests == 0 {
                continue;
            }
            let pairs: Vec<f64> = per_pair(&base.cpu_per_round, &with.cpu_per_round)
                .into_iter()
                .filter(|r| r.is_finite())
                .collect();
            println!(
                "{name}: cpu per request {}/{} = {:.3} over all rounds, median of pairs {:.3} (pairs: {}); busy {:.1} % and {:.1} %",
                stack.label(),
                stacks[j].label(),
                with.cpu_per_request() / base.cpu_per_request(),
                median(&pairs),
                list(&pairs),
                with.busy() * 100.0,
                base.busy() * 100.0,
            );
        }
    }
}

/// The median (the mean of the middle two for an even count; 0 when empty).
fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn runtime(threads: usize) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("a runtime")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let full = args.iter().any(|a| a == "--bench");
    let s = if full {
        Settings {
            round: env_secs("FUSEBOX_LOAD_ROUND_SECS", Duration::from_secs(3)),
            warm_up: env_secs("FUSEBOX_LOAD_WARMUP_SECS", Duration::from_millis(500)),
            pairs: env_usize("FUSEBOX_LOAD_PAIRS", 3),
            connections: env_usize("FUSEBOX_LOAD_CONNECTIONS", 16),
        }
    } else {
        Settings {
            round: Duration::from_millis(100),
            warm_up: Duration::from_millis(50),
            pairs: 1,
            connections: 2,
        }
    };
    let server_rt = runtime(env_usize("FUSEBOX_LOAD_SERVER_THREADS", 1));
    let client_rt = runtime(env_usize("FUSEBOX_LOAD_CLIENT_THREADS", 1));

    let only = std::env::var("FUSEBOX_LOAD_ONLY").unwrap_or_default();
    // The short run (without `--bench`) runs every side it can, to show each works.
    let tower = !full || std::env::var("FUSEBOX_LOAD_TOWER").is_ok_and(|v| v == "1");
    let floor = !full || std::env::var("FUSEBOX_LOAD_FLOOR").is_ok_and(|v| v == "1");
    if tower && TowerStack::for_layers().is_none() {
        println!("tower has no stack for these FUSEBOX_LOAD_LAYERS: the tower side is left out");
    }
    if floor && Floor::for_layers().is_none() {
        println!("these FUSEBOX_LOAD_LAYERS have no floor (it needs the timeout): it is left out");
    }
    let mut stacks = vec![Stack::Bare, Stack::Policy];
    if tower && TowerStack::for_layers().is_some() {
        stacks.push(Stack::Tower);
    }
    if floor && Floor::for_layers().is_some() {
        stacks.push(Stack::Floor);
    }
    let stacks = &stacks[..];
    let bare_addr = serve(&server_rt, app(Stack::Bare));
    let policy_addr = serve(&server_rt, app(Stack::Policy));
    let tower_addr = serve(&server_rt, app(Stack::Tower));
    let floor_addr = serve(&server_rt, app(Stack::Floor));
    if only != "client" {
        compare("server (axum hello world)", s, stacks, |stack| {
            let addr = match stack {
                Stack::Bare => bare_addr,
                Stack::Policy => policy_addr,
                Stack::Tower => tower_addr,
                Stack::Floor => floor_addr,
            };
            server_round(&client_rt, &server_rt, addr, s)
        });
    }
    if only == "server" {
        return;
    }

    let uri: Uri = format!("http://{bare_addr}/").parse().expect("a valid URI");
    let (bare_client, policy_client, tower_client, floor_client) = {
        let _guard = client_rt.enter();
        // Built as `fusebox::hyper::client` builds the policy's.
        let bare: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let timeout = tower::timeout::TimeoutLayer::new(Duration::from_secs(1));
        let guarded = ServiceBuilder::new()
            .layer(CircuitBreakerLayer::new(breaker_config()))
            .layer(tower::limit::ConcurrencyLimitLayer::new(1000))
            .layer(timeout.clone())
            .service(bare.clone());
        let tower = TowerClients {
            full: ServiceBuilder::new()
                .layer(tower::retry::RetryLayer::new(TowerRetryPolicy::new()))
                .service(guarded.clone()),
            guarded,
            timeout: timeout.layer(bare.clone()),
        };
        let floor = ServiceBuilder::new()
            .layer(KeepHeadLayer)
            .layer(timeout)
            .service(bare.clone());
        (
            bare,
            fusebox::hyper::wrap_with_body::<Empty<Bytes>, _>(&policy()),
            tower,
            floor,
        )
    };
    compare(
        "client (hyper-util legacy client)",
        s,
        stacks,
        |stack| match stack {
            Stack::Bare => client_round(&client_rt, &bare_client, &uri, s),
            Stack::Policy => client_round(&client_rt, &policy_client, &uri, s),
            Stack::Floor => match Floor::for_layers() {
                Some(Floor::HeadAndTimer) | None => {
                    client_round(&client_rt, &floor_client, &uri, s)
                }
                Some(Floor::Timer) => client_round(&client_rt, &tower_client.timeout, &uri, s),
            },
            Stack::Tower => match TowerStack::for_layers() {
                Some(TowerStack::Full) | None => {
                    client_round(&client_rt, &tower_client.full, &uri, s)
                }
                Some(TowerStack::Guarded) => {
                    client_round(&client_rt, &tower_client.guarded, &uri, s)
                }
                Some(TowerStack::Timeout) => {
                    client_round(&client_rt, &tower_client.timeout, &uri, s)
                }
            },
        },
    );
}
