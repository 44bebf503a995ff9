//! The `Retry` service and the state every clone of a layer shares.

use crate::backoff::{Backoff, server_delay};
use crate::budget::RetryBudget;
use crate::config::RetryConfig;
use crate::error::BoxError;
use crate::future::{Replay, ResponseFuture, first_hedge};
use crate::replay::{Buffered, ReplayBody};
use crate::telemetry;
use crate::verdicts::{AttemptVerdicts, Classify};
use arc_swap::ArcSwap;
use arc_swap::cache::Cache;
use fusebox_classify::context::Scope;
use fusebox_classify::series::{Series, SeriesBuilder};
use fusebox_classify::shard::Leases;
use fusebox_classify::{CallMeta, Classifier, Clock, Deadline, RetryHint, RouteTable};
use http::{Request, Response};
use http_body::Body;
use metrics::Counter;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tower_service::Service;
use tracing::Span;

/// What every clone of one layer shares: settings, routes, the budget, the jitter source
/// and the metric handles (registered once, at layer construction).
pub(crate) struct Shared<C> {
    /// The settings calls read now: swapped whole by a reload
    /// ([`RetryBudgetLayer::reconfigure`](crate::RetryBudgetLayer::reconfigure)), read with
    /// one lock-free load where a call needs them.
    pub(crate) config: ArcSwap<RetryConfig>,
    pub(crate) routes: RouteTable<C>,
    pub(crate) budget: RetryBudget,
    rng: Mutex<SmallRng>,
    pub(crate) metrics: Metrics,
}

impl<C> fmt::Debug for Shared<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("config", &**self.config.load())
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

/// The counters, labelled `dependency` with the layer's name.
pub(crate) struct Metrics {
    pub(crate) attempts: Counter,
    pub(crate) retries: Counter,
    pub(crate) hedges: Counter,
    pub(crate) budget_exhausted: Counter,
    pub(crate) cut_off: Counter,
    /// The layer's name (fixed: it labels every series).
    pub(crate) name: Arc<str>,
    _series: Arc<Series>,
}

impl Metrics {
    fn new(name: &str) -> Self {
        crate::telemetry::describe();
        let b = SeriesBuilder::new(name);
        Metrics {
            attempts: b.counter(telemetry::ATTEMPTS_TOTAL, &[]),
            retries: b.counter(telemetry::RETRIES_TOTAL, &[]),
            hedges: b.counter(telemetry::HEDGES_TOTAL, &[]),
            budget_exhausted: b.counter(telemetry::BUDGET_EXHAUSTED_TOTAL, &[]),
            cut_off: b.counter(telemetry::CUTOFF_REFUSALS_TOTAL, &[]),
            name: Arc::from(name),
            _series: b.finish(),
        }
    }
}

/// Why a wanted retry or hedge was not made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    Attempts,
    ServerDelay,
    Deadline,
    CutOff,
    Budget,
}

impl Refusal {
    fn as_str(self) -> &'static str {
        match self {
            Refusal::Attempts => "max attempts reached",
            Refusal::ServerDelay => "server asked to wait longer than max_retry_after",
            Refusal::Deadline => "the deadline would pass first",
            Refusal::CutOff => "failure rate above the cut-off",
            Refusal::Budget => "retry budget exhausted",
        }
    }
}

impl<C: Classifier> Shared<C> {
    pub(crate) fn new(config: RetryConfig, routes: RouteTable<C>) -> Self {
        let seed = config.seed().unwrap_or_else(|| {
            // Process-random without an OS RNG dependency: std's per-process hash keys.
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        });
        Shared {
            budget: RetryBudget::with_clock(&config, Clock::new()),
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
            metrics: Metrics::new(config.name()),
            config: ArcSwap::from_pointee(config),
            routes,
        }
    }
}

impl<C> Shared<C> {
    /// See [`RetryBudgetLayer::reconfigure`](crate::RetryBudgetLayer::reconfigure).
    pub(crate) fn reconfigure(&self, config: RetryConfig) -> Result<(), crate::Reconfigure> {
        if config.name() != &*self.metrics.name {
            return Err(crate::Reconfigure::Name);
        }
        if !self.budget.reconfigure(&config) {
            return Err(crate::Reconfigure::Ttl);
        }
        self.config.store(Arc::new(config));
        Ok(())
    }

