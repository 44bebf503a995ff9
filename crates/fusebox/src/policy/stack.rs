//! The stages a [`PolicyService`](crate::PolicyService) is made of: the retry layer
//! (outermost), present or passed through, around [`Guarded`] — the circuit breaker,
//! concurrency limit and timeout run as one service ([`stages`](super::stages)).
//!
//! A policy may leave any layer out. Leaving one out must not change the service's type —
//! otherwise every combination of layers would be a different type, and a struct field, a
//! function signature or a `Router` could not hold "a policy" — and must cost close to
//! nothing. [`Guarded`] holds each of its three layers as an option, and the retry stage is
//! an enum of the layer's service and the bare inner service ([`Optional`]) whose off
//! variant answers with *the same response type* as when it is on.
//!
//! The retry stage is the one that also touches requests: the retry layer sends
//! [`ReplayBody<B>`] to the services below it so that a body can be replayed. An off retry
//! stage sends the same type, passing the body through once
//! ([`ReplayBody::streaming`]), so the service at the bottom of a policy always receives
//! `Request<ReplayBody<B>>`.
//!
//! You rarely need these names: they are public so that [`Stack`], and with it
//! [`PolicyService`](crate::PolicyService)'s future, can be named.

use fusebox_classify::Judgement;
use fusebox_classify::stage::Judged;
use fusebox_classify::{BoxError, Classifier};
use fusebox_retry::verdicts::FromStages;
use fusebox_retry::{ReplayBody, Retry};
use http::{Request, Response};
use http_body::Body;
use pin_project::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower_service::Service;

pub use crate::policy::stages::{End, Guarded, GuardedBody, GuardedFuture};

/// A layer's service (`On`) or the service it would have wrapped (`Off`). Closed: a stage is
/// on or off.
#[derive(Debug, Clone)]
pub enum Optional<On, Off> {
    /// The layer is configured.
    On(On),
    /// The layer is not configured: calls go straight to the inner service.
    Off(Off),
}

/// The retry stage (outermost).
///
/// The retry reads each attempt's verdict from the stages under it
/// ([`FromStages`]): the answer is classified once.
pub type RetryStage<S, C> = Optional<Retry<S, C, FromStages>, S>;
/// Every stage of a policy around `S`: retry → (circuit breaker → concurrency limit →
/// timeout) → `S`.
pub type Stack<S, C> = RetryStage<Guarded<S, C>, C>;

/// The future of a stage: the layer's future, or the inner service's future passed
/// through ([`Passed`]). Closed, as [`Optional`] is.
#[pin_project(project = StageFutureProj)]
#[derive(Debug)]
pub enum StageFuture<On, Off> {
    /// The layer's own future.
    On(#[pin] On),
    /// The inner service's future, passed through.
    Off(#[pin] Off),
}

impl<On, Off, T> Future for StageFuture<On, Off>
where
    On: Future<Output = T>,
    Off: Future<Output = T>,
{
    type Output = T;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match self.project() {
            StageFutureProj::On(f) => f.poll(cx),
            StageFutureProj::Off(f) => f.poll(cx),
        }
    }
}

/// The inner service's future under an off stage, handed on as it is: the answer is not
/// moved through a wrapper (the off stage has the inner service's body and error types).
#[pin_project]
#[derive(Debug)]
pub struct Passed<F> {
    #[pin]
    inner: F,
}

impl<F> Passed<F> {
    #[inline]
    fn new(inner: F) -> Self {
        Passed { inner }
    }
}

/// The verdict the stages under an off stage gave the answer, read through it.
impl<F: Judged> Judged for Passed<F> {
    #[inline]
    fn judgement(&self) -> Option<Judgement> {
        self.inner.judgement()
    }
}

impl<F: Future> Future for Passed<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx)
    }
}

/// The retry's `call`, out of line here (the retry's own `call` is inlined into its
/// callers, which suits the retry on its own): its future is written straight into the
/// optional stage's instead of built aside and copied.
#[inline(never)]
fn retry_call<S, C, B>(
    retry: &mut Retry<S, C, FromStages>,
    request: Request<B>,
) -> <Retry<S, C, FromStages> as Service<Request<B>>>::Future
where
    Retry<S, C, FromStages>: Service<Request<B>>,
{
    retry.call(request)
}

// === impl Optional<Retry> ===

impl<S, C, B, RB> Service<Request<B>> for Optional<Retry<S, C, FromStages>, S>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<RB>, Error = BoxError> + Clone,
    S::Future: Judged,
    C: Classifier,
    B: Body,
    B::Data: Clone,
    B::Error: Into<BoxError>,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future =
        StageFuture<fusebox_retry::future::ResponseFuture<S, C, B, FromStages>, Passed<S::Future>>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Optional::On(s) => s.poll_ready(cx),
            Optional::Off(s) => s.poll_ready(cx),
        }
    }

    // Out of line, as `retry_call` is: each writes the future it returns straight into its
    // caller's, where inlined they would build it aside and copy it (the retry's future,
    // over 500 bytes, once per level).
    #[inline(never)]
    fn call(&mut self, request: Request<B>) -> Self::Future {
        match self {
            Optional::On(s) => StageFuture::On(retry_call(s, request)),
            Optional::Off(s) => {
                StageFuture::Off(Passed::new(s.call(request.map(ReplayBody::streaming))))
            }
        }
    }
}
