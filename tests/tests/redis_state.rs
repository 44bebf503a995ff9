//! The fleet state as Redis holds it: epochs that discard stale results and never repeat
//! (across idle expiry, FLUSHALL and a Redis restart), states other than CLOSED that never
//! expire, a missing record that reads as CLOSED, and a replica that starts mid-incident and
//! rejects from its first call.

mod redis_common;

use fusebox_breaker::{CircuitBreakerLayer, State};
use fusebox_classify::error::CircuitOpen;
use fusebox_redis::{OnRedis, Scope};
use redis::AsyncCommands;
use redis_common::*;
use std::sync::Arc;
use std::time::Duration;

const STATE: &str = "fusebox:{dep:payments}:state";
const WINDOW: &str = "fusebox:{dep:payments}:window";
const RING: &str = "fusebox:{dep:payments}:ring";
const EPOCH: &str = "fusebox:{dep:payments}:epoch";

async fn window_calls(conn: &mut redis::aio::MultiplexedConnection) -> i64 {
    let n: Option<i64> = conn.hget(WINDOW, "n").await.expect("HGET");
    n.unwrap_or(0)
}

async fn stale_results_are_discarded(strict: bool) {
    let server = RedisServer::start().await;
    let config = breaker("payments", |b| b);
    let store = store(&server, |b| {
        if strict {
            b.strict()
        } else {
            b.batched(Duration::from_millis(5))
        }
        .poll_interval(Duration::from_secs(30))
    });
    let replicas = Arc::new(fleet(1, &config, &store).await);
    let r = &replicas[0];
    let dep = Dependency::new(503);
    assert_eq!(r.call(&dep).await.expect("admitted"), 503);
    let mut conn = inspect(&server).await;
    eventually(
        WITHIN,
        "the first failure is in the fleet window",
        || async { window_calls(&mut inspect(&server).await).await == 1 },
    )
    .await;
    let first: u64 = conn.get(EPOCH).await.expect("GET");
    assert_eq!(r.handle().snapshot().generation, first);

    // Five calls are admitted in the first epoch and held by the dependency ...
    dep.shut_gate();
    let before = dep.calls();
    let held: Vec<_> = (0..5)
        .map(|_| {
            let (replicas, dep) = (Arc::clone(&replicas), dep.clone());
            tokio::spawn(async move { replicas[0].call(&dep).await.map_err(|e| e.to_string()) })
        })
        .collect();
    eventually(WITHIN, "five calls in flight", || async {
        dep.calls() == before + 5
    })
    .await;
    // ... while the fleet moves 41 epochs on behind this replica's back (as another
    // replica's transitions would, with the message lost). Their results carry the first.
    let () = conn.set(EPOCH, first + 41).await.expect("SET");
    dep.open_gate();
    for call in held {
        assert_eq!(call.await.expect("no panic").expect("admitted"), 503);
    }
    // The script discarded them; its answer taught the replica the new epoch.
    eventually(WITHIN, "the replica learns the epoch", || async {
        r.handle().snapshot().generation == first + 41
    })
    .await;
    assert_eq!(
        window_calls(&mut conn).await,
        1,
        "results of the first epoch were discarded"
    );
    assert_eq!(r.state(), State::Closed);

    // Results of the current epoch count again.
    assert_eq!(r.call(&dep).await.expect("admitted"), 503);
    eventually(WITHIN, "a current result counts", || async {
        window_calls(&mut inspect(&server).await).await == 2
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_from_an_older_epoch_are_discarded_strict() {
    stale_results_are_discarded(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_from_an_older_epoch_are_discarded_batched() {
    stale_results_are_discarded(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_epoch_moves_on_every_transition_but_open_to_half_open_and_waits_grow() {
    let server = RedisServer::start().await;
    let config = breaker("payments", |b| {
        b.open_wait(Duration::from_millis(100))
            .open_wait_growth(4.0, Duration::from_secs(10))
            .permitted_probes(1)
    });
    let mut replicas = fleet(1, &config, &store(&server, |b| b.strict())).await;
    let mut conn = inspect(&server).await;
    let first = replicas[0].handle().snapshot().generation;
    let dep = Dependency::new(503);
    for _ in 0..10 {
        let _ = replicas[0].call(&dep).await;
    }
    let r = &replicas[0];
    eventually(WITHIN, "open", || async { r.state() == State::Open }).await;
    let open_for: i64 = conn.hget(STATE, "of").await.expect("HGET");
    assert_eq!(open_for, 100_000, "the first trip waits open_wait (us)");
    // Past the open wait, calls are refused until a lease is claimed; then one probes,
    // and fails.
    let before = dep.calls();
    eventually(WITHIN, "a probe ran", || async {
        let _ = r.call(&dep).await;
        dep.calls() > before
    })
    .await;
    eventually(WITHIN, "open again", || async { r.state() == State::Open }).await;
    let open_for: i64 = conn.hget(STATE, "of").await.expect("HGET");
    assert_eq!(
        open_for, 400_000,
        "the second trip in a row waits 4 x longer"
    );
    dep.set(200);
    eventually(WITHIN, "closed", || async {
        let _ = r.call(&dep).await;
        r.state() == State::Closed
    })
    .await;
    let seen = replicas[0].transitions_with_epochs();
    let moves: Vec<(State, State)> = seen.iter().map(|t| (t.0, t.1)).collect();
    assert_eq!(
        moves,
        [
            (State::Closed, State::Open),
            (State::Open, State::HalfOpen),
            (State::HalfOpen, State::Open),
            (State::Open, State::HalfOpen),
            (State::HalfOpen, State::Closed),
        ]
    );
    let e: Vec<u64> = seen.iter().map(|t| t.2).collect();
    assert!(first < e[0], "the trip moves the epoch: {first} then {e:?}");
    assert_eq!(e[0], e[1], "OPEN -> HALF_OPEN keeps it: {e:?}");
    assert!(e[1] < e[2], "a failed probe moves it: {e:?}");
    assert_eq!(e[2], e[3], "OPEN -> HALF_OPEN keeps it: {e:?}");
    assert!(e[3] < e[4], "closing moves it: {e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_state_never_expires_and_a_closed_one_may() {
    let server = RedisServer::start().await;
    let config = breaker("payments", |b| b);
    let store = store(&server, |b| b.strict().idle_ttl(Duration::from_secs(60)));
    let replicas = fleet(2, &config, &store).await;
    let dep = Dependency::new(503);
    let mut conn = inspect(&server).await;

    assert_eq!(replicas[0].call(&dep).await.expect("admitted"), 503);
    eventually(WITHIN, "written", || async {
        window_calls(&mut inspect(&server).await).await == 1
    })
    .await;
    for key in [STATE, WINDOW, RING] {
        let t = ttl(&mut conn, key).await;
        assert!(
            (1..=60).contains(&t),
            "a CLOSED scope expires when idle: TTL {key} = {t}"
        );
    }

    for _ in 0..9 {
        let _ = replicas[1].call(&dep).await;
    }
    all_show(&replicas, State::Open).await;
    for key in [STATE, WINDOW, RING] {
        assert_eq!(ttl(&mut conn, key).await, -1, "OPEN never expires: {key}");
    }
    replicas[0].handle().force_open();
    all_show(&replicas, State::ForcedOpen).await;
    assert_eq!(ttl(&mut conn, STATE).await, -1);

    replicas[1].handle().reset();
    all_show(&replicas, State::Closed).await;
    let t = ttl(&mut conn, STATE).await;
    assert!((1..=60).contains(&t), "CLOSED again: TTL {t}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_record_reads_as_closed() {
    let server = RedisServer::start().await;
    let config = breaker("payments", |b| b);
    let store = store(&server, |b| b.strict());
    let replicas = fleet(1, &config, &store).await;
    let r = &replicas[0];
    let mut conn = inspect(&server).await;
    assert_eq!(
        all_keys(&mut conn).await,
        [EPOCH],
        "reading wrote nothing but the scope's epoch"
    );
    let first: u64 = conn.get(EPOCH).await.expect("GET");
    let s = r.handle().snapshot();
    assert_eq!(
        (s.state, s.generation, s.window.calls),
        (State::Closed, first, 0)
    );

    let dep = Dependency::new(503);
    for _ in 0..10 {
        let _ = r.call(&dep).await;
    }
    eventually(WITHIN, "open", || async { r.state() == State::Open }).await;
    let opened = r.handle().snapshot().generation;
    // The record disappears (a flushed or replaced Redis): the next poll reads CLOSED.
    let () = redis::cmd("FLUSHALL")
        .query_async(&mut conn)
        .await
        .expect("FLUSHALL");
    eventually(WITHIN, "closed after the record vanished", || async {
        r.state() == State::Closed
    })
    .await;
    let epoch = r.handle().snapshot().generation;
    assert!(
        epoch > opened && opened > first,
        "a new epoch, never an old one: {first}, {opened} then {epoch}"
    );
    assert_eq!(r.call(&dep).await.expect("admitted"), 503, "admitted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_started_mid_incident_rejects_from_its_first_call() {
    let server = RedisServer::start().await;
    let config = breaker("payments", |b| b.open_wait(Duration::from_secs(60)));
    let store = store(&server, |b| b.scope(Scope::dep("payments")));
    let replicas = fleet(3, &config, &store).await;
    let dep = Dependency::new(503);
    for r in &replicas {
        for _ in 0..4 {
            let _ = r.call(&dep).await;
        }
    }
    all_show(&replicas, State::Open).await;

    // A deploy mid-incident: the new replica reads the fleet's state before it serves.
    let redis = OnRedis::new(store.clone());
    assert_eq!(redis.prefetch(&config, None).await, Some(State::Open));
    let layer = CircuitBreakerLayer::builder(config.clone())
        .store(redis.clone())
        .build()
        .expect("the Redis store accepts the breaker");
    let newcomer = Replica {
        events: layer.handle().subscribe(),
        layer,
        redis,
    };
    let before = dep.calls();
    let err = newcomer.call(&dep).await.expect_err("rejected");
    let open = err
        .downcast_ref::<CircuitOpen>()
        .expect("rejected by the breaker");
    assert!(
        open.retry_after() > Duration::from_secs(50),
        "{:?}",
        open.retry_after()
    );
    assert_eq!(
        dep.calls(),
        before,
        "the first call never reached the dependency"
    );
    assert_eq!(newcomer.state(), State::Open);
}