    /// Decides whether retry number `attempts` (the attempts made so far) may go, and after
    /// how long; takes it from the budget when it may.
    pub(crate) fn plan_retry(
        &self,
        hint: RetryHint,
        attempts: u32,
        deadline: Option<Deadline>,
    ) -> Result<Duration, Refusal> {
        let config = self.config.load();
        if attempts >= config.max_attempts() {
            return Err(Refusal::Attempts);
        }
        let delay = match hint {
            RetryHint::After(after) => {
                server_delay(after, config.wall_clock().now(), config.max_retry_after())
                    .ok_or(Refusal::ServerDelay)?
            }
            _ => {
                let backoff = Backoff::new(config.base_delay(), config.max_delay());
                let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
                backoff.delay(attempts, &mut *rng)
            }
        };
        drop(config);
        if let Some(deadline) = deadline {
            let now = tokio::time::Instant::now();
            if now
                .checked_add(delay)
                .is_none_or(|at| at >= deadline.instant())
            {
                return Err(Refusal::Deadline);
            }
        }
        self.take(Refusal::Budget).map(|()| {
            self.metrics.retries.increment(1);
            delay
        })
    }

    /// Decides whether a hedge may go now; takes it from the budget when it may.
    pub(crate) fn plan_hedge(
        &self,
        attempts: u32,
        deadline: Option<Deadline>,
    ) -> Result<(), Refusal> {
        if attempts >= self.config.load().max_attempts() {
            return Err(Refusal::Attempts);
        }
        if deadline.is_some_and(|d| d.is_expired()) {
            return Err(Refusal::Deadline);
        }
        self.take(Refusal::Budget)?;
        self.metrics.hedges.increment(1);
        Ok(())
    }

    /// The cut-off, then the budget.
    fn take(&self, refusal: Refusal) -> Result<(), Refusal> {
        if self.budget.is_cut_off() {
            self.metrics.cut_off.increment(1);
            return Err(Refusal::CutOff);
        }
        if !self.budget.try_withdraw() {
            self.metrics.budget_exhausted.increment(1);
            return Err(refusal);
        }
        Ok(())
    }

    /// Logs a refusal (formatting happens only when the event is enabled).
    pub(crate) fn refused(&self, refusal: Refusal, attempts: u32) {
        tracing::debug!(
            target: "fusebox::retry",
            name = self.metrics.name.as_ref(),
            attempts,
            reason = refusal.as_str(),
            "retry refused"
        );
    }
}

/// What the calls of one retry service share: the layer's budget and settings, and a spare
/// copy of the inner service that retries and hedges clone theirs from.
///
/// # Why a spare
///
/// A retry needs a service to send the request again, long after `call` returned. Keeping a
/// clone of the inner service in every call's future (as `tower::retry` does) costs every
/// healthy call a clone and a drop of the whole stack below — an atomic reference-count
/// increment and decrement for each layer that holds an `Arc`, on cache lines that every
/// thread calling the dependency shares — and makes every future as large as that stack.
/// Only a call that is actually retried needs one, so it is cloned from this spare then, and
/// boxed (a retry already waits out a backoff; one allocation is nothing next to it).
///
/// The spare sits behind a mutex so that a future holding the `Bound` stays `Send` when the
/// inner service is `Send` but not `Sync` (`tower::util::BoxCloneService`); the lock is taken
/// only to clone it, never on a healthy call.
pub(crate) struct Bound<S, C> {
    shared: Arc<Shared<C>>,
    /// Set by the first call (the inner service is only known to be `Clone` there).
    spare: OnceLock<Mutex<S>>,
}

impl<S, C> Bound<S, C> {
    fn new(shared: Arc<Shared<C>>) -> Self {
        Bound {
            shared,
            spare: OnceLock::new(),
        }
    }
}

impl<S: Clone, C> Bound<S, C> {
    /// Keeps a copy of `inner` for later retries, once.
    #[inline]
    fn keep_spare(&self, inner: &S) {
        if self.spare.get().is_none() {
            let _ = self.spare.set(Mutex::new(inner.clone()));
        }
    }

    /// A fresh clone of the inner service, for a retry or a hedge; `None` before the first
    /// call kept a spare (which cannot happen: only a call's future asks).
    pub(crate) fn spare(&self) -> Option<S> {
        let spare = self.spare.get()?;
        let service = spare.lock().unwrap_or_else(PoisonError::into_inner);
        Some(service.clone())
    }
}

