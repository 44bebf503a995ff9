//! The services: [`Timeout`] and [`IncomingDeadline`].

use crate::body::TimeoutBody;
use crate::budget::{self, Budget};
use crate::config::{DeadlineConfig, TimeoutConfig};
use crate::future::{BodyFuture, Bound, ResponseFuture, Timer};
use crate::table::Timeouts;
use crate::telemetry::{self, RouteSeries};
use fusebox_classify::context::Scope;
use fusebox_classify::deadline::GRPC_TIMEOUT;
use fusebox_classify::error::DeadlineExceeded;
use fusebox_classify::route::PerRoute;
use fusebox_classify::shard::{Lease, Leases};
use fusebox_classify::stage::{Admit, Answer, NoEnd, NoWait, Opaque, Stage, Staged};
use fusebox_classify::{BoxError, Classifier, Deadline, RouteId, RouteTable, SharedVerdict};
use http::{HeaderMap, Request, Response};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tower_service::Service;

/// The names of a table's routes, leased per thread: every call's future holds its route's
/// name (for the [`Elapsed`](crate::error::Elapsed) error and the metrics of a timeout),
/// and one shared `Arc` would make every thread calling the dependency write to one cache
/// line twice per call ([`fusebox_classify::shard`]). One set of leases covers the whole
/// table, and a layer makes it once: the services it builds share it. A route added to the
/// table while it runs ([`RouteTable::edit`]) gets its name and metric handles the first
/// time a call is on it.
#[derive(Clone)]
pub(crate) struct RouteNames {
    names: Arc<Leases<PerRoute<RouteSeries>>>,
    /// The dependency the series are labelled with, for routes added later.
    dependency: Arc<str>,
}

impl RouteNames {
    /// The names of `routes`, with their metric handles labelled `dependency`.
    pub(crate) fn new<C: Classifier>(routes: &RouteTable<C>, dependency: &Arc<str>) -> Self {
        let names = routes.per_route(|id| RouteSeries::new(dependency, routes.shared_name(id)));
        RouteNames {
            names: Arc::new(Leases::new(Arc::new(names))),
            dependency: Arc::clone(dependency),
        }
    }

    /// The name of route `id` of `routes` (the default route's for an id of another
    /// table), leased for this thread.
    #[inline]
    pub(crate) fn lease<C: Classifier>(&self, id: RouteId, routes: &RouteTable<C>) -> RouteName {
        let route = if self.names.shared().get(id).is_some() {
            id
        } else {
            self.grow(id, routes)
        };
        RouteName {
            names: self.names.lease(),
            route,
        }
    }

    /// Names route `id`, added to `routes` since the names were made; the default route
    /// for an id `routes` never gave out.
    #[cold]
    #[inline(never)]
    fn grow<C: Classifier>(&self, id: RouteId, routes: &RouteTable<C>) -> RouteId {
        let named = routes.grow(self.names.shared(), id, |added| {
            RouteSeries::new(&self.dependency, routes.shared_name(added))
        });
        if named.is_some() {
            id
        } else {
            RouteId::DEFAULT
        }
    }
}

impl std::fmt::Debug for RouteNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.names.shared().iter().map(|r| &**r.name()))
            .finish()
    }
}

/// One call's route name: this thread's lease on the table's names, and the route.
pub(crate) struct RouteName {
    names: Arc<Lease<PerRoute<RouteSeries>>>,
    route: RouteId,
}

impl RouteName {
    /// The name.
    #[inline]
    pub(crate) fn get(&self) -> &RouteSeries {
        // `route` was checked against the table's names when the lease was taken.
        self.names.get_or_default(self.route)
    }

    /// The same route, to keep past the call (a body's timer): another count on this
    /// thread's lease.
    pub(crate) fn series(&self) -> RouteName {
        RouteName {
            names: Arc::clone(&self.names),
            route: self.route,
        }
    }
}

impl std::fmt::Debug for RouteName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RouteName").field(&&**self.get()).finish()
    }
}

/// The timeout's per-call logic, as a [`Stage`]: bound the call by its route's timeout
/// and the caller's deadline (telling the next hop its budget), refuse it at once when
/// the deadline has passed, and end it with [`Elapsed`](crate::error::Elapsed) when the
/// bound passes first.
///
/// [`Timeout`] runs it alone; fusebox's `Policy` runs it innermost, after the breaker's
/// and the limit's stages, in one future.
#[derive(Debug, Clone)]
pub struct TimeoutStage<C> {
    routes: RouteTable<C>,
    names: RouteNames,
    config: TimeoutConfig,
    /// Each route's timeout as calls read it (changed in place by a reload).
    timeouts: Timeouts,
}

