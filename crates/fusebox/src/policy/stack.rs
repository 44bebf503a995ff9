//! The four stages a [`PolicyService`](crate::PolicyService) is made of, each present or
//! passed through.
//!
//! A policy may leave any layer out. Leaving one out must not change the service's type —
//! otherwise every combination of layers would be a different type, and a struct field, a
//! function signature or a `Router` could not hold "a policy" — and must cost close to
//! nothing. So every stage is an enum of the layer's service and the bare inner service
//! ([`Optional`], [`BreakerStage`]), and a stage that is off answers with *the same
//! response type* as when it is on: the layers' response bodies all have a pass-through
//! form ([`ClassifiedBody::passthrough`]), so an off stage only wraps the body it forwards.
//! An off stage costs one `match` per call and per poll, and no clock read, atomic or
//! allocation. What it does not save is size: an enum is as large as its largest
//! variant, so an off stage's future is as large as the layer's would be, and moving the
//! nested futures of four stages is most of what a policy without any layer costs over a
//! bare call (benches/benches/policy.rs, `policy_layers/no_layer`).
//!
//! The retry stage is the one that also touches requests: the retry layer sends
//! [`ReplayBody<B>`] to the services below it so that a body can be replayed. An off retry
//! stage sends the same type, passing the body through once
//! ([`ReplayBody::streaming`]), so the service at the bottom of a policy always receives
//! `Request<ReplayBody<B>>`.
//!
//! You rarely need these names: they are public so that [`Stack`], and with it
//! [`PolicyService`](crate::PolicyService)'s future, can be named.

use fusebox_breaker::{CircuitBreaker, EosRecorder, KeyedCircuitBreaker};
use fusebox_classify::{BoxError, ClassifiedBody, Classifier, OnEndOfStream};
use fusebox_limit::{Completion, ConcurrencyLimit};
use fusebox_retry::{ReplayBody, Retry};
use fusebox_timeout::Timeout;
use http::{Request, Response};
use http_body::Body;
use pin_project::pin_project;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tower_service::Service;

use crate::policy::key::KeyBy;
use crate::policy::store::{BreakerStore, PolicyStore};

/// A layer's service (`On`) or the service it would have wrapped (`Off`).
#[derive(Debug, Clone)]
pub enum Optional<On, Off> {
    /// The layer is configured.
    On(On),
    /// The layer is not configured: calls go straight to the inner service.
    Off(Off),
}

/// The circuit-breaker stage: one breaker, one breaker per key, or none; its state in
/// memory or on Redis ([`PolicyStore`]).
#[derive(Debug)]
pub enum BreakerStage<S, C> {
    /// One breaker for every call.
    Single(CircuitBreaker<S, C, PolicyStore>),
    /// One breaker per key.
    Keyed(KeyedCircuitBreaker<S, KeyBy, C, BreakerStore>),
    /// No breaker.
    Off(S),
}

impl<S: Clone, C> Clone for BreakerStage<S, C> {
    fn clone(&self) -> Self {
        match self {
            BreakerStage::Single(s) => BreakerStage::Single(s.clone()),
            BreakerStage::Keyed(s) => BreakerStage::Keyed(s.clone()),
            BreakerStage::Off(s) => BreakerStage::Off(s.clone()),
        }
    }
}

/// The timeout stage (innermost): bounds the wait for the response head.
pub type TimeoutStage<S, C> = Optional<Timeout<S, C>, S>;
/// The concurrency-limit stage.
pub type LimitStage<S, C> = Optional<ConcurrencyLimit<S, C>, S>;
/// The retry stage (outermost).
pub type RetryStage<S, C> = Optional<Retry<S, C>, S>;
/// Every stage of a policy around `S`: retry → circuit breaker → concurrency limit →
/// timeout → `S`.
pub type Stack<S, C> = RetryStage<BreakerStage<LimitStage<TimeoutStage<S, C>, C>, C>, C>;

/// How an off stage turns the inner response body into the body type the stage has when it
/// is on.
pub trait Passthrough<B> {
    /// The stage's response body.
    type Body;
    /// Wraps `body` without adding any behaviour.
    fn wrap(body: B) -> Self::Body;
}

/// The body is forwarded as it is (the retry stage does not change bodies).
#[derive(Debug, Clone, Copy)]
pub enum Same {}

impl<B> Passthrough<B> for Same {
    type Body = B;
    #[inline]
    fn wrap(body: B) -> B {
        body
    }
}

/// The body is wrapped in a [`ClassifiedBody`] without a callback.
#[derive(Debug)]
pub struct Classified<E>(PhantomData<fn() -> E>);

impl<B: Body, E: OnEndOfStream> Passthrough<B> for Classified<E> {
    type Body = ClassifiedBody<B, E>;
    #[inline]
    fn wrap(body: B) -> ClassifiedBody<B, E> {
        ClassifiedBody::passthrough(body)
    }
}

