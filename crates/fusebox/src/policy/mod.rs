//! [`Policy`]: the four layers, in the right order, around one route table.
//!
//! Resilience layers interact, and their order decides how:
//!
//! ```text
//! retry budget → circuit breaker → concurrency limit → timeout → your service
//! ```
//!
//! - the **timeout** is innermost, so each attempt has its own timeout and a timed-out
//!   attempt is one failure that every layer above sees (the breaker counts it, the retry
//!   layer may retry it, the limit gives its permit back when it fires);
//! - the **concurrency limit** sits inside the breaker, so an open breaker rejects without
//!   taking a permit, and a full limit is not counted against the dependency (unless the
//!   breaker's `count_overloaded` says it stands for the dependency's own saturation);
//! - the **breaker** sits inside the retry layer, so every attempt is judged, and its
//!   rejection ([`CircuitOpen`](crate::error::CircuitOpen)) is never retried;
//! - the **retry budget** is outermost, so a retry spends from the budget and goes through
//!   the breaker and the limit again like any call.
//!
//! All four read the same [`RouteTable`]: one place for each route's classifier (whether a
//! 429 or RESOURCE_EXHAUSTED counts as a failure), slow-call threshold, timeout, whether it
//! may be retried, and whether its requests are idempotent.
//!
//! A policy is a [`Layer`]: `ServiceBuilder::new().layer(policy).service(client)`. Every
//! layer is optional, and leaving one out does not change the service's type (see
//! [`stack`] for how, and what an absent layer costs: one `match`). The breaker, the limit
//! and the timeout run as one tuple of their stages, one future and one response-body wrapper for
//! the three ([`stages`]): they behave exactly as the three layers stacked by hand, for a
//! fraction of the cost of moving requests, responses and futures between three services. Its state — the
//! breaker, the limit's permits, the retry budget — is created once, by
//! [`PolicyBuilder::build`], and shared by every service the policy makes: a framework that
//! calls [`Layer::layer`] once per route still gets one breaker and one limit.
//!
//! # Example
//!
//! ```
//! use fusebox::{CircuitBreakerConfig, Policy, RetryConfig, Route, RouteTable, StandardClassifier};
//! use fusebox::retry::ReplayBody;
//! use http::{Request, Response};
//! use http_body_util::Empty;
//! use bytes::Bytes;
//! use std::time::Duration;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! // The partner's 429s mean it is struggling: that route counts them.
//! let routes = RouteTable::builder(Route::default().slow_call_duration(Duration::from_millis(500)))
//!     .route("POST /charge", Route::new(StandardClassifier::new().count_throttling(true)).retry(false))
//!     .route("GET /rates", Route::default().timeout(Duration::from_millis(100)))
//!     .build()?;
//! let policy = Policy::builder("fraud-eu")
//!     .routes(routes)
//!     .timeout(Duration::from_millis(250))
//!     .concurrency_limit(64)
//!     .circuit_breaker(CircuitBreakerConfig::builder().failure_rate_threshold(50))
//!     .retry_budget(RetryConfig::builder().retry_ratio(0.1))
//!     .build()?;
//!
//! let client = tower::service_fn(|_req: Request<ReplayBody<Empty<Bytes>>>| async {
//!     Ok::<_, std::convert::Infallible>(Response::new(Empty::<Bytes>::new()))
//! });
//! let svc = ServiceBuilder::new().layer(policy).service(client);
//! let response = svc.oneshot(Request::get("/rates").body(Empty::new())?).await?;
//! assert_eq!(response.status(), 200);
//! # Ok(())
//! # }
//! ```

mod body;
mod call_span;
mod fallback;
mod future;
mod key;
mod ramp;
mod service;
pub mod stack;
pub mod stages;
mod store;

pub use self::body::{PolicyBody, StackBody};
pub(crate) use self::fallback::FAMILIES as FALLBACK_FAMILIES;
pub use self::fallback::{FALLBACKS_TOTAL, Fallback, FallbackContext, FallbackReason};
pub use self::future::{Attempts, ResponseFuture};
pub use self::key::{BreakerKey, KeyBy};
pub use self::ramp::RecoveryRamp;
pub use self::service::PolicyService;
use self::stages::{BreakerStages, PolicyStages};
pub use self::store::{BreakerStore, PolicyStore};
use fusebox_breaker::compose::gate_keys;
use fusebox_classify::stage::Staged;

use self::fallback::Armed;
use self::ramp::Ramp;
use crate::registry::Registry;
use fusebox_breaker::spread::KeySpread;
use fusebox_breaker::{
    BreakerEvent, BreakerHandle, CircuitBreakerConfig, CircuitBreakerConfigBuilder,
    CircuitBreakerLayer, KeyedBreakerHandle, KeyedCircuitBreakerLayer,
};
use fusebox_classify::{
    Classifier, ConfigError, RouteTable, RouteTableBuilder, StandardClassifier, Validator,
};
use fusebox_limit::{
    ConcurrencyLimitConfig, ConcurrencyLimitConfigBuilder, ConcurrencyLimitLayer, Limit,
    LimitHandle,
};
use fusebox_retry::{RetryBudget, RetryBudgetLayer, RetryConfig, RetryConfigBuilder};
use fusebox_timeout::{BodyTimeoutLayer, TimeoutConfig, TimeoutConfigBuilder, TimeoutLayer};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tower_layer::Layer;

/// A configuration, or something that builds one: [`PolicyBuilder`] accepts either, and
/// reports a builder's problems with the rest (each under its layer's path).
pub trait IntoConfig<T> {
    /// The configuration, or every problem with it.
    fn into_config(self) -> Result<T, ConfigError>;
}

impl<T> IntoConfig<T> for T {
    fn into_config(self) -> Result<T, ConfigError> {
        Ok(self)
    }
}

