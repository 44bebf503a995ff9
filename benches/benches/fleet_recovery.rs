//! How soon a fleet's breaker admits its first probe once an open wait ends, with its state
//! on a `redis-server` the bench starts itself (127.0.0.1, a free port, no persistence),
//! against one Redis round trip measured in the same run.
//!
//! Run with:
//! `cargo bench -p fusebox-benches --bench fleet_recovery`
//!
//! Each iteration trips a fresh scope (its own dependency name) with a 50 ms open wait and a
//! poll interval of 30 s, so no poll can help, then times how soon the replica holds a probe
//! lease (its view turns HALF_OPEN, told by the breaker's transition event; from then on a
//! call is admitted as a probe at once):
//!
//! - `with_demand`: calls were rejected during the wait, so the replica claims its leases
//!   the moment the wait ends (as its view times it); timed from that moment;
//! - `without_demand`: no call during the wait; the first call after it is rejected and
//!   makes the replica claim at once; timed from that call.
//!
//! `round_trip` is one script call (`OnRedis::prefetch`, a read of the state). The summary
//! after criterion's figures gives the median of each and the delays in round trips.

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use fusebox_breaker::{BreakerEvent, CircuitBreakerConfig, CircuitBreakerLayer, EventKind, State};
use fusebox_redis::{OnRedis, RedisStoreConfig, Scope};
use http::{Request, Response};
use http_body_util::Empty;
use std::convert::Infallible;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

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
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(std::env::temp_dir())
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
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn breaker() -> CircuitBreakerConfig {
    CircuitBreakerConfig::builder()
        .name("recovery")
        .count_window(10)
        .minimum_calls(5)
        .failure_rate_threshold(50)
        .open_wait(Duration::from_millis(50))
        .open_wait_jitter(Duration::ZERO)
        .permitted_probes(3)
        .build()
        .expect("a valid breaker config")
}

fn store(server: &RedisServer, scope: u64) -> OnRedis {
    OnRedis::new(
        RedisStoreConfig::builder(server.url())
            .strict()
            .scope(Scope::dep(format!("recovery-{scope}")))
            .poll_interval(Duration::from_secs(30))
            // Generous: a loaded machine must not send the store to its fallback mid-run.
            .timeout(Duration::from_secs(1))
            .build()
            .expect("a valid store config"),
    )
}

/// Trips a fresh scope, then times how soon after the open wait ends the replica holds a
/// probe lease: the moment its view turns HALF_OPEN (the claim's reply), taken when the
/// breaker's transition event arrives, so that nothing polls. `demand`: calls were rejected
/// during the wait (the lease is claimed when the wait ends, which is what is timed);
/// otherwise one call comes after the wait and the time is taken from that call.
async fn lease_after_the_wait(server: &RedisServer, scope: u64, demand: bool) -> Duration {
    let redis = store(server, scope);
    let config = breaker();
    redis.prefetch(&config, None).await.expect("Redis answers");
    let layer = CircuitBreakerLayer::builder(config)
        .store(redis)
        .build()
        .expect("the Redis store accepts the breaker");
    let mut events = layer.handle().subscribe();
    let svc = layer.layer(tower::service_fn(|_: Request<()>| {
        let mut response = Response::new(Empty::<Bytes>::new());
        *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
        std::future::ready(Ok::<_, Infallible>(response))
    }));
    let handle = layer.handle();
    while handle.state() != State::Open {
        let _ = svc.clone().oneshot(Request::new(())).await;
    }
    if demand {
        for _ in 0..5 {
            let _ = svc.clone().oneshot(Request::new(())).await;
        }
    }
    // When the wait ends, as the replica's view of the fleet times it.
    let end = Instant::now() + handle.snapshot().until_half_open.unwrap_or_default();
    let from = if demand {
        end
    } else {
        tokio::time::sleep_until(end).await;
        let first = Instant::now();
        let _ = svc.clone().oneshot(Request::new(())).await;
        first
    };
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .unwrap_or_else(|_| panic!("no lease within 10 s: {:?}", handle.snapshot()));
        if let BreakerEvent {
            kind: EventKind::Transition(t),
            ..
        } = event.expect("the breaker's events")
            && t.to == State::HalfOpen
        {
            return Instant::now().saturating_duration_since(from);
        }
    }
}

fn median(samples: &Mutex<Vec<Duration>>) -> Duration {
    let mut v = samples.lock().map(|v| v.clone()).unwrap_or_default();
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn fleet_recovery(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a two-worker runtime");
    let server = RedisServer::start(&rt);
    let scopes = AtomicU64::new(0);
    let samples: [Mutex<Vec<Duration>>; 3] = Default::default();

    let mut g = c.benchmark_group("fleet_recovery");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("round_trip", |b| {
        let redis = store(&server, u64::MAX);
        let config = breaker();
        b.iter_custom(|n| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..n {
                    redis.prefetch(&config, None).await.expect("Redis answers");
                }
                let took = start.elapsed();
                if let Ok(mut s) = samples[0].lock() {
                    s.push(took / u32::try_from(n).unwrap_or(u32::MAX).max(1));
                }
                took
            })
        })
    });
    for (i, (name, demand)) in [("with_demand", true), ("without_demand", false)]
        .into_iter()
        .enumerate()
    {
        g.bench_function(name, |b| {
            b.iter_custom(|n| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..n {
                        let scope = scopes.fetch_add(1, Ordering::Relaxed);
                        let took = lease_after_the_wait(&server, scope, demand).await;
                        if let Ok(mut s) = samples[i + 1].lock() {
                            s.push(took);
                        }
                        total += took;
                    }
                    total
                })
            })
        });
    }
    g.finish();

    let rtt = median(&samples[0]);
    #[allow(clippy::print_stderr)]
    {
        eprintln!();
        eprintln!("fleet_recovery summary (medians):");
        eprintln!("  one script call (round trip):        {rtt:?}");
        for (i, name) in [
            "after the wait, calls rejected during it:",
            "after the first call past the wait:      ",
        ]
        .iter()
        .enumerate()
        {
            let d = median(&samples[i + 1]);
            eprintln!(
                "  a probe lease held {name} {d:?} ({:.1} round trips)",
                d.as_secs_f64() / rtt.as_secs_f64().max(1e-9)
            );
        }
    }
}

criterion_group!(benches, fleet_recovery);
criterion_main!(benches);
