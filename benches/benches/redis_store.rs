//! The breaker's healthy path with its state on Redis (fusebox-redis, strict and batched
//! modes) against the in-memory store and a bare service, in the same run, against a
//! `redis-server` the bench starts itself (127.0.0.1, a free port, no persistence).
//!
//! Run with:
//! `cargo bench -p fusebox-benches --bench redis_store -- --warm-up-time 1 --measurement-time 3`
//!
//! Every variant calls the same inner service — a `tower::service_fn` answering `200 OK`
//! at once — through a breaker with a count window of 100 (and, for the time-window pair,
//! the last 60 s in 60 buckets), warmed up until its window is full of fast successes. One
//! task makes the calls (`block_on` on a two-worker multi-thread runtime, whose workers run
//! the stores' background tasks: flushes, polls, pub/sub, strict mode's script calls).
//!
//! After criterion's figures a summary measures, in the same process:
//! - the cost per call of each variant in 31 interleaved runs of 100,000 calls, as wall time
//!   and as this process's CPU time (fastest and median: on a shared machine the fastest
//!   run is the least disturbed), and the throughput ratios batched / in-memory and
//!   strict / in-memory;
//! - Redis round trips per call (`EVALSHA` calls counted by `INFO commandstats`): for
//!   strict mode at full speed (beyond `max_in_flight` calls waiting on Redis, strict mode
//!   batches) and paced at one call per millisecond (every call its own script call), and
//!   for batched mode.

use bytes::Bytes;
use cpu_time::ProcessTime;
use criterion::{Criterion, criterion_group, criterion_main};
use fusebox_breaker::{CircuitBreakerConfig, CircuitBreakerLayer};
use fusebox_redis::{OnRedis, RedisStoreConfig};
use http::{Request, Response};
use http_body_util::Empty;
use std::convert::Infallible;
use std::fmt::Debug;
use std::hint::black_box;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

type Reply = Result<Response<Empty<Bytes>>, Infallible>;

/// The inner service: answers at once, allocates nothing.
fn bare() -> impl Service<
    Request<()>,
    Response = Response<Empty<Bytes>>,
    Error = Infallible,
    Future = std::future::Ready<Reply>,
> + Clone
+ Send
+ 'static {
    tower::service_fn(|_: Request<()>| std::future::ready(Ok(Response::new(Empty::new()))))
}

#[inline(always)]
fn request() -> Request<()> {
    let mut request = Request::new(());
    black_box(&mut request);
    request
}