impl<T> IntoConfig<T> for Result<T, ConfigError> {
    fn into_config(self) -> Result<T, ConfigError> {
        self
    }
}

impl IntoConfig<CircuitBreakerConfig> for CircuitBreakerConfigBuilder {
    fn into_config(self) -> Result<CircuitBreakerConfig, ConfigError> {
        self.build()
    }
}

impl IntoConfig<ConcurrencyLimitConfig> for ConcurrencyLimitConfigBuilder {
    fn into_config(self) -> Result<ConcurrencyLimitConfig, ConfigError> {
        self.build()
    }
}

impl IntoConfig<RetryConfig> for RetryConfigBuilder {
    fn into_config(self) -> Result<RetryConfig, ConfigError> {
        self.build()
    }
}

impl IntoConfig<TimeoutConfig> for TimeoutConfigBuilder {
    fn into_config(self) -> Result<TimeoutConfig, ConfigError> {
        self.build()
    }
}

impl<C: Classifier> IntoConfig<RouteTable<C>> for RouteTableBuilder<C> {
    fn into_config(self) -> Result<RouteTable<C>, ConfigError> {
        self.build()
    }
}

impl IntoConfig<BreakerStore> for fusebox_breaker::InMemory {
    fn into_config(self) -> Result<BreakerStore, ConfigError> {
        Ok(BreakerStore::InMemory)
    }
}

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
impl IntoConfig<BreakerStore> for fusebox_redis::OnRedis {
    fn into_config(self) -> Result<BreakerStore, ConfigError> {
        Ok(BreakerStore::Redis(self))
    }
}

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
impl IntoConfig<BreakerStore> for fusebox_redis::RedisStoreConfig {
    fn into_config(self) -> Result<BreakerStore, ConfigError> {
        Ok(BreakerStore::from(self))
    }
}

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
impl IntoConfig<BreakerStore> for fusebox_redis::RedisStoreConfigBuilder {
    fn into_config(self) -> Result<BreakerStore, ConfigError> {
        self.build().map(BreakerStore::from)
    }
}

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
impl IntoConfig<BreakerStore> for Result<fusebox_redis::RedisStoreConfig, ConfigError> {
    fn into_config(self) -> Result<BreakerStore, ConfigError> {
        self.map(BreakerStore::from)
    }
}

type Listener = Arc<dyn Fn(&BreakerEvent) + Send + Sync>;

/// Builds a [`Policy`]. Nothing is checked until [`build`](PolicyBuilder::build), which
/// reports every problem at once.
pub struct PolicyBuilder<C = StandardClassifier> {
    name: Arc<str>,
    routes: Result<RouteTable<C>, ConfigError>,
    timeout: Option<Result<TimeoutConfig, ConfigError>>,
    limit: Option<Result<ConcurrencyLimitConfig, ConfigError>>,
    breaker: Option<Result<CircuitBreakerConfig, ConfigError>>,
    breaker_key: Option<KeyBy>,
    /// The rule of the dependency-wide breaker gated by the keyed one's spread.
    spread: Option<Result<KeySpread, ConfigError>>,
    /// A policy file's `answer_key_header`, applied to `breaker_key` when it is built.
    answer_key_header: Option<http::HeaderName>,
    /// Problems a policy file found in how its keys fit together, reported by `build`.
    file_problems: Vec<(&'static str, &'static str)>,
    breaker_store: Option<Result<BreakerStore, ConfigError>>,
    /// Checking only (a policy file's validation): the store is checked, but the policy
    /// built keeps its breaker in memory, so that checking starts no Redis connection.
    check_only: bool,
    expose_verdict: bool,
    max_keys: Option<usize>,
    idle_timeout: Option<Duration>,
    listeners: Vec<Listener>,
    retry: Option<Result<RetryConfig, ConfigError>>,
    fallback: Option<Fallback>,
    fallback_routes: Vec<String>,
    ramp: Option<RecoveryRamp>,
    registry: Option<Registry>,
}

impl<C> fmt::Debug for PolicyBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyBuilder")
            .field("name", &self.name)
            .field("timeout", &self.timeout)
            .field("limit", &self.limit)
            .field("breaker", &self.breaker)
            .field("breaker_key", &self.breaker_key)
            .field("key_spread", &self.spread)
            .field("breaker_store", &self.breaker_store)
            .field("retry", &self.retry.as_ref().map(|r| r.is_ok()))
            .field("fallback", &self.fallback)
            .field("recovery_ramp", &self.ramp)
            .finish_non_exhaustive()
    }
}

impl Policy {
    /// A builder for a policy named `name` (the name of its fallback metrics, and of the
    /// layers the shorthands [`timeout`](PolicyBuilder::timeout) and
    /// [`concurrency_limit`](PolicyBuilder::concurrency_limit) make), with no layer yet and
    /// the default route table.
    pub fn builder(name: impl Into<Arc<str>>) -> PolicyBuilder {
        PolicyBuilder {
            name: name.into(),
            routes: Ok(RouteTable::default()),
            timeout: None,
            limit: None,
            breaker: None,
            breaker_key: None,
            spread: None,
            answer_key_header: None,
            file_problems: Vec::new(),
            breaker_store: None,
            check_only: false,
            expose_verdict: false,
            max_keys: None,
            idle_timeout: None,
            listeners: Vec::new(),
            retry: None,
            fallback: None,
            fallback_routes: Vec::new(),
            ramp: None,
            registry: None,
        }
    }
}

