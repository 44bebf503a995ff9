//! The policy's response future.

use crate::policy::Shared;
use crate::policy::body::{PolicyBody, StackBody};
use crate::policy::call_span::{Answer, CallSpan};
use crate::policy::stack::{Stack, StageFuture};
use fusebox_classify::stage::Judged;
use fusebox_classify::verdict;
use fusebox_classify::{AnswerVerdict, BoxError, Call, Classified, Classifier, Judgement, RouteId};
use fusebox_retry::ReplayBody;
use fusebox_retry::verdicts::FromStages;
use http::{Method, Request, Response};
use http_body::Body;
use pin_project::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tower_service::Service;

/// A call on a route whose fallback applies, or of a policy that exposes its verdicts:
/// what the fallback needs if the call fails, and what the verdict left in the response
/// names. (One field of the future for both: they are rare, and the healthy call's future
/// stays the size it was.)
pub(crate) struct FallbackCall<C> {
    pub(crate) shared: Arc<Shared<C>>,
    pub(crate) route: RouteId,
    pub(crate) method: Method,
    /// Whether the route's rejections go to the fallback.
    pub(crate) fallback: bool,
    /// Whether the answer's verdict is left in the response's extensions.
    pub(crate) expose: bool,
}

impl<C: Classifier> FallbackCall<C> {
    /// Leaves the verdict on `response` in its extensions: `known` (the call span's, which
    /// read or classified it), else the stages' (`judged`), or, when no stage judged it with
    /// the policy's table and the call's route, the route's classifier's.
    #[cold]
    #[inline(never)]
    fn expose<B>(
        &self,
        response: &mut Response<B>,
        known: Option<Classified>,
        judged: Option<Judgement>,
    ) {
        let routes = &self.shared.routes;
        let known = known.or_else(|| judged.and_then(|j| j.of(routes, self.route)));
        let classified = match known {
            Some(classified) => classified,
            None => {
                let route = routes.route(self.route);
                // The request's headers are gone: its idempotency is the route's say, or
                // its method's.
                let idempotent = route
                    .idempotent_override()
                    .unwrap_or_else(|| self.method.is_idempotent());
                let call = Call::new(
                    self.route,
                    routes.name(self.route),
                    &self.method,
                    idempotent,
                );
                route
                    .classifier()
                    .classify_response(&call, response.status(), response.headers())
            }
        };
        let verdict = AnswerVerdict::new(self.route, routes.shared_name(self.route), classified);
        response.extensions_mut().insert(verdict);
    }
}

/// How many attempts the policy's outermost stage sent (the retry layer's count, or one
/// when the policy has no retry budget), and the verdict the stages gave the answer it
/// handed on. Implemented by that stage's future, for the call's span and the exposed
/// verdict (public only because [`ResponseFuture`]'s `Future` impl names it).
pub trait Attempts {
    /// The attempts sent so far.
    fn attempts(&self) -> u32;

    /// Once done: the verdict the stages gave the answer handed on, if they judged it.
    fn judgement(&self) -> Option<Judgement>;
}

impl<S, C, B, Off> Attempts
    for StageFuture<fusebox_retry::future::ResponseFuture<S, C, B, FromStages>, Off>
where
    S: Service<Request<ReplayBody<B>>>,
    S::Future: Judged,
    B: Body,
    Off: Judged,
{
    #[inline]
    fn attempts(&self) -> u32 {
        match self {
            StageFuture::On(retry) => retry.attempts(),
            StageFuture::Off(_) => 1,
        }
    }

    #[inline]
    fn judgement(&self) -> Option<Judgement> {
        match self {
            StageFuture::On(retry) => retry.judgement(),
            StageFuture::Off(passed) => passed.judgement(),
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
        // Something reads the answer's verdict (the call's span, the exposed verdict): what
        // the retry classified itself (no stage under it judged the answer) is collected for
        // it, out of line. The plain call polls as it would without either.
        let mut offered = None;
        let polled = if this.span.is_none() && this.fallback.as_ref().is_none_or(|c| !c.expose) {
            this.inner.as_mut().poll(cx)
        } else {
            poll_collecting(this.inner.as_mut(), this.span.as_deref(), cx, &mut offered)
        };
        let polled = ready!(polled);
        let judged = || this.inner.as_ref().get_ref().judgement().or(offered);
        match polled {
            Ok(mut response) => {
                // The span's verdict, for the exposed one: an answer nothing judged yet
                // is classified once for both.
                let mut known = None;
                if let Some(span) = this.span.take() {
                    let done = this.inner.as_ref().get_ref();
                    let answer = Answer::Response(response.status(), response.headers());
                    known = span.finish(done.attempts(), answer, false, judged());
                }
                if let Some(call) = this.fallback.as_ref().filter(|call| call.expose) {
                    call.expose(&mut response, known, judged());
                }
                Poll::Ready(Ok(response.map(PolicyBody::inner)))
            }
            Err(error) => {
                let mut served = None;
                if let Some(call) = this.fallback.take().filter(|call| call.fallback) {
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
                    let done = this.inner.as_ref().get_ref();
                    let answer = Answer::Error(&*error);
                    span.finish(done.attempts(), answer, served.is_some(), judged());
                }
                match served {
                    Some(response) => Poll::Ready(Ok(response.map(PolicyBody::fallback))),
                    None => Poll::Ready(Err(error)),
                }
            }
        }
    }
}

/// Polls `inner` inside the call's span (if any), collecting the verdict a retry in it
/// offers ([`verdict::collect`]) into `offered`.
#[cold]
#[inline(never)]
fn poll_collecting<F: Future, C>(
    inner: Pin<&mut F>,
    span: Option<&CallSpan<C>>,
    cx: &mut Context<'_>,
    offered: &mut Option<Judgement>,
) -> Poll<F::Output> {
    let _entered = span.map(|s| s.span().enter());
    let (polled, judgement) = verdict::collect(|| inner.poll(cx));
    *offered = judgement;
    polled
}