impl<C> TimeoutStage<C> {
    /// Each route's timeout as this stage reads it, per call: set a new value there to
    /// change the timeout of the calls that start from then on.
    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// Writes the budget of a call with a deadline into the request's headers (never
    /// loosening a stricter value the request already carries). Allocates: only called
    /// for requests that carry a deadline.
    fn propagate(&self, headers: &mut HeaderMap, limit: Duration) {
        if self.config.propagate_grpc_timeout()
            && let Some(value) = budget::outbound_grpc_timeout(headers.get(GRPC_TIMEOUT), limit)
        {
            headers.insert(GRPC_TIMEOUT, value);
        }
        if let Some(name) = self.config.deadline_header() {
            let stricter = headers
                .get(name)
                .and_then(budget::parse_millis)
                .is_some_and(|theirs| theirs <= limit);
            if !stricter {
                headers.insert(name.clone(), budget::millis_value(limit));
            }
        }
    }
}

impl<B, C: Classifier> Stage<Request<B>> for TimeoutStage<C> {
    type Admitted = Bound;
    type Waiting = NoWait;
    type End = NoEnd;
    type Timer = Timer;

    #[inline(always)]
    fn admit(&self, request: &mut Request<B>, scope: &mut Scope) -> Admit<Bound, NoWait> {
        match self.bound_in(request, scope) {
            Ok(bound) => Admit::Ready(bound),
            Err(expired) => Admit::Refuse(expired.into_error()),
        }
    }

    fn poll_wait(
        &self,
        waiting: Pin<&mut NoWait>,
        _: &mut Request<B>,
        _: &mut Scope,
        _: &mut Context<'_>,
    ) -> Poll<Admit<Bound, NoWait>> {
        match *waiting.get_mut() {}
    }

    #[inline(always)]
    fn poll_deadline(
        admitted: Pin<&mut Bound>,
        timer: Pin<&mut Timer>,
        cx: &mut Context<'_>,
    ) -> Poll<BoxError> {
        timer.poll_elapsed(&admitted, cx)
    }

    #[inline(always)]
    fn on_answer(
        admitted: Pin<&mut Bound>,
        answer: Answer<'_>,
        _: &SharedVerdict,
    ) -> Option<NoEnd> {
        // A call this timeout ended was counted when its time ran out.
        if !matches!(answer, Answer::Error(e) if e.is::<fusebox_classify::error::Elapsed>()) {
            crate::telemetry::completed(admitted.route());
        }
        None
    }
}

/// Bounds every call by its route's timeout and by the caller's deadline, if any.
///
/// Built by [`TimeoutLayer`](crate::TimeoutLayer); see the [crate docs](crate) for the
/// behaviour. Fails with [`Elapsed`](crate::error::Elapsed) when a call gets no response
/// in time, and with [`DeadlineExceeded`](crate::error::DeadlineExceeded), without calling
/// the inner service, when the deadline had already passed. The response itself passes
/// through untouched (bound its body with [`BodyTimeout`]).
///
/// It is the stage runner ([`Staged`]) over the timeout's [`TimeoutStage`].
#[derive(Debug, Clone)]
pub struct Timeout<S, C> {
    staged: Staged<S, TimeoutStage<C>, Opaque>,
}

impl<S, C: Classifier> Timeout<S, C> {
    /// Wraps `inner`.
    pub fn new(inner: S, routes: RouteTable<C>, config: TimeoutConfig) -> Self {
        let names = RouteNames::new(&routes, config.shared_name());
        let timeouts = Timeouts::new(&routes, &config);
        Timeout::with_names(inner, names, routes, config, timeouts)
    }

    /// Wraps `inner`, with the names the layer made of `routes` and the timeouts it shares
    /// with its other services.
    pub(crate) fn with_names(
        inner: S,
        names: RouteNames,
        routes: RouteTable<C>,
        config: TimeoutConfig,
        timeouts: Timeouts,
    ) -> Self {
        Timeout {
            staged: Staged::new(
                inner,
                TimeoutStage {
                    names,
                    routes,
                    config,
                    timeouts,
                },
            ),
        }
    }

