//! Where a policy's circuit breaker keeps its state: in this process (the default) or, with
//! the `redis` feature, on Redis, shared by every replica of a fleet.
//!
//! A policy's type must not depend on its configuration — a file decides at run time
//! whether a breaker is local or fleet-wide, and a struct field or a `Router` holds "a
//! policy" either way — so the store is an enum ([`PolicyStore`]) rather than a type
//! parameter. Without the `redis` feature it has one variant, and every `match` on it
//! compiles away: the in-memory breaker costs what it costs alone. With the feature, an
//! in-memory breaker pays one predictable branch per store call, and no allocation or
//! dynamic dispatch.

use crate::policy::KeyBy;
use fusebox_breaker::CircuitBreakerConfig;
use fusebox_breaker::state::{Command, Permit, Rejected, Snapshot};
use fusebox_breaker::store::StoreSpec;
use fusebox_breaker::{InMemory, MakeStore, MemoryStore, Reconfigure, Store};
use fusebox_classify::{ConfigError, Nanos, Validator};
use std::fmt;
use std::sync::Arc;

#[cfg(feature = "redis")]
use fusebox_redis::{OnRedis, RedisStore};

/// Where a policy's breaker keeps its state; give it to
/// [`PolicyBuilder::breaker_store`](crate::PolicyBuilder::breaker_store).
///
/// With the `redis` feature, an `OnRedis`, a `RedisStoreConfig` or its builder (from
/// `fusebox::redis`) converts into `BreakerStore::Redis`.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum BreakerStore {
    /// In this process (the default): each replica judges its own calls.
    #[default]
    InMemory,
    /// On Redis: every replica of the fleet shares one window, one state and one probe
    /// budget (see [`fusebox_redis`]). Nothing connects until the first call, and while
    /// Redis is unreachable the breaker decides on this replica's own calls (per the
    /// store's [`Fallback`](fusebox_redis::Fallback)): an outage of Redis never fails a
    /// call by itself.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    Redis(OnRedis),
}

impl fmt::Debug for BreakerStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BreakerStore::InMemory => f.write_str("BreakerStore::InMemory"),
            #[cfg(feature = "redis")]
            BreakerStore::Redis(on) => f
                .debug_tuple("BreakerStore::Redis")
                .field(on.config())
                .finish(),
        }
    }
}

impl BreakerStore {
    /// The Redis the breaker's state is kept on, if it is: its configuration, whether it
    /// answers ([`OnRedis::is_connected`]) and its statistics.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn redis(&self) -> Option<&OnRedis> {
        match self {
            BreakerStore::InMemory => None,
            BreakerStore::Redis(on) => Some(on),
        }
    }

    /// Whether the state is kept in this process.
    pub fn is_in_memory(&self) -> bool {
        matches!(self, BreakerStore::InMemory)
    }

    /// Checks how the store fits the breaker it is for (problems under `breaker.store`).
    #[cfg_attr(not(feature = "redis"), allow(unused_variables))]
    pub(crate) fn validate(
        &self,
        breaker: &CircuitBreakerConfig,
        key: Option<&KeyBy>,
        v: &mut Validator,
    ) {
        // The store's own rules, then the one a policy adds: route keys.
        v.nested(
            "breaker.store",
            MakeStore::check(self, breaker, key.is_some()),
        );
        #[cfg(feature = "redis")]
        if let (BreakerStore::Redis(_), Some(KeyBy::Route)) = (self, key) {
            v.fail(
                "breaker.store",
                "a breaker keyed by route cannot keep its keys on Redis: route names (\"GET /users/{id}\") are not valid Redis scope parts; key by host, or give each route a policy of its own",
            );
        }
    }
}

impl From<InMemory> for BreakerStore {
    fn from(_: InMemory) -> Self {
        BreakerStore::InMemory
    }
}

#[cfg(feature = "redis")]
impl From<OnRedis> for BreakerStore {
    fn from(on: OnRedis) -> Self {
        BreakerStore::Redis(on)
    }
}

#[cfg(feature = "redis")]
impl From<fusebox_redis::RedisStoreConfig> for BreakerStore {
    fn from(config: fusebox_redis::RedisStoreConfig) -> Self {
        BreakerStore::Redis(OnRedis::new(config))
    }
}

impl MakeStore for BreakerStore {
    type Store = PolicyStore;

