//! What the Redis tests share: replicas (a breaker layer each, with its own connection to
//! Redis, as separate processes would have), a dependency whose answers the test sets, and
//! a look into Redis.
//!
//! Redis's clock cannot be paused: these tests use short real durations and poll for what
//! they expect within generous bounds (`eventually`), never asserting how long anything took.

#![allow(dead_code, unreachable_pub)]

use bytes::Bytes;
use fusebox_breaker::{
    BreakerEvent, BreakerHandle, CircuitBreakerConfig, CircuitBreakerConfigBuilder,
    CircuitBreakerLayer, EventKind, State,
};
use fusebox_classify::{BoxError, StandardClassifier};
use fusebox_redis::{OnRedis, RedisStore, RedisStoreConfig, RedisStoreConfigBuilder};
pub use fusebox_tests::redis_server::{RedisServer, eventually};
use http::{Request, Response};
use http_body_util::Empty;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::{Semaphore, broadcast};
use tower::{Layer, ServiceExt};

/// Bounds for `eventually`: generous, so a loaded CI machine does not fail a correct store.
pub const WITHIN: Duration = Duration::from_secs(10);

/// A breaker configuration for the tests: a count window of 20, trips at 50 % after 10
/// calls, no jitter.
pub fn breaker(
    name: &str,
    f: impl FnOnce(CircuitBreakerConfigBuilder) -> CircuitBreakerConfigBuilder,
) -> CircuitBreakerConfig {
    f(CircuitBreakerConfig::builder()
        .name(name)
        .count_window(20)
        .minimum_calls(10)
        .failure_rate_threshold(50)
        .open_wait(Duration::from_secs(30))
        .open_wait_jitter(Duration::ZERO)
        .permitted_probes(2)
        .max_half_open_wait(Some(Duration::from_secs(30))))
    .build()
    .expect("a valid breaker configuration")
}

/// A store configuration for the tests: short timeouts and polls.
pub fn store(
    server: &RedisServer,
    f: impl FnOnce(RedisStoreConfigBuilder) -> RedisStoreConfigBuilder,
) -> RedisStoreConfig {
    f(RedisStoreConfig::builder(server.url())
        .timeout(Duration::from_millis(200))
        .poll_interval(Duration::from_millis(100))
        .retry_interval(Duration::from_millis(50))
        .probe_lease(Duration::from_secs(5)))
    .build()
    .expect("a valid store configuration")
}

/// A dependency: answers with the status the test sets; while the gate is shut, calls wait
/// for a permit.
#[derive(Debug, Clone)]
pub struct Dependency {
    status: Arc<AtomicU16>,
    gate: Arc<Semaphore>,
    gated: Arc<std::sync::atomic::AtomicBool>,
    /// Calls that reached the dependency.
    pub calls: Arc<AtomicUsize>,
}

impl Dependency {
    pub fn new(status: u16) -> Self {
        Dependency {
            status: Arc::new(AtomicU16::new(status)),
            gate: Arc::new(Semaphore::new(0)),
            gated: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            calls: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub fn set(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    /// Calls from now on wait until `open_gate`.
    pub fn shut_gate(&self) {
        self.gated.store(true, Ordering::SeqCst);
    }

    /// Lets every waiting call (and every later one) through.
    pub fn open_gate(&self) {
        self.gated.store(false, Ordering::SeqCst);
        self.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

/// One replica: a breaker layer whose store talks to Redis over its own connection.
pub struct Replica {
    pub layer: CircuitBreakerLayer<StandardClassifier, RedisStore>,
    pub redis: OnRedis,
    pub events: broadcast::Receiver<BreakerEvent>,
}

impl Replica {
    pub fn new(breaker: CircuitBreakerConfig, store: RedisStoreConfig) -> Replica {
        let redis = OnRedis::new(store);
        let layer = CircuitBreakerLayer::builder(breaker)
            .store(redis.clone())
            .build()
            .expect("the Redis store accepts the breaker");
        let events = layer.handle().subscribe();
        Replica {
            layer,
            redis,
            events,
        }
    }

    pub fn handle(&self) -> BreakerHandle {
        self.layer.handle()
    }

    pub fn state(&self) -> State {
        self.handle().state()
    }

    /// One call through the breaker to `dep`: the status, or the breaker's error.
    pub async fn call(&self, dep: &Dependency) -> Result<u16, BoxError> {
        let dep = dep.clone();
        let svc = self.layer.layer(tower::service_fn(move |_: Request<()>| {
            let dep = dep.clone();
            async move {
                dep.calls.fetch_add(1, Ordering::SeqCst);
                if dep.gated.load(Ordering::SeqCst) {
                    let _ = dep.gate.acquire().await.map(|p| p.forget());
                }
                let status = dep.status.load(Ordering::SeqCst);
                let mut response = Response::new(Empty::<Bytes>::new());
                *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or_default();
                Ok::<_, Infallible>(response)
            }
        }));
        svc.oneshot(Request::new(()))
            .await
            .map(|r| r.status().as_u16())
    }

    /// The transitions reported so far (and not yet taken): (from, to, epoch).
    pub fn transitions_with_epochs(&mut self) -> Vec<(State, State, u64)> {
        let mut out = Vec::new();
        while let Ok(e) = self.events.try_recv() {
            if let EventKind::Transition(t) = e.kind {
                out.push((t.from, t.to, t.generation));
            }
        }
        out
    }

    /// The transitions reported so far (and not yet taken): (from, to).
    pub fn transitions(&mut self) -> Vec<(State, State)> {
        let mut out = Vec::new();
        while let Ok(e) = self.events.try_recv() {
            if let EventKind::Transition(t) = e.kind {
                out.push((t.from, t.to));
            }
        }
        out
    }
}

/// `n` replicas of `breaker` on `store`, each with its own connection; returns once each
/// has heard from Redis.
pub async fn fleet(
    n: usize,
    breaker: &CircuitBreakerConfig,
    store: &RedisStoreConfig,
) -> Vec<Replica> {
    let replicas: Vec<Replica> = (0..n)
        .map(|_| Replica::new(breaker.clone(), store.clone()))
        .collect();
    for r in &replicas {
        eventually(WITHIN, "every replica heard from Redis", || async {
            r.redis.is_connected()
        })
        .await;
    }
    replicas
}

/// Waits until every replica shows `state`.
pub async fn all_show(replicas: &[Replica], state: State) {
    for (i, r) in replicas.iter().enumerate() {
        eventually(WITHIN, &format!("replica {i} shows {state}"), || async {
            r.state() == state
        })
        .await;
    }
}

/// A connection for looking into Redis.
pub async fn inspect(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("a valid URL")
        .get_multiplexed_async_connection()
        .await
        .expect("a connection to the test server")
}

/// Every key in Redis (walked with `SCAN`).
pub async fn all_keys(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .expect("SCAN");
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    keys.sort();
    keys.dedup();
    keys
}

/// `TTL key`.
pub async fn ttl(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("TTL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("TTL")
}
