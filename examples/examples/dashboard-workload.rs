//! Run with: cargo run -p fusebox-examples --example dashboard-workload -- [--listen 127.0.0.1:9184] [--seconds 180] [--redis redis://127.0.0.1:6379/0]
//!
//! A workload for the Grafana dashboard (`dashboards/fusebox.json`): two policies,
//! `payments` and `inventory`, call two local dependencies on 127.0.0.1 at a steady rate, a
//! balanced pool (`fusebox::pool`) calls a third, `search`, served by four endpoints, and
//! fusebox's metrics are served at `http://<listen>/metrics` for Prometheus to scrape.
//! `dashboards/render/render.py` runs it under a real Prometheus and draws the dashboard.
//!
//! The dependencies follow a fixed script over `--seconds` (S):
//!
//! - `payments` (40 calls/s) answers in 10–40 ms (2 % take 150 ms: hedges) and fails 3 % of
//!   calls with 503; from S/10 it fails 8 % (more retries than the budget grants), and
//!   from S/6 to 2S/5 85 %: the breaker opens, probes, re-opens, and closes once the outage
//!   is over; retries are refused by the cut-off; calls rejected by the open breaker get a
//!   fallback.
//! - `inventory` (80 calls/s, each with a caller deadline of 150 ms) answers in 20–60 ms,
//!   except from S/2 to 2S/3, a brownout: first every answer takes 80–110 ms, then ever
//!   more take 120 ms (slow) or 400 ms (past the deadline). Slow calls, an adaptive limit
//!   that backs off and sheds, a queue, deadlines passed before a call is sent, timeouts,
//!   fallbacks for the sheds and the timeouts, and the breaker opening.
//! - `search` (40 calls/s) is four endpoints, `a` to `d`, each its own server, behind tower's
//!   p2c balancer with a breaker per endpoint (one `CircuitBreakerConfig`) and the
//!   default cap on ejection (10 % of four endpoints, at least one: one may be out). Each
//!   answers in 5–25 ms and fails 1 % of calls with 503, except that `b` fails 90 % from
//!   S/4 to S/2: its breaker opens, the pool ejects it and the balancer spreads its calls
//!   over the other three; its probes fail and re-open it until the window ends, then one
//!   probe run succeeds and it serves again. And `c` fails 80 % from S/3 to 5S/12: its
//!   breaker opens too, but `b` holds the one place the cap allows, so the pool keeps `c`
//!   in ("would eject": the calls its breaker rejects are sent anyway) until its probes
//!   succeed after its window.
//!
//! With `--redis`, the payments breaker keeps its state on that Redis (the shared store), so
//! the dashboard's Redis panel has data; stop and restart the server to see it fall back and
//! resynchronise. The program exits after S seconds.

// The example's output is its point.
#![allow(clippy::print_stdout)]

use bytes::Bytes;
use fusebox::limit::AimdConfig;
use fusebox::pool::PoolLayer;
use fusebox::redis::{RedisStoreConfig, Scope};
use fusebox::{
    CircuitBreakerConfig, ConcurrencyLimitConfig, Deadline, Fallback, FallbackReason, Policy,
    RetryConfig, Route, RouteTable,
};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::time::{Instant, MissedTickBehavior};
use tower::discover::Change;
use tower::{Service, ServiceExt};

/// What the workload is told on the command line.
struct Args {
    listen: SocketAddr,
    seconds: u64,
    redis: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        listen: SocketAddr::from(([127, 0, 0, 1], 9184)),
        seconds: 180,
        redis: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => args.listen = value.parse().map_err(|e| format!("--listen: {e}"))?,
            "--seconds" => args.seconds = value.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--redis" => args.redis = Some(value),
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if !args.listen.ip().is_loopback() {
        return Err("--listen must be a 127.0.0.1 address".into());
    }
    if args.seconds < 30 {
        return Err("--seconds must be at least 30".into());
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            println!("{e}");
            return ExitCode::FAILURE;
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("{e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    // The recorder first: layers register their metrics when they are built.
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(fusebox::metrics::BREAKER_CALL_DURATION_SECONDS.to_owned()),
            &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0],
        )?
        .install_recorder()?;
    fusebox::metrics::describe();
    serve_metrics(args.listen, handle).await?;

