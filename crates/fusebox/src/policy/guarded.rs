//! The policy's circuit breaker, concurrency limit and timeout, run as one service with
//! one future and one response-body wrapper.
//!
//! Stacked as three tower services, the three layers each take the request by value and
//! move it on, each build a future around the next one's, and the breaker and the limit
//! each wrap the response body for their end-of-stream bookkeeping — so every healthy
//! call moves the request three times and the response twice, and nests three futures.
//! What each layer *decides* per call is small next to that (`docs/performance.md`,
//! section 8). [`Guarded`] asks each layer for its decision instead of calling it as a
//! service — [`CircuitBreaker::admit`], [`ConcurrencyLimit::acquire`],
//! [`Timeout::bound`] — and keeps what they hand back (a breaker [`Guard`], a limit
//! permit ([`Admitted`]), a timeout [`Bound`]) in one future, in the order the stack
//! would have used them:
//!
//! 1. the breaker admits or rejects ([`CircuitOpen`](crate::error::CircuitOpen); nothing
//!    else happens);
//! 2. the limit admits, queues (the call waits in its future, as in the limit's own) or
//!    sheds ([`Overloaded`](crate::error::Overloaded), which the breaker then classifies);
//! 3. the timeout bounds the call from the moment it is sent (after any wait in the
//!    queue), or refuses it if the caller's deadline has passed;
//! 4. the answer — response head or error — is reported to the limit, then to the
//!    breaker, as the stacked layers would see it; a verdict that waits for the trailers
//!    travels in the one body wrapper ([`End`]), which reports to both at the end of the
//!    stream.
//!
//! The layers themselves are unchanged and remain the way to stack them by hand; the
//! policy's tests (`policy/tests.rs`) and an equivalence property test
//! (`tests/tests/policy_equivalence.rs`) hold the fused stage to the stacked layers'
//! behaviour.

use crate::policy::key::KeyBy;
use crate::policy::store::{BreakerStore, PolicyStore};
use fusebox_breaker::{CircuitBreaker, EosRecorder, Guard, KeyedCircuitBreaker};
use fusebox_classify::{BoxError, ClassifiedBody, Classifier, OnEndOfStream, StreamEnd};
use fusebox_limit::{Acquire, Admitted, Completion, ConcurrencyLimit, Dequeued, Queued, Waiting};
use fusebox_timeout::Timeout;
use fusebox_timeout::future::{Bound, Timer};
use http::{Request, Response};
use http_body::Body;
use pin_project::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tower_service::Service;

/// The policy's breaker: one, one per key, or none.
pub(crate) enum BreakerPart<C> {
    Single(CircuitBreaker<(), C, PolicyStore>),
    Keyed(KeyedCircuitBreaker<(), KeyBy, C, BreakerStore>),
    Off,
}

/// What [`Guarded`] consults on every call; made once per policy.
pub(crate) struct Parts<C> {
    pub(crate) breaker: BreakerPart<C>,
    pub(crate) limit: Option<ConcurrencyLimit<(), C>>,
    pub(crate) timeout: Option<Timeout<(), C>>,
}

impl<C: Classifier> Parts<C> {
    /// The call's time bound; `Ok(None)` without a timeout.
    #[inline(always)]
    fn bound<B>(&self, request: &mut Request<B>) -> Result<Option<Bound>, BoxError> {
        match &self.timeout {
            Some(t) => t.bound(request).map(Some).map_err(|e| e.into_error()),
            None => Ok(None),
        }
    }
}

/// The circuit breaker, concurrency limit and timeout of a policy around `S`, as one
/// service (see the [module docs](self)).
///
/// Responses come back as `Response<ClassifiedBody<S's body, End<C>>>`; errors as
/// [`BoxError`], fusebox's own ([`CircuitOpen`](crate::error::CircuitOpen),
/// [`Overloaded`](crate::error::Overloaded), [`Elapsed`](crate::error::Elapsed),
/// [`DeadlineExceeded`](crate::error::DeadlineExceeded)) or the inner service's.
pub struct Guarded<S, C> {
    inner: S,
    parts: Arc<Parts<C>>,
}

impl<S, C> Guarded<S, C> {
    pub(crate) fn new(inner: S, parts: Arc<Parts<C>>) -> Self {
        Guarded { inner, parts }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, C> Clone for Guarded<S, C> {
    fn clone(&self) -> Self {
        Guarded {
            inner: self.inner.clone(),
            parts: Arc::clone(&self.parts),
        }
    }
}

impl<S: fmt::Debug, C> fmt::Debug for Guarded<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &*self.parts;
        f.debug_struct("Guarded")
            .field("inner", &self.inner)
            .field("breaker", &!matches!(p.breaker, BreakerPart::Off))
            .field("limit", &p.limit.is_some())
            .field("timeout", &p.timeout.is_some())
            .finish()
    }
}

