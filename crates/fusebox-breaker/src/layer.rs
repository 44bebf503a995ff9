//! The breaker layer and its builder.

use crate::breaker::{Breaker, BreakerHandle, Leases, Partial};
use crate::config::CircuitBreakerConfig;
use crate::events::{BreakerEvent, EventSink, Listener};
use crate::keyed::{KeyFn, KeyedCircuitBreakerLayer, KeyedShared};
use crate::plain::PlainCircuitBreakerLayer;
use crate::service::{BreakerStage, CircuitBreaker};
use crate::spread::KeySpreadGate;
use crate::store::{InMemory, MakeStore, MemoryStore, Store, StoreSpec};
use fusebox_classify::{Classifier, Clock, ConfigError, RouteTable, StandardClassifier, Validator};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tower_layer::Layer;

/// Puts a circuit breaker in front of a service.
///
/// One layer value is one breaker: every service it makes, and every clone of those, shares
/// the same state — a framework that calls [`Layer::layer`] once per route still gets one
/// breaker. Build one per dependency.
pub struct CircuitBreakerLayer<C = StandardClassifier, St = MemoryStore> {
    breaker: Arc<Leases<C, St>>,
}

impl<C, St> Clone for CircuitBreakerLayer<C, St> {
    fn clone(&self) -> Self {
        CircuitBreakerLayer {
            breaker: Arc::clone(&self.breaker),
        }
    }
}

impl<C, St: Store> fmt::Debug for CircuitBreakerLayer<C, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerLayer")
            .field("breaker", &self.breaker.name)
            .finish()
    }
}

impl CircuitBreakerLayer {
    /// A breaker with `config`, the default classifier for every route, and in-memory state.
    pub fn new(config: CircuitBreakerConfig) -> Self {
        // In memory, any valid configuration can be kept: nothing to check.
        Self::builder(config).assemble()
    }

    /// A builder, to set routes, a store, listeners, or keys.
    pub fn builder(config: CircuitBreakerConfig) -> CircuitBreakerLayerBuilder {
        CircuitBreakerLayerBuilder {
            config,
            table: RouteTable::default(),
            make: InMemory,
            listeners: Vec::new(),
            max_keys: 10_000,
            idle_timeout: Duration::from_secs(600),
            expose: false,
            gate: None,
            key: None,
        }
    }
}

impl<C: Classifier, St: Store> CircuitBreakerLayer<C, St> {
    /// An operator's handle on the breaker.
    pub fn handle(&self) -> BreakerHandle {
        BreakerHandle::new(self.breaker.shared().clone())
    }

    /// The breaker's per-call logic as a stage (see `fusebox_classify::stage`), for a
    /// service that runs it with stages of its own (a pool's endpoint does).
    pub fn stage(&self) -> BreakerStage<C, St> {
        BreakerStage::new(Arc::clone(&self.breaker))
    }

    /// The same breaker, for services that do not speak HTTP: any request type, an `Ok`
    /// answer a success, an error judged by the default route's classifier (see
    /// [`plain`](crate::plain)). Shares this layer's state: one handle sees the calls of
    /// both.
    pub fn plain(&self) -> PlainCircuitBreakerLayer<C, St> {
        PlainCircuitBreakerLayer::new(Arc::clone(&self.breaker))
    }
}

impl<S, C, St> Layer<S> for CircuitBreakerLayer<C, St> {
    type Service = CircuitBreaker<S, C, St>;

    fn layer(&self, inner: S) -> Self::Service {
        CircuitBreaker::new(inner, Arc::clone(&self.breaker))
    }
}

/// Builds a [`CircuitBreakerLayer`] or a [`KeyedCircuitBreakerLayer`].
pub struct CircuitBreakerLayerBuilder<C = StandardClassifier, M = InMemory> {
    config: CircuitBreakerConfig,
    table: RouteTable<C>,
    make: M,
    listeners: Vec<Listener>,
    max_keys: usize,
    idle_timeout: Duration,
    expose: bool,
    gate: Option<KeySpreadGate>,
    key: Option<Arc<str>>,
}

impl<C, M: fmt::Debug> fmt::Debug for CircuitBreakerLayerBuilder<C, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerLayerBuilder")
            .field("config", &self.config)
            .field("store", &self.make)
            .field("max_keys", &self.max_keys)
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

impl<C: Classifier, M: MakeStore> CircuitBreakerLayerBuilder<C, M> {
    /// Classifies calls per route with `table` (default: one route, the
    /// [`StandardClassifier`]).
    pub fn routes<C2: Classifier>(
        self,
        table: RouteTable<C2>,
    ) -> CircuitBreakerLayerBuilder<C2, M> {
        CircuitBreakerLayerBuilder {
            config: self.config,
            table,
            make: self.make,
            listeners: self.listeners,
            max_keys: self.max_keys,
            idle_timeout: self.idle_timeout,
            expose: self.expose,
            gate: self.gate,
            key: self.key,
        }
    }

    /// Keeps the state in stores made by `make` (default: [`InMemory`]).
    pub fn store<M2: MakeStore>(self, make: M2) -> CircuitBreakerLayerBuilder<C, M2> {
        CircuitBreakerLayerBuilder {
            config: self.config,
            table: self.table,
            make,
            listeners: self.listeners,
            max_keys: self.max_keys,
            idle_timeout: self.idle_timeout,
            expose: self.expose,
            gate: self.gate,
            key: self.key,
        }
    }

