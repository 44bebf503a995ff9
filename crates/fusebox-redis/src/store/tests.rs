//! The local view without Redis: stores made outside a runtime never connect, and replies
//! are fed to them by hand.

use super::*;
use crate::OnRedis;
use crate::config::RedisStoreConfig;
use fusebox_breaker::events::EventSink;
use fusebox_breaker::{BreakerEvent, CircuitBreakerConfig, MakeStore};
use fusebox_classify::Clock;
use tokio::sync::broadcast;

const NOW: i64 = 1_700_000_000_000_000;

fn config(
    f: impl FnOnce(crate::RedisStoreConfigBuilder) -> crate::RedisStoreConfigBuilder,
) -> RedisStoreConfig {
    f(RedisStoreConfig::builder("redis://127.0.0.1:1/0"))
        .build()
        .unwrap()
}

fn breaker() -> Arc<CircuitBreakerConfig> {
    Arc::new(
        CircuitBreakerConfig::builder()
            .name("payments")
            .count_window(10)
            .minimum_calls(5)
            .open_wait(Duration::from_secs(30))
            .open_wait_jitter(Duration::ZERO)
            .permitted_probes(2)
            .build()
            .unwrap(),
    )
}

fn make(redis: RedisStoreConfig) -> (RedisStore, broadcast::Receiver<BreakerEvent>) {
    let config = breaker();
    let events = EventSink::new(Arc::from(config.name()), Vec::new());
    let rx = events.subscribe();
    let store = OnRedis::new(redis).make_store(StoreSpec::new(config, Clock::new(), events));
    (store, rx)
}

fn shared(store: &RedisStore) -> &Arc<Shared> {
    match &store.inner {
        Inner::Shared { shared, .. } => shared,
        Inner::Local(_) => panic!("expected a shared store"),
    }
}

fn reply(state: State, epoch: u64, now_us: i64) -> Reply {
    let mut r = Reply::missing(epoch, now_us);
    r.state = state;
    r.exists = true;
    r
}

fn open(epoch: u64, now_us: i64, wait: Duration) -> Reply {
    let mut r = reply(State::Open, epoch, now_us);
    r.open_until_us = now_us + i64::try_from(wait.as_micros()).unwrap();
    r.open_for_us = i64::try_from(wait.as_micros()).unwrap();
    r.reason = Reason::FailureRate;
    r.from = State::Closed;
    r.window = WindowTotals::new(6, 4, 0);
    r
}

fn transitions(rx: &mut broadcast::Receiver<BreakerEvent>) -> Vec<(State, State, u64)> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        if let EventKind::Transition(t) = e.kind {
            out.push((t.from, t.to, t.generation));
        }
    }
    out
}

#[test]
fn before_redis_answers_the_local_fallback_decides() {
    let (store, _) = make(config(|b| b));
    assert!(!store.is_synced());
    assert_eq!(store.scope(), Some("dep:payments"));
    let permit = store.acquire().unwrap();
    assert_ne!(
        permit.generation() & LOCAL_BIT,
        0,
        "a permit of the local breaker"
    );
    for _ in 0..5 {
        let p = store.acquire().unwrap();
        store.record(p, true, false, None);
    }
    assert_eq!(
        store.snapshot().state,
        State::Open,
        "the local window tripped"
    );
    assert!(store.acquire().is_err());
}

#[test]
fn the_fleet_state_decides_once_heard_and_each_transition_is_reported_once() {
    let (store, mut rx) = make(config(|b| b));
    let s = shared(&store);
    s.apply_now(&reply(State::Closed, 3, NOW));
    assert!(store.is_synced());
    assert_eq!(
        store.acquire().unwrap(),
        Permit::new(3, PermitKind::Counted)
    );
    assert_eq!(transitions(&mut rx), [], "closed at start is no transition");

    let opened = open(4, NOW + 10, Duration::from_secs(30));
    s.apply_now(&opened);
    s.apply_now(&opened); // the same news twice (reply and pub/sub)
    assert_eq!(transitions(&mut rx), [(State::Closed, State::Open, 4)]);
    let rejected = store.acquire().unwrap_err();
    assert!(!rejected.half_open);
    assert!(
        rejected.retry_after > Duration::from_secs(29),
        "{rejected:?}"
    );
    let snap = store.snapshot();
    assert_eq!((snap.state, snap.generation), (State::Open, 4));
    assert_eq!(snap.window.failures, 4);

    // Older news is ignored.
    s.apply_now(&reply(State::Closed, 3, NOW + 5));
    assert_eq!(store.snapshot().state, State::Open);
    assert_eq!(transitions(&mut rx), []);
}

/// Each reported transition's `time_in_previous`.
fn times_in_previous(rx: &mut broadcast::Receiver<BreakerEvent>) -> Vec<Duration> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        if let EventKind::Transition(t) = e.kind {
            out.push(t.time_in_previous);
        }
    }
    out
}