    let start = Instant::now();
    let total = Duration::from_secs(args.seconds);
    let script = Script { start, total };
    let payments_addr = dependency(script, Script::payments).await?;
    let inventory_addr = dependency(script, Script::inventory).await?;
    let mut search_addrs = Vec::new();
    for (i, key) in SEARCH_ENDPOINTS.iter().enumerate() {
        let addr = dependency(script, move |script: &Script, n| script.search(i, n)).await?;
        search_addrs.push((*key, addr));
    }
    let payments = payments_policy(args.redis.as_deref())?;
    let inventory = inventory_policy()?;
    let search = search_pool()?;
    println!(
        "metrics at http://{}/metrics; payments degraded from {:?}, down {:?}..{:?}; inventory \
         brownout {:?}..{:?}; search endpoint b failing {:?}..{:?}, c {:?}..{:?}; ends at \
         {total:?}",
        args.listen,
        total / 10,
        total / 6,
        total * 2 / 5,
        total / 2,
        total * 2 / 3,
        total / 4,
        total / 2,
        total / 3,
        total * 5 / 12
    );

    let pay = load(payments, payments_addr, "/pay", 40, None, start + total);
    let stock = load(
        inventory,
        inventory_addr,
        "/stock/42",
        80,
        Some(Duration::from_millis(150)),
        start + total,
    );
    let find = load_pool(search, search_addrs, "/search", 40, start + total);
    tokio::join!(pay, stock, find);
    Ok(())
}

/// The keys of the search pool's endpoints: their breakers' series carry them (`key`).
const SEARCH_ENDPOINTS: [&str; 4] = ["a", "b", "c", "d"];

/// The search pool: a breaker per endpoint, all from one configuration, and the default cap
/// on ejection (one endpoint of four).
fn search_pool() -> Result<PoolLayer, fusebox::ConfigError> {
    let breaker = CircuitBreakerConfig::builder()
        .name("search")
        .count_window(20)
        .minimum_calls(10)
        .failure_rate_threshold(50)
        .open_wait(Duration::from_secs(5))
        .open_wait_jitter(Duration::from_secs(1))
        .permitted_probes(3)
        .probe_successes(3)
        .build()?;
    Ok(PoolLayer::builder(breaker).build())
}

fn payments_policy(redis: Option<&str>) -> Result<Policy, fusebox::ConfigError> {
    let mut builder = Policy::builder("payments")
        .routes(
            RouteTable::builder(
                Route::default()
                    .timeout(Duration::from_millis(500))
                    .slow_call_duration(Duration::from_millis(250)),
            )
            .build()?,
        )
        .concurrency_limit(64)
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .count_window(40)
                .minimum_calls(20)
                .failure_rate_threshold(50)
                .open_wait(Duration::from_secs(4))
                .open_wait_jitter(Duration::from_secs(1)),
        )
        .retry_budget(
            RetryConfig::builder()
                .retry_ratio(0.05)
                .min_retries_per_second(1)
                .hedge_delay(Some(Duration::from_millis(100))),
        )
        .fallback(
            Fallback::new(|_| Response::new(Bytes::from_static(b"{\"queued\":true}")))
                .route("default")
                .reasons(&[FallbackReason::CircuitOpen]),
        );
    if let Some(url) = redis {
        builder = builder.breaker_store(
            RedisStoreConfig::builder(url)
                .scope(Scope::dep("payments"))
                .batched(Duration::from_millis(5))
                .timeout(Duration::from_millis(250))
                .retry_interval(Duration::from_secs(1)),
        );
    }
    builder.build()
}