    /// Calls `listener` with every event, synchronously, where it happens.
    pub fn on_event(mut self, listener: impl Fn(&BreakerEvent) + Send + Sync + 'static) -> Self {
        self.listeners.push(Arc::new(listener));
        self
    }

    /// For keyed breakers: the most keys kept at once (default 10,000). Past it, a new key
    /// makes room by evicting one CLOSED breaker not in use (the least recently used);
    /// open, half-open and operator-held breakers are never evicted to make room. When
    /// nothing can go, the new key's calls share its shard's overflow breaker
    /// ([`KeyedBreakerHandle::OVERFLOW_KEY`](crate::KeyedBreakerHandle::OVERFLOW_KEY)).
    pub fn max_keys(mut self, max: usize) -> Self {
        self.max_keys = max;
        self
    }

    /// Leaves each answer's verdict in its response's extensions, as a
    /// [`fusebox_classify::AnswerVerdict`] (default `false`): read it with
    /// `response.extensions().get::<AnswerVerdict>()`. It costs an allocation per response
    /// (the extensions' map and the value), which is why it is off unless asked for; the
    /// verdict is the one the breaker judged by, classified once for every stage of the
    /// call. An error has no extensions: its verdict is not exposed.
    pub fn expose_verdict(mut self, expose: bool) -> Self {
        self.expose = expose;
        self
    }

    /// Counts a failure only while `gate` finds failures spread over enough keys of the
    /// keyed breaker it came from
    /// ([`KeyedBreakerHandle::spread_gate`](crate::KeyedBreakerHandle::spread_gate)): for a
    /// dependency-wide breaker stacked around keyed ones, so that a few hot keys open
    /// their own breakers and not this one (see [`crate::spread`]). A failure the gate
    /// does not count is counted as ignored.
    pub fn key_spread(mut self, gate: KeySpreadGate) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Makes the layer's one breaker stand for `key` of its dependency, as one key of a
    /// keyed breaker does: its events, its [`CircuitOpen`](crate::CircuitOpen) rejections
    /// and its metric series carry the key (the series' `key` label, see
    /// [`events`](crate::events)), while its name stays the dependency's. For a breaker
    /// per endpoint of a pool, where the caller, not a key function, picks the breaker.
    /// Ignored by [`build_keyed`](Self::build_keyed), whose keys come from its key function.
    pub fn key(mut self, key: impl Into<Arc<str>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// For keyed breakers: a key unused for about this long is evicted (default 10 min).
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = idle;
        self
    }

    /// The layer: one breaker. Fails, naming each problem's field, when the store cannot
    /// keep this breaker's state (with `fusebox-redis`: a breaker name that is not a valid
    /// scope part while the store's scope does not name the dependency, `store.scope.dep`).
    pub fn build(self) -> Result<CircuitBreakerLayer<C, M::Store>, ConfigError> {
        self.make
            .check(&self.config, false)
            .map_err(|e| e.prefixed("store"))?;
        Ok(self.assemble())
    }

    fn assemble(self) -> CircuitBreakerLayer<C, M::Store> {
        let clock = Clock::new();
        let config = Arc::new(self.config);
        let mut events = EventSink::new(Arc::clone(&config.name), self.listeners);
        if let Some(key) = &self.key {
            // The key's own series and events, as one key of a keyed breaker has.
            events = events.for_key(Arc::clone(key));
        }
        let store = self.make.make_store(StoreSpec {
            config: Arc::clone(&config),
            key: self.key.clone(),
            clock,
            events: events.clone(),
        });
        CircuitBreakerLayer {
            breaker: Arc::new(Leases::new(Arc::new(
                Breaker::new(
                    self.table,
                    store,
                    clock,
                    Arc::clone(&config.name),
                    self.key,
                    events,
                    config.count_overloaded,
                )
                .exposing(self.expose)
                .partial(self.gate.map(|gate| Arc::new(Partial::Gated(gate)))),
            ))),
        }
    }

    /// The layer: one breaker per key that `key_fn` gives.
    pub fn build_keyed<F: KeyFn>(
        self,
        key_fn: F,
    ) -> Result<KeyedCircuitBreakerLayer<F, C, M>, ConfigError> {
        let mut v = Validator::new();
        v.nested("store", self.make.check(&self.config, true));
        v.check(self.max_keys >= 1, "max_keys", || {
            "must be at least 1, got 0".into()
        });
        v.check(!self.idle_timeout.is_zero(), "idle_timeout", || {
            "must be greater than zero".into()
        });
        v.finish(())?;
        let config = Arc::new(self.config);
        let events = EventSink::new(Arc::clone(&config.name), self.listeners);
        Ok(KeyedCircuitBreakerLayer::from_shared(
            KeyedShared::new(
                key_fn,
                self.table,
                config,
                Clock::new(),
                self.make,
                events,
                self.max_keys,
                self.idle_timeout,
            )
            .exposing(self.expose)
            .into_shared(),
        ))
    }
}