    #[inline]
    fn make_store(&self, spec: StoreSpec) -> PolicyStore {
        match self {
            BreakerStore::InMemory => PolicyStore::Memory(MemoryStore::new(spec)),
            #[cfg(feature = "redis")]
            BreakerStore::Redis(on) => PolicyStore::Redis(on.make_store(spec)),
        }
    }

    #[cfg_attr(not(feature = "redis"), allow(unused_variables))]
    fn check(&self, config: &CircuitBreakerConfig, keyed: bool) -> Result<(), ConfigError> {
        match self {
            BreakerStore::InMemory => Ok(()),
            #[cfg(feature = "redis")]
            BreakerStore::Redis(on) => on.check(config, keyed),
        }
    }
}

/// The state of one breaker of a policy (one per key for a keyed breaker), as made by a
/// [`BreakerStore`]. It appears in the names of a policy's stage and body types; you do not
/// make one yourself.
#[non_exhaustive]
// One per breaker, inside the breaker's shared allocation: its size costs nothing per call,
// and boxing the memory store would put a pointer chase on the in-memory hot path.
#[allow(clippy::large_enum_variant)]
pub enum PolicyStore {
    /// In this process.
    Memory(MemoryStore),
    /// On Redis.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    Redis(RedisStore),
}

impl fmt::Debug for PolicyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyStore::Memory(s) => s.fmt(f),
            #[cfg(feature = "redis")]
            PolicyStore::Redis(s) => s.fmt(f),
        }
    }
}

impl PolicyStore {
    /// The Redis scope this breaker shares (`dep:payments`), or `None` when its state is
    /// kept in this process.
    pub fn redis_scope(&self) -> Option<&str> {
        match self {
            PolicyStore::Memory(_) => None,
            #[cfg(feature = "redis")]
            PolicyStore::Redis(s) => s.scope(),
        }
    }
}

impl Store for PolicyStore {
    #[inline]
    fn acquire(&self) -> Result<Permit, Rejected> {
        match self {
            PolicyStore::Memory(s) => s.acquire(),
            #[cfg(feature = "redis")]
            PolicyStore::Redis(s) => s.acquire(),
        }
    }

    #[inline]
    fn record(&self, permit: Permit, failure: bool, slow: bool, now: Option<Nanos>) {
        match self {
            PolicyStore::Memory(s) => s.record(permit, failure, slow, now),
            #[cfg(feature = "redis")]
            PolicyStore::Redis(s) => s.record(permit, failure, slow, now),
        }
    }

    #[inline]
    fn record_fast_success(&self, permit: Permit) -> bool {
        match self {
            PolicyStore::Memory(s) => s.record_fast_success(permit),
            #[cfg(feature = "redis")]
            PolicyStore::Redis(s) => s.record_fast_success(permit),
        }
    }

    #[inline]
    fn release(&self, permit: Permit) {
        match self {
            PolicyStore::Memory(s) => s.release(permit),
            #[cfg(feature = "redis")]
            PolicyStore::Redis(s) => s.release(permit),
        }
    }

    fn snapshot(&self) -> Snapshot {
        match self {
            PolicyStore::Memory(s) => s.snapshot(),
            #[cfg(feature = "redis")]
            PolicyStore::Redis(s) => s.snapshot(),
        }
    }

    fn command(&self, command: Command) {
        match self {
            PolicyStore::Memory(s) => s.command(command),
            #[cfg(feature = "redis")]
            PolicyStore::Redis(s) => s.command(command),
        }
    }

    fn needs_end_time(&self) -> bool {
        match self {
            PolicyStore::Memory(s) => s.needs_end_time(),
            #[cfg(feature = "redis")]
            PolicyStore::Redis(s) => s.needs_end_time(),
        }
    }

    fn config(&self) -> Option<Arc<CircuitBreakerConfig>> {
        match self {
            PolicyStore::Memory(s) => s.config(),
            #[cfg(feature = "redis")]
            PolicyStore::Redis(s) => s.config(),
        }
    }

    fn reconfigure(&self, config: &Arc<CircuitBreakerConfig>) -> Result<(), Reconfigure> {
        match self {
            PolicyStore::Memory(s) => s.reconfigure(config),
            #[cfg(feature = "redis")]
            PolicyStore::Redis(s) => s.reconfigure(config),
        }
    }
}