impl<C: Classifier> PolicyBuilder<C> {
    /// Classifies calls per route with `routes` (a [`RouteTable`] or its builder), in every
    /// layer. Each route sets its classifier (whether 429 / RESOURCE_EXHAUSTED count as
    /// failures), slow-call threshold, timeout, retry on/off and idempotency.
    ///
    /// A route with a timeout turns the timeout layer on even without
    /// [`timeout`](PolicyBuilder::timeout); routes without one then get
    /// [`DEFAULT_TIMEOUT`](fusebox_timeout::DEFAULT_TIMEOUT).
    pub fn routes<C2: Classifier>(
        self,
        routes: impl IntoConfig<RouteTable<C2>>,
    ) -> PolicyBuilder<C2> {
        PolicyBuilder {
            name: self.name,
            routes: routes.into_config(),
            timeout: self.timeout,
            limit: self.limit,
            breaker: self.breaker,
            breaker_key: self.breaker_key,
            spread: self.spread,
            answer_key_header: self.answer_key_header,
            file_problems: self.file_problems,
            breaker_store: self.breaker_store,
            check_only: self.check_only,
            expose_verdict: self.expose_verdict,
            max_keys: self.max_keys,
            idle_timeout: self.idle_timeout,
            listeners: self.listeners,
            retry: self.retry,
            fallback: self.fallback,
            fallback_routes: self.fallback_routes,
            ramp: self.ramp,
            registry: self.registry,
        }
    }

    /// A timeout of `timeout` for every route that sets none.
    pub fn timeout(self, timeout: Duration) -> Self {
        self.timeout_config(TimeoutConfig::builder().default_timeout(timeout))
    }

    /// The timeout layer's full configuration (default timeout, deadline propagation, body
    /// timeout).
    ///
    /// The policy bounds the wait for the response *head*. A `body_timeout` is applied by
    /// the layer [`Policy::body_timeout_layer`] gives, placed around the policy's service:
    /// as in `fusebox-timeout`, the body timer is a layer of its own so that responses that
    /// need none do not carry one (it would cost every call of every policy, bounded or not).
    pub fn timeout_config(mut self, config: impl IntoConfig<TimeoutConfig>) -> Self {
        self.timeout = Some(config.into_config());
        self
    }

    /// A fixed limit of `max` calls in flight, shedding at once when full.
    pub fn concurrency_limit(self, max: usize) -> Self {
        self.concurrency_limit_config(ConcurrencyLimitConfig::builder().max_concurrency(max))
    }

    /// The concurrency limit's full configuration (queue, adaptive limits, release). A
    /// limit nobody named takes the policy's name, as every layer of the policy does.
    pub fn concurrency_limit_config(
        mut self,
        config: impl IntoConfig<ConcurrencyLimitConfig>,
    ) -> Self {
        self.limit = Some(config.into_config());
        self
    }

    /// A circuit breaker (a [`CircuitBreakerConfig`] or its builder). A breaker nobody
    /// named takes the policy's name.
    pub fn circuit_breaker(mut self, config: impl IntoConfig<CircuitBreakerConfig>) -> Self {
        self.breaker = Some(config.into_config());
        self
    }

    /// One breaker per key instead of one for every call (needs
    /// [`circuit_breaker`](PolicyBuilder::circuit_breaker)).
    pub fn breaker_key(mut self, key: KeyBy) -> Self {
        self.breaker_key = Some(key);
        self
    }

