//! A replica that falls back for a moment while the fleet is half-open: the probe leases it
//! holds in Redis are not forgotten (they would hold the fleet's probe budget until they
//! expire, and the breaker could not close), and its return to the fleet's state reports
//! no transition the listeners never saw the start of.
//!
//! The leases and the half-open wait last a minute here, far past the bound the tests wait
//! within: a lease forgotten shows as a breaker that does not close.

mod redis_common;

use fusebox_breaker::State;
use redis_common::*;
use std::sync::Arc;
use std::time::Duration;

const LEASES: &str = "fusebox:{dep:payments}:leases";

fn config() -> fusebox_breaker::CircuitBreakerConfig {
    breaker("payments", |b| {
        b.open_wait(Duration::from_millis(300))
            .permitted_probes(2)
            .probe_successes(2)
            .max_half_open_wait(Some(Duration::from_secs(60)))
    })
}

async fn leases_held(server: &RedisServer) -> usize {
    let mut conn = inspect(server).await;
    redis::cmd("ZCARD")
        .arg(LEASES)
        .query_async(&mut conn)
        .await
        .expect("ZCARD")
}

/// Trips the replica's breaker and waits until its open wait is over.
async fn trip(r: &Replica, dep: &Dependency) {
    dep.set(503);
    for _ in 0..10 {
        let _ = r.call(dep).await;
    }
    eventually(WITHIN, "the breaker opened", || async {
        r.state() == State::Open
    })
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_in_flight_when_redis_stalls_still_report_and_the_breaker_closes() {
    let server = RedisServer::start().await;
    let store = store(&server, |b| b.strict().probe_lease(Duration::from_secs(60)));
    let mut replicas = fleet(1, &config(), &store).await;
    let dep = Dependency::new(503);
    trip(&replicas[0], &dep).await;
    let r = Arc::new(replicas.remove(0));

    // Two probes reach the dependency, which holds them.
    dep.set(200);
    dep.shut_gate();
    let before = dep.calls();
    let mut probes = Vec::new();
    eventually(WITHIN, "two probes in flight", || {
        let (r, held) = (Arc::clone(&r), dep.clone());
        probes.push(tokio::spawn(async move {
            r.call(&held).await.map_err(|e| e.to_string())
        }));
        let dep = dep.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            dep.calls() >= before + 2
        }
    })
    .await;
    assert_eq!(leases_held(&server).await, 2, "both leases are out");

    // Redis stalls past the time bound: the replica falls back, then returns.
    server.freeze();
    eventually(WITHIN, "the replica fell back", || async {
        !r.redis.is_connected()
    })
    .await;
    server.thaw();
    eventually(WITHIN, "back on the fleet's state", || async {
        r.redis.stats().resyncs >= 1 && r.redis.is_connected()
    })
    .await;

    // The probes end well: they report on their leases, and the fleet closes.
    dep.open_gate();
    for p in probes {
        let _ = p.await.expect("no panic");
    }
    eventually(WITHIN, "the probes closed the breaker", || async {
        r.state() == State::Closed
    })
    .await;
    let mut r = Arc::try_unwrap(r).unwrap_or_else(|_| panic!("the probes are done"));
    assert_eq!(
        r.transitions(),
        [
            (State::Closed, State::Open),
            (State::Open, State::HalfOpen),
            (State::HalfOpen, State::Closed),
        ],
        "the stall is no transition of its own"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_redis_granted_without_answering_is_given_back() {
    let server = RedisServer::start().await;
    // No polls: the claim is the only call the stall catches.
    let store = store(&server, |b| {
        b.strict()
            .probe_lease(Duration::from_secs(60))
            .poll_interval(Duration::from_secs(60))
    });
    let replicas = fleet(1, &config(), &store).await;
    let r = &replicas[0];
    let dep = Dependency::new(503);
    trip(r, &dep).await;

    // A call past the open wait is rejected and makes the worker claim a lease — which
    // Redis, frozen, grants only after the claim's time bound.
    server.freeze();
    assert!(r.call(&dep).await.is_err(), "no lease yet");
    eventually(WITHIN, "the claim timed out", || async {
        r.redis.stats().timeouts >= 1
    })
    .await;
    server.thaw();
    eventually(WITHIN, "back on the fleet's state", || async {
        r.redis.stats().resyncs >= 1 && r.redis.is_connected()
    })
    .await;

    // The lease the replica never heard it got does not hold a probe slot: both probes
    // run, and they close the breaker.
    dep.set(200);
    eventually(WITHIN, "the probes closed the breaker", || async {
        let _ = r.call(&dep).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        r.state() == State::Closed
    })
    .await;
}