/// What a response body still owes the breaker and the limit when its stream ends: the
/// breaker's verdict when it is in the trailers, the limit's permit when the limit
/// releases at the end of the body (and an adaptive limit's verdict from the trailers).
pub struct End<C: Classifier> {
    limit: Option<Completion<C>>,
    breaker: Option<EosRecorder<C, PolicyStore>>,
}

impl<C: Classifier> fmt::Debug for End<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("End")
            .field("limit", &self.limit)
            .field("breaker", &self.breaker)
            .finish()
    }
}

impl<C: Classifier> OnEndOfStream for End<C> {
    fn on_end(self, end: StreamEnd<'_>) {
        // The limit first, as its body sat inside the breaker's in the stacked layers.
        if let Some(limit) = self.limit {
            limit.on_end(end);
        }
        if let Some(breaker) = self.breaker {
            breaker.on_end(end);
        }
    }
}

/// The response body of [`Guarded`].
pub type GuardedBody<B, C> = ClassifiedBody<B, End<C>>;

impl<S, C, R, RB> Service<Request<R>> for Guarded<S, C>
where
    S: Service<Request<R>, Response = Response<RB>> + Clone,
    S::Error: Into<BoxError>,
    RB: Body,
    C: Classifier,
{
    type Response = Response<GuardedBody<RB, C>>;
    type Error = BoxError;
    type Future = GuardedFuture<S, R, C>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Admission is decided per call, in `call`, as in each layer.
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    #[inline]
    fn call(&mut self, mut request: Request<R>) -> Self::Future {
        let parts = &*self.parts;
        let guard = match parts.admit(&request) {
            Ok(guard) => guard,
            Err(open) => return GuardedFuture::failed(open, None, None),
        };
        let admitted = match &parts.limit {
            None => None,
            Some(limit) => match limit.acquire(&request) {
                Acquire::Admitted(admitted) => Some(admitted),
                Acquire::Queued(queued) => return self.wait(queued, guard, request),
                Acquire::Shed(error) => return GuardedFuture::failed(error.into(), guard, None),
            },
        };
        let bound = match parts.bound(&mut request) {
            Ok(bound) => bound,
            Err(expired) => return GuardedFuture::failed(expired, guard, admitted),
        };
        GuardedFuture {
            state: State::Called {
                future: self.inner.call(request),
            },
            timer: Timer::new(),
            bound,
            guard,
            admitted,
        }
    }
}

impl<C: Classifier> Parts<C> {
    /// Admits a call at the breaker; `Ok(None)` without a breaker.
    #[inline(always)]
    fn admit<B>(&self, request: &Request<B>) -> Result<Option<Guard<C, PolicyStore>>, BoxError> {
        match &self.breaker {
            BreakerPart::Single(b) => b.admit(request).map(Some).map_err(Into::into),
            BreakerPart::Keyed(b) => b.admit(request).map(Some).map_err(Into::into),
            BreakerPart::Off => Ok(None),
        }
    }
}

impl<S: Clone, C: Classifier> Guarded<S, C> {
    /// A call queued by the limit takes the service the caller polled ready with it; this
    /// service keeps a fresh clone (as the limit's own service does).
    #[inline(never)]
    fn wait<R>(
        &mut self,
        queued: Queued<C>,
        guard: Option<Guard<C, PolicyStore>>,
        request: Request<R>,
    ) -> GuardedFuture<S, R, C>
    where
        S: Service<Request<R>>,
    {
        let fresh = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, fresh);
        GuardedFuture {
            state: State::Queued {
                waiter: Box::pin(Waiter {
                    waiting: Waiting::new(queued, ready, request),
                    parts: Arc::clone(&self.parts),
                }),
            },
            timer: Timer::new(),
            bound: None,
            guard,
            admitted: None,
        }
    }
}

/// The future of [`Guarded`].
///
/// Dropping it at any point gives back what it holds (its place in the limit's queue, its
/// permit, its breaker permit) and counts nothing: the call was cancelled.
#[pin_project]
pub struct GuardedFuture<S, R, C>
where
    S: Service<Request<R>>,
    C: Classifier,
{
    #[pin]
    state: State<S, R, C>,
    #[pin]
    timer: Timer,
    bound: Option<Bound>,
    guard: Option<Guard<C, PolicyStore>>,
    admitted: Option<Admitted<C>>,
}

#[pin_project(project = StateProj)]
enum State<S, R, C>
where
    S: Service<Request<R>>,
    C: Classifier,
{
    Called {
        #[pin]
        future: S::Future,
    },
    /// Waiting for a permit. Boxed: only calls that find the limit full wait, and the
    /// request and service they carry would make every call's future larger.
    Queued { waiter: Pin<Box<Waiter<S, R, C>>> },
    /// Refused before the inner call (breaker open, limit shed, deadline passed): the
    /// error, taken by the poll that returns it.
    Failed { error: Option<BoxError> },
}

/// A call waiting in the limit's queue, with what it needs to be sent once admitted (and
/// the parts, for the timeout's bound then).
#[pin_project(project = WaiterProj)]
struct Waiter<S, R, C: Classifier> {
    #[pin]
    waiting: Waiting<S, R, C>,
    parts: Arc<Parts<C>>,
}

