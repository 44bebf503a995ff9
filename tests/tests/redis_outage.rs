//! Redis slow or down: `kill -9` under load, a frozen server, and the fail-open and
//! fail-closed fallbacks. Requests are served throughout on local state, no call waits on
//! Redis, nothing panics, and the fleet resynchronises when Redis returns.

mod redis_common;

use fusebox_breaker::State;
use fusebox_redis::{Fallback, RedisStoreConfigBuilder};
use redis_common::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// Calls through every replica from two tasks each until stopped; counts the calls served
/// and keeps the longest any call took.
struct Load {
    stop: Arc<AtomicBool>,
    served: Arc<AtomicUsize>,
    longest_us: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(replicas: &Arc<Vec<Replica>>, dep: &Dependency) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicUsize::new(0));
        let longest_us = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for i in 0..replicas.len() {
            for _ in 0..2 {
                let (replicas, dep, stop, served, longest) = (
                    Arc::clone(replicas),
                    dep.clone(),
                    Arc::clone(&stop),
                    Arc::clone(&served),
                    Arc::clone(&longest_us),
                );
                tasks.push(tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        let started = Instant::now();
                        let _ = replicas[i].call(&dep).await;
                        let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                        longest.fetch_max(took, Ordering::SeqCst);
                        served.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }));
            }
        }
        Load {
            stop,
            served,
            longest_us,
            tasks,
        }
    }

    fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }

    async fn more_served(&self, n: usize) {
        let from = self.served();
        eventually(WITHIN, "calls keep being served", || async {
            self.served() >= from + n
        })
        .await;
    }

    async fn stop(self) -> Duration {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            t.await.expect("no call panicked");
        }
        Duration::from_micros(self.longest_us.load(Ordering::SeqCst))
    }
}

async fn survives_kill_9(mode: fn(RedisStoreConfigBuilder) -> RedisStoreConfigBuilder) {
    let mut server = RedisServer::start().await;
    let config = breaker("payments", |b| {
        b.open_wait(Duration::from_millis(300)).permitted_probes(1)
    });
    let store = store(&server, |b| mode(b).timeout(Duration::from_millis(100)));
    let replicas = Arc::new(fleet(5, &config, &store).await);
    let dep = Dependency::new(200);
    let load = Load::start(&replicas, &dep);
    load.more_served(200).await;

    server.kill();
    // Every replica notices within its time bound and falls back; calls go on meanwhile.
    for r in replicas.iter() {
        eventually(WITHIN, "the replica fell back", || async {
            !r.redis.is_connected()
        })
        .await;
    }
    load.more_served(1000).await;
    assert!(replicas.iter().all(|r| r.state() == State::Closed));

    // The local windows decide while Redis is away: a failing dependency opens them.
    dep.set(503);
    all_show(&replicas, State::Open).await;

    // Redis comes back, empty. Every replica resynchronises: its fallback's window, full of
    // the outage's failures, joins the fleet's, which opens; the whole fleet follows it.
    server.restart().await;
    for r in replicas.iter() {
        eventually(WITHIN, "the replica resynchronised", || async {
            r.redis.stats().resyncs >= 1 && r.redis.is_connected()
        })
        .await;
    }
    let agree = |state: State| {
        let replicas = Arc::clone(&replicas);
        async move {
            let first = replicas[0].handle().snapshot();
            first.state == state
                && first.generation > 0
                && replicas.iter().all(|r| {
                    let s = r.handle().snapshot();
                    (s.state, s.generation) == (first.state, first.generation)
                })
        }
    };
    eventually(WITHIN, "the fleet opened on the outage's failures", || {
        agree(State::Open)
    })
    .await;
    // The dependency recovers: the fleet probes once and closes, every replica with it.
    dep.set(200);
    eventually(WITHIN, "the fleet closed as one", || agree(State::Closed)).await;
    load.more_served(200).await;
    let longest = load.stop().await;
    // No call waited on Redis: calls return in microseconds; a generous bound keeps a
    // loaded CI machine from failing a correct store.
    assert!(longest < Duration::from_secs(2), "a call took {longest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_strict() {
    survives_kill_9(|b| b.strict()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_batched() {
    survives_kill_9(|b| b.batched(Duration::from_millis(5))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_costs_at_most_the_time_bound() {
    let server = RedisServer::start().await;
    let config = breaker("payments", |b| b);
    let store = store(&server, |b| b.strict().timeout(Duration::from_millis(100)));
    let replicas = Arc::new(fleet(3, &config, &store).await);
    let dep = Dependency::new(200);
    let load = Load::start(&replicas, &dep);
    load.more_served(100).await;

    server.freeze();
    for r in replicas.iter() {
        eventually(WITHIN, "a call timed out", || async {
            r.redis.stats().timeouts >= 1
        })
        .await;
    }
    load.more_served(500).await;
    server.thaw();
    for r in replicas.iter() {
        eventually(WITHIN, "back on the fleet's state", || async {
            r.redis.stats().resyncs >= 1 && r.redis.is_connected()
        })
        .await;
    }
    // The fleet acts as one again.
    dep.set(503);
    all_show(&replicas, State::Open).await;
    let longest = load.stop().await;
    assert!(longest < Duration::from_secs(2), "a call took {longest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_closed_rejects_and_fail_open_admits_while_redis_is_away() {
    let mut server = RedisServer::start().await;
    let config = breaker("payments", |b| b);
    let closed = fleet(
        1,
        &config,
        &store(&server, |b| b.fallback(Fallback::FailClosed)),
    )
    .await;
    let open = fleet(
        1,
        &config,
        &store(&server, |b| b.fallback(Fallback::FailOpen)),
    )
    .await;
    let dep = Dependency::new(200);
    assert_eq!(closed[0].call(&dep).await.expect("admitted"), 200);
    assert_eq!(open[0].call(&dep).await.expect("admitted"), 200);

    server.kill();
    eventually(WITHIN, "fail-closed rejects", || async {
        let _ = closed[0].call(&dep).await;
        closed[0].state() == State::ForcedOpen
    })
    .await;
    assert!(closed[0].call(&dep).await.is_err());
    eventually(WITHIN, "fail-open admits and records nothing", || async {
        let _ = open[0].call(&dep).await;
        open[0].state() == State::Disabled
    })
    .await;
    dep.set(503);
    for _ in 0..50 {
        assert_eq!(open[0].call(&dep).await.expect("admitted"), 503);
    }
    assert_eq!(open[0].state(), State::Disabled);

    dep.set(200);
    server.restart().await;
    for r in closed.iter().chain(&open) {
        eventually(WITHIN, "serving on the fleet's state again", || async {
            r.state() == State::Closed
        })
        .await;
    }
    assert_eq!(closed[0].call(&dep).await.expect("admitted"), 200);
}
