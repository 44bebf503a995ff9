//! The response body of a [`BodyTimeout`](crate::BodyTimeout): a passthrough, or a body with a
//! timer that ends the stream with an [`Elapsed`] error when it fires.
//!
//! The timeout to the response headers says nothing about a body that streams for minutes,
//! or one that stops sending halfway: without a body timer such a call holds its connection
//! (and its caller) forever. The timer starts when the headers arrive and is dropped as soon
//! as the body ends, so a finished body holds no timer-wheel entry.

use crate::service::RouteName;
use crate::telemetry::{self, Phase};
use fusebox_classify::BoxError;
use fusebox_classify::error::Elapsed;
use http_body::{Body, Frame, SizeHint};
use pin_project::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::Sleep;

/// The response body of a [`BodyTimeout`](crate::BodyTimeout) service.
///
/// Without a body timeout (and without a caller's deadline) it only forwards frames. With
/// one, it ends the stream with an [`Elapsed`] error (a [`BoxError`]) once the time is up;
/// after that it reports its end, so nothing waits on it.
#[pin_project]
#[derive(Debug)]
pub struct TimeoutBody<B> {
    #[pin]
    inner: B,
    #[pin]
    timer: Option<BodyTimer>,
    /// The stream has ended (or timed out): the inner body is not polled again.
    done: bool,
}

#[pin_project]
#[derive(Debug)]
struct BodyTimer {
    #[pin]
    sleep: Sleep,
    route: RouteName,
    limit: Duration,
}

impl<B> TimeoutBody<B> {
    /// A body without a timer.
    #[inline]
    pub fn passthrough(inner: B) -> Self {
        TimeoutBody {
            inner,
            timer: None,
            done: false,
        }
    }

    /// A body that fails with `Elapsed(route, limit)` when `sleep` completes.
    pub(crate) fn with_timer(inner: B, sleep: Sleep, route: RouteName, limit: Duration) -> Self {
        TimeoutBody {
            inner,
            timer: Some(BodyTimer {
                sleep,
                route,
                limit,
            }),
            done: false,
        }
    }

    /// Whether the body's timer is running.
    pub fn has_timer(&self) -> bool {
        self.timer.is_some()
    }

    /// The wrapped body.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }

    /// The wrapped body, mutably.
    pub fn get_mut(&mut self) -> &mut B {
        &mut self.inner
    }

    /// The wrapped body (its timer, if any, is dropped).
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B> Body for TimeoutBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        if *this.done {
            return Poll::Ready(None);
        }
        // The timer first: a body that always has a frame ready must still stop on time.
        if let Some(timer) = this.timer.as_mut().as_pin_mut() {
            let timer = timer.project();
            if timer.sleep.poll(cx).is_ready() {
                telemetry::elapsed(timer.route.get(), *timer.limit, Phase::Body);
                let error = Elapsed::new(Arc::clone(timer.route.get().name()), *timer.limit);
                this.timer.set(None);
                *this.done = true;
                return Poll::Ready(Some(Err(Box::new(error))));
            }
        }
        let frame = ready!(this.inner.as_mut().poll_frame(cx));
        if frame.is_none() {
            // Some bodies panic when polled past their end; answer for them from now on.
            *this.done = true;
        }
        let more = matches!(frame, Some(Ok(_))) && !this.inner.is_end_stream();
        if !more && this.timer.is_some() {
            // Ended (or failed): release the timer now rather than when the body is dropped.
            this.timer.set(None);
        }
        Poll::Ready(frame.map(|f| f.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.done {
            SizeHint::with_exact(0)
        } else {
            self.inner.size_hint()
        }
    }
}