impl<S, C> Deref for Bound<S, C> {
    type Target = Shared<C>;

    #[inline]
    fn deref(&self) -> &Shared<C> {
        &self.shared
    }
}

impl<S, C> fmt::Debug for Bound<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bound")
            .field("shared", &self.shared)
            .field("spare", &self.spare.get().is_some())
            .finish()
    }
}

/// A span per attempt, carrying the attempt number (1-based). Disabled spans cost a
/// callsite check: nothing is formatted or allocated unless a subscriber wants DEBUG.
#[inline]
pub(crate) fn attempt_span(attempt: u32) -> Span {
    tracing::debug_span!(target: "fusebox::retry", "retry_attempt", attempt)
}

/// Calls `service` inside `span`, with `scope` (what this layer resolved about the call)
/// current, so that the fusebox layers inside read it instead of resolving the attempt
/// again.
///
/// Not `Span::in_scope`: its closure's result — the attempt's future, hundreds of bytes
/// under a full policy — would be copied out of one more stack frame on every call.
///
/// Out of line: the future a function call returns is written straight into the place
/// its caller keeps it, where the same future built by inlined code is built aside and
/// then copied there (one copy of the whole future per call, the `calls` driver's copy
/// counts show).
#[inline(never)]
pub(crate) fn call_in<S: Service<R>, R>(
    span: &Span,
    scope: &Scope,
    service: &mut S,
    request: R,
) -> S::Future {
    let _entered = span.enter();
    let _current = scope.enter();
    service.call(request)
}

/// Retries requests to `S` within a shared budget; see the [crate docs](crate).
///
/// Built by [`RetryBudgetLayer`](crate::RetryBudgetLayer). Clones share the layer's budget.
///
/// `V` says where each attempt's verdict comes from: the retry's own classifier
/// ([`Classify`], the default), or the stages under it ([`FromStages`](crate::verdicts::FromStages):
/// see [`with_verdicts`](Retry::with_verdicts)).
pub struct Retry<S, C = fusebox_classify::StandardClassifier, V = Classify> {
    inner: S,
    verdicts: PhantomData<fn() -> V>,
    /// The layer's state.
    shared: Arc<Shared<C>>,
    /// The settings as this service last read them: a call compares one pointer with the
    /// layer's and reads them again only after a reload swapped them.
    settings: Cache<Settings<C>, Arc<RetryConfig>>,
    /// This service's spare, leased per thread: every call's future holds one (see
    /// [`fusebox_classify::shard`]). Made by the service's first call or first clone, and
    /// then shared by its clones; not by the layer, so that layering a service allocates
    /// nothing. (The spare is this service's own, a copy of its inner service: it cannot
    /// be the layer's, which builds services over different inner services.)
    bound: OnceLock<Arc<Leases<Bound<S, C>>>>,
}

impl<S, C> Retry<S, C> {
    pub(crate) fn new(inner: S, shared: Arc<Shared<C>>) -> Self {
        Retry {
            inner,
            verdicts: PhantomData,
            settings: Cache::new(Settings(Arc::clone(&shared))),
            shared,
            bound: OnceLock::new(),
        }
    }
}

/// The layer's reloadable settings, reached through its state: what a service's
/// [`Cache`] watches.
pub(crate) struct Settings<C>(Arc<Shared<C>>);

impl<C> Clone for Settings<C> {
    fn clone(&self) -> Self {
        Settings(Arc::clone(&self.0))
    }
}

impl<C> Deref for Settings<C> {
    type Target = ArcSwap<RetryConfig>;

    #[inline]
    fn deref(&self) -> &ArcSwap<RetryConfig> {
        &self.0.config
    }
}

