//! A fleet of replicas sharing one breaker on a real `redis-server`: they open together,
//! probe together (exactly the probe budget, fleet-wide), recover when a probe's holder
//! vanishes, obey one operator, and keep scopes apart — in both modes.

mod redis_common;

use bytes::Bytes;
use fusebox_breaker::{CircuitBreakerLayer, State};
use fusebox_classify::error::CircuitOpen;
use fusebox_redis::{RedisStoreConfigBuilder, Scope};
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use redis_common::*;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tower::{Layer, ServiceExt};

fn strict(b: RedisStoreConfigBuilder) -> RedisStoreConfigBuilder {
    b.strict()
}

fn batched(b: RedisStoreConfigBuilder) -> RedisStoreConfigBuilder {
    b.batched(Duration::from_millis(5))
}

/// Sends `failures` failing calls through each replica, one replica after the other.
async fn fail_each(replicas: &[Replica], dep: &Dependency, failures: usize) {
    for r in replicas {
        for _ in 0..failures {
            let status = r.call(dep).await.expect("admitted while closed");
            assert_eq!(status, 503);
        }
    }
}

async fn fleet_opens_together(mode: fn(RedisStoreConfigBuilder) -> RedisStoreConfigBuilder) {
    let server = RedisServer::start().await;
    let config = breaker("payments", |b| b);
    let store = store(&server, mode);
    let mut replicas = fleet(5, &config, &store).await;
    let dep = Dependency::new(503);

    // Each replica sees 3 failures, fewer than minimum_calls (10); together they see 15.
    fail_each(&replicas, &dep, 3).await;
    all_show(&replicas, State::Open).await;
    let r = replicas[4].call(&dep).await.expect_err("rejected");
    assert_eq!(
        r.downcast_ref::<CircuitOpen>()
            .expect("the breaker's error")
            .breaker(),
        "payments"
    );
    assert_eq!(dep.calls(), 15, "nothing reached the dependency once open");

    // Each replica reported the opening once, however many replies, messages and polls
    // told it.
    for (i, r) in replicas.iter_mut().enumerate() {
        eventually(WITHIN, "the opening is reported", || {
            let seen = !r.events.is_empty();
            async move { seen }
        })
        .await;
        let calls = r.redis.stats().calls;
        eventually(WITHIN, "a few more polls", || async {
            r.redis.stats().calls >= calls + 3
        })
        .await;
        assert_eq!(
            r.transitions(),
            [(State::Closed, State::Open)],
            "replica {i}"
        );
    }

    // The same traffic through separate in-memory breakers opens none of them.
    for _ in 0..5 {
        let layer = CircuitBreakerLayer::new(config.clone());
        let svc = layer.layer(tower::service_fn(|_: Request<()>| async {
            let mut r = Response::new(Empty::<Bytes>::new());
            *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            Ok::<_, Infallible>(r)
        }));
        for _ in 0..3 {
            svc.clone()
                .oneshot(Request::new(()))
                .await
                .expect("admitted");
        }
        assert_eq!(layer.handle().state(), State::Closed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_opens_together_where_separate_breakers_would_not_strict() {
    fleet_opens_together(strict).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_opens_together_where_separate_breakers_would_not_batched() {
    fleet_opens_together(batched).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_time_window_is_shared_too() {
    let server = RedisServer::start().await;
    let config = breaker("ledger", |b| b.time_window(Duration::from_secs(10), 10));
    let replicas = fleet(5, &config, &store(&server, batched)).await;
    let dep = Dependency::new(503);
    fail_each(&replicas, &dep, 3).await;
    all_show(&replicas, State::Open).await;
    let snap = replicas[0].handle().snapshot();
    assert_eq!(snap.window.failures, snap.window.calls);
    assert!(snap.window.calls >= 10, "{snap:?}");
}

/// Calls through every replica from `tasks` tasks each, until `stop`; counts rejections.
fn hammer(
    replicas: &Arc<Vec<Replica>>,
    dep: &Dependency,
    tasks: usize,
    stop: &Arc<AtomicBool>,
    rejected: &Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut handles = Vec::new();
    for i in 0..replicas.len() {
        for _ in 0..tasks {
            let (replicas, dep, stop, rejected) = (
                Arc::clone(replicas),
                dep.clone(),
                Arc::clone(stop),
                Arc::clone(rejected),
            );
            handles.push(tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    if replicas[i].call(&dep).await.is_err() {
                        rejected.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }));
        }
    }
    handles
}

async fn exactly_the_probe_budget(mode: fn(RedisStoreConfigBuilder) -> RedisStoreConfigBuilder) {
    let server = RedisServer::start().await;
    let config = breaker("fraud", |b| {
        b.open_wait(Duration::from_millis(300)).permitted_probes(2)
    });
    let replicas = Arc::new(fleet(5, &config, &store(&server, mode)).await);
    let dep = Dependency::new(503);
    fail_each(&replicas, &dep, 3).await;
    all_show(&replicas, State::Open).await;

    // The dependency recovers, but holds every call until the test lets it answer.
    dep.set(200);
    dep.shut_gate();
    let before = dep.calls();
    let stop = Arc::new(AtomicBool::new(false));
    let rejected = Arc::new(AtomicUsize::new(0));
    let tasks = hammer(&replicas, &dep, 3, &stop, &rejected);
    eventually(WITHIN, "two probes admitted fleet-wide", || async {
        dep.calls() - before == 2
    })
    .await;
    // However many replicas keep asking, no third probe starts.
    let seen = rejected.load(Ordering::SeqCst);
    eventually(WITHIN, "many more rejections", || async {
        rejected.load(Ordering::SeqCst) >= seen + 300
    })
    .await;
    assert_eq!(dep.calls() - before, 2, "exactly the probe budget ran");
    for r in replicas.iter() {
        let s = r.handle().snapshot();
        assert_eq!(s.state, State::HalfOpen);
        assert!(s.probes_admitted <= 2, "{s:?}");
    }

    // Both probes succeed: the fleet closes.
    dep.open_gate();
    all_show(&replicas, State::Closed).await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.expect("no panic");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_runs_exactly_the_probe_budget_fleet_wide_strict() {
    exactly_the_probe_budget(strict).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_runs_exactly_the_probe_budget_fleet_wide_batched() {
    exactly_the_probe_budget(batched).await;
}

/// Polls `future` once for a while: `Err` with it still pending, or its output.
async fn admitted<F: Future + Unpin>(mut future: F) -> Result<F::Output, F> {
    match tokio::time::timeout(Duration::from_millis(100), &mut future).await {
        Ok(out) => Ok(out),
        Err(_) => Err(future),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_whose_holder_vanished_expires_and_recovery_proceeds() {
    let server = RedisServer::start().await;
    let config = breaker("risk", |b| {
        b.open_wait(Duration::from_millis(200)).permitted_probes(1)
    });
    let store = store(&server, |b| {
        strict(b).probe_lease(Duration::from_millis(800))
    });
    let replicas = fleet(3, &config, &store).await;
    let dep = Dependency::new(503);
    fail_each(&replicas, &dep, 4).await;
    all_show(&replicas, State::Open).await;
    dep.set(200);
    dep.shut_gate();
    let before = dep.calls();

    // Replica 0 takes the only probe and vanishes with it: its call never ends and never
    // gives the lease back (as a process killed mid-call would).
    let holder = &replicas[0];
    let vanished = loop {
        match admitted(Box::pin(holder.call(&dep))).await {
            Ok(result) => {
                assert!(result.is_err(), "rejected until a lease is claimed");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(pending) => break pending,
        }
    };
    std::mem::forget(vanished);
    assert_eq!(dep.calls() - before, 1);
    dep.open_gate();

    // The others are rejected while the lease lives...
    let mut rejections = 0;
    while rejections < 5 {
        match replicas[1].call(&dep).await {
            Err(e) => {
                assert!(e.downcast_ref::<CircuitOpen>().is_some());
                rejections += 1;
            }
            Ok(_) => panic!("a second probe started while the first one's lease lived"),
        }
    }
    // ... and once it expires one of them probes, succeeds, and the fleet closes.
    let (a, b) = (&replicas[1], &replicas[2]);
    eventually(WITHIN, "the fleet recovers", || async {
        let _ = a.call(&dep).await;
        let _ = b.call(&dep).await;
        a.state() == State::Closed && b.state() == State::Closed
    })
    .await;
    all_show(&replicas, State::Closed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_order_reaches_the_whole_fleet() {
    let server = RedisServer::start().await;
    let config = breaker("search", |b| b);
    let replicas = fleet(3, &config, &store(&server, batched)).await;
    let dep = Dependency::new(200);
    replicas[0].handle().force_open();
    all_show(&replicas, State::ForcedOpen).await;
    assert!(replicas[2].call(&dep).await.is_err());
    replicas[1].handle().disable();
    all_show(&replicas, State::Disabled).await;
    replicas[2].handle().reset();
    all_show(&replicas, State::Closed).await;
    assert_eq!(replicas[0].call(&dep).await.expect("admitted"), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_scopes_do_not_interfere_and_every_key_carries_its_scope_as_hash_tag() {
    let server = RedisServer::start().await;
    let config = breaker("payments", |b| {
        b.open_wait(Duration::from_millis(100)).permitted_probes(1)
    });
    let eu = fleet(
        3,
        &config,
        &store(&server, |b| {
            strict(b).scope(Scope::dep("payments").region("eu"))
        }),
    )
    .await;
    let us = fleet(
        3,
        &config,
        &store(&server, |b| {
            batched(b).scope(Scope::dep("payments").region("us"))
        }),
    )
    .await;
    let tenant = fleet(
        2,
        &breaker("ledger", |b| b.time_window(Duration::from_secs(5), 5)),
        &store(&server, |b| {
            batched(b).scope(Scope::breaker_name().tenant("acme"))
        }),
    )
    .await;
    let failing = Dependency::new(503);
    let healthy = Dependency::new(200);
    fail_each(&eu, &failing, 4).await;
    for r in us.iter().chain(&tenant) {
        for _ in 0..4 {
            assert_eq!(r.call(&healthy).await.expect("admitted"), 200);
        }
    }
    all_show(&eu, State::Open).await;
    eventually(WITHIN, "the us window holds its own calls", || async {
        us[0].handle().snapshot().window.calls == 12
    })
    .await;
    for r in us.iter().chain(&tenant) {
        assert_eq!(r.state(), State::Closed);
    }
    let us_window = us[0].handle().snapshot().window;
    assert_eq!((us_window.calls, us_window.failures), (12, 0));

    // A probe round in eu writes its leases.
    eventually(WITHIN, "eu probes and closes", || async {
        let _ = eu[0].call(&healthy).await;
        eu[0].state() == State::Closed
    })
    .await;

    let mut conn = inspect(&server).await;
    let keys = all_keys(&mut conn).await;
    assert!(!keys.is_empty());
    let scopes = [
        "dep:payments:region:eu",
        "dep:payments:region:us",
        "dep:ledger:tenant:acme",
    ];
    let mut seen = std::collections::BTreeSet::new();
    for key in &keys {
        let rest = key
            .strip_prefix("fusebox:{")
            .unwrap_or_else(|| panic!("{key}: not under fusebox:{{...}}"));
        let (tag, suffix) = rest
            .split_once("}:")
            .unwrap_or_else(|| panic!("{key}: no hash tag"));
        assert!(scopes.contains(&tag), "{key}: unknown scope {tag}");
        assert!(
            ["state", "window", "ring", "leases", "epoch"].contains(&suffix),
            "{key}: unknown key"
        );
        assert_eq!(key.matches('{').count(), 1, "{key}");
        assert_eq!(key.matches('}').count(), 1, "{key}");
        seen.insert(tag);
    }
    assert_eq!(seen.len(), 3, "every scope wrote: {keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_breaker_shares_only_the_keys_its_configuration_lists() {
    let server = RedisServer::start().await;
    let config = breaker("catalog", |b| b);
    let store = store(&server, |b| strict(b).share_key("shard-1"));
    let shard = |head: &fusebox_breaker::RequestHead<'_>| -> String {
        head.headers()
            .get("x-shard")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none")
            .to_owned()
    };
    let layers: Vec<_> = (0..3)
        .map(|_| {
            CircuitBreakerLayer::builder(config.clone())
                .store(fusebox_redis::OnRedis::new(store.clone()))
                .build_keyed(shard)
                .expect("a valid keyed breaker")
        })
        .collect();
    let call = |layer: &fusebox_breaker::KeyedCircuitBreakerLayer<_, _, _>, key: &'static str| {
        let svc = layer.layer(tower::service_fn(|_: Request<()>| async {
            let mut r = Response::new(Empty::<Bytes>::new());
            *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            Ok::<_, Infallible>(r)
        }));
        let request = Request::builder()
            .header("x-shard", key)
            .body(())
            .expect("a request");
        svc.oneshot(request)
    };
    // Each replica: 4 failures on each shard (10 are needed to trip).
    for layer in &layers {
        for key in ["shard-1", "shard-2"] {
            for _ in 0..4 {
                let _ = call(layer, key).await;
            }
        }
    }
    for (i, layer) in layers.iter().enumerate() {
        let handle = layer.handle();
        eventually(
            WITHIN,
            &format!("replica {i}: the shared key opened"),
            || async {
                handle
                    .get(&"shard-1".to_owned())
                    .is_some_and(|h| h.state() == State::Open)
            },
        )
        .await;
        let local = handle.get(&"shard-2".to_owned()).expect("the key exists");
        assert_eq!(
            local.state(),
            State::Closed,
            "replica {i}: a local key saw 4 calls"
        );
    }
    let mut conn = inspect(&server).await;
    let keys = all_keys(&mut conn).await;
    assert!(!keys.is_empty());
    assert!(
        keys.iter()
            .all(|k| k.starts_with("fusebox:{dep:catalog:key:shard-1}:")),
        "only the listed key reached Redis: {keys:?}"
    );
}