/// The future of a stage: the layer's future, or the inner service's future passed
/// through ([`Passed`]).
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

/// The inner service's future under an off stage: its body wrapped by `P`, its error boxed.
#[pin_project]
#[derive(Debug)]
pub struct Passed<F, P> {
    #[pin]
    inner: F,
    _p: PhantomData<fn() -> P>,
}

impl<F, P> Passed<F, P> {
    #[inline]
    fn new(inner: F) -> Self {
        Passed {
            inner,
            _p: PhantomData,
        }
    }
}

impl<F, P, B, E> Future for Passed<F, P>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
    P: Passthrough<B>,
{
    type Output = Result<Response<P::Body>, BoxError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let result = ready!(self.project().inner.poll(cx));
        Poll::Ready(match result {
            Ok(response) => Ok(response.map(P::wrap)),
            Err(e) => Err(e.into()),
        })
    }
}

/// A future whose error is boxed.
#[pin_project]
#[derive(Debug)]
pub struct MapErr<F> {
    #[pin]
    inner: F,
}

impl<F> MapErr<F> {
    #[inline]
    fn new(inner: F) -> Self {
        MapErr { inner }
    }
}

impl<F, T, E> Future for MapErr<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx).map_err(Into::into)
    }
}

// === impl Optional<Timeout> ===

impl<S, C, B> Service<Request<B>> for Optional<Timeout<S, C>, S>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
    C: Classifier,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future =
        StageFuture<fusebox_timeout::future::ResponseFuture<S::Future>, MapErr<S::Future>>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Optional::On(s) => s.poll_ready(cx),
            Optional::Off(s) => s.poll_ready(cx).map_err(Into::into),
        }
    }

    #[inline(always)]
    fn call(&mut self, request: Request<B>) -> Self::Future {
        match self {
            Optional::On(s) => StageFuture::On(s.call(request)),
            Optional::Off(s) => StageFuture::Off(MapErr::new(s.call(request))),
        }
    }
}

// === impl Optional<ConcurrencyLimit> ===

impl<S, C, B, RB> Service<Request<B>> for Optional<ConcurrencyLimit<S, C>, S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone,
    S::Error: Into<BoxError>,
    RB: Body,
    C: Classifier,
{
    type Response = Response<fusebox_limit::ResponseBody<RB, C>>;
    type Error = BoxError;
    type Future = StageFuture<
        fusebox_limit::ResponseFuture<S, B, C>,
        Passed<S::Future, Classified<Completion<C>>>,
    >;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Optional::On(s) => s.poll_ready(cx),
            Optional::Off(s) => s.poll_ready(cx).map_err(Into::into),
        }
    }

    #[inline(always)]
    fn call(&mut self, request: Request<B>) -> Self::Future {
        match self {
            Optional::On(s) => StageFuture::On(s.call(request)),
            Optional::Off(s) => StageFuture::Off(Passed::new(s.call(request))),
        }
    }
}

// === impl BreakerStage ===

impl<S, C, B, RB> Service<Request<B>> for BreakerStage<S, C>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
    RB: Body,
    C: Classifier,
{
    type Response = Response<fusebox_breaker::ResponseBody<RB, C, PolicyStore>>;
    type Error = BoxError;
    type Future = StageFuture<
        fusebox_breaker::ResponseFuture<S::Future, C, PolicyStore>,
        Passed<S::Future, Classified<EosRecorder<C, PolicyStore>>>,
    >;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            BreakerStage::Single(s) => s.poll_ready(cx),
            BreakerStage::Keyed(s) => s.poll_ready(cx),
            BreakerStage::Off(s) => s.poll_ready(cx).map_err(Into::into),
        }
    }

    #[inline(always)]
    fn call(&mut self, request: Request<B>) -> Self::Future {
        match self {
            BreakerStage::Single(s) => StageFuture::On(s.call(request)),
            BreakerStage::Keyed(s) => StageFuture::On(s.call(request)),
            BreakerStage::Off(s) => StageFuture::Off(Passed::new(s.call(request))),
        }
    }
}

// === impl Optional<Retry> ===

impl<S, C, B, RB> Service<Request<B>> for Optional<Retry<S, C>, S>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<RB>> + Clone,
    S::Error: Into<BoxError>,
    C: Classifier,
    B: Body,
    B::Data: Clone,
    B::Error: Into<BoxError>,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future =
        StageFuture<fusebox_retry::future::ResponseFuture<S, C, B>, Passed<S::Future, Same>>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Optional::On(s) => s.poll_ready(cx),
            Optional::Off(s) => s.poll_ready(cx).map_err(Into::into),
        }
    }

    #[inline(always)]
    fn call(&mut self, request: Request<B>) -> Self::Future {
        match self {
            Optional::On(s) => StageFuture::On(s.call(request)),
            Optional::Off(s) => {
                StageFuture::Off(Passed::new(s.call(request.map(ReplayBody::streaming))))
            }
        }
    }
}
