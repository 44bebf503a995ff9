//! A fleet's recovery on a real `redis-server`: the probe budget is claimable the moment an
//! open wait ends (exactly `permitted_probes` admissions fleet-wide for a burst from every
//! replica, however long the poll interval), an epoch never repeats (across idle expiry of
//! a CLOSED scope, FLUSHALL and a Redis restart, so calls held across them are never
//! counted), and a seeded breaker's jitter is the same on Redis as in memory.

mod redis_common;

use fusebox_breaker::sim::{Recorded, Simulator};
use fusebox_breaker::{CircuitBreakerConfig, EventKind, OnClose, State};
use fusebox_redis::{RedisStoreConfig, RedisStoreConfigBuilder};
use redis::AsyncCommands;
use redis_common::*;
use std::sync::Arc;
use std::time::Duration;

const STATE: &str = "fusebox:{dep:payments}:state";
const WINDOW: &str = "fusebox:{dep:payments}:window";
const LEASES: &str = "fusebox:{dep:payments}:leases";

fn strict(b: RedisStoreConfigBuilder) -> RedisStoreConfigBuilder {
    b.strict()
}

fn batched(b: RedisStoreConfigBuilder) -> RedisStoreConfigBuilder {
    b.batched(Duration::from_millis(5))
}

type Mode = fn(RedisStoreConfigBuilder) -> RedisStoreConfigBuilder;

/// Starts `per_replica` calls on every replica at one instant, each to `dep` (whose gate
/// the caller shut, so an admitted call stays in flight); returns once every call was
/// either rejected or admitted, with the number admitted and the calls still in flight.
async fn burst(
    replicas: &Arc<Vec<Replica>>,
    dep: &Dependency,
    per_replica: usize,
) -> (usize, Vec<tokio::task::JoinHandle<()>>) {
    let before = dep.calls();
    let mut tasks = Vec::new();
    let mut rejected = Vec::new();
    for i in 0..replicas.len() {
        for _ in 0..per_replica {
            let (replicas, dep) = (Arc::clone(replicas), dep.clone());
            let (tx, rx) = tokio::sync::oneshot::channel();
            tasks.push(tokio::spawn(async move {
                if replicas[i].call(&dep).await.is_err() {
                    let _ = tx.send(());
                }
            }));
            rejected.push(rx);
        }
    }
    let total = replicas.len() * per_replica;
    let mut refused = 0;
    eventually(
        WITHIN,
        "every call of the burst rejected or admitted",
        || {
            let seen = dep.calls() - before;
            for rx in rejected.iter_mut() {
                if rx.try_recv().is_ok() {
                    refused += 1;
                }
            }
            let done = seen + refused == total;
            async move { done }
        },
    )
    .await;
    (dep.calls() - before, tasks)
}

