//! The response futures: [`ResponseFuture`] of [`Timeout`](crate::Timeout) and
//! [`BodyFuture`] of [`BodyTimeout`](crate::BodyTimeout).

use crate::body::TimeoutBody;
use crate::service::{RouteName, TimeoutStage};
use crate::telemetry::{self, Phase};
use fusebox_classify::BoxError;
use fusebox_classify::error::Elapsed;
use fusebox_classify::stage::{Opaque, StagedFuture};
use http::{Request, Response};
use pin_project::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// The future of [`Timeout`](crate::Timeout) around `S` called with `Request<B>`: the
/// inner call, bounded by the route's timeout and the caller's deadline, or a refusal
/// when the deadline had already passed. It is the stage runner's future; the answer is
/// handed on untouched.
pub type ResponseFuture<S, B, C> = StagedFuture<S, Request<B>, TimeoutStage<C>, Opaque>;

/// How long one call may take to answer: the instant its time is up, and what to report
/// then. Race the call against it with a [`Timer`].
///
/// Made by [`TimeoutStage::bound`](crate::TimeoutStage::bound) (and
/// [`Timeout::bound`](crate::Timeout::bound), for a caller that drives the timeout by
/// hand); it is what the timeout's stage holds for an admitted call, and the call's
/// [`Timer`] (the stage's [`Timer`](fusebox_classify::stage::Stage::Timer)) races it.
#[derive(Debug)]
pub struct Bound {
    at: Instant,
    route: RouteName,
    limit: Duration,
}

impl Bound {
    /// `timeout` from now; a timeout too long to add fires never (in practice).
    #[inline]
    pub(crate) fn after(route: RouteName, timeout: Duration) -> Self {
        let now = Instant::now();
        Bound {
            at: now
                .checked_add(timeout)
                .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30)),
            route,
            limit: timeout,
        }
    }

    /// Until `at`, `limit` from now (a caller's deadline).
    pub(crate) fn until(route: RouteName, at: Instant, limit: Duration) -> Self {
        Bound { at, route, limit }
    }

    /// The time the call was given.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// When the time is up.
    pub fn deadline(&self) -> Instant {
        self.at
    }

    /// The route's name and counters.
    #[inline]
    pub(crate) fn route(&self) -> &crate::telemetry::RouteSeries {
        self.route.get()
    }
}

/// The timer that races a call against its [`Bound`].
///
/// A [`Sleep`] pinned in place: nothing is boxed. It is made only when first polled, for
/// the bound's instant: poll the call first, and a call that answers on its first poll (a
/// handler that answers at once, a cached response) never makes one — making one clones
/// tokio's runtime handle, an atomic increment and decrement on a count every thread
/// shares. Kept apart from the [`Bound`] so that a call's bound, small, can be moved while
/// its timer is not yet made.
#[pin_project]
#[derive(Debug, Default)]
pub struct Timer {
    #[pin]
    sleep: Option<Sleep>,
}

impl Timer {
    /// A timer not armed yet.
    #[inline]
    pub fn new() -> Self {
        Timer { sleep: None }
    }

    /// Ready with an [`Elapsed`] error (counted in the timeout's metrics) once `bound`'s
    /// time is up; arms the timer, for `bound`'s instant, on the first poll.
    #[inline]
    pub fn poll_elapsed(
        self: Pin<&mut Self>,
        bound: &Bound,
        cx: &mut Context<'_>,
    ) -> Poll<BoxError> {
        let mut sleep = self.project().sleep;
        if sleep.is_none() {
            sleep.set(Some(tokio::time::sleep_until(bound.at)));
        }
        if let Some(sleep) = sleep.as_pin_mut() {
            ready!(sleep.poll(cx));
        }
        let route = bound.route.get();
        telemetry::elapsed(route, bound.limit, Phase::Headers);
        Poll::Ready(Box::new(Elapsed::new(Arc::clone(route), bound.limit)))
    }
}

/// The response future of [`BodyTimeout`](crate::BodyTimeout): the inner call, then its
/// response body wrapped in a [`TimeoutBody`] whose timer starts when the headers arrive.
#[pin_project]
#[derive(Debug)]
pub struct BodyFuture<F> {
    #[pin]
    inner: F,
    route: RouteName,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
}

impl<F> BodyFuture<F> {
    #[inline]
    pub(crate) fn new(
        inner: F,
        route: RouteName,
        timeout: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Self {
        BodyFuture {
            inner,
            route,
            timeout,
            deadline,
        }
    }
}

impl<F, B, E> Future for BodyFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<TimeoutBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.inner.poll(cx))?;
        let now = Instant::now();
        let by_timeout = this.timeout.and_then(|t| now.checked_add(t));
        let until = match (by_timeout, *this.deadline) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => return Poll::Ready(Ok(response.map(TimeoutBody::passthrough))),
        };
        let limit = until.saturating_duration_since(now);
        let sleep = tokio::time::sleep_until(until);
        let route = this.route.series();
        Poll::Ready(Ok(
            response.map(|body| TimeoutBody::with_timer(body, sleep, route, limit))
        ))
    }
}