    /// The call's time bound, without calling the inner service: for a caller that drives
    /// the timeout by hand. See [`TimeoutStage::bound`].
    #[inline]
    pub fn bound<B>(&self, request: &mut Request<B>) -> Result<Bound, Expired> {
        self.stage().bound(request)
    }
}

impl<S, C> Timeout<S, C> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        self.staged.get_ref()
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        self.staged.get_mut()
    }

    /// The inner service.
    pub fn into_inner(self) -> S {
        self.staged.into_inner()
    }

    /// The timeout's stage.
    pub fn stage(&self) -> &TimeoutStage<C> {
        self.staged.stage()
    }

    /// Each route's timeout as this service (and its clones) read it, per call: set a new
    /// value there to change the timeout of the calls that start from then on.
    pub fn timeouts(&self) -> &Timeouts {
        self.stage().timeouts()
    }
}

impl<S, C, ReqBody> Service<Request<ReqBody>> for Timeout<S, C>
where
    S: Service<Request<ReqBody>>,
    S::Error: Into<BoxError>,
    C: Classifier,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S, ReqBody, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.staged.poll_ready(cx)
    }

    #[inline(always)]
    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        self.staged.call(request)
    }
}

/// A call whose deadline had passed before it was made.
#[derive(Debug)]
pub struct Expired {
    route: RouteName,
    deadline: Instant,
}

impl Expired {
    /// The error to fail the call with.
    pub fn into_error(self) -> BoxError {
        Box::new(DeadlineExceeded::new())
    }

    /// The name of the call's route.
    pub fn route(&self) -> &str {
        self.route.get().name()
    }

    /// The deadline that had passed.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl<C: Classifier> TimeoutStage<C> {
    /// How long `request` may take to answer: its route's timeout, or less if its
    /// [`Deadline`] comes first (then the deadline's headers are written into the request
    /// when the layer propagates them); [`Expired`] (counted in the metrics) when the
    /// deadline has passed already and the call must not be made.
    ///
    /// The stage's admission is this; a caller that drives the timeout by hand races the
    /// inner call against the bound with a [`Timer`](crate::compose::Timer).
    ///
    /// ```
    /// use fusebox_classify::{Route, RouteTable};
    /// use fusebox_timeout::compose::Timer;
    /// use fusebox_timeout::{Deadline, TimeoutConfig, TimeoutLayer};
    /// use http::Request;
    /// use std::time::Duration;
    /// use tower::Layer;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// let routes = RouteTable::single(Route::default().timeout(Duration::from_millis(250)));
    /// // The timeout's decisions, without an inner service to call.
    /// let timeout = TimeoutLayer::builder(TimeoutConfig::default()).routes(routes).build()?.layer(());
    ///
    /// let mut request = Request::new(());
    /// let bound = timeout.bound(&mut request).expect("no deadline has passed");
    /// assert_eq!(bound.limit(), Duration::from_millis(250));
    /// // A call that never answers loses the race against its timer.
    /// let mut timer = Box::pin(Timer::new());
    /// let elapsed = std::future::poll_fn(|cx| timer.as_mut().poll_elapsed(&bound, cx)).await;
    /// assert_eq!(elapsed.to_string(), "request on `default` timed out after 250 ms");
    ///
    /// // A request whose deadline has passed is not to be sent at all.
    /// let mut late = Request::new(());
    /// late.extensions_mut().insert(Deadline::after(Duration::ZERO));
    /// tokio::time::advance(Duration::from_millis(1)).await;
    /// assert!(timeout.bound(&mut late).is_err());
    /// # Ok(())
    /// # }
    /// ```
    #[inline]
    pub fn bound<B>(&self, request: &mut Request<B>) -> Result<Bound, Expired> {
        self.bound_in(request, &mut Scope::new())
    }

