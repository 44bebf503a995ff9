//! [`OnRedis`]: makes the stores of every breaker that shares one Redis, and owns what they
//! share — the reconnecting connection, the loaded script, and one pub/sub connection that
//! hears every scope's transitions.

use crate::config::{MAX_SCOPE_PART, RedisStoreConfig, is_valid_scope_part};
use crate::script::{self, ConfigArgs, Keys, Op, Reply, invocation};
use crate::store::{RedisStore, Shared};
use fusebox_breaker::store::{MakeStore, StoreSpec};
use fusebox_breaker::{CircuitBreakerConfig, State};
use fusebox_classify::{ConfigError, Validator};
use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Makes [`RedisStore`]s: breakers whose state a fleet shares in Redis. Pass it to
/// `CircuitBreakerLayerBuilder::store`.
///
/// Cheap to clone; clones share one connection (a redis-rs `ConnectionManager`, which
/// reconnects by itself), one pub/sub connection and the statistics. Nothing connects until
/// a store is made inside a tokio runtime (or first used in one).
#[derive(Clone)]
pub struct OnRedis {
    backend: Arc<Backend>,
}

impl fmt::Debug for OnRedis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OnRedis")
            .field("config", &self.backend.config)
            .field("stats", &self.stats())
            .finish()
    }
}

/// What an [`OnRedis`] and its stores did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisStats {
    /// Script calls sent (each one round trip, plus a reload after a Redis restart).
    pub calls: u64,
    /// Calls that failed with an error.
    pub errors: u64,
    /// Calls that got no answer in time.
    pub timeouts: u64,
    /// Times a store went back to the fleet's state after falling back.
    pub resyncs: u64,
    /// Pub/sub messages received.
    pub messages: u64,
}

impl OnRedis {
    /// Stores on the Redis of `config`.
    pub fn new(config: RedisStoreConfig) -> OnRedis {
        let (tx, rx) = oneshot::channel();
        OnRedis {
            backend: Arc::new(Backend {
                config,
                conn: tokio::sync::Mutex::new(None),
                loaded: AtomicBool::new(false),
                replica: std::hash::BuildHasher::hash_one(
                    &std::collections::hash_map::RandomState::new(),
                    0u8,
                ),
                tokens: AtomicU64::new(0),
                pubsub: Arc::new(PubSub::default()),
                pubsub_stop: Mutex::new(Some(rx)),
                _pubsub_stop: tx,
                warm: Mutex::new(HashMap::new()),
                stats: Arc::new(Stats::default()),
            }),
        }
    }

    /// Reads the fleet's state for the breaker `breaker` (and, for a keyed breaker, the
    /// shared key `key`) now, so that a store made for it afterwards decides its first
    /// calls by the fleet's state instead of starting cold: a replica deployed while the
    /// fleet's breaker is OPEN rejects from its first call. Waits at most the configured
    /// timeout; `None` when Redis did not answer (or the scope is not shared).
    pub async fn prefetch(
        &self,
        breaker: &CircuitBreakerConfig,
        key: Option<&str>,
    ) -> Option<State> {
        let config = &self.backend.config;
        if let Some(k) = key
            && !config.shared_keys.contains(k)
        {
            return None;
        }
        let scope = config.scope.render(breaker.name(), key)?;
        let keys = Keys::new(&config.prefix, &scope);
        let args = ConfigArgs::new(&keys.channel, breaker, config.idle_ttl);
        let inv = invocation(&keys, &args, &Op::Sync, Duration::ZERO);
        let reply = Reply::decode(&self.backend.invoke(&inv).await.ok()?)?;
        let state = reply.state;
        lock(&self.backend.warm).insert(scope, (reply, Instant::now()));
        Some(state)
    }

    /// The configuration.
    pub fn config(&self) -> &RedisStoreConfig {
        &self.backend.config
    }

    /// What happened so far.
    pub fn stats(&self) -> RedisStats {
        let s = &self.backend.stats;
        RedisStats {
            calls: s.calls.load(Ordering::Relaxed),
            errors: s.errors.load(Ordering::Relaxed),
            timeouts: s.timeouts.load(Ordering::Relaxed),
            resyncs: s.resyncs.load(Ordering::Relaxed),
            messages: s.messages.load(Ordering::Relaxed),
        }
    }

    /// Whether the last script call was answered.
    pub fn is_connected(&self) -> bool {
        self.backend.stats.connected.load(Ordering::Relaxed)
    }
}

impl MakeStore for OnRedis {
    type Store = RedisStore;