impl<S, C, V> Retry<S, C, V> {
    /// The same service, taking each attempt's verdict from `V2`
    /// ([`AttemptVerdicts`](crate::verdicts::AttemptVerdicts)): with
    /// [`FromStages`](crate::verdicts::FromStages) around fusebox's stage runner, the
    /// verdict its stages gave the answer, so that the answer is not classified again.
    pub fn with_verdicts<V2>(self) -> Retry<S, C, V2> {
        Retry {
            inner: self.inner,
            verdicts: PhantomData,
            shared: self.shared,
            settings: self.settings,
            bound: self.bound,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, consuming the retry layer.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The budget shared by every clone of the layer.
    pub fn budget(&self) -> &RetryBudget {
        &self.shared.budget
    }

    /// Which leases this service holds (their address), if it has made them yet.
    #[cfg(test)]
    pub(crate) fn leases_made(&self) -> Option<usize> {
        self.bound.get().map(|leases| Arc::as_ptr(leases) as usize)
    }
}

/// The leases of a service's spare, made the first time they are asked for. A function of
/// the two fields, not a method, so that a call can hold them while it uses the inner
/// service.
#[inline]
fn leases<'a, S, C>(
    bound: &'a OnceLock<Arc<Leases<Bound<S, C>>>>,
    shared: &Arc<Shared<C>>,
) -> &'a Arc<Leases<Bound<S, C>>> {
    bound.get_or_init(|| Arc::new(Leases::new(Arc::new(Bound::new(Arc::clone(shared))))))
}

impl<S: Clone, C, V> Clone for Retry<S, C, V> {
    /// A clone shares this service's leases and spare (making them, if no call has yet).
    fn clone(&self) -> Self {
        let bound = Arc::clone(leases(&self.bound, &self.shared));
        Retry {
            inner: self.inner.clone(),
            verdicts: PhantomData,
            shared: Arc::clone(&self.shared),
            settings: self.settings.clone(),
            bound: OnceLock::from(bound),
        }
    }
}

impl<S: fmt::Debug, C, V> fmt::Debug for Retry<S, C, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("inner", &self.inner)
            .field("shared", &self.shared)
            .field("bound", &self.bound.get())
            .finish()
    }
}

impl<S, C, V, B, ResB> Service<Request<B>> for Retry<S, C, V>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    C: Classifier,
    V: AttemptVerdicts<S::Future>,
    B: Body,
    B::Data: Clone,
    B::Error: Into<BoxError>,
{
    type Response = Response<ResB>;
    type Error = BoxError;
    type Future = ResponseFuture<S, C, B, V>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    #[inline(always)]
    fn call(&mut self, request: Request<B>) -> Self::Future {
        let leases = leases(&self.bound, &self.shared);
        let bound = &***leases;
        bound.budget.deposit();
        bound.metrics.attempts.increment(1);
        let mut scope = Scope::new();
        let meta: CallMeta = bound.routes.meta_in(&request, &mut scope);
        let deadline = request.extensions().get::<Deadline>().copied();
        if deadline.is_some_and(|d| d.is_expired()) {
            // No attempt starts past the deadline, the first one included.
            return ResponseFuture::expired(leases.lease(), meta);
        }
        let route = bound.routes.route(meta.route());
        // The settings a reload may swap, read once for the whole of `call`: one pointer
        // compared with the layer's while they stay the same.
        let config = self.settings.load();
        let repeatable = route.retry_enabled() && config.max_attempts() > 1;
        let (parts, body) = request.into_parts();

        if repeatable && body.is_end_stream() {
            // Nothing to buffer: every attempt gets an empty body.
            bound.keep_spare(&self.inner);
            let inner = &mut self.inner;
            let hedge = first_hedge(config, &meta);
            return ResponseFuture::repeatable(
                // The attempt is made where it is sent, from the head the future keeps.
                |span, parts| {
                    let attempt = Request::from_parts(parts.clone(), ReplayBody::empty());
                    call_in(span, &scope, inner, attempt)
                },
                attempt_span(1),
                leases.lease(),
                meta,
                deadline,
                parts,
                hedge,
            );
        }
        let cap = config.max_replay_body_bytes() as u64;
        if repeatable && body.size_hint().upper().is_some_and(|n| n <= cap) {
            bound.keep_spare(&self.inner);
            // The body is read before the first attempt: that attempt goes to the service
            // the caller polled ready, taken out of this one (which gets a fresh clone).
            let clone = self.inner.clone();
            let ready = std::mem::replace(&mut self.inner, clone);
            let replay = Replay::new(Some(Box::new(ready)), parts, Buffered::default());
            return ResponseFuture::buffering(body, leases.lease(), meta, deadline, replay);
        }
        // Streaming, too large, or never retried: sent once, untouched.
        let span = attempt_span(1);
        let attempt = Request::from_parts(parts, ReplayBody::streaming(body));
        let future = call_in(&span, &scope, &mut self.inner, attempt);
        ResponseFuture::once(future, span, leases.lease(), meta, deadline)
    }
}