fn inventory_policy() -> Result<Policy, fusebox::ConfigError> {
    Policy::builder("inventory")
        .routes(
            RouteTable::builder(Route::default())
                .route(
                    "GET /stock/{sku}",
                    Route::default()
                        .timeout(Duration::from_millis(200))
                        .slow_call_duration(Duration::from_millis(100)),
                )
                .build()?,
        )
        .concurrency_limit_config(
            ConcurrencyLimitConfig::builder()
                .aimd(
                    AimdConfig::new()
                        .initial_limit(8)
                        .min_limit(2)
                        .max_limit(16)
                        .backoff_ratio(0.5),
                )
                .queue(4, Duration::from_millis(200)),
        )
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .count_window(400)
                .minimum_calls(100)
                .slow_call_rate_threshold(80)
                .open_wait(Duration::from_secs(3))
                .open_wait_jitter(Duration::from_secs(1)),
        )
        .retry_budget(RetryConfig::builder().retry_ratio(0.1))
        .fallback(
            Fallback::new(|_| Response::new(Bytes::from_static(b"{\"stock\":null}")))
                .route("GET /stock/{sku}")
                .reasons(&[FallbackReason::Overloaded, FallbackReason::Elapsed]),
        )
        .build()
}

/// Calls `path` on `addr` through `policy`, `per_second` times a second until `until`,
/// each call in a task of its own (an open loop: slow answers pile up as they would).
async fn load(
    policy: Policy,
    addr: SocketAddr,
    path: &'static str,
    per_second: u64,
    deadline: Option<Duration>,
    until: Instant,
) {
    let client = fusebox::hyper::wrap(&policy);
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / per_second));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let uri = format!("http://{addr}{path}");
    while tick.tick().await < until {
        let Ok(mut request) = Request::get(uri.as_str()).body(Full::new(Bytes::new())) else {
            return;
        };
        if let Some(d) = deadline {
            request.extensions_mut().insert(Deadline::after(d));
        }
        let client = client.clone();
        tokio::spawn(async move {
            if let Ok(response) = client.oneshot(request).await {
                let _ = response.into_body().collect().await;
            }
        });
    }
}

/// Calls `path` through a p2c balancer over the pool's `endpoints`, `per_second` times a
/// second until `until`; each call's answer is awaited in a task of its own. The balancer
/// is driven from this task: it waits only while no endpoint is ready.
async fn load_pool(
    pool: PoolLayer,
    endpoints: Vec<(&'static str, SocketAddr)>,
    path: &'static str,
    per_second: u64,
    until: Instant,
) {
    let changes: Vec<_> = endpoints
        .into_iter()
        .map(|(key, addr)| Ok::<_, Infallible>(Change::Insert(key, Replica::new(addr))))
        .collect();
    let mut balance = pool.balance(futures_util::stream::iter(changes));
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / per_second));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    while tick.tick().await < until {
        let Ok(request) = Request::get(path).body(Full::new(Bytes::new())) else {
            return;
        };
        let Ok(ready) = balance.ready().await else {
            return;
        };
        let call = ready.call(request);
        tokio::spawn(async move {
            if let Ok(response) = call.await {
                let _ = response.into_body().collect().await;
            }
        });
    }
}

/// One endpoint of the search pool: a hyper client sending every request to `addr`.
#[derive(Clone)]
struct Replica {
    client: Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
}

impl Replica {
    fn new(addr: SocketAddr) -> Self {
        Replica {
            client: Client::builder(TokioExecutor::new()).build_http(),
            addr,
        }
    }
}

impl Service<Request<Full<Bytes>>> for Replica {
    type Response = Response<Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = hyper_util::client::legacy::ResponseFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Full<Bytes>>) -> Self::Future {
        let uri = format!("http://{}{}", self.addr, request.uri().path());
        if let Ok(uri) = uri.parse() {
            *request.uri_mut() = uri;
        }
        self.client.request(request)
    }
}