    /// A store for `spec`'s breaker. A keyed breaker's key shares state in Redis only if
    /// the configuration lists it; other keys, and a breaker whose name is not a valid
    /// scope part while no dependency is configured, keep their state in this process.
    fn make_store(&self, spec: StoreSpec) -> RedisStore {
        let config = &self.backend.config;
        if let Some(k) = spec.key.as_deref()
            && !config.shared_keys.contains(k)
        {
            return RedisStore::local(spec);
        }
        if script::window_args(spec.config.window()).is_none() {
            // Refused when a layer is built (`check`).
            tracing::error!(
                target: "fusebox::redis",
                breaker = %spec.config.name(),
                "the breaker's window is not one the Redis store keeps: its state stays in this process",
            );
            return RedisStore::local(spec);
        }
        match config.scope.render(spec.config.name(), spec.key.as_deref()) {
            Some(scope) => RedisStore::shared(Arc::clone(&self.backend), spec, scope),
            None => {
                // Refused when a layer is built (`check`); a store made without one keeps
                // its state here rather than under a scope that is not one.
                tracing::error!(
                    target: "fusebox::redis",
                    breaker = %spec.config.name(),
                    "the breaker's name is not a valid Redis scope part (1 to 64 letters, digits, '.', '_', '-') and no dependency is configured: its state stays in this process",
                );
                RedisStore::local(spec)
            }
        }
    }

    /// Refuses, naming the field: a breaker whose name is not a valid scope part while the
    /// scope does not name the dependency (`scope.dep`); shared keys for an unkeyed breaker,
    /// and a keyed breaker that lists none (`shared_keys`).
    fn check(&self, breaker: &CircuitBreakerConfig, keyed: bool) -> Result<(), ConfigError> {
        let config = &self.backend.config;
        let mut v = Validator::new();
        if config.scope.dep_name().is_none() && !is_valid_scope_part(breaker.name()) {
            v.fail(
                "scope.dep",
                format!(
                    "must name the dependency: the breaker's name {:?}, which it defaults to, is not a valid Redis scope part (1 to {MAX_SCOPE_PART} ASCII letters, digits, '.', '_' or '-')",
                    breaker.name()
                ),
            );
        }
        if script::window_args(breaker.window()).is_none() {
            v.fail(
                "window",
                "the breaker's window must be a count or a time window: the Redis store keeps no other",
            );
        }
        let shares_keys = !config.shared_keys.is_empty();
        if shares_keys && !keyed {
            v.fail(
                "shared_keys",
                "only a keyed breaker has keys to share, and this one is unkeyed",
            );
        } else if keyed && !shares_keys {
            v.fail(
                "shared_keys",
                "must list the keys the fleet shares: a keyed breaker keeps on Redis only the keys listed (keys computed from requests never reach Redis otherwise), and none is",
            );
        }
        v.finish(())
    }
}

#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) calls: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) resyncs: AtomicU64,
    pub(crate) messages: AtomicU64,
    pub(crate) connected: AtomicBool,
}

/// What every store of one [`OnRedis`] shares.
pub(crate) struct Backend {
    pub(crate) config: RedisStoreConfig,
    /// An async lock: held while a connection is being made (within a call's time bound).
    conn: tokio::sync::Mutex<Option<ConnectionManager>>,
    loaded: AtomicBool,
    replica: u64,
    tokens: AtomicU64,
    pubsub: Arc<PubSub>,
    pubsub_stop: Mutex<Option<oneshot::Receiver<()>>>,
    /// Dropped with the backend: the pub/sub task stops.
    _pubsub_stop: oneshot::Sender<()>,
    warm: Mutex<HashMap<String, (Reply, Instant)>>,
    pub(crate) stats: Arc<Stats>,
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backend")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Backend {
    /// The connection, made on first use and kept (the manager reconnects by itself);
    /// while none could be made, each call tries again — within its time bound, which the
    /// caller sets.
    async fn connection(&self) -> redis::RedisResult<ConnectionManager> {
        let mut conn = self.conn.lock().await;
        if let Some(c) = &*conn {
            return Ok(c.clone());
        }
        let c = &self.config;
        let retry_ms = u64::try_from(c.retry_interval.as_millis()).unwrap_or(u64::MAX);
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(c.timeout)
            // Our own bound (`timeout`) ends every call first; this one only clears answers
            // that never come out of the connection's pipeline.
            .set_response_timeout(c.timeout.saturating_mul(2))
            .set_number_of_retries(1)
            .set_factor(10)
            .set_max_delay(retry_ms);
        let manager = ConnectionManager::new_with_config(c.client.clone(), manager_config).await?;
        *conn = Some(manager.clone());
        Ok(manager)
    }

    /// Runs a script invocation — connecting first if need be — within the configured time.
    pub(crate) async fn invoke(
        &self,
        inv: &redis::ScriptInvocation<'_>,
    ) -> Result<Vec<i64>, String> {
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        let work = async {
            let mut conn = self.connection().await?;
            if !self.loaded.load(Ordering::Acquire) {
                inv.load_async(&mut conn).await?;
                self.loaded.store(true, Ordering::Release);
            }
            // EVALSHA; on NOSCRIPT (a restarted Redis) redis-rs loads the script again.
            inv.invoke_async::<Vec<i64>>(&mut conn).await
        };
        match tokio::time::timeout(self.config.timeout, work).await {
            Ok(Ok(v)) => {
                self.stats.connected.store(true, Ordering::Relaxed);
                Ok(v)
            }
            Ok(Err(e)) => {
                if e.is_timeout() {
                    self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                }
                self.stats.connected.store(false, Ordering::Relaxed);
                Err(e.to_string())
            }
            Err(_) => {
                self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                self.stats.connected.store(false, Ordering::Relaxed);
                Err(format!("no answer within {:?}", self.config.timeout))
            }
        }
    }