    /// [`bound`](TimeoutStage::bound), reading the call's route from its `scope`.
    #[inline]
    pub fn bound_in<B>(
        &self,
        request: &mut Request<B>,
        scope: &mut Scope,
    ) -> Result<Bound, Expired> {
        let id = self.routes.resolve_in(request, scope);
        let route_timeout = self.timeouts.get(id);
        let route = self.names.lease(id, &self.routes);

        // An empty `Extensions` answers without hashing: no deadline costs one branch.
        let Some(deadline) = request.extensions().get::<Deadline>().copied() else {
            // The healthy path: one clock read (to start the timer), as tower's Timeout.
            return Ok(Bound::after(route, route_timeout));
        };

        let now = Instant::now();
        match budget::budget(now, deadline.instant(), route_timeout) {
            Budget::Expired => {
                telemetry::deadline_exceeded(route.get());
                Err(Expired {
                    route,
                    deadline: deadline.instant(),
                })
            }
            Budget::Run { limit } => {
                if self.config.propagates() {
                    self.propagate(request.headers_mut(), limit);
                }
                // `limit` is at most the time left, so `now + limit` cannot overflow.
                Ok(Bound::until(route, now + limit, limit))
            }
        }
    }
}

/// Bounds how long each response body may take, from its headers to its end.
///
/// Built by [`BodyTimeoutLayer`](crate::BodyTimeoutLayer). The timer runs until the
/// configured [`body_timeout`](TimeoutConfig::body_timeout) or the caller's [`Deadline`],
/// whichever comes first; when it fires, the body ends with an
/// [`Elapsed`](crate::error::Elapsed) error ([`TimeoutBody`]). A response with neither
/// passes through with no timer. Adds no error of its own to the call.
#[derive(Debug, Clone)]
pub struct BodyTimeout<S, C> {
    inner: S,
    routes: RouteTable<C>,
    names: RouteNames,
    timeout: Option<Duration>,
}

impl<S, C: Classifier> BodyTimeout<S, C> {
    /// Wraps `inner`; bodies may take `timeout` (or forever, with `None`, unless the
    /// request carries a deadline). Its metrics are labelled `dependency="default"`; a
    /// [`BodyTimeoutLayer`](crate::BodyTimeoutLayer) labels them with its timeout's name.
    pub fn new(inner: S, routes: RouteTable<C>, timeout: Option<Duration>) -> Self {
        let names = RouteNames::new(&routes, &Arc::from("default"));
        BodyTimeout::with_names(inner, names, routes, timeout)
    }

    /// Wraps `inner`, with the names the layer made of `routes`.
    pub(crate) fn with_names(
        inner: S,
        names: RouteNames,
        routes: RouteTable<C>,
        timeout: Option<Duration>,
    ) -> Self {
        BodyTimeout {
            inner,
            names,
            routes,
            timeout,
        }
    }
}

impl<S, C> BodyTimeout<S, C> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, C, ReqBody, ResBody> Service<Request<ReqBody>> for BodyTimeout<S, C>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    C: Classifier,
{
    type Response = Response<TimeoutBody<ResBody>>;
    type Error = S::Error;
    type Future = BodyFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let mut scope = Scope::new();
        let route = self
            .names
            .lease(self.routes.resolve_in(&request, &mut scope), &self.routes);
        let deadline = request
            .extensions()
            .get::<Deadline>()
            .map(Deadline::instant);
        let _current = scope.hand_on();
        BodyFuture::new(self.inner.call(request), route, self.timeout, deadline)
    }
}

/// Puts the caller's deadline, read from the request's headers, into its extensions.
///
/// Built by [`IncomingDeadlineLayer`](crate::IncomingDeadlineLayer). A request that already
/// carries a [`Deadline`] keeps the earlier of the two. Malformed header values are ignored
/// and counted ([`MALFORMED_DEADLINE_TOTAL`](crate::telemetry::MALFORMED_DEADLINE_TOTAL));
/// requests without the headers pass through untouched. Adds no error and no future.
#[derive(Debug, Clone)]
pub struct IncomingDeadline<S> {
    inner: S,
    config: DeadlineConfig,
}

impl<S> IncomingDeadline<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, config: DeadlineConfig) -> Self {
        IncomingDeadline { inner, config }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqBody> Service<Request<ReqBody>> for IncomingDeadline<S>
where
    S: Service<Request<ReqBody>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        let found = budget::incoming(
            request.headers(),
            self.config.grpc_timeout(),
            self.config.header(),
        );
        if let Some(source) = found.malformed {
            telemetry::malformed(source);
        }
        if let Some(timeout) = found.timeout {
            let mut deadline = Deadline::after(timeout);
            if let Some(earlier) = request.extensions().get::<Deadline>() {
                deadline = deadline.min(*earlier);
            }
            request.extensions_mut().insert(deadline);
        }
        self.inner.call(request)
    }
}
