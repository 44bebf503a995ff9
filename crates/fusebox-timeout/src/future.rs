//! The response futures: [`ResponseFuture`] of [`Timeout`](crate::Timeout) and
//! [`BodyFuture`] of [`BodyTimeout`](crate::BodyTimeout).

use crate::body::TimeoutBody;
use crate::telemetry::{self, Phase};
use fusebox_classify::BoxError;
use fusebox_classify::error::{DeadlineExceeded, Elapsed};
use fusebox_classify::shard::Lease;
use http::Response;
use pin_project::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// The response future of [`Timeout`](crate::Timeout): the inner call raced against its
/// timer.
///
/// Its timer is a [`Sleep`] pinned inside it: nothing is boxed. The `Sleep` is made only
/// when the inner call first returns `Pending`, for the instant fixed when the call was
/// made: a call that answers on its first poll (a handler that answers at once, a cached
/// response) never makes one — making one clones tokio's runtime handle, an atomic
/// increment and decrement on a count every thread shares. Fails with [`Elapsed`] when the
/// timer fires first, and with [`DeadlineExceeded`] at once when the caller's deadline had
/// passed before the call (the inner service was not called: no inner future).
#[pin_project]
#[derive(Debug)]
pub struct ResponseFuture<F> {
    #[pin]
    inner: Option<F>,
    #[pin]
    timer: Timer,
    route: Arc<Lease<str>>,
    limit: Duration,
}

/// The timer of a call: when it fires, then the `Sleep` armed for that instant.
#[pin_project(project = TimerProj)]
#[derive(Debug)]
enum Timer {
    /// Not armed yet: the call has not been pending.
    At(Instant),
    /// Armed.
    Armed(#[pin] Sleep),
}

impl Timer {
    /// `timeout` from now; a timeout too long to add fires never (in practice).
    #[inline]
    fn after(timeout: Duration) -> Timer {
        let now = Instant::now();
        Timer::At(
            now.checked_add(timeout)
                .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30)),
        )
    }

    /// Polls the timer, arming it first if needed.
    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let TimerProj::At(at) = self.as_mut().project() {
            let at = *at;
            self.set(Timer::Armed(tokio::time::sleep_until(at)));
        }
        match self.project() {
            TimerProj::Armed(sleep) => sleep.poll(cx),
            TimerProj::At(_) => Poll::Pending,
        }
    }
}

impl<F> ResponseFuture<F> {
    /// A call bounded by `timeout` from now.
    #[inline]
    pub(crate) fn new(inner: F, route: Arc<Lease<str>>, timeout: Duration) -> Self {
        ResponseFuture {
            inner: Some(inner),
            timer: Timer::after(timeout),
            route,
            limit: timeout,
        }
    }

    /// A call bounded by a caller's deadline: its timer fires at `until`, `limit` from now.
    pub(crate) fn until(inner: F, route: Arc<Lease<str>>, until: Instant, limit: Duration) -> Self {
        ResponseFuture {
            inner: Some(inner),
            timer: Timer::At(until),
            route,
            limit,
        }
    }

    /// A call refused because its deadline, `deadline`, had passed.
    pub(crate) fn expired(route: Arc<Lease<str>>, deadline: Instant) -> Self {
        ResponseFuture {
            inner: None,
            timer: Timer::At(deadline),
            route,
            limit: Duration::ZERO,
        }
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(inner) = this.inner.as_pin_mut() else {
            return Poll::Ready(Err(Box::new(DeadlineExceeded::new())));
        };
        // The call first, as tower's Timeout does: a response that is ready is returned
        // even if the timer is due, and a call that completes on its first poll never
        // arms a timer.
        if let Poll::Ready(result) = inner.poll(cx) {
            return Poll::Ready(result.map_err(Into::into));
        }
        ready!(this.timer.poll(cx));
        let route = this.route.shared();
        telemetry::elapsed(route, *this.limit, Phase::Headers);
        Poll::Ready(Err(Box::new(Elapsed::new(Arc::clone(route), *this.limit))))
    }
}

/// The response future of [`BodyTimeout`](crate::BodyTimeout): the inner call, then its
/// response body wrapped in a [`TimeoutBody`] whose timer starts when the headers arrive.
#[pin_project]
#[derive(Debug)]
pub struct BodyFuture<F> {
    #[pin]
    inner: F,
    route: Arc<Lease<str>>,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
}

impl<F> BodyFuture<F> {
    #[inline]
    pub(crate) fn new(
        inner: F,
        route: Arc<Lease<str>>,
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
        let route = Arc::clone(this.route.shared());
        Poll::Ready(Ok(
            response.map(|body| TimeoutBody::with_timer(body, sleep, route, limit))
        ))
    }
}