#[test]
fn time_in_a_state_redis_has_no_entry_time_for_counts_from_the_first_answer() {
    let (store, mut rx) = make(config(|b| b));
    let s = shared(&store);
    // A new scope: no state record, so no entry time for its CLOSED state.
    s.apply_now(&reply(State::Closed, 3, NOW));
    let mut opened = open(4, NOW + 10_000_000, Duration::from_secs(30));
    opened.entered_us = NOW + 10_000_000;
    s.apply_now(&opened);
    assert_eq!(
        times_in_previous(&mut rx),
        [Duration::from_secs(10)],
        "closed from the first answer to the opening, not since the Unix epoch"
    );
    // A state Redis recorded the entry of counts from it.
    let mut half_open = reply(State::HalfOpen, 4, NOW + 40_000_000);
    half_open.entered_us = NOW + 40_000_000;
    half_open.prev_entered_us = NOW + 10_000_000;
    s.apply_now(&half_open);
    assert_eq!(times_in_previous(&mut rx), [Duration::from_secs(30)]);
}

#[test]
fn a_result_from_an_old_epoch_is_discarded() {
    let (store, _) = make(config(|b| b.batched(Duration::from_millis(5))));
    let s = shared(&store);
    s.apply_now(&reply(State::Closed, 3, NOW));
    let old = store.acquire().unwrap();
    s.apply_now(&reply(State::Closed, 5, NOW + 1));
    store.record(old, true, false, None);
    assert!(s.batch.is_empty(), "the outcome of epoch 3 was dropped");
    let current = store.acquire().unwrap();
    store.record(current, true, false, None);
    assert!(!s.batch.is_empty());
    // The fleet moves on before the flush: the pending outcome goes with its epoch.
    s.apply_now(&open(6, NOW + 2, Duration::from_secs(1)));
    assert!(s.batch.is_empty());
}

#[test]
fn batched_mode_skips_fast_successes_in_a_clean_window() {
    let (store, _) = make(config(|b| b));
    let s = shared(&store);
    let mut clean = reply(State::Closed, 1, NOW);
    clean.clean = true;
    s.apply_now(&clean);
    for _ in 0..100 {
        let p = store.acquire().unwrap();
        store.record(p, false, false, None);
    }
    assert!(s.batch.is_empty());
    let p = store.acquire().unwrap();
    assert!(store.record_fast_success(p), "taken for free");
    assert!(
        !store.record_fast_success(Permit::new(0, PermitKind::Counted)),
        "not of this epoch"
    );
    let p = store.acquire().unwrap();
    store.record(p, false, true, None);
    assert!(!s.batch.is_empty(), "a slow call is news");
}

#[test]
fn half_open_admits_only_on_a_lease_held() {
    let (store, _) = make(config(|b| b));
    let s = shared(&store);
    let mut half = reply(State::HalfOpen, 2, NOW);
    half.half_open_since_us = NOW;
    s.apply_now(&half);
    let r = store.acquire().unwrap_err();
    assert!(r.half_open);
    assert_eq!(s.want_lease.load(Ordering::Relaxed), 1, "a lease is wanted");
    s.view().leases.push(Lease {
        token: "t1".into(),
        epoch: 2,
        claimed: s.spec.clock.now(),
        in_use: false,
    });
    let probe = store.acquire().unwrap();
    assert_eq!(probe, Permit::new(2, PermitKind::Probe));
    assert!(store.acquire().is_err(), "one lease, one probe");
    // A stale probe (no lease of its epoch) changes nothing.
    store.record(Permit::new(1, PermitKind::Probe), false, false, None);
    assert_eq!(s.view().leases.len(), 1);
    // The fleet moves on: the lease is gone, the probe's result is stale.
    s.apply_now(&open(3, NOW + 1, Duration::from_secs(5)));
    assert!(s.view().leases.is_empty());
}

#[test]
fn when_redis_goes_away_a_known_open_state_holds_and_otherwise_the_local_window_decides() {
    let (store, mut rx) = make(config(|b| b));
    let s = shared(&store);
    s.apply_now(&open(4, NOW, Duration::from_secs(30)));
    transitions(&mut rx);
    s.unhealthy("connection refused", "sync");
    assert!(!store.is_synced());
    let r = store.acquire().unwrap_err();
    assert!(
        r.retry_after > Duration::from_secs(29),
        "the fleet's OPEN holds: {r:?}"
    );
    assert_eq!(store.snapshot().state, State::Open);
    // A late reply does not put the view back in charge.
    s.apply_now(&reply(State::Closed, 5, NOW + 1));
    assert!(store.acquire().is_err());
    assert_eq!(transitions(&mut rx), [], "no fleet transition while away");

    let (store, _) = make(config(|b| b));
    let s = shared(&store);
    s.apply_now(&reply(State::Closed, 1, NOW));
    s.unhealthy("connection refused", "sync");
    let p = store.acquire().unwrap();
    assert_ne!(
        p.generation() & LOCAL_BIT,
        0,
        "a permit of the local breaker"
    );
    store.record(p, true, false, None);
    assert_eq!(store.snapshot().window.failures, 1, "recorded locally");
    // A permit of the fleet admitted before the outage is not recorded anywhere.
    store.record(Permit::new(1, PermitKind::Counted), true, false, None);
    assert_eq!(store.snapshot().window.failures, 1);
}