    /// With a keyed breaker ([`breaker_key`](PolicyBuilder::breaker_key)), adds a
    /// dependency-wide breaker that a few failing keys do not open: a second breaker with
    /// the same [`CircuitBreakerConfig`] (and so the same name, the dependency's), standing
    /// outside the keyed one, that counts a failure only when the keyed breaker sees
    /// failures on enough of its keys (`spread`; see [`fusebox_breaker::spread`] for the
    /// rule). A few hot keys open their own breakers and leave the dependency's closed; a
    /// failure on most keys opens it, and it then refuses every call without asking the
    /// keys.
    ///
    /// [`Policy::breaker_handle`] is then the dependency-wide breaker's handle, and
    /// [`Policy::keyed_breaker_handle`] the keys'; breaker events come from both (the
    /// dependency's carry no key). The dependency-wide breaker keeps its state in this
    /// process whatever the [`breaker_store`](PolicyBuilder::breaker_store): the spread it
    /// is gated by is this process's count of its keys. It runs in the keyed breaker's
    /// guards, in the policy's one stage runner ([`stages`]): not as a second service, nor
    /// as a stage of its own.
    ///
    /// [`build`](PolicyBuilder::build) fails at `breaker.spread` without a keyed breaker.
    ///
    /// ```
    /// use fusebox::{CircuitBreakerConfig, KeyBy, KeySpread, Policy};
    ///
    /// let policy = Policy::builder("store")
    ///     .circuit_breaker(CircuitBreakerConfig::builder())
    ///     .breaker_key(KeyBy::Host)
    ///     .key_spread(KeySpread::new(0.5, 4)?)
    ///     .build()?;
    /// assert_eq!(policy.key_spread().map(|s| s.min_keys()), Some(4));
    /// assert!(policy.breaker_handle().is_some() && policy.keyed_breaker_handle().is_some());
    ///
    /// let err = Policy::builder("store")
    ///     .circuit_breaker(CircuitBreakerConfig::builder())
    ///     .key_spread(KeySpread::default())
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.problems()[0].path(), "breaker.spread");
    /// # Ok::<(), fusebox::ConfigError>(())
    /// ```
    pub fn key_spread(mut self, spread: KeySpread) -> Self {
        self.spread = Some(Ok(spread));
        self
    }

    /// A policy file's `breaker.spread`, or its problems (reported under `breaker.spread`).
    #[cfg(any(feature = "toml", feature = "yaml"))]
    pub(crate) fn key_spread_config(mut self, spread: Result<KeySpread, ConfigError>) -> Self {
        self.spread = Some(spread);
        self
    }

    /// A policy file's `answer_key_header`: the keys of `breaker_key` are named by answers
    /// in `header` ([`KeyBy::named_by_answer`], applied when the policy is built).
    #[cfg(any(feature = "toml", feature = "yaml"))]
    pub(crate) fn answer_key_header(mut self, header: http::HeaderName) -> Self {
        self.answer_key_header = Some(header);
        self
    }

    /// A problem a policy file found at `path` (a builder path, as `build` reports them),
    /// reported by `build` with the others.
    #[cfg(any(feature = "toml", feature = "yaml"))]
    pub(crate) fn file_problem(mut self, path: &'static str, rule: &'static str) -> Self {
        self.file_problems.push((path, rule));
        self
    }

    /// Where the breaker keeps its state (default: [`BreakerStore::InMemory`], in this
    /// process; needs [`circuit_breaker`](PolicyBuilder::circuit_breaker)).
    ///
    /// With the `redis` feature, give it an `OnRedis`, a `RedisStoreConfig` or its builder
    /// (from `fusebox::redis`): every replica whose policy names the same Redis and scope
    /// then shares one breaker — one window (the fleet opens after `minimum_calls` in
    /// total, not per replica), one state, and one half-open probe budget fleet-wide.
    /// Building connects to nothing and never blocks; until Redis answers, and whenever it
    /// does not, the breaker decides on this replica's own calls (the store's `Fallback`),
    /// so Redis being down never fails a call by itself. Policies given clones of one
    /// `OnRedis` share its connections (one for scripts, one for pub/sub); each
    /// `RedisStoreConfig` given opens its own.
    ///
    /// [`build`](PolicyBuilder::build) reports, under `breaker.store`, the store
    /// configuration's own problems and how it fits the breaker:
    ///
    /// - the scope's dependency defaults to the breaker's name, which must then be a valid
    ///   scope part (`breaker.store.scope.dep`);
    /// - a keyed breaker ([`breaker_key`](PolicyBuilder::breaker_key)) shares on Redis only
    ///   the keys its store lists (`share_key`; keys computed from requests never reach
    ///   Redis otherwise), so it must list at least one (`breaker.store.shared_keys`), and
    ///   an unkeyed breaker must list none;
    /// - a breaker keyed by [`KeyBy::Route`] cannot share its keys: route names
    ///   (`"GET /users/{id}"`) are not valid scope parts (`breaker.store`).
    ///
    /// ```
    /// # #[cfg(feature = "redis")] {
    /// use fusebox::redis::{RedisStoreConfig, Scope};
    /// use fusebox::{CircuitBreakerConfig, Policy};
    /// use std::time::Duration;
    ///
    /// // Every replica of the payments service builds the same policy.
    /// let policy = Policy::builder("payments")
    ///     .circuit_breaker(CircuitBreakerConfig::builder().minimum_calls(50))
    ///     .breaker_store(
    ///         RedisStoreConfig::builder("redis://127.0.0.1:6379/0")
    ///             .scope(Scope::dep("payments").region("eu"))
    ///             .batched(Duration::from_millis(5)),
    ///     )
    ///     .build()?;
    /// // Nothing has connected: until Redis answers, the local fallback decides.
    /// assert_eq!(policy.breaker_handle().map(|h| h.state()), Some(fusebox::breaker::State::Closed));
    /// assert!(policy.breaker_store().redis().is_some());
    ///
    /// // A keyed breaker must say which keys the fleet shares.
    /// let err = Policy::builder("partners")
    ///     .circuit_breaker(CircuitBreakerConfig::builder())
    ///     .breaker_key(fusebox::KeyBy::Host)
    ///     .breaker_store(RedisStoreConfig::builder("redis://127.0.0.1:6379/0"))
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.problems()[0].path(), "breaker.store.shared_keys");
    /// # }
    /// # Ok::<(), fusebox::ConfigError>(())
    /// ```
    pub fn breaker_store(mut self, store: impl IntoConfig<BreakerStore>) -> Self {
        self.breaker_store = Some(store.into_config());
        self
    }

    /// Marks the builder as building only to check a configuration (see `check_only`).
    #[cfg(any(feature = "toml", feature = "yaml"))]
    pub(crate) fn check_only(mut self) -> Self {
        self.check_only = true;
        self
    }

    /// Leaves the verdict on each call's answer in its response's extensions, as a
    /// [`fusebox_classify::AnswerVerdict`] (default `false`): read it with
    /// `response.extensions().get::<AnswerVerdict>()`.
    ///
    /// It is the verdict of the call's route's classifier on the answer handed back (the
    /// last attempt's, when the call was retried), the one the breaker, the limit and the
    /// retry judged by: classified once for all of them, and read here without classifying
    /// again. A gRPC answer whose status comes in the trailers carries
    /// [`Classified::AtEndOfStream`](fusebox_classify::Classified::AtEndOfStream) (its
    /// verdict is taken when the body ends, after the head is handed back); an error, and a
    /// fallback's response, carry none.
    ///
    /// It costs an allocation per response (the extensions' map and the value), which is
    /// why it is off unless asked for; off, the healthy call allocates nothing.
    pub fn expose_verdict(mut self, expose: bool) -> Self {
        self.expose_verdict = expose;
        self
    }

    /// For keyed breakers: the most keys kept at once (default 10,000).
    pub fn max_keys(mut self, max: usize) -> Self {
        self.max_keys = Some(max);
        self
    }

    /// For keyed breakers: a key unused for about this long is forgotten (default 10 min).
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = Some(idle);
        self
    }

    /// Calls `listener` with every breaker event, synchronously, where it happens.
    pub fn on_breaker_event(
        mut self,
        listener: impl Fn(&BreakerEvent) + Send + Sync + 'static,
    ) -> Self {
        self.listeners.push(Arc::new(listener));
        self
    }

    /// A retry budget (a [`RetryConfig`] or its builder). A budget nobody named takes the
    /// policy's name.
    pub fn retry_budget(mut self, config: impl IntoConfig<RetryConfig>) -> Self {
        self.retry = Some(config.into_config());
        self
    }

    /// A fallback for fusebox's own rejections, on the routes it names.
    pub fn fallback(mut self, fallback: Fallback) -> Self {
        self.fallback = Some(fallback);
        self
    }

    /// Opts `route` (named as in the route table) in to the policy's
    /// [`fallback`](PolicyBuilder::fallback), in addition to the routes the fallback names
    /// itself: how a configuration file's `fallback = true` reaches the fallback function
    /// given in code. Naming a route without giving a fallback is a configuration error.
    pub fn fallback_route(mut self, route: impl Into<String>) -> Self {
        self.fallback_routes.push(route.into());
        self
    }

    /// Whether routes were opted in to a fallback with
    /// [`fallback_route`](PolicyBuilder::fallback_route).
    pub fn wants_fallback(&self) -> bool {
        !self.fallback_routes.is_empty()
    }

    /// Lists the policy in `registry` once built (see [`Registry`]): its breaker and keys,
    /// limit, retry budget and timeout, with their states and settings, for an admin page
    /// or a readiness check. The registry holds the policy weakly: when the policy and every
    /// service it made are dropped, it is no longer listed. Nothing of this touches a call.
    ///
    /// [`build`](PolicyBuilder::build) fails (under `registry`) when the registry already
    /// lists something alive under the policy's name.
    pub fn registry(mut self, registry: &Registry) -> Self {
        self.registry = Some(registry.clone());
        self
    }

    /// A slow start for the concurrency limit after the breaker closes.
    pub fn recovery_ramp(mut self, ramp: RecoveryRamp) -> Self {
        self.ramp = Some(ramp);
        self
    }

    /// Checks everything — each layer's configuration, the route table, and how they fit
    /// together — and builds the policy's shared state, or reports every problem, each with
    /// its path (`breaker.failure_rate_threshold: must be within 1..=100, got 150`).
    pub fn build(mut self) -> Result<Policy<C>, ConfigError> {
        let mut v = Validator::new();
        for (path, rule) in std::mem::take(&mut self.file_problems) {
            v.fail(path, rule);
        }
        if self.breaker_key.is_some()
            && let Some(header) = self.answer_key_header.take()
        {
            self.breaker_key = self.breaker_key.take().map(|k| k.named_by_answer(header));
        }
        v.check(!self.name.trim().is_empty(), "name", || {
            "must not be empty".into()
        });
        // A layer given with an invalid configuration counts as present for the
        // cross-checks: its own problems are reported under its path.
        let has_breaker = self.breaker.is_some();
        let has_limit = self.limit.is_some();
        let has_store = self.breaker_store.is_some();
        let routes = v.nested("", self.routes);
        // Named once: the layers nobody named take the policy's name.
        let name = &self.name;
        let timeout = self.timeout.and_then(|t| v.nested("timeout", t)).map(|c| {
            if c.is_named() {
                c
            } else {
                c.with_name(Arc::clone(name))
            }
        });
        let limit = self.limit.and_then(|l| v.nested("limit", l)).map(|c| {
            if c.is_named() {
                c
            } else {
                c.with_name(name.as_ref())
            }
        });
        let breaker = self.breaker.and_then(|b| v.nested("breaker", b)).map(|c| {
            if c.is_named() {
                c
            } else {
                c.with_name(Arc::clone(name))
            }
        });
        let store = self
            .breaker_store
            .and_then(|s| v.nested("breaker.store", s));
        let has_spread = self.spread.is_some();
        let spread = self.spread.and_then(|s| v.nested("breaker.spread", s));
        let retry = self.retry.and_then(|r| v.nested("retry", r)).map(|c| {
            if c.is_named() {
                c
            } else {
                c.with_name(Arc::clone(name))
            }
        });

        if self.breaker_key.is_some() && !has_breaker {
            v.fail("breaker_key", "needs a circuit breaker");
        }
        if let Some(KeyBy::Answered(inner, _)) = &self.breaker_key
            && !inner.takes_text()
        {
            v.fail(
                "breaker_key",
                "a breaker keyed by route cannot take its keys from answers: an answer names a shard, host or value, not one of the client's routes",
            );
        }
        if self.answer_key_header.is_some() {
            // Left only when there is no key to apply it to.
            v.fail(
                "breaker_answer_key",
                "needs a keyed breaker (`key`): an answer names one of its keys",
            );
        }
        if has_spread && self.breaker_key.is_none() {
            v.fail(
                "breaker.spread",
                "needs a keyed breaker (`breaker_key`): the spread is counted over its keys",
            );
        }
        if has_store && !has_breaker {
            v.fail("breaker.store", "needs a circuit breaker");
        }
        if let (Some(store), Some(config)) = (&store, &breaker) {
            store.validate(config, self.breaker_key.as_ref(), &mut v);
        }
        if let Some(ramp) = &self.ramp {
            if !has_breaker {
                v.fail("recovery_ramp", "needs a circuit breaker");
            } else if self.breaker_key.is_some() {
                v.fail(
                    "recovery_ramp",
                    "needs an unkeyed circuit breaker: a keyed breaker's keys recover one by one, and the limit is shared by all of them",
                );
            }
            match limit.as_ref().map(|l| l.limit()) {
                None if !has_limit => v.fail("recovery_ramp", "needs a concurrency limit"),
                None => ramp.validate(None, &mut v),
                Some(Limit::Fixed(max)) => ramp.validate(Some(*max), &mut v),
                Some(_) => v.fail(
                    "recovery_ramp",
                    "needs a fixed max_concurrency: an adaptive limit already starts low after the failures that opened the breaker",
                ),
            }
        }
        let mut fallback = self.fallback;
        match &mut fallback {
            Some(f) => f.routes.extend(self.fallback_routes),
            None => {
                for route in &self.fallback_routes {
                    v.fail(
                        format!("routes[{route:?}].fallback"),
                        "asks for a fallback, but the policy has no fallback function (PolicyBuilder::fallback)",
                    );
                }
            }
        }
        let mut on_route = Vec::new();
        if let (Some(fallback), Some(routes)) = (&fallback, &routes) {
            on_route = vec![fallback.all_routes; routes.route_count()];
            if !fallback.all_routes && fallback.routes.is_empty() {
                v.fail(
                    "fallback.routes",
                    "name at least one route of the route table, or apply it to all routes",
                );
            }
            for name in &fallback.routes {
                match routes.iter().find(|(_, n, _)| n == name) {
                    Some((id, _, _)) => on_route[id.index()] = true,
                    None => v.fail(
                        format!("fallback.routes[{name:?}]"),
                        "is not a route of the route table",
                    ),
                }
            }
        }
        v.finish(())?;
        let routes = routes.ok_or_else(|| ConfigError::new("routes", "invalid"))?;

        let needs_timeout = timeout.is_some()
            || routes
                .iter()
                .any(|(_, _, r)| r.timeout_duration().is_some());
        let timeout = needs_timeout
            .then(|| {
                TimeoutLayer::builder(
                    timeout.unwrap_or_else(|| TimeoutConfig::default().with_name(Arc::clone(name))),
                )
                .routes(routes.clone())
                .build()
            })
            .transpose()
            .map_err(|e| e.prefixed("timeout"))?;
        let limit = limit
            .map(|l| {
                ConcurrencyLimitLayer::builder(l)
                    .routes(routes.clone())
                    .build()
            })
            .transpose()
            .map_err(|e| e.prefixed("limit"))?;
        let ramp = match (&self.ramp, &limit) {
            (Some(r), Some(l)) => match l.config().limit() {
                Limit::Fixed(max) => Some(Arc::new(Ramp::new(*r, l.handle(), *max))),
                _ => None,
            },
            _ => None,
        };
        let store = match store {
            Some(_) if self.check_only => BreakerStore::InMemory,
            store => store.unwrap_or_default(),
        };
        let span_key = self.breaker_key.clone();
        let settings = Settings {
            breaker: breaker.clone(),
            key: self.breaker_key.clone(),
            max_keys: self.max_keys,
            idle_timeout: self.idle_timeout,
            spread,
            ramp: self.ramp,
            fallback: match &fallback {
                Some(f) if f.all_routes => FallbackRoutes::All,
                _ => FallbackRoutes::Named(
                    routes
                        .iter()
                        .filter(|(id, _, _)| on_route.get(id.index()).copied().unwrap_or(false))
                        .map(|(_, name, _)| name.to_owned())
                        .collect(),
                ),
            },
        };
        let mut dependency = None;
        let breaker = match breaker {
            None => BreakerLayer::Off,
            Some(config) => {
                let mut b = CircuitBreakerLayer::builder(config.clone())
                    .routes(routes.clone())
                    .store(store.clone());
                for listener in &self.listeners {
                    let listener = Arc::clone(listener);
                    b = b.on_event(move |e| listener(e));
                }
                if let Some(ramp) = &ramp {
                    let ramp = Arc::clone(ramp);
                    b = b.on_event(move |e| ramp.on_event(e));
                }
                if let Some(max) = self.max_keys {
                    b = b.max_keys(max);
                }
                if let Some(idle) = self.idle_timeout {
                    b = b.idle_timeout(idle);
                }
                match self.breaker_key {
                    None => BreakerLayer::Single(b.build().map_err(|e| e.prefixed("breaker"))?),
                    Some(key) => {
                        let keyed = b.build_keyed(key).map_err(|e| e.prefixed("breaker"))?;
                        if let Some(rule) = spread {
                            // The dependency-wide breaker, in this process: its gate reads
                            // this process's count of the keys.
                            let mut d = CircuitBreakerLayer::builder(config)
                                .routes(routes.clone())
                                .store(BreakerStore::InMemory)
                                .key_spread(keyed.handle().spread_gate(rule));
                            for listener in self.listeners {
                                d = d.on_event(move |e| listener(e));
                            }
                            dependency = Some(d.build().map_err(|e| e.prefixed("breaker"))?);
                        }
                        BreakerLayer::Keyed(keyed)
                    }
                }
            }
        };
        let retry = retry
            .map(|r| RetryBudgetLayer::builder(r).routes(routes.clone()).build())
            .transpose()
            .map_err(|e| e.prefixed("retry"))?;
        let fallback = fallback.map(|f| Armed::new(f, on_route.into_boxed_slice(), &self.name));
        let parts: Arc<PolicyStages<C>> = Arc::new((
            match &breaker {
                BreakerLayer::Off => None,
                BreakerLayer::Single(b) => Some(BreakerStages::Single(b.layer(()).stage().clone())),
                BreakerLayer::Keyed(b) => {
                    let keys = b.layer(()).stage().clone();
                    if let Some(dependency) = &dependency {
                        // The dependency-wide breaker runs in the keys' guards (see
                        // `stages`): a freshly built keyed layer has no gate yet.
                        let gated = gate_keys(&keys, dependency.layer(()).stage());
                        debug_assert!(gated, "a new keyed breaker is not gated yet");
                    }
                    Some(BreakerStages::Keyed(keys))
                }
            },
            (
                limit.as_ref().map(|l| l.layer(()).stage().clone()),
                timeout.as_ref().map(|t| t.layer(()).stage().clone()),
            ),
        ));
        let timeouts = parts.1.1.as_ref().map(|t| t.timeouts().clone());
        let policy = Policy {
            inner: Arc::new(PolicyLayers {
                parts,
                shared: Arc::new(Shared {
                    timeouts,
                    name: self.name,
                    routes,
                    key: span_key,
                    fallback,
                    expose_verdict: self.expose_verdict,
                    ramp,
                    settings,
                    retry,
                    breaker,
                    dependency,
                    limit,
                    timeout,
                    store,
                }),
            }),
        };
        if let Some(registry) = &self.registry {
            registry
                .register(&policy)
                .map_err(|e| e.prefixed("registry"))?;
        }
        Ok(policy)
    }
}

