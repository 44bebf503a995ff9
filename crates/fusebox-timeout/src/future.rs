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
/// Its timer is a [`Sleep`] pinned inside it: nothing is boxed. Fails with [`Elapsed`]
/// when the timer fires first, and with [`DeadlineExceeded`] at once when the caller's
/// deadline had passed before the call (the inner service was not called: no inner
/// future).
#[pin_project]
#[derive(Debug)]
pub struct ResponseFuture<F> {
    #[pin]
    inner: Option<F>,
    #[pin]
    sleep: Sleep,
    route: Arc<Lease<str>>,
    limit: Duration,
}

impl<F> ResponseFuture<F> {
    /// A call bounded by `timeout` from now (the timer is built in place).
    #[inline]
    pub(crate) fn new(inner: F, route: Arc<Lease<str>>, timeout: Duration) -> Self {
        ResponseFuture {
            inner: Some(inner),
            sleep: tokio::time::sleep(timeout),
            route,
            limit: timeout,
        }
    }

    /// A call bounded by a caller's deadline: its timer fires at `until`, `limit` from now.
    pub(crate) fn until(inner: F, route: Arc<Lease<str>>, until: Instant, limit: Duration) -> Self {
        ResponseFuture {
            inner: Some(inner),
            sleep: tokio::time::sleep_until(until),
            route,
            limit,
        }
    }

    /// A call refused because its deadline, `deadline`, had passed.
    pub(crate) fn expired(route: Arc<Lease<str>>, deadline: Instant) -> Self {
        ResponseFuture {
            inner: None,
            sleep: tokio::time::sleep_until(deadline),
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
        // even if the timer is due, and the timer is never registered with the driver
        // for a call that completes on its first poll.
        if let Poll::Ready(result) = inner.poll(cx) {
            return Poll::Ready(result.map_err(Into::into));
        }
        ready!(this.sleep.poll(cx));
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
