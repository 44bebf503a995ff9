//! The policy's response future.

use crate::policy::Shared;
use crate::policy::body::{PolicyBody, StackBody};
use crate::policy::stack::Stack;
use fusebox_classify::{BoxError, Classifier, RouteId};
use http::{Method, Request, Response};
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

/// The future of a [`PolicyService`](crate::PolicyService): the layers' future, and the
/// fallback if the call's route has one.
#[pin_project]
pub struct ResponseFuture<S, B, C>
where
    Stack<S, C>: Service<Request<B>>,
{
    #[pin]
    inner: <Stack<S, C> as Service<Request<B>>>::Future,
    fallback: Option<FallbackCall<C>>,
}

impl<S, B, C> ResponseFuture<S, B, C>
where
    Stack<S, C>: Service<Request<B>>,
{
    pub(crate) fn new(
        inner: <Stack<S, C> as Service<Request<B>>>::Future,
        fallback: Option<FallbackCall<C>>,
    ) -> Self {
        ResponseFuture { inner, fallback }
    }
}

impl<S, B, C> fmt::Debug for ResponseFuture<S, B, C>
where
    Stack<S, C>: Service<Request<B>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("fallback", &self.fallback.is_some())
            .finish_non_exhaustive()
    }
}

impl<S, B, C, RB> Future for ResponseFuture<S, B, C>
where
    Stack<S, C>: Service<Request<B>, Response = Response<StackBody<RB, C>>, Error = BoxError>,
    C: Classifier,
{
    type Output = Result<Response<PolicyBody<RB, C>>, BoxError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match ready!(this.inner.poll(cx)) {
            Ok(response) => Poll::Ready(Ok(response.map(PolicyBody::inner))),
            Err(error) => {
                if let Some(call) = this.fallback.take() {
                    let shared = &call.shared;
                    if let Some(armed) = &shared.fallback
                        && let Some(response) = armed.respond(
                            &*error,
                            &shared.name,
                            shared.routes.name(call.route),
                            &call.method,
                        )
                    {
                        return Poll::Ready(Ok(response.map(PolicyBody::fallback)));
                    }
                }
                Poll::Ready(Err(error))
            }
        }
    }
}