/// Trips the fleet, keeps every replica busy with rejected calls through the open wait,
/// then 300 ms after the wait ends sends a burst from every replica at one instant: exactly
/// the probe budget is admitted, fleet-wide.
async fn a_burst_after_the_open_wait_gets_exactly_the_budget(
    mode: Mode,
    poll_interval: Duration,
    replicas_n: usize,
    probes: u32,
) {
    let server = RedisServer::start().await;
    let config = breaker("payments", |b| {
        b.open_wait(Duration::from_millis(600))
            .permitted_probes(probes)
            .probe_successes(1)
    });
    let store = store(&server, |b| mode(b).poll_interval(poll_interval));
    let replicas = Arc::new(fleet(replicas_n, &config, &store).await);
    let dep = Dependency::new(503);
    for r in replicas.iter() {
        for _ in 0..(10 / replicas_n).max(1) + 1 {
            let _ = r.call(&dep).await;
        }
    }
    all_show(&replicas, State::Open).await;
    // Calls during the wait are rejected: each replica now wants probes.
    for r in replicas.iter() {
        for _ in 0..5 {
            assert!(r.call(&dep).await.is_err(), "rejected while open");
        }
    }
    let until = replicas[0]
        .handle()
        .snapshot()
        .until_half_open
        .expect("open, with a wait");
    tokio::time::sleep(until + Duration::from_millis(300)).await;

    // The dependency recovers but holds every call: a probe stays in flight.
    dep.set(200);
    dep.shut_gate();
    let (admitted, held) = burst(&replicas, &dep, 20).await;
    assert_eq!(
        admitted, probes as usize,
        "the burst got exactly the probe budget, fleet-wide"
    );
    // More calls change nothing while the probes are out.
    let (more, more_held) = burst(&replicas, &dep, 5).await;
    assert_eq!(more, 0, "no probe beyond the budget");
    dep.open_gate();
    for t in held.into_iter().chain(more_held) {
        t.await.expect("no panic");
    }
    all_show(&replicas, State::Closed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_right_after_the_open_wait_gets_exactly_the_budget_strict() {
    a_burst_after_the_open_wait_gets_exactly_the_budget(strict, Duration::from_millis(100), 5, 2)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_right_after_the_open_wait_gets_exactly_the_budget_batched() {
    a_burst_after_the_open_wait_gets_exactly_the_budget(batched, Duration::from_millis(100), 5, 2)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_long_poll_interval_the_burst_still_gets_exactly_the_budget_strict() {
    a_burst_after_the_open_wait_gets_exactly_the_budget(strict, Duration::from_secs(30), 5, 2)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_long_poll_interval_the_burst_still_gets_exactly_the_budget_batched() {
    a_burst_after_the_open_wait_gets_exactly_the_budget(batched, Duration::from_secs(30), 5, 2)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_with_demand_claims_the_whole_budget_at_once() {
    a_burst_after_the_open_wait_gets_exactly_the_budget(strict, Duration::from_secs(30), 1, 3)
        .await;
}

/// With no call during the open wait, no replica holds a lease when it ends; the first
/// calls after it make the replicas claim at once, not at the next poll 30 s away, and the
/// fleet's calls get exactly the budget.
async fn the_first_calls_after_the_wait_cause_a_claim(mode: Mode) {
    let server = RedisServer::start().await;
    let config = breaker("payments", |b| {
        b.open_wait(Duration::from_millis(300))
            .permitted_probes(2)
            .probe_successes(1)
    });
    let store = store(&server, |b| mode(b).poll_interval(Duration::from_secs(30)));
    let replicas = Arc::new(fleet(3, &config, &store).await);
    let dep = Dependency::new(503);
    for r in replicas.iter() {
        for _ in 0..4 {
            let _ = r.call(&dep).await;
        }
    }
    all_show(&replicas, State::Open).await;
    let until = replicas[0]
        .handle()
        .snapshot()
        .until_half_open
        .expect("open, with a wait");
    tokio::time::sleep(until + Duration::from_millis(100)).await;
    dep.set(200);
    dep.shut_gate();
    let leases: usize = inspect(&server).await.zcard(LEASES).await.expect("ZCARD");
    assert_eq!(leases, 0, "no lease was claimed before these calls came");
    // The first calls find no lease and cause the claims; calls of the same burst that
    // arrive after a claim has landed (one round trip later) may already be admitted.
    let (first, mut held) = burst(&replicas, &dep, 5).await;
    let deadline = tokio::time::Instant::now() + WITHIN;
    let mut admitted = first;
    while admitted == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no probe admitted after the wait"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
        let (n, tasks) = burst(&replicas, &dep, 5).await;
        admitted += n;
        held.extend(tasks);
    }
    let (more, tasks) = burst(&replicas, &dep, 5).await;
    held.extend(tasks);
    assert_eq!(admitted + more, 2, "exactly the probe budget, fleet-wide");
    dep.open_gate();
    for t in held {
        t.await.expect("no panic");
    }
    all_show(&replicas, State::Closed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_calls_after_the_wait_cause_a_claim_at_once_strict() {
    the_first_calls_after_the_wait_cause_a_claim(strict).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_calls_after_the_wait_cause_a_claim_at_once_batched() {
    the_first_calls_after_the_wait_cause_a_claim(batched).await;
}

/// What happens to the scope between two incidents.
#[derive(Debug, Clone, Copy)]
enum Between {
    /// Nobody writes to the CLOSED scope until its state and window expire.
    IdleExpiry,
    /// `FLUSHALL`.
    Flush,
    /// Redis restarts with an empty data set.
    Restart,
}

/// Sends calls through every replica until each shows `state`.
async fn drive_until(replicas: &[Replica], dep: &Dependency, state: State) {
    for (i, r) in replicas.iter().enumerate() {
        eventually(WITHIN, &format!("replica {i} shows {state}"), || async {
            let _ = r.call(dep).await;
            r.state() == state
        })
        .await;
    }
}

/// Trips and recovers the fleet, holds ten calls admitted while CLOSED, lets `between`
/// happen, trips and recovers again, then lets the held calls fail: none is counted (the
/// fleet stays CLOSED with a clean window), because no epoch came back.
async fn held_calls_of_an_old_epoch_are_never_counted(mode: Mode, between: Between) {
    let mut server = RedisServer::start().await;
    let config = breaker("payments", |b| {
        b.open_wait(Duration::from_millis(200))
            .permitted_probes(1)
            .on_close(OnClose::Clear)
    });
    let store = store(&server, |b| mode(b).idle_ttl(Duration::from_secs(1)));
    let replicas = Arc::new(fleet(2, &config, &store).await);
    let live = Dependency::new(503);
    drive_until(&replicas, &live, State::Open).await;
    live.set(200);
    drive_until(&replicas, &live, State::Closed).await;
    let recovered = replicas[0].handle().snapshot().generation;

    // Ten calls admitted now, held by their dependency; they will fail.
    let held_dep = Dependency::new(503);
    held_dep.shut_gate();
    let held: Vec<_> = (0..10)
        .map(|_| {
            let (replicas, dep) = (Arc::clone(&replicas), held_dep.clone());
            tokio::spawn(async move { replicas[0].call(&dep).await.map_err(|e| e.to_string()) })
        })
        .collect();
    eventually(WITHIN, "ten calls in flight", || async {
        held_dep.calls() == 10
    })
    .await;

    let mut conn = inspect(&server).await;
    match between {
        Between::IdleExpiry => {
            eventually(WITHIN, "the idle CLOSED scope expires", || async {
                let state: bool = inspect(&server).await.exists(STATE).await.expect("EXISTS");
                !state
            })
            .await;
        }
        Between::Flush => {
            let () = redis::cmd("FLUSHALL")
                .query_async(&mut conn)
                .await
                .expect("FLUSHALL");
        }
        Between::Restart => {
            server.restart().await;
            for r in replicas.iter() {
                eventually(WITHIN, "the replica hears from Redis again", || async {
                    r.redis.is_connected() && r.redis.stats().resyncs > 0
                })
                .await;
            }
        }
    }

    // The next incident, and its recovery.
    live.set(503);
    drive_until(&replicas, &live, State::Open).await;
    live.set(200);
    drive_until(&replicas, &live, State::Closed).await;
    let now = replicas[0].handle().snapshot().generation;
    assert!(
        now > recovered,
        "epochs move forward: {recovered} then {now}"
    );

    // The held calls fail now, recorded under the epoch they were admitted in.
    let calls = replicas[0].redis.stats().calls;
    held_dep.open_gate();
    for call in held {
        assert_eq!(call.await.expect("no panic").expect("admitted"), 503);
    }
    // Their records (strict) or batch (batched) reached Redis, and a few polls after.
    let r = &replicas[0];
    eventually(
        WITHIN,
        "the held results and a few polls reached Redis",
        || async { r.redis.stats().calls >= calls + 5 },
    )
    .await;
    let mut conn = inspect(&server).await;
    let failures: Option<i64> = conn.hget(WINDOW, "f").await.expect("HGET");
    assert_eq!(
        failures.unwrap_or(0),
        0,
        "no held failure reached the fleet's window"
    );
    for r in replicas.iter() {
        assert_eq!(
            r.state(),
            State::Closed,
            "ten held failures did not re-open it"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_expiry_does_not_bring_an_epoch_back_strict() {
    held_calls_of_an_old_epoch_are_never_counted(strict, Between::IdleExpiry).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_expiry_does_not_bring_an_epoch_back_batched() {
    held_calls_of_an_old_epoch_are_never_counted(batched, Between::IdleExpiry).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_does_not_bring_an_epoch_back_strict() {
    held_calls_of_an_old_epoch_are_never_counted(strict, Between::Flush).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_does_not_bring_an_epoch_back_batched() {
    held_calls_of_an_old_epoch_are_never_counted(batched, Between::Flush).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_does_not_bring_an_epoch_back_strict() {
    held_calls_of_an_old_epoch_are_never_counted(strict, Between::Restart).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_does_not_bring_an_epoch_back_batched() {
    held_calls_of_an_old_epoch_are_never_counted(batched, Between::Restart).await;
}

/// The jitter of the first two openings of a breaker seeded with 42, as the in-memory
/// state machine draws them (on virtual time: the breaker's own simulator).
fn jitter_in_memory(config: &CircuitBreakerConfig) -> Vec<Duration> {
    let mut sim = Simulator::new(config.clone());
    let mut now = fusebox_classify::Nanos::ZERO;
    let mut jitter = Vec::new();
    while jitter.len() < 2 {
        let (permit, _) = sim.acquire(now);
        if let Ok(permit) = permit
            && let Recorded::Transition(t) = sim.record(permit, true, false, now)
            && let Some(j) = t.jitter
        {
            jitter.push(j);
            now = now.plus(t.open_for.expect("an opening has a wait"));
        }
    }
    jitter
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_breaker_draws_the_same_jitter_on_redis_as_in_memory() {
    let server = RedisServer::start().await;
    let config = breaker("payments", |b| {
        b.open_wait(Duration::from_millis(50))
            .open_wait_jitter(Duration::from_millis(400))
            .permitted_probes(1)
            .seed(42)
    });
    let expected = jitter_in_memory(&config);
    assert_ne!(expected[0], expected[1], "two draws: {expected:?}");

    // Two runs on Redis, each on a fresh scope: both give the in-memory jitter (to the
    // microsecond the script keeps).
    for run in ["payments", "payments-again"] {
        let config = breaker(run, |b| {
            b.open_wait(Duration::from_millis(50))
                .open_wait_jitter(Duration::from_millis(400))
                .permitted_probes(1)
                .seed(42)
        });
        let store: RedisStoreConfig = store(&server, strict);
        let mut replicas = fleet(1, &config, &store).await;
        let r = &mut replicas[0];
        let dep = Dependency::new(503);
        // The first opening, then a failed probe past its wait: the second.
        let mut jitter = Vec::new();
        let deadline = tokio::time::Instant::now() + WITHIN;
        while jitter.len() < 2 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "two openings: {jitter:?}"
            );
            let _ = r.call(&dep).await;
            while let Ok(event) = r.events.try_recv() {
                if let EventKind::Transition(t) = event.kind
                    && t.to == State::Open
                {
                    jitter.push(t.jitter.expect("an opening has its jitter").as_micros());
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let want: Vec<u128> = expected.iter().map(Duration::as_micros).collect();
        assert_eq!(jitter, want, "run {run}");
    }
}
