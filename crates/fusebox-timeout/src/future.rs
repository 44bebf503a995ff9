//! The response future of a [`Timeout`](crate::Timeout).

use crate::body::TimeoutBody;
use crate::telemetry::{self, Phase};
use fusebox_classify::BoxError;
use fusebox_classify::error::{DeadlineExceeded, Elapsed};
use http::Response;
use pin_project::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// The response future of [`Timeout`](crate::Timeout): the inner call raced against its
/// timer, then the response body wrapped in a [`TimeoutBody`].
///
/// Its timer is a [`Sleep`] pinned inside it: nothing is boxed. Fails with
/// [`Elapsed`] when the timer fires first, and with [`DeadlineExceeded`] at once when the
/// caller's deadline had passed before the call (the inner service was not called).
#[pin_project]
#[derive(Debug)]
pub struct ResponseFuture<F> {
    #[pin]
    state: State<F>,
}

#[pin_project(project = StateProj)]
#[derive(Debug)]
enum State<F> {
    Running {
        #[pin]
        inner: F,
        #[pin]
        sleep: Sleep,
        route: Arc<str>,
        limit: Duration,
        body: BodyPlan,
    },
    Expired,
}

/// How the response body is to be bounded once the headers arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BodyPlan {
    /// The configured body timeout.
    pub(crate) timeout: Option<Duration>,
    /// The caller's deadline.
    pub(crate) deadline: Option<Instant>,
}

impl BodyPlan {
    /// No timer on the body.
    pub(crate) fn is_unbounded(&self) -> bool {
        self.timeout.is_none() && self.deadline.is_none()
    }

    /// The body's timer and its limit, starting now; `None` when the body is unbounded.
    fn timer(&self) -> Option<(Sleep, Duration)> {
        if self.is_unbounded() {
            return None;
        }
        let now = Instant::now();
        let by_timeout = self.timeout.and_then(|t| now.checked_add(t));
        let until = match (by_timeout, self.deadline) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => return None,
        };
        Some((
            tokio::time::sleep_until(until),
            until.saturating_duration_since(now),
        ))
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn running(
        inner: F,
        sleep: Sleep,
        route: Arc<str>,
        limit: Duration,
        body: BodyPlan,
    ) -> Self {
        ResponseFuture {
            state: State::Running {
                inner,
                sleep,
                route,
                limit,
                body,
            },
        }
    }

    pub(crate) fn expired() -> Self {
        ResponseFuture {
            state: State::Expired,
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response<TimeoutBody<B>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Running {
                inner,
                sleep,
                route,
                limit,
                body,
            } => {
                // The call first, as tower's Timeout does: a response that is ready is
                // returned even if the timer is due, and the timer is never registered
                // with the driver for a call that completes on its first poll.
                if let Poll::Ready(result) = inner.poll(cx) {
                    let response = result.map_err(Into::into)?;
                    return Poll::Ready(Ok(match body.timer() {
                        None => response.map(TimeoutBody::passthrough),
                        Some((sleep, limit)) => response
                            .map(|b| TimeoutBody::with_timer(b, sleep, Arc::clone(route), limit)),
                    }));
                }
                ready!(sleep.poll(cx));
                telemetry::elapsed(route, *limit, Phase::Headers);
                Poll::Ready(Err(Box::new(Elapsed::new(Arc::clone(route), *limit))))
            }
            StateProj::Expired => Poll::Ready(Err(Box::new(DeadlineExceeded::new()))),
        }
    }
}