/// The breaker a policy holds.
pub(crate) enum BreakerLayer<C> {
    Off,
    Single(CircuitBreakerLayer<C, PolicyStore>),
    Keyed(KeyedCircuitBreakerLayer<KeyBy, C, BreakerStore>),
}

/// What every service of a policy shares: what the services read per call (the name, the
/// routes, the fallback, the ramp), and the layers themselves, which the services reach
/// through the policy's stages and the retry service but which keep the policy listed in a
/// [`Registry`](crate::Registry) (it holds a weak reference to this) for as long as any
/// service of the policy is alive.
pub(crate) struct Shared<C> {
    pub(crate) name: Arc<str>,
    pub(crate) routes: RouteTable<C>,
    /// The keyed breaker's key function (for the call's span).
    pub(crate) key: Option<KeyBy>,
    pub(crate) fallback: Option<Armed>,
    /// Whether each answer's verdict is left in its response's extensions.
    pub(crate) expose_verdict: bool,
    pub(crate) ramp: Option<Arc<Ramp>>,
    pub(crate) settings: Settings,
    pub(crate) retry: Option<RetryBudgetLayer<C>>,
    pub(crate) breaker: BreakerLayer<C>,
    /// The dependency-wide breaker around a keyed one, gated by its keys' spread
    /// ([`PolicyBuilder::key_spread`]).
    pub(crate) dependency: Option<CircuitBreakerLayer<C, PolicyStore>>,
    pub(crate) limit: Option<ConcurrencyLimitLayer<C>>,
    pub(crate) timeout: Option<TimeoutLayer<C>>,
    /// Where the breaker keeps its state (kept for [`Policy::breaker_store`]).
    pub(crate) store: BreakerStore,
    /// Each call's timeout as the timeout stage reads it (a reload changes its default).
    pub(crate) timeouts: Option<fusebox_timeout::Timeouts>,
}