/// A `redis-server` for the bench, killed when dropped.
struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    fn start(rt: &Runtime) -> RedisServer {
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let dir = std::env::temp_dir();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (Debian: apt-get install redis-server)");
        let server = RedisServer { child, port };
        let url = server.url();
        rt.block_on(async {
            let client = redis::Client::open(url).expect("a valid URL");
            for _ in 0..500 {
                if let Ok(mut c) = client.get_multiplexed_async_connection().await
                    && redis::cmd("PING")
                        .query_async::<String>(&mut c)
                        .await
                        .is_ok()
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!("redis-server did not answer");
        });
        server
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// `EVALSHA` (and `EVAL`) calls so far, from `INFO commandstats`.
    fn script_calls(&self, rt: &Runtime) -> u64 {
        rt.block_on(async {
            let client = redis::Client::open(self.url()).expect("a valid URL");
            let mut c = client
                .get_multiplexed_async_connection()
                .await
                .expect("a connection");
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut c)
                .await
                .expect("INFO");
            info.lines()
                .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
                .filter_map(|l| {
                    l.split(['=', ','])
                        .nth(1)
                        .and_then(|n| n.parse::<u64>().ok())
                })
                .sum()
        })
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn breaker(name: &str, time_window: bool) -> CircuitBreakerConfig {
    let b = CircuitBreakerConfig::builder()
        .name(name)
        .minimum_calls(100)
        .failure_rate_threshold(50);
    if time_window {
        b.time_window(Duration::from_secs(60), 60)
    } else {
        b.count_window(100)
    }
    .build()
    .expect("a valid breaker config")
}

fn on_redis(server: &RedisServer, strict: bool) -> OnRedis {
    let b = RedisStoreConfig::builder(server.url());
    let b = if strict {
        b.strict()
    } else {
        b.batched(Duration::from_millis(5))
    };
    OnRedis::new(b.build().expect("a valid store config"))
}

/// `iters` calls of `svc` by one task.
fn run<S>(rt: &Runtime, svc: &S, iters: u64) -> Duration
where
    S: Service<Request<()>> + Clone,
    S::Error: Debug,
{
    let mut svc = svc.clone();
    rt.block_on(async move {
        let start = Instant::now();
        for _ in 0..iters {
            let ready = svc.ready().await.expect("ready");
            let result = ready.call(request()).await;
            black_box(&result);
        }
        start.elapsed()
    })
}

/// Calls enough to fill the windows, then lets flushes and replies land.
fn warm<S>(rt: &Runtime, svc: &S)
where
    S: Service<Request<()>> + Clone,
    S::Error: Debug,
{
    run(rt, svc, 2_000);
    rt.block_on(tokio::time::sleep(Duration::from_millis(300)));
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a two-worker runtime")
}

fn redis_store(c: &mut Criterion) {
    let rt = runtime();
    let _guard = rt.enter();
    let server = RedisServer::start(&rt);

    let bare_svc = bare();
    let memory = CircuitBreakerLayer::new(breaker("bench-memory", false)).layer(bare());
    let batched = CircuitBreakerLayer::builder(breaker("bench-batched", false))
        .store(on_redis(&server, false))
        .build()
        .expect("the Redis store accepts the breaker")
        .layer(bare());
    let strict = CircuitBreakerLayer::builder(breaker("bench-strict", false))
        .store(on_redis(&server, true))
        .build()
        .expect("the Redis store accepts the breaker")
        .layer(bare());
    let memory_time = CircuitBreakerLayer::new(breaker("bench-memory-time", true)).layer(bare());
    let batched_time = CircuitBreakerLayer::builder(breaker("bench-batched-time", true))
        .store(on_redis(&server, false))
        .build()
        .expect("the Redis store accepts the breaker")
        .layer(bare());
    warm(&rt, &memory);
    warm(&rt, &batched);
    warm(&rt, &strict);
    warm(&rt, &memory_time);
    warm(&rt, &batched_time);

    let mut g = c.benchmark_group("redis_store");
    g.bench_function("bare", |b| b.iter_custom(|n| run(&rt, &bare_svc, n)));
    g.bench_function("in_memory", |b| b.iter_custom(|n| run(&rt, &memory, n)));
    g.bench_function("redis_batched", |b| {
        b.iter_custom(|n| run(&rt, &batched, n))
    });
    g.bench_function("redis_strict", |b| b.iter_custom(|n| run(&rt, &strict, n)));
    g.bench_function("in_memory_time_window", |b| {
        b.iter_custom(|n| run(&rt, &memory_time, n))
    });
    g.bench_function("redis_batched_time_window", |b| {
        b.iter_custom(|n| run(&rt, &batched_time, n))
    });
    g.finish();

    // === The summary: ratios and round trips, measured here ===
    // Short runs of every variant, interleaved, many times: on a shared machine the
    // fastest run of each is the one least disturbed, and every variant had the same
    // chances. Medians are shown too.
    const CALLS: u64 = 1_000_000;
    const RUN: u64 = 100_000;
    const ROUNDS: usize = 31;
    let variants: [(&str, &dyn Fn(u64) -> Duration); 6] = [
        ("bare", &|n| run(&rt, &bare_svc, n)),
        ("in_memory", &|n| run(&rt, &memory, n)),
        ("redis_batched", &|n| run(&rt, &batched, n)),
        ("redis_strict", &|n| run(&rt, &strict, n)),
        ("in_memory_time_window", &|n| run(&rt, &memory_time, n)),
        ("redis_batched_time_window", &|n| run(&rt, &batched_time, n)),
    ];
    // Wall time, and this process's CPU time (every thread: the caller and the stores'
    // background tasks), which other processes on a shared machine disturb less.
    let mut wall: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    for _ in 0..ROUNDS {
        for (i, (_, f)) in variants.iter().enumerate() {
            let started = ProcessTime::now();
            let took = f(RUN);
            let used = started.elapsed();
            wall[i].push(took.as_nanos() as f64 / RUN as f64);
            cpu[i].push(used.as_nanos() as f64 / RUN as f64);
        }
    }
    let summarize = |samples: &mut Vec<Vec<f64>>| -> Vec<(f64, f64)> {
        samples
            .iter_mut()
            .map(|v| {
                v.sort_by(f64::total_cmp);
                (v[0], v[v.len() / 2])
            })
            .collect()
    };
    let wall = summarize(&mut wall);
    let cpu = summarize(&mut cpu);

    // Round trips per call.
    rt.block_on(tokio::time::sleep(Duration::from_millis(500)));
    let before = server.script_calls(&rt);
    run(&rt, &strict, CALLS);
    rt.block_on(tokio::time::sleep(Duration::from_millis(500)));
    let strict_full = (server.script_calls(&rt) - before) as f64 / CALLS as f64;

    const PACED: u64 = 1_000;
    let before = server.script_calls(&rt);
    rt.block_on(async {
        let mut svc = strict.clone();
        for _ in 0..PACED {
            let ready = svc.ready().await.expect("ready");
            black_box(ready.call(request()).await.expect("admitted"));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    });
    let paced_calls = server.script_calls(&rt) - before;
    // The scope's own polls (one a second) ran meanwhile too.
    let strict_paced = paced_calls as f64 / PACED as f64;

    let before = server.script_calls(&rt);
    let took = run(&rt, &batched, CALLS);
    let batched_rt = (server.script_calls(&rt) - before) as f64 / CALLS as f64;

    #[allow(clippy::print_stderr)]
    {
        eprintln!();
        eprintln!("redis_store summary: ns per call over {ROUNDS} interleaved runs of {RUN} calls");
        eprintln!(
            "  {:<26} {:>9} {:>9} {:>9} {:>9}",
            "", "wall min", "wall med", "cpu min", "cpu med"
        );
        for (i, (name, _)) in variants.iter().enumerate() {
            eprintln!(
                "  {name:<26} {:9.1} {:9.1} {:9.1} {:9.1}",
                wall[i].0, wall[i].1, cpu[i].0, cpu[i].1
            );
        }
        let ratio = |s: &[(f64, f64)], a: usize, b: usize| 100.0 * s[a].0 / s[b].0;
        eprintln!("throughput ratios (fastest runs; wall, cpu):");
        eprintln!(
            "  redis_batched / in_memory:                         {:.1} %, {:.1} %",
            ratio(&wall, 1, 2),
            ratio(&cpu, 1, 2)
        );
        eprintln!(
            "  redis_strict / in_memory:                          {:.1} %, {:.1} %",
            ratio(&wall, 1, 3),
            ratio(&cpu, 1, 3)
        );
        eprintln!(
            "  redis_batched_time_window / in_memory_time_window: {:.1} %, {:.1} %",
            ratio(&wall, 4, 5),
            ratio(&cpu, 4, 5)
        );
        eprintln!("Redis round trips per call (EVALSHA in INFO commandstats):");
        eprintln!(
            "  strict, full speed:       {strict_full:.4} (beyond max_in_flight waiting calls, outcomes are batched)"
        );
        eprintln!(
            "  strict, one call per ms:  {strict_paced:.3} ({paced_calls} script calls for {PACED} calls, polls included)"
        );
        eprintln!("  batched, full speed:      {batched_rt:.6} ({CALLS} calls in {took:?})");
    }
}

criterion_group!(benches, redis_store);
criterion_main!(benches);
