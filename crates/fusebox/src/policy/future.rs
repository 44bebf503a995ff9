//! The policy's response future.

use crate::policy::Shared;
use crate::policy::body::{PolicyBody, StackBody};
use crate::policy::call_span::{Answer, CallSpan};
use crate::policy::stack::{Stack, StageFuture};
use fusebox_classify::{BoxError, Classifier, RouteId};
use fusebox_retry::ReplayBody;
use http::{Method, Request, Response};
use http_body::Body;
use pin_project::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tower_service::Service;

/// A call on a route whose fallback applies: what the fallback needs if the call fails.
pub(crate) struct FallbackCall<C> {
    pub(crate) shared: Arc<Shared<C>>,
    pub(crate) route: RouteId,
    pub(crate) method: Method,
}

/// How many attempts the policy's outermost stage sent: the retry layer's count, or one
/// when the policy has no retry budget. Implemented by that stage's future, for the call's
/// span (public only because [`ResponseFuture`]'s `Future` impl names it).
pub trait Attempts {
    /// The attempts sent so far.
    fn attempts(&self) -> u32;
}

impl<S, C, B, Off> Attempts for StageFuture<fusebox_retry::future::ResponseFuture<S, C, B>, Off>
where
    S: Service<Request<ReplayBody<B>>>,
    B: Body,
{
    #[inline]
    fn attempts(&self) -> u32 {
        match self {
            StageFuture::On(retry) => retry.attempts(),
            StageFuture::Off(_) => 1,
        }
    }
}

/// The future of a [`PolicyService`](crate::PolicyService): the layers' future, the
/// fallback if the call's route has one, and the call's span when a subscriber wants it.
#[pin_project]
pub struct ResponseFuture<S, B, C>
where
    Stack<S, C>: Service<Request<B>>,
{
    #[pin]
    inner: <Stack<S, C> as Service<Request<B>>>::Future,
    fallback: Option<FallbackCall<C>>,
    /// `None` unless `policy_call` is enabled: one pointer on the healthy path.
    span: Option<Box<CallSpan<C>>>,
}

impl<S, B, C> ResponseFuture<S, B, C>
where
    Stack<S, C>: Service<Request<B>>,
{
    pub(crate) fn new(
        inner: <Stack<S, C> as Service<Request<B>>>::Future,
        fallback: Option<FallbackCall<C>>,
        span: Option<Box<CallSpan<C>>>,
    ) -> Self {
        ResponseFuture {
            inner,
            fallback,
            span,
        }
    }
}

impl<S, B, C> fmt::Debug for ResponseFuture<S, B, C>
where
    Stack<S, C>: Service<Request<B>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("fallback", &self.fallback.is_some())
            .field("span", &self.span.as_ref().map(|s| s.span()))
            .finish_non_exhaustive()
    }
}

impl<S, B, C, RB> Future for ResponseFuture<S, B, C>
where
    Stack<S, C>: Service<Request<B>, Response = Response<StackBody<RB, C>>, Error = BoxError>,
    <Stack<S, C> as Service<Request<B>>>::Future: Attempts,
    C: Classifier,
{
    type Output = Result<Response<PolicyBody<RB, C>>, BoxError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let polled = match this.span.as_deref() {
            None => this.inner.as_mut().poll(cx),
            Some(span) => {
                let _entered = span.span().enter();
                this.inner.as_mut().poll(cx)
            }
        };
        match ready!(polled) {
            Ok(response) => {
                if let Some(span) = this.span.take() {
                    let attempts = this.inner.as_ref().get_ref().attempts();
                    let answer = Answer::Response(response.status(), response.headers());
                    span.finish(attempts, answer, false);
                }
                Poll::Ready(Ok(response.map(PolicyBody::inner)))
            }
            Err(error) => {
                let mut served = None;
                if let Some(call) = this.fallback.take() {
                    let shared = &call.shared;
                    if let Some(armed) = &shared.fallback {
                        // Inside the span: the fallback's own event belongs to the call.
                        let _entered = this.span.as_deref().map(|s| s.span().enter());
                        served = armed.respond(
                            &*error,
                            &shared.name,
                            shared.routes.name(call.route),
                            &call.method,
                        );
                    }
                }
                if let Some(span) = this.span.take() {
                    let attempts = this.inner.as_ref().get_ref().attempts();
                    span.finish(attempts, Answer::Error(&*error), served.is_some());
                }
                match served {
                    Some(response) => Poll::Ready(Ok(response.map(PolicyBody::fallback))),
                    None => Poll::Ready(Err(error)),
                }
            }
        }
    }
}