/// What a policy was built with beyond its layers' own configurations (for reading it
/// back: [`Policy::breaker_config`], and a policy written out as a file).
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) breaker: Option<CircuitBreakerConfig>,
    pub(crate) key: Option<KeyBy>,
    pub(crate) max_keys: Option<usize>,
    pub(crate) idle_timeout: Option<Duration>,
    /// The rule of the dependency-wide breaker gated by the keys' spread.
    pub(crate) spread: Option<KeySpread>,
    pub(crate) ramp: Option<RecoveryRamp>,
    /// The routes whose rejections go to the fallback.
    pub(crate) fallback: FallbackRoutes,
}

/// The routes whose rejections go to a policy's fallback.
#[derive(Clone, PartialEq)]
pub(crate) enum FallbackRoutes {
    /// Every route, those added by a reload included.
    All,
    /// These, by name (none: the policy has no fallback).
    Named(Vec<String>),
}

impl fmt::Debug for FallbackRoutes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FallbackRoutes::All => f.write_str("all routes"),
            FallbackRoutes::Named(names) => names.fmt(f),
        }
    }
}

pub(crate) struct PolicyLayers<C> {
    /// The breaker's, the limit's and the timeout's stages, as every service runs them.
    parts: Arc<PolicyStages<C>>,
    pub(crate) shared: Arc<Shared<C>>,
}

