//! The `Retry` service and the state every clone of a layer shares.

use crate::backoff::{Backoff, server_delay};
use crate::budget::RetryBudget;
use crate::config::RetryConfig;
use crate::error::BoxError;
use crate::future::{Replay, ResponseFuture};
use crate::replay::{Buffered, ReplayBody};
use fusebox_classify::{CallMeta, Classifier, Clock, Deadline, RetryHint, RouteTable};
use http::{Request, Response};
use http_body::Body;
use metrics::Counter;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tower_service::Service;
use tracing::Span;

/// What every clone of one layer shares: settings, routes, the budget, the jitter source
/// and the metric handles (registered once, at layer construction).
pub(crate) struct Shared<C> {
    pub(crate) config: RetryConfig,
    pub(crate) routes: RouteTable<C>,
    pub(crate) budget: RetryBudget,
    backoff: Backoff,
    rng: Mutex<SmallRng>,
    pub(crate) metrics: Metrics,
}

impl<C> fmt::Debug for Shared<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

/// The counters, labelled with the layer's name.
pub(crate) struct Metrics {
    pub(crate) attempts: Counter,
    pub(crate) retries: Counter,
    pub(crate) hedges: Counter,
    pub(crate) budget_exhausted: Counter,
    pub(crate) cut_off: Counter,
}

impl Metrics {
    fn new(name: &str) -> Self {
        metrics::describe_counter!(
            "fusebox_retry_attempts_total",
            "Attempts sent by fusebox's retry layer: first attempts, retries and hedges."
        );
        metrics::describe_counter!("fusebox_retry_retries_total", "Retries the budget granted.");
        metrics::describe_counter!(
            "fusebox_retry_hedges_total",
            "Hedges (backup requests) the budget granted."
        );
        metrics::describe_counter!(
            "fusebox_retry_budget_exhausted_total",
            "Retries and hedges refused because the retry budget was spent."
        );
        metrics::describe_counter!(
            "fusebox_retry_cutoff_refusals_total",
            "Retries and hedges refused because the dependency's failure rate passed the cut-off."
        );
        let label = name.to_owned();
        Metrics {
            attempts: metrics::counter!("fusebox_retry_attempts_total", "name" => label.clone()),
            retries: metrics::counter!("fusebox_retry_retries_total", "name" => label.clone()),
            hedges: metrics::counter!("fusebox_retry_hedges_total", "name" => label.clone()),
            budget_exhausted: metrics::counter!("fusebox_retry_budget_exhausted_total", "name" => label.clone()),
            cut_off: metrics::counter!("fusebox_retry_cutoff_refusals_total", "name" => label),
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
            backoff: Backoff::new(config.base_delay(), config.max_delay()),
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
            metrics: Metrics::new(config.name()),
            config,
            routes,
        }
    }
}

impl<C> Shared<C> {
    /// Decides whether retry number `attempts` (the attempts made so far) may go, and after
    /// how long; takes it from the budget when it may.
    pub(crate) fn plan_retry(
        &self,
        hint: RetryHint,
        attempts: u32,
        deadline: Option<Deadline>,
    ) -> Result<Duration, Refusal> {
        if attempts >= self.config.max_attempts() {
            return Err(Refusal::Attempts);
        }
        let delay = match hint {
            RetryHint::After(after) => server_delay(
                after,
                self.config.wall_clock().now(),
                self.config.max_retry_after(),
            )
            .ok_or(Refusal::ServerDelay)?,
            _ => {
                let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
                self.backoff.delay(attempts, &mut *rng)
            }
        };
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
        if attempts >= self.config.max_attempts() {
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
            name = self.config.name(),
            attempts,
            reason = refusal.as_str(),
            "retry refused"
        );
    }
}

/// A span per attempt, carrying the attempt number (1-based). Disabled spans cost a
/// callsite check: nothing is formatted or allocated unless a subscriber wants DEBUG.
#[inline]
pub(crate) fn attempt_span(attempt: u32) -> Span {
    tracing::debug_span!("retry_attempt", attempt)
}

/// Retries requests to `S` within a shared budget; see the [crate docs](crate).
///
/// Built by [`RetryBudgetLayer`](crate::RetryBudgetLayer). Clones share the layer's budget.
pub struct Retry<S, C = fusebox_classify::StandardClassifier> {
    inner: S,
    shared: Arc<Shared<C>>,
}

impl<S, C> Retry<S, C> {
    pub(crate) fn new(inner: S, shared: Arc<Shared<C>>) -> Self {
        Retry { inner, shared }
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
}

impl<S: Clone, C> Clone for Retry<S, C> {
    fn clone(&self) -> Self {
        Retry {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug, C> fmt::Debug for Retry<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("inner", &self.inner)
            .field("shared", &self.shared)
            .finish()
    }
}

impl<S, C, B, ResB> Service<Request<B>> for Retry<S, C>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    C: Classifier,
    B: Body,
    B::Data: Clone,
    B::Error: Into<BoxError>,
{
    type Response = Response<ResB>;
    type Error = BoxError;
    type Future = ResponseFuture<S, C, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    #[inline]
    fn call(&mut self, request: Request<B>) -> Self::Future {
        let shared = &self.shared;
        shared.budget.deposit();
        shared.metrics.attempts.increment(1);
        let meta: CallMeta = shared.routes.meta(&request);
        let deadline = request.extensions().get::<Deadline>().copied();
        if deadline.is_some_and(|d| d.is_expired()) {
            // No attempt starts past the deadline, the first one included.
            return ResponseFuture::expired(Arc::clone(shared), meta);
        }
        let route = shared.routes.route(meta.route());
        let repeatable = route.retry_enabled() && shared.config.max_attempts() > 1;
        let (parts, body) = request.into_parts();

        if repeatable && body.is_end_stream() {
            // Nothing to buffer: every attempt gets an empty body.
            let service = self.inner.clone();
            let span = attempt_span(1);
            let attempt = Request::from_parts(parts.clone(), ReplayBody::empty());
            let future = span.in_scope(|| self.inner.call(attempt));
            return ResponseFuture::repeatable(
                future,
                span,
                Arc::clone(shared),
                meta,
                deadline,
                service,
                parts,
            );
        }
        let cap = shared.config.max_replay_body_bytes() as u64;
        if repeatable && body.size_hint().upper().is_some_and(|n| n <= cap) {
            // Buffer first, then send: the ready service goes into the future, a clone
            // stays here for the next call.
            let clone = self.inner.clone();
            let ready = std::mem::replace(&mut self.inner, clone);
            let replay = Replay::new(ready, parts, Buffered::default());
            return ResponseFuture::buffering(body, Arc::clone(shared), meta, deadline, replay);
        }
        // Streaming, too large, or never retried: sent once, untouched.
        let span = attempt_span(1);
        let attempt = Request::from_parts(parts, ReplayBody::streaming(body));
        let future = span.in_scope(|| self.inner.call(attempt));
        ResponseFuture::once(future, span, Arc::clone(shared), meta, deadline)
    }
}