    /// A fresh probe-lease token: this replica's random id and a counter (no request data).
    pub(crate) fn token(&self) -> String {
        let n = self.tokens.fetch_add(1, Ordering::Relaxed);
        format!("{:016x}.{n}", self.replica)
    }

    /// A state read by `OnRedis::prefetch` for `scope`, and its age.
    pub(crate) fn warm(&self, scope: &str) -> Option<(Reply, Duration)> {
        lock(&self.warm)
            .get(scope)
            .map(|(reply, at)| (reply.clone(), at.elapsed()))
    }

    /// Starts the pub/sub task (once).
    pub(crate) fn start_pubsub(&self, handle: &Handle) {
        let Some(stop) = lock(&self.pubsub_stop).take() else {
            return;
        };
        handle.spawn(pubsub_loop(
            Arc::clone(&self.pubsub),
            self.config.client.clone(),
            self.config.timeout,
            self.config.retry_interval,
            Arc::clone(&self.stats),
            stop,
        ));
    }

    pub(crate) fn subscribe(&self, shared: &Arc<Shared>) {
        lock(&self.pubsub.subs)
            .entry(shared.keys.channel.clone())
            .or_default()
            .push(Arc::downgrade(shared));
        self.pubsub.changed.notify_one();
    }

    pub(crate) fn unsubscribe(&self, shared: &Arc<Shared>) {
        let mut subs = lock(&self.pubsub.subs);
        if let Some(list) = subs.get_mut(&shared.keys.channel) {
            list.retain(|w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), Arc::as_ptr(shared)));
            if list.is_empty() {
                subs.remove(&shared.keys.channel);
            }
        }
        drop(subs);
        self.pubsub.changed.notify_one();
    }
}

/// The channels the stores of one backend listen to.
#[derive(Default)]
struct PubSub {
    subs: Mutex<HashMap<String, Vec<Weak<Shared>>>>,
    changed: Notify,
}

impl PubSub {
    fn channels(&self) -> HashSet<String> {
        lock(&self.subs).keys().cloned().collect()
    }

    fn targets(&self, channel: &str) -> Vec<Arc<Shared>> {
        lock(&self.subs)
            .get(channel)
            .map(|list| list.iter().filter_map(Weak::upgrade).collect())
            .unwrap_or_default()
    }

    /// Asks every store to re-read its state (messages may have been missed).
    fn poke_all(&self) {
        let all: Vec<Arc<Shared>> = lock(&self.subs)
            .values()
            .flat_map(|list| list.iter().filter_map(Weak::upgrade))
            .collect();
        for s in all {
            s.poll_now.store(true, Ordering::Relaxed);
            s.notify.notify_one();
        }
    }
}

/// Listens to every scope's channel; reconnects (every `retry`) when the connection drops,
/// and then has every store re-read its state.
async fn pubsub_loop(
    pubsub: Arc<PubSub>,
    client: redis::Client,
    timeout: Duration,
    retry: Duration,
    stats: Arc<Stats>,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        let connected = tokio::select! {
            _ = &mut stop => return,
            r = tokio::time::timeout(timeout, client.get_async_pubsub()) => r,
        };
        if let Ok(Ok(conn)) = connected {
            let (mut sink, mut stream) = conn.split();
            let mut subscribed: HashSet<String> = HashSet::new();
            let mut fresh = true;
            'connection: loop {
                let wanted = pubsub.channels();
                for channel in wanted.difference(&subscribed.clone()) {
                    match tokio::time::timeout(timeout, sink.subscribe(channel)).await {
                        Ok(Ok(())) => {
                            subscribed.insert(channel.clone());
                        }
                        _ => break 'connection,
                    }
                }
                let gone: Vec<String> = subscribed.difference(&wanted).cloned().collect();
                for channel in gone {
                    let _ = tokio::time::timeout(timeout, sink.unsubscribe(&channel)).await;
                    subscribed.remove(&channel);
                }
                if fresh {
                    fresh = false;
                    pubsub.poke_all();
                }
                tokio::select! {
                    _ = &mut stop => return,
                    () = pubsub.changed.notified() => {}
                    message = stream.next() => match message {
                        Some(m) => {
                            stats.messages.fetch_add(1, Ordering::Relaxed);
                            if let Ok(payload) = std::str::from_utf8(m.get_payload_bytes())
                                && let Some(reply) = Reply::parse(payload)
                            {
                                for s in pubsub.targets(m.get_channel_name()) {
                                    s.apply_now(&reply);
                                }
                            }
                        }
                        None => break 'connection,
                    },
                }
            }
            tracing::debug!(target: "fusebox::redis", "pub/sub connection lost; reconnecting");
        }
        tokio::select! {
            _ = &mut stop => return,
            () = tokio::time::sleep(retry) => {}
        }
    }
}