/// Retry budget → circuit breaker → concurrency limit → timeout around one route table,
/// as one [`Layer`]; see the [module docs](self).
///
/// Cloning is cheap and shares everything: the breaker, the limit, the budget.
pub struct Policy<C = StandardClassifier> {
    pub(crate) inner: Arc<PolicyLayers<C>>,
}

impl<C> Clone for Policy<C> {
    fn clone(&self) -> Self {
        Policy {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C> fmt::Debug for Policy<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = &self.inner.shared;
        f.debug_struct("Policy")
            .field("name", &l.name)
            .field("retry", &l.retry.is_some())
            .field(
                "breaker",
                &match l.breaker {
                    BreakerLayer::Off => "off",
                    BreakerLayer::Single(_) => "single",
                    BreakerLayer::Keyed(_) if l.dependency.is_some() => "keyed, spread-gated",
                    BreakerLayer::Keyed(_) => "keyed",
                },
            )
            .field("limit", &l.limit.is_some())
            .field("timeout", &l.timeout.is_some())
            .field("breaker_store", &l.store)
            .field("fallback", &l.fallback.is_some())
            .field("recovery_ramp", &l.ramp.is_some())
            .finish()
    }
}

impl<C: Classifier> Policy<C> {
    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.inner.shared.name
    }

    /// The breaker's configuration, as built (named after the policy unless named), if the
    /// policy has a breaker.
    pub fn breaker_config(&self) -> Option<&CircuitBreakerConfig> {
        self.inner.shared.settings.breaker.as_ref()
    }

    /// How a keyed breaker keys its breakers, if it is keyed.
    pub fn breaker_key(&self) -> Option<&KeyBy> {
        self.inner.shared.settings.key.as_ref()
    }

    /// A keyed breaker's [`max_keys`](PolicyBuilder::max_keys) and
    /// [`idle_timeout`](PolicyBuilder::idle_timeout), where given.
    pub fn breaker_key_limits(&self) -> (Option<usize>, Option<Duration>) {
        (
            self.inner.shared.settings.max_keys,
            self.inner.shared.settings.idle_timeout,
        )
    }