/// The dependencies' behaviour over the run.
#[derive(Clone, Copy)]
struct Script {
    start: Instant,
    total: Duration,
}

impl Script {
    /// How far into the run we are, 0–1.
    fn progress(&self) -> f64 {
        self.start.elapsed().as_secs_f64() / self.total.as_secs_f64()
    }

    /// The payments dependency's answer to call `n`: latency and status.
    fn payments(&self, n: u64) -> (Duration, StatusCode) {
        let p = self.progress();
        let fail = if (1.0 / 6.0..0.4).contains(&p) {
            0.85
        } else if (0.1..1.0 / 6.0).contains(&p) {
            0.08
        } else {
            0.03
        };
        let status = if unit(n) < fail {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        };
        let r = unit(n ^ 0x5eed);
        let ms = if r < 0.02 { 150.0 } else { 10.0 + 30.0 * r };
        (Duration::from_secs_f64(ms / 1000.0), status)
    }

    /// The inventory dependency's answer to call `n`. The brownout's first half slows every
    /// answer to 80–110 ms (more calls in flight than the limit lets through); in its second
    /// half the share of slow (120 ms) and very slow (400 ms) answers grows from 10 % to 80 %.
    fn inventory(&self, n: u64) -> (Duration, StatusCode) {
        let p = self.progress();
        let (r, jitter) = (unit(n), unit(n ^ 0x5eed));
        let ms = if (0.5..7.0 / 12.0).contains(&p) {
            80.0 + 30.0 * jitter
        } else if (7.0 / 12.0..2.0 / 3.0).contains(&p) {
            let share = 0.1 + 0.7 * (p - 7.0 / 12.0) * 12.0;
            if r < share * 0.25 {
                400.0
            } else if r < share {
                120.0
            } else {
                20.0 + 40.0 * jitter
            }
        } else {
            20.0 + 40.0 * jitter
        };
        (Duration::from_secs_f64(ms / 1000.0), StatusCode::OK)
    }

    /// The answer of search endpoint `endpoint` (an index of `SEARCH_ENDPOINTS`) to its
    /// call `n`: 5–25 ms, 1 % failed, except `b` (90 % failed from S/4 to S/2) and `c` (80 %
    /// failed from S/3 to 5S/12).
    fn search(&self, endpoint: usize, n: u64) -> (Duration, StatusCode) {
        let p = self.progress();
        let fail = match endpoint {
            1 if (0.25..0.5).contains(&p) => 0.9,
            2 if (1.0 / 3.0..5.0 / 12.0).contains(&p) => 0.8,
            _ => 0.01,
        };
        // Each endpoint its own sequence: the call numbers start at 0 on every server.
        let n = n ^ ((endpoint as u64 + 1) << 40);
        let status = if unit(n) < fail {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        };
        let ms = 5.0 + 20.0 * unit(n ^ 0x5eed);
        (Duration::from_secs_f64(ms / 1000.0), status)
    }
}

/// A number in 0..1 from `n` (splitmix64): a reproducible stand-in for randomness.
fn unit(n: u64) -> f64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// A local HTTP server whose every answer `answer` decides from its call number.
async fn dependency(
    script: Script,
    answer: impl Fn(&Script, u64) -> (Duration, StatusCode) + Copy + Send + Sync + 'static,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let count = Arc::new(AtomicU64::new(0));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_: Request<Incoming>| {
                    let (latency, status) = answer(&script, count.fetch_add(1, Ordering::Relaxed));
                    async move {
                        tokio::time::sleep(latency).await;
                        let mut response = Response::new(Full::new(Bytes::new()));
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

/// Serves the recorder's registry at `/metrics` on `addr`.
async fn serve_metrics(addr: SocketAddr, handle: PrometheusHandle) -> std::io::Result<()> {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let handle = handle.clone();
            async move { handle.render() }
        }),
    );
    let listener = TcpListener::bind(addr).await?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(())
}