#[test]
fn fail_open_and_fail_closed() {
    let (store, _) = make(config(|b| b.fallback(Fallback::FailOpen)));
    shared(&store).unhealthy("timeout", "rec");
    let p = store.acquire().unwrap();
    assert_eq!(p.kind(), PermitKind::Untracked);
    assert_eq!(store.snapshot().state, State::Disabled);

    let (store, _) = make(config(|b| b.fallback(Fallback::FailClosed)));
    shared(&store).unhealthy("timeout", "rec");
    assert!(store.acquire().is_err());
    assert_eq!(store.snapshot().state, State::ForcedOpen);
}

#[test]
fn keys_not_listed_and_invalid_names_stay_local() {
    let redis = OnRedis::new(config(|b| b.share_key("shard-1")));
    let spec = |name: &str, key: Option<&str>| {
        let spec = StoreSpec::new(
            Arc::new(CircuitBreakerConfig::builder().name(name).build().unwrap()),
            Clock::new(),
            EventSink::new(Arc::from(name), Vec::new()),
        );
        match key {
            Some(key) => spec.with_key(key),
            None => spec,
        }
    };
    assert_eq!(
        redis.make_store(spec("fraud", Some("shard-1"))).scope(),
        Some("dep:fraud:key:shard-1")
    );
    assert_eq!(
        redis.make_store(spec("fraud", Some("shard-2"))).scope(),
        None
    );
    assert_eq!(redis.make_store(spec("has space", None)).scope(), None);
}

/// Every problem of a configuration, as `path: rule`.
fn problems(e: &fusebox_classify::ConfigError) -> Vec<String> {
    e.problems().iter().map(ToString::to_string).collect()
}

#[test]
fn a_layer_whose_breaker_redis_cannot_share_fails_to_build_naming_the_field() {
    use fusebox_breaker::ByHost;
    use fusebox_breaker::CircuitBreakerLayer;
    let named = |name: &str| CircuitBreakerConfig::builder().name(name).build().unwrap();

    // No dependency in the scope, and a name that cannot stand for one: refused.
    let err = CircuitBreakerLayer::builder(named("fraud eu"))
        .store(OnRedis::new(config(|b| b)))
        .build()
        .unwrap_err();
    assert_eq!(
        problems(&err),
        [
            "store.scope.dep: must name the dependency: the breaker's name \"fraud eu\", which it defaults to, is not a valid Redis scope part (1 to 64 ASCII letters, digits, '.', '_' or '-')"
        ]
    );
    // Naming the dependency, or a name that is a scope part, builds.
    let layer = CircuitBreakerLayer::builder(named("fraud eu"))
        .store(OnRedis::new(config(|b| {
            b.scope(crate::Scope::dep("fraud"))
        })))
        .build()
        .expect("the scope names the dependency");
    assert_eq!(layer.handle().name(), "fraud eu");
    assert!(
        CircuitBreakerLayer::builder(named("fraud-eu"))
            .store(OnRedis::new(config(|b| b)))
            .build()
            .is_ok()
    );

    // Shared keys need a keyed breaker, and a keyed breaker needs shared keys.
    let err = CircuitBreakerLayer::builder(named("fraud"))
        .store(OnRedis::new(config(|b| b.share_key("shard-1"))))
        .build()
        .unwrap_err();
    assert_eq!(
        problems(&err),
        ["store.shared_keys: only a keyed breaker has keys to share, and this one is unkeyed"]
    );
    let err = CircuitBreakerLayer::builder(named("fraud eu"))
        .store(OnRedis::new(config(|b| b)))
        .max_keys(0)
        .build_keyed(ByHost)
        .unwrap_err();
    assert_eq!(
        problems(&err),
        [
            "store.scope.dep: must name the dependency: the breaker's name \"fraud eu\", which it defaults to, is not a valid Redis scope part (1 to 64 ASCII letters, digits, '.', '_' or '-')",
            "store.shared_keys: must list the keys the fleet shares: a keyed breaker keeps on Redis only the keys listed (keys computed from requests never reach Redis otherwise), and none is",
            "max_keys: must be at least 1, got 0",
        ]
    );
}