    /// The rule of the dependency-wide breaker gated by the keyed breaker's spread, if the
    /// policy has one ([`PolicyBuilder::key_spread`]).
    pub fn key_spread(&self) -> Option<&KeySpread> {
        self.inner.shared.settings.spread.as_ref()
    }

    /// The recovery ramp, if the policy has one.
    pub fn recovery_ramp(&self) -> Option<&RecoveryRamp> {
        self.inner.shared.settings.ramp.as_ref()
    }

    /// The routes (by name) whose rejections go to the fallback: those it names, or every
    /// route of the table when it applies to all ([`Fallback::all_routes`]).
    pub fn fallback_routes(&self) -> impl Iterator<Item = &str> {
        let shared = &self.inner.shared;
        let (all, named) = match &shared.settings.fallback {
            FallbackRoutes::All => (true, &[][..]),
            FallbackRoutes::Named(named) => (false, &named[..]),
        };
        let every = shared.routes.iter().filter(move |_| all);
        named
            .iter()
            .map(String::as_str)
            .chain(every.map(|(_, name, _)| name))
    }

    /// The route table every layer reads.
    pub fn routes(&self) -> &RouteTable<C> {
        &self.inner.shared.routes
    }

    /// The operator's handle on the breaker that stands for the whole dependency: an
    /// unkeyed breaker, or the dependency-wide breaker a keyed one has with a
    /// [`key_spread`](PolicyBuilder::key_spread); `None` for a keyed breaker without one.
    pub fn breaker_handle(&self) -> Option<BreakerHandle> {
        if let Some(d) = &self.inner.shared.dependency {
            return Some(d.handle());
        }
        match &self.inner.shared.breaker {
            BreakerLayer::Single(b) => Some(b.handle()),
            _ => None,
        }
    }

    /// The operator's handle on every key's breaker (keyed breakers).
    pub fn keyed_breaker_handle(&self) -> Option<KeyedBreakerHandle<BreakerKey>> {
        match &self.inner.shared.breaker {
            BreakerLayer::Keyed(b) => Some(b.handle()),
            _ => None,
        }
    }

    /// Where the breaker keeps its state ([`BreakerStore::InMemory`] when the policy has
    /// no breaker). With the `redis` feature, `BreakerStore::redis` gives the Redis
    /// connection's state and statistics.
    pub fn breaker_store(&self) -> &BreakerStore {
        &self.inner.shared.store
    }

    /// A view of the concurrency limit.
    pub fn limit_handle(&self) -> Option<LimitHandle> {
        self.inner.shared.limit.as_ref().map(|l| l.handle())
    }

    /// The retry budget.
    pub fn retry_budget(&self) -> Option<&RetryBudget> {
        self.inner.shared.retry.as_ref().map(|r| r.budget())
    }

    /// Whether the policy has a timeout layer.
    pub fn has_timeout(&self) -> bool {
        self.inner.shared.timeout.is_some()
    }

    /// The timeout layer's configuration.
    pub fn timeout_config(&self) -> Option<&TimeoutConfig> {
        self.inner.shared.timeout.as_ref().map(|t| t.config())
    }

    /// The concurrency limit's configuration: as built, or as the last
    /// [`reload`](Policy::reload) set it.
    pub fn limit_config(&self) -> Option<ConcurrencyLimitConfig> {
        self.inner
            .shared
            .limit
            .as_ref()
            .map(|l| l.handle().config())
    }

    /// The retry layer's configuration: as built, or as the last
    /// [`reload`](Policy::reload) set it.
    pub fn retry_config(&self) -> Option<Arc<RetryConfig>> {
        self.inner.shared.retry.as_ref().map(|r| r.config())
    }

    /// The layer that bounds response bodies by the timeout configuration's `body_timeout`
    /// (and callers' deadlines), when one is set: put it around the policy's service,
    /// `ServiceBuilder::new().layer(bodies).layer(policy)`. (It changes the response body
    /// type, so it cannot be an optional layer of the same type.)
    ///
    /// ```
    /// use fusebox::{Policy, TimeoutConfig};
    /// use std::time::Duration;
    ///
    /// let policy = Policy::builder("feed")
    ///     .timeout_config(TimeoutConfig::builder().body_timeout(Duration::from_secs(30)))
    ///     .build()?;
    /// let bodies = policy.body_timeout_layer().expect("a body timeout is configured");
    /// assert_eq!(bodies.timeout(), Some(Duration::from_secs(30)));
    /// # Ok::<(), fusebox::ConfigError>(())
    /// ```
    pub fn body_timeout_layer(&self) -> Option<BodyTimeoutLayer<C>> {
        self.inner
            .shared
            .timeout
            .as_ref()
            .filter(|t| t.config().body_timeout().is_some())
            .map(TimeoutLayer::body_layer)
    }

    /// Whether the policy serves fallbacks.
    pub fn has_fallback(&self) -> bool {
        self.inner.shared.fallback.is_some()
    }

    /// Whether the policy ramps its limit up after the breaker closes.
    pub fn has_recovery_ramp(&self) -> bool {
        self.inner.shared.ramp.is_some()
    }
}

impl<S, C: Classifier> Layer<S> for Policy<C> {
    type Service = PolicyService<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        use self::stack::Optional;
        let l = &*self.inner;
        let guarded = Staged::new(inner, Arc::clone(&l.parts));
        let retry = match &l.shared.retry {
            Some(r) => Optional::On(r.layer(guarded).with_verdicts()),
            None => Optional::Off(guarded),
        };
        PolicyService::new(retry, Arc::clone(&l.shared))
    }
}

#[cfg(test)]
mod tests;