impl<S, R, C> GuardedFuture<S, R, C>
where
    S: Service<Request<R>>,
    C: Classifier,
{
    /// A call refused before it was sent (breaker open, limit shed, deadline passed).
    #[cold]
    fn failed(
        error: BoxError,
        guard: Option<Guard<C, PolicyStore>>,
        admitted: Option<Admitted<C>>,
    ) -> Self {
        GuardedFuture {
            state: State::Failed { error: Some(error) },
            timer: Timer::new(),
            bound: None,
            guard,
            admitted,
        }
    }
}

impl<S, R, C> fmt::Debug for GuardedFuture<S, R, C>
where
    S: Service<Request<R>>,
    C: Classifier,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Called { .. } => "called",
            State::Queued { .. } => "queued",
            State::Failed { .. } => "failed",
        };
        f.debug_struct("GuardedFuture")
            .field("state", &state)
            .field("guard", &self.guard)
            .field("admitted", &self.admitted)
            .finish_non_exhaustive()
    }
}

impl<S, R, C, RB> Future for GuardedFuture<S, R, C>
where
    S: Service<Request<R>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
    RB: Body,
    C: Classifier,
{
    type Output = Result<Response<GuardedBody<RB, C>>, BoxError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let result = match this.state.as_mut().project() {
                StateProj::Called { future } => match future.poll(cx) {
                    Poll::Ready(result) => result.map_err(Into::into),
                    // The call first, as in the timeout layer: a ready answer wins over a
                    // due timer, and a call that answers on its first poll arms none.
                    Poll::Pending => match this.bound.as_ref() {
                        Some(bound) => Err(ready!(this.timer.as_mut().poll_elapsed(bound, cx))),
                        None => return Poll::Pending,
                    },
                },
                StateProj::Queued { .. } => {
                    ready!(send(this.state.as_mut(), this.bound, this.admitted, cx));
                    continue;
                }
                StateProj::Failed { error } => match error.take() {
                    Some(error) => Err(error),
                    None => panic!("fusebox GuardedFuture polled after completion"),
                },
            };
            return Poll::Ready(finish(result, this.guard, this.admitted));
        }
    }
}

/// Drives a queued call: once admitted, bounds it by the timeout and sends it (the state
/// becomes `Called`); a call shed from the queue, or whose deadline passed while it
/// waited, fails (the state becomes `Failed`).
#[inline(never)]
fn send<S, R, C>(
    mut state: Pin<&mut State<S, R, C>>,
    bound: &mut Option<Bound>,
    admitted: &mut Option<Admitted<C>>,
    cx: &mut Context<'_>,
) -> Poll<()>
where
    S: Service<Request<R>>,
    C: Classifier,
{
    let sent = {
        let StateProj::Queued { waiter } = state.as_mut().project() else {
            return Poll::Ready(());
        };
        let WaiterProj { waiting, parts } = waiter.as_mut().project();
        match ready!(waiting.poll_admit(cx)) {
            Err(shed) => Err(BoxError::from(shed)),
            Ok(Dequeued {
                admitted: permit,
                mut service,
                mut request,
                ..
            }) => {
                *admitted = Some(permit);
                parts
                    .bound(&mut request)
                    .map(|b| (b, service.call(request)))
            }
        }
    };
    match sent {
        Ok((b, future)) => {
            *bound = b;
            state.set(State::Called { future });
        }
        Err(error) => state.set(State::Failed { error: Some(error) }),
    }
    Poll::Ready(())
}

/// Reports a call's answer to the limit, then to the breaker (as the stacked layers
/// would), and hands the response body what they still wait for.
#[inline]
fn finish<RB, C>(
    result: Result<Response<RB>, BoxError>,
    guard: &mut Option<Guard<C, PolicyStore>>,
    admitted: &mut Option<Admitted<C>>,
) -> Result<Response<GuardedBody<RB, C>>, BoxError>
where
    RB: Body,
    C: Classifier,
{
    match result {
        Ok(response) => {
            let limit = match admitted.take() {
                Some(a) if !a.is_plain() => a.on_response(response.status(), response.headers()),
                // A plain permit goes back with the head.
                _ => None,
            };
            let breaker = match guard {
                Some(g) => match g.classify_response(response.status(), response.headers()) {
                    Some(verdict) => {
                        g.finish_in_place(verdict);
                        *guard = None;
                        None
                    }
                    None => guard.take().map(Guard::at_end_of_stream),
                },
                None => None,
            };
            Ok(if limit.is_none() && breaker.is_none() {
                response.map(ClassifiedBody::passthrough)
            } else {
                ClassifiedBody::for_response(response, End { limit, breaker })
            })
        }
        Err(error) => {
            if let Some(a) = admitted.take() {
                a.on_error(&*error);
            }
            if let Some(g) = guard.take() {
                let verdict = g.classify_error(&*error);
                g.finish(verdict);
            }
            Err(error)
        }
    }
}
