//! The one mechanism every fusebox layer runs its per-call logic through.
//!
//! Each layer's per-call logic is a [`Stage`]: what it decides before the call
//! ([`Stage::admit`]: go, wait, or refuse), how long the call may take
//! ([`Stage::poll_deadline`]), and what it records once the answer is in
//! ([`Stage::on_answer`], which may leave something for the end of the response stream).
//! [`Staged`] is the one service, [`StagedFuture`] the one future and
//! [`ClassifiedBody`] the one body that run a stage around an inner service.
//!
//! A pair of stages is a stage: `(outer, inner)` admits at `outer` first, then at
//! `inner`, and hands the answer to `inner` first, then to `outer` — what the two layers
//! would do stacked, as one future and one body wrapper instead of two of each. An
//! `Option` of a stage is a stage that can be turned off. fusebox's circuit breaker,
//! concurrency limit and timeout layers are each [`Staged`] over their own stage, and
//! fusebox's `Policy` is the retry around [`Staged`] over the three of them.
//!
//! Every stage told an answer is lent the same [`SharedVerdict`]: the stages that judge it
//! (a breaker, an adaptive limit) ask it rather than their classifier, so that the answer
//! is classified once however many stages judge it ([`verdict`](crate::verdict)); once
//! done, the runner's future keeps that verdict ([`StagedFuture::judgement`]) for what sits
//! around it (the `Policy`'s retry and call span).
//!
//! How the answer is read and handed on depends on what the inner service answers
//! ([`Reply`]): an HTTP response is judged by its head and comes back with its body wrapped
//! ([`Http`]); any other answer comes back untouched and only its `Ok` or `Err` is seen
//! ([`Opaque`]).
//!
//! # Example
//!
//! A stage that counts the calls it admits and refuses every third one:
//!
//! ```
//! use fusebox_classify::context::Scope;
//! use fusebox_classify::stage::{Admit, Answer, Http, NoEnd, NoTimer, NoWait, Stage, Staged};
//! use fusebox_classify::{BoxError, SharedVerdict};
//! use http::{Request, Response};
//! use std::pin::Pin;
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::task::{Context, Poll};
//! use tower::{Service, ServiceExt};
//!
//! #[derive(Clone, Default)]
//! struct EveryThird(Arc<AtomicUsize>);
//!
//! impl<B> Stage<Request<B>> for EveryThird {
//!     type Admitted = ();
//!     type Waiting = NoWait;
//!     type End = NoEnd;
//!     type Timer = NoTimer;
//!
//!     fn admit(&self, _: &mut Request<B>, _: &mut Scope) -> Admit<(), NoWait> {
//!         if self.0.fetch_add(1, Ordering::Relaxed) % 3 == 2 {
//!             Admit::Refuse("every third call is refused".into())
//!         } else {
//!             Admit::Ready(())
//!         }
//!     }
//!
//!     fn poll_wait(
//!         &self,
//!         waiting: Pin<&mut NoWait>,
//!         _: &mut Request<B>,
//!         _: &mut Scope,
//!         _: &mut Context<'_>,
//!     ) -> Poll<Admit<(), NoWait>> {
//!         match *waiting.get_mut() {}
//!     }
//!
//!     fn on_answer(_: Pin<&mut ()>, _: Answer<'_>, _: &SharedVerdict) -> Option<NoEnd> {
//!         None
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let inner = tower::service_fn(|_: Request<()>| async {
//!     Ok::<_, BoxError>(Response::new(String::from("ok")))
//! });
//! let mut svc = Staged::<_, _, Http>::new(inner, EveryThird::default());
//! for n in 0..3 {
//!     let answer = svc.ready().await.unwrap().call(Request::new(())).await;
//!     assert_eq!(answer.is_ok(), n != 2);
//! }
//! # }
//! ```

use crate::BoxError;
use crate::body::{ClassifiedBody, OnEndOfStream, StreamEnd};
use crate::context::Scope;
use crate::verdict::{AnswerVerdict, Judgement, SharedVerdict};
use http::{HeaderMap, Response, StatusCode};
use http_body::Body;
use pin_project::pin_project;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tower_service::Service;

/// What a stage decides for a call before it is sent.
#[derive(Debug)]
pub enum Admit<A, W> {
    /// The call may go; `A` is what the stage holds until the answer is in.
    Ready(A),
    /// The call has to wait (a full limit's queue); poll [`Stage::poll_wait`] with `W`.
    Wait(W),
    /// The call is refused and never sent; the error is the call's answer.
    Refuse(BoxError),
    /// The call was admitted by the outer part of a stage and refused by an inner part: it
    /// is never sent, and when its future is polled the error is its answer, told to what
    /// admitted it (`A`) — as a refusal by an inner layer reaches the layers around it.
    Fail(A, BoxError),
}

/// The answer a stage is told about in [`Stage::on_answer`].
#[derive(Debug, Clone, Copy)]
pub enum Answer<'a> {
    /// An HTTP response head.
    Head {
        /// The response's status.
        status: StatusCode,
        /// The response's headers.
        headers: &'a HeaderMap,
    },
    /// An answer with no head to judge: a plain service's `Ok`.
    Done,
    /// The call failed with this error (the inner service's, or a refusal by an inner
    /// stage).
    Error(&'a (dyn Error + 'static)),
}

/// One layer's per-call logic; see the [module docs](self).
///
/// The stage itself is consulted only when a call is admitted (and while it waits): once
/// admitted, everything the call needs is in its [`Admitted`](Stage::Admitted) value, so
/// the healthy call's future holds no reference to the stage.
pub trait Stage<Req> {
    /// What an admitted call holds until its answer is in. Dropping it unanswered means
    /// the call was cancelled: it gives back what it holds and counts nothing.
    type Admitted;
    /// What a call that has to wait holds while it waits ([`NoWait`] for a stage that
    /// never makes a call wait).
    type Waiting;
    /// What the response body still owes the stage when its stream ends ([`NoEnd`] for
    /// a stage that is always done with the head).
    type End: OnEndOfStream;
    /// What a call keeps for the stage's deadline ([`NoTimer`] for a stage without one): a
    /// timer, made empty with the call's future and pinned in it, apart from the
    /// [`Admitted`](Stage::Admitted) value, so that admitting a call (which moves what it
    /// admitted into the future) never moves a timer, armed or not. Only
    /// [`poll_deadline`](Stage::poll_deadline) touches it.
    type Timer: Default;

    /// Decides whether `request` may go now, must wait, or is refused. The stage may
    /// change the request (a timeout tells the next hop its deadline). What a stage needs
    /// to know about the call's route it reads from `scope`, which every stage of the call
    /// shares (and which an outer fusebox layer may have filled already): see
    /// [`context`](crate::context).
    fn admit(&self, request: &mut Req, scope: &mut Scope) -> Admit<Self::Admitted, Self::Waiting>;

    /// Drives a waiting call; ready with its admission ([`Admit::Ready`]), or with the
    /// error that refuses it ([`Admit::Refuse`], or [`Admit::Fail`] when part of the stage
    /// had admitted it). Never [`Admit::Wait`].
    fn poll_wait(
        &self,
        waiting: Pin<&mut Self::Waiting>,
        request: &mut Req,
        scope: &mut Scope,
        cx: &mut Context<'_>,
    ) -> Poll<Admit<Self::Admitted, NoWait>>;

    /// Polled while the inner call is pending: ready with the error that ends the call
    /// when the stage's deadline has passed, with the call's [`Timer`](Stage::Timer). The
    /// default has no deadline.
    #[inline(always)]
    fn poll_deadline(
        admitted: Pin<&mut Self::Admitted>,
        timer: Pin<&mut Self::Timer>,
        cx: &mut Context<'_>,
    ) -> Poll<BoxError> {
        let _ = (admitted, timer, cx);
        Poll::Pending
    }

    /// The call's answer is in: record it, and return what the response body still owes
    /// the stage, if anything. Called at most once per admitted call.
    ///
    /// `verdict` is the answer's verdict, shared by every stage told this answer: a stage
    /// that judges the answer asks it ([`SharedVerdict::classify`]) rather than its
    /// classifier, so that the answer is classified once however many stages judge it.
    fn on_answer(
        admitted: Pin<&mut Self::Admitted>,
        answer: Answer<'_>,
        verdict: &SharedVerdict,
    ) -> Option<Self::End>;
}

/// What a waiting call needs from the service it was polled ready on: a call that waits
/// takes that service with it, and the runner keeps a clone in its place (as tower's
/// buffering layers do), which is why a stage that can wait needs `S: Clone`.
pub trait Handoff<S> {
    /// The service the waiting call takes with it, leaving a fresh one in `inner`.
    fn take(&self, inner: &mut S) -> S;
}

/// The [`Timer`](Stage::Timer) of a stage without a deadline: no bytes in a call's future.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoTimer;

/// The [`Timer`](Stage::Timer) of a pair of stages: the outer stage's and the inner one's.
#[pin_project]
#[derive(Debug, Default)]
pub struct PairTimer<A, B> {
    #[pin]
    outer: A,
    #[pin]
    inner: B,
}

/// The [`Waiting`](Stage::Waiting) of a stage that never makes a call wait: it has no
/// values, so the waiting paths of a runner over such stages compile to nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoWait {}

impl<S> Handoff<S> for NoWait {
    fn take(&self, _: &mut S) -> S {
        match *self {}
    }
}

/// The [`End`](Stage::End) of a stage that never waits for the end of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoEnd {}

impl OnEndOfStream for NoEnd {
    fn on_end(self, _: StreamEnd<'_>) {
        match self {}
    }
}

// === impl (A, B) ===

/// What a pair of stages holds for an admitted call: the outer stage's admission and the
/// inner one's (`None` when the inner stage refused the call).
#[pin_project]
#[derive(Debug)]
pub struct Both<A, B> {
    #[pin]
    outer: A,
    #[pin]
    inner: Option<B>,
}

/// How a pair of stages makes a call wait: at the outer stage (the inner one has not been
/// asked yet), or at the inner one (the outer one admitted it).
#[pin_project(project = PairWaitProj)]
#[derive(Debug)]
pub enum PairWait<A, WA, WB> {
    /// Waiting at the outer stage.
    Outer(#[pin] WA),
    /// Admitted by the outer stage, waiting at the inner one.
    Inner {
        /// The outer stage's admission, kept unpinned until the call is sent.
        outer: Option<A>,
        /// The inner stage's wait.
        #[pin]
        waiting: WB,
    },
}

impl<S, A, WA: Handoff<S>, WB: Handoff<S>> Handoff<S> for PairWait<A, WA, WB> {
    #[inline]
    fn take(&self, inner: &mut S) -> S {
        match self {
            PairWait::Outer(w) => w.take(inner),
            PairWait::Inner { waiting, .. } => waiting.take(inner),
        }
    }
}

/// The inner stage's decision after the outer stage admitted the call with `outer`; an
/// inner wait is the caller's to handle (it keeps `outer` in the pair's wait).
#[inline(always)]
fn with_outer<A, B>(outer: A, inner: Admit<B, NoWait>) -> Admit<Both<A, B>, NoWait> {
    match inner {
        Admit::Ready(inner) => Admit::Ready(Both {
            outer,
            inner: Some(inner),
        }),
        Admit::Wait(never) => match never {},
        Admit::Refuse(error) => Admit::Fail(Both { outer, inner: None }, error),
        Admit::Fail(inner, error) => Admit::Fail(
            Both {
                outer,
                inner: Some(inner),
            },
            error,
        ),
    }
}

impl<Req, A: Stage<Req>, B: Stage<Req>> Stage<Req> for (A, B) {
    type Admitted = Both<A::Admitted, B::Admitted>;
    type Waiting = PairWait<A::Admitted, A::Waiting, B::Waiting>;
    /// The inner stage's end first, then the outer one's: the inner body sat inside.
    type End = (Option<B::End>, Option<A::End>);
    type Timer = PairTimer<A::Timer, B::Timer>;

    #[inline(always)]
    fn admit(&self, request: &mut Req, scope: &mut Scope) -> Admit<Self::Admitted, Self::Waiting> {
        let outer = match self.0.admit(request, scope) {
            Admit::Ready(outer) => outer,
            Admit::Wait(waiting) => return Admit::Wait(PairWait::Outer(waiting)),
            Admit::Refuse(error) => return Admit::Refuse(error),
            Admit::Fail(outer, error) => return Admit::Fail(Both { outer, inner: None }, error),
        };
        match self.1.admit(request, scope) {
            Admit::Ready(inner) => Admit::Ready(Both {
                outer,
                inner: Some(inner),
            }),
            Admit::Wait(waiting) => Admit::Wait(PairWait::Inner {
                outer: Some(outer),
                waiting,
            }),
            // Told to the outer stage when the call's future is polled, as a refusal by an
            // inner layer reaches the layers around it.
            Admit::Refuse(error) => Admit::Fail(Both { outer, inner: None }, error),
            Admit::Fail(inner, error) => Admit::Fail(
                Both {
                    outer,
                    inner: Some(inner),
                },
                error,
            ),
        }
    }

    fn poll_wait(
        &self,
        mut waiting: Pin<&mut Self::Waiting>,
        request: &mut Req,
        scope: &mut Scope,
        cx: &mut Context<'_>,
    ) -> Poll<Admit<Self::Admitted, NoWait>> {
        loop {
            match waiting.as_mut().project() {
                PairWaitProj::Outer(w) => {
                    let outer = match ready!(self.0.poll_wait(w, request, scope, cx)) {
                        Admit::Ready(outer) => outer,
                        Admit::Wait(never) => match never {},
                        Admit::Refuse(error) => return Poll::Ready(Admit::Refuse(error)),
                        Admit::Fail(outer, error) => {
                            return Poll::Ready(Admit::Fail(Both { outer, inner: None }, error));
                        }
                    };
                    let inner = match self.1.admit(request, scope) {
                        Admit::Wait(w) => {
                            waiting.set(PairWait::Inner {
                                outer: Some(outer),
                                waiting: w,
                            });
                            continue;
                        }
                        Admit::Ready(inner) => Admit::Ready(inner),
                        Admit::Refuse(error) => Admit::Refuse(error),
                        Admit::Fail(inner, error) => Admit::Fail(inner, error),
                    };
                    return Poll::Ready(with_outer(outer, inner));
                }
                PairWaitProj::Inner { outer, waiting: w } => {
                    let inner = ready!(self.1.poll_wait(w, request, scope, cx));
                    // `None`: polled again after it was ready; it stays pending.
                    let Some(outer) = outer.take() else {
                        return Poll::Pending;
                    };
                    return Poll::Ready(with_outer(outer, inner));
                }
            }
        }
    }

    #[inline(always)]
    fn poll_deadline(
        admitted: Pin<&mut Self::Admitted>,
        timer: Pin<&mut Self::Timer>,
        cx: &mut Context<'_>,
    ) -> Poll<BoxError> {
        let both = admitted.project();
        let timers = timer.project();
        // The inner stage's deadline first, as the inner layer's timer would fire first.
        if let Some(inner) = both.inner.as_pin_mut()
            && let Poll::Ready(error) = B::poll_deadline(inner, timers.inner, cx)
        {
            return Poll::Ready(error);
        }
        A::poll_deadline(both.outer, timers.outer, cx)
    }

    #[inline(always)]
    fn on_answer(
        admitted: Pin<&mut Self::Admitted>,
        answer: Answer<'_>,
        verdict: &SharedVerdict,
    ) -> Option<Self::End> {
        let both = admitted.project();
        let inner = match both.inner.as_pin_mut() {
            Some(inner) => B::on_answer(inner, answer, verdict),
            None => None,
        };
        let outer = A::on_answer(both.outer, answer, verdict);
        if inner.is_none() && outer.is_none() {
            None
        } else {
            Some((inner, outer))
        }
    }
}

// === impl Option<St> ===

/// A stage that is there or not: `None` admits every call and records nothing.
impl<Req, St: Stage<Req>> Stage<Req> for Option<St> {
    type Admitted = Option<St::Admitted>;
    type Waiting = St::Waiting;
    type End = St::End;
    type Timer = St::Timer;

    #[inline(always)]
    fn admit(&self, request: &mut Req, scope: &mut Scope) -> Admit<Self::Admitted, Self::Waiting> {
        match self {
            None => Admit::Ready(None),
            Some(stage) => some(stage.admit(request, scope)),
        }
    }

    fn poll_wait(
        &self,
        waiting: Pin<&mut Self::Waiting>,
        request: &mut Req,
        scope: &mut Scope,
        cx: &mut Context<'_>,
    ) -> Poll<Admit<Self::Admitted, NoWait>> {
        match self {
            Some(stage) => stage.poll_wait(waiting, request, scope, cx).map(some),
            // Only a stage that is there makes a call wait.
            None => Poll::Pending,
        }
    }

    #[inline(always)]
    fn poll_deadline(
        admitted: Pin<&mut Self::Admitted>,
        timer: Pin<&mut Self::Timer>,
        cx: &mut Context<'_>,
    ) -> Poll<BoxError> {
        match admitted.as_pin_mut() {
            Some(admitted) => St::poll_deadline(admitted, timer, cx),
            None => Poll::Pending,
        }
    }

    #[inline(always)]
    fn on_answer(
        admitted: Pin<&mut Self::Admitted>,
        answer: Answer<'_>,
        verdict: &SharedVerdict,
    ) -> Option<Self::End> {
        St::on_answer(admitted.as_pin_mut()?, answer, verdict)
    }
}

/// A stage's decision, as its `Option`'s.
#[inline(always)]
fn some<A, W>(admit: Admit<A, W>) -> Admit<Option<A>, W> {
    match admit {
        Admit::Ready(admitted) => Admit::Ready(Some(admitted)),
        Admit::Wait(waiting) => Admit::Wait(waiting),
        Admit::Refuse(error) => Admit::Refuse(error),
        Admit::Fail(admitted, error) => Admit::Fail(Some(admitted), error),
    }
}

/// `None` tells nothing; `Some` tells its callback.
impl<E: OnEndOfStream> OnEndOfStream for Option<E> {
    #[inline]
    fn on_end(self, end: StreamEnd<'_>) {
        if let Some(e) = self {
            e.on_end(end);
        }
    }

    #[inline]
    fn on_end_shared(self, end: StreamEnd<'_>, verdict: &SharedVerdict) {
        if let Some(e) = self {
            e.on_end_shared(end, verdict);
        }
    }
}

// === impl Arc<St> ===

/// A shared stage: what the runners of one policy (or layer) hold, one pointer each.
impl<Req, St: Stage<Req>> Stage<Req> for Arc<St> {
    type Admitted = St::Admitted;
    type Waiting = St::Waiting;
    type End = St::End;
    type Timer = St::Timer;

    #[inline(always)]
    fn admit(&self, request: &mut Req, scope: &mut Scope) -> Admit<Self::Admitted, Self::Waiting> {
        (**self).admit(request, scope)
    }

    fn poll_wait(
        &self,
        waiting: Pin<&mut Self::Waiting>,
        request: &mut Req,
        scope: &mut Scope,
        cx: &mut Context<'_>,
    ) -> Poll<Admit<Self::Admitted, NoWait>> {
        (**self).poll_wait(waiting, request, scope, cx)
    }

    #[inline(always)]
    fn poll_deadline(
        admitted: Pin<&mut Self::Admitted>,
        timer: Pin<&mut Self::Timer>,
        cx: &mut Context<'_>,
    ) -> Poll<BoxError> {
        St::poll_deadline(admitted, timer, cx)
    }

    #[inline(always)]
    fn on_answer(
        admitted: Pin<&mut Self::Admitted>,
        answer: Answer<'_>,
        verdict: &SharedVerdict,
    ) -> Option<Self::End> {
        St::on_answer(admitted, answer, verdict)
    }
}

// === Reply ===

/// How a runner reads the inner service's answer and hands it on.
pub trait Reply<R> {
    /// The answer the runner hands on, carrying what the stages still owe (`E`).
    type Output<E: OnEndOfStream>;

    /// The answer as the stages see it.
    fn answer(response: &R) -> Answer<'_>;

    /// The answer handed on, with what the stages still wait for at the end of its stream.
    fn wrap<E: OnEndOfStream>(response: R, end: Option<E>) -> Self::Output<E>;

    /// Leaves `verdict` with the answer, for a stage that asked to expose it
    /// ([`SharedVerdict::expose`]). The default drops it: an answer of no known type has
    /// nowhere to keep it.
    #[inline]
    fn expose(response: &mut R, verdict: AnswerVerdict) {
        let _ = (response, verdict);
    }
}

/// HTTP answers: judged by their head, handed on with their body in a [`ClassifiedBody`]
/// (which tells the stages how the stream ended when they wait for it).
#[derive(Debug, Clone, Copy)]
pub enum Http {}

impl<B: Body> Reply<Response<B>> for Http {
    type Output<E: OnEndOfStream> = Response<ClassifiedBody<B, E>>;

    #[inline(always)]
    fn answer(response: &Response<B>) -> Answer<'_> {
        Answer::Head {
            status: response.status(),
            headers: response.headers(),
        }
    }

    #[inline(always)]
    fn wrap<E: OnEndOfStream>(response: Response<B>, end: Option<E>) -> Self::Output<E> {
        match end {
            Some(end) => ClassifiedBody::for_response(response, end),
            None => response.map(ClassifiedBody::passthrough),
        }
    }

    /// In the response's extensions (which allocates).
    #[cold]
    #[inline(never)]
    fn expose(response: &mut Response<B>, verdict: AnswerVerdict) {
        response.extensions_mut().insert(verdict);
    }
}

/// Any answer: only its `Ok` ([`Answer::Done`]) or `Err` is seen, and it is handed on
/// untouched, in the inner service's own type.
#[derive(Debug, Clone, Copy)]
pub enum Opaque {}

impl<R> Reply<R> for Opaque {
    type Output<E: OnEndOfStream> = R;

    #[inline(always)]
    fn answer(_: &R) -> Answer<'_> {
        Answer::Done
    }

    #[inline(always)]
    fn wrap<E: OnEndOfStream>(response: R, end: Option<E>) -> R {
        // There is no stream to wait for: whatever a stage waits for ends with the answer.
        if let Some(end) = end {
            end.on_end(StreamEnd::Dropped);
        }
        response
    }
}

// === impl Staged ===

/// The service that runs `St` around `S`; answers are read and handed on as `P` says
/// ([`Http`] or [`Opaque`]). See the [module docs](self).
pub struct Staged<S, St, P> {
    inner: S,
    stage: St,
    reply: PhantomData<fn() -> P>,
}

impl<S, St, P> Staged<S, St, P> {
    /// Runs `stage` around `inner`.
    pub fn new(inner: S, stage: St) -> Self {
        Staged {
            inner,
            stage,
            reply: PhantomData,
        }
    }

    /// The stage.
    pub fn stage(&self) -> &St {
        &self.stage
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, consuming the runner.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, St: Clone, P> Clone for Staged<S, St, P> {
    fn clone(&self) -> Self {
        Staged {
            inner: self.inner.clone(),
            stage: self.stage.clone(),
            reply: PhantomData,
        }
    }
}

impl<S: fmt::Debug, St: fmt::Debug, P> fmt::Debug for Staged<S, St, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Staged")
            .field("inner", &self.inner)
            .field("stage", &self.stage)
            .finish()
    }
}

impl<S, St, P, Req> Service<Req> for Staged<S, St, P>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    St: Stage<Req> + Clone,
    St::Waiting: Handoff<S>,
    P: Reply<S::Response>,
{
    type Response = P::Output<St::End>;
    type Error = BoxError;
    type Future = StagedFuture<S, Req, St, P>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Admission is decided per call, in `call`: a stage that refuses does so at once
        // instead of holding `poll_ready` (and with it the caller's whole stack) pending.
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    #[inline(always)]
    fn call(&mut self, mut request: Req) -> Self::Future {
        // What the stages resolve about the call, shared by them and, while the call is
        // handed on, by the fusebox services inside this one.
        let mut scope = Scope::new();
        match self.stage.admit(&mut request, &mut scope) {
            Admit::Ready(admitted) => {
                let _current = scope.hand_on();
                StagedFuture {
                    phase: Phase::Called {
                        future: self.inner.call(request),
                    },
                    admitted: Some(admitted),
                    timer: St::Timer::default(),
                    reply: PhantomData,
                }
            }
            Admit::Wait(waiting) => self.wait(waiting, request, scope),
            Admit::Refuse(error) => StagedFuture::refused(error, None),
            Admit::Fail(admitted, error) => StagedFuture::refused(error, Some(admitted)),
        }
    }
}

impl<S, St, P> Staged<S, St, P> {
    /// A call that has to wait takes the service the caller polled ready with it (and the
    /// stage, to admit it later); this runner keeps a fresh service in its place.
    #[inline(never)]
    fn wait<Req>(
        &mut self,
        waiting: St::Waiting,
        request: Req,
        scope: Scope,
    ) -> StagedFuture<S, Req, St, P>
    where
        S: Service<Req>,
        St: Stage<Req> + Clone,
        St::Waiting: Handoff<S>,
    {
        let service = waiting.take(&mut self.inner);
        StagedFuture {
            phase: Phase::Waiting {
                waiter: Box::pin(Waiter {
                    waiting,
                    stage: self.stage.clone(),
                    call: Some((service, request)),
                    scope,
                }),
            },
            admitted: None,
            timer: St::Timer::default(),
            reply: PhantomData,
        }
    }
}

// === impl StagedFuture ===

/// The future of [`Staged`]: the inner call bounded by the stages' deadlines, a wait for
/// admission, or a refusal.
///
/// Dropping it at any point gives back what the stages handed the call (a place in a
/// queue, a permit, a breaker's probe) and counts nothing: the call was cancelled.
#[pin_project]
pub struct StagedFuture<S, Req, St, P>
where
    S: Service<Req>,
    St: Stage<Req>,
{
    #[pin]
    phase: Phase<S, Req, St>,
    #[pin]
    admitted: Option<St::Admitted>,
    /// The stages' timers: made empty here and never moved ([`Stage::Timer`]).
    #[pin]
    timer: St::Timer,
    reply: PhantomData<fn() -> P>,
}

#[pin_project(project = PhaseProj, project_replace = PhaseOwn)]
enum Phase<S, Req, St>
where
    S: Service<Req>,
    St: Stage<Req>,
{
    Called {
        #[pin]
        future: S::Future,
    },
    /// Boxed: only calls that find a limit full wait, and the request and service they
    /// carry would make every call's future larger.
    Waiting {
        waiter: Pin<Box<Waiter<S, Req, St>>>,
    },
    /// Refused before it was sent: the error, taken by the poll that returns it (and told
    /// to what the outer part of the stage had admitted, if anything).
    Refused { error: Option<BoxError> },
    /// Answered: the inner call is gone, and what is left is the verdict the stages shared
    /// on the answer (`None` if none of them judged it).
    Done { judgement: Option<Judgement> },
}

/// A waiting call, with what it needs to be sent once admitted.
#[pin_project]
struct Waiter<S, Req, St: Stage<Req>> {
    #[pin]
    waiting: St::Waiting,
    stage: St,
    call: Option<(S, Req)>,
    /// The call's scope: what its stages resolved, current again when it is sent.
    scope: Scope,
}

impl<S, Req, St, P> StagedFuture<S, Req, St, P>
where
    S: Service<Req>,
    St: Stage<Req>,
{
    /// A call refused before it was sent; `admitted` is what the outer part of the stage
    /// had admitted it with, told of the refusal when the future is polled.
    #[cold]
    fn refused(error: BoxError, admitted: Option<St::Admitted>) -> Self {
        StagedFuture {
            phase: Phase::Refused { error: Some(error) },
            admitted,
            timer: St::Timer::default(),
            reply: PhantomData,
        }
    }
}

impl<S, Req, St, P> StagedFuture<S, Req, St, P>
where
    S: Service<Req>,
    St: Stage<Req>,
{
    /// Once the future is done: the verdict its stages shared on the answer, with the
    /// classifier that gave it (`None` before, and when no stage judged the answer).
    ///
    /// What sits around the runner and judges the same answer with the same route table
    /// (the `Policy`'s retry and call span) reads it here instead of classifying again.
    #[inline]
    pub fn judgement(&self) -> Option<Judgement> {
        match self.phase {
            Phase::Done { judgement } => judgement,
            _ => None,
        }
    }
}

/// A future that, once done, can tell the verdict its stages gave its answer
/// ([`StagedFuture::judgement`]).
pub trait Judged {
    /// The verdict on the answer the future completed with, if it is done and a stage
    /// judged it.
    fn judgement(&self) -> Option<Judgement>;
}

impl<S, Req, St, P> Judged for StagedFuture<S, Req, St, P>
where
    S: Service<Req>,
    St: Stage<Req>,
{
    #[inline]
    fn judgement(&self) -> Option<Judgement> {
        StagedFuture::judgement(self)
    }
}

impl<S, Req, St, P> fmt::Debug for StagedFuture<S, Req, St, P>
where
    S: Service<Req>,
    St: Stage<Req>,
    St::Admitted: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phase = match &self.phase {
            Phase::Called { .. } => "called",
            Phase::Waiting { .. } => "waiting",
            Phase::Refused { .. } => "refused",
            Phase::Done { .. } => "done",
        };
        f.debug_struct("StagedFuture")
            .field("phase", &phase)
            .field("admitted", &self.admitted)
            .finish_non_exhaustive()
    }
}

impl<S, Req, St, P> Future for StagedFuture<S, Req, St, P>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    St: Stage<Req>,
    P: Reply<S::Response>,
{
    type Output = Result<P::Output<St::End>, BoxError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let error = match this.phase.as_mut().project() {
                PhaseProj::Called { future } => match future.poll(cx) {
                    // The answer is judged where it lies and moved once, into the output:
                    // a response head is over a hundred bytes, and turning the inner
                    // `Result` into one with a `BoxError` first would copy it once more.
                    Poll::Ready(Ok(response)) => {
                        return Poll::Ready(Ok(answered::<_, _, Req, St, P>(
                            response,
                            this.phase,
                            this.admitted,
                            this.timer,
                        )));
                    }
                    Poll::Ready(Err(error)) => error.into(),
                    // The call first: a ready answer wins over a due deadline, and a call
                    // that answers on its first poll arms no timer.
                    Poll::Pending => match this.admitted.as_mut().as_pin_mut() {
                        Some(admitted) => {
                            ready!(St::poll_deadline(admitted, this.timer.as_mut(), cx))
                        }
                        None => return Poll::Pending,
                    },
                },
                // Out of line: matched here with the others, the phase would be read
                // through a jump table on every healthy call.
                _ => match poll_unsent(this.phase.as_mut(), this.admitted.as_mut(), cx) {
                    Poll::Ready(Some(error)) => error,
                    Poll::Ready(None) => continue,
                    Poll::Pending => return Poll::Pending,
                },
            };
            return Poll::Ready(Err(failed::<S, Req, St>(
                error,
                this.phase,
                this.admitted,
                this.timer,
            )));
        }
    }
}

/// A call's phase when it is not `Called`: a call waiting for admission is driven
/// (`Ready(None)` once it is sent, its phase then `Called`), a refused call's error taken.
#[inline(never)]
fn poll_unsent<S, Req, St>(
    mut phase: Pin<&mut Phase<S, Req, St>>,
    admitted: Pin<&mut Option<St::Admitted>>,
    cx: &mut Context<'_>,
) -> Poll<Option<BoxError>>
where
    S: Service<Req>,
    St: Stage<Req>,
{
    let error = match phase.as_mut().project() {
        PhaseProj::Waiting { .. } => {
            ready!(send(phase, admitted, cx));
            return Poll::Ready(None);
        }
        PhaseProj::Refused { error } => error.take(),
        // `Called` is the caller's to poll, and never reaches here.
        PhaseProj::Called { .. } | PhaseProj::Done { .. } => None,
    };
    match error {
        Some(error) => Poll::Ready(Some(error)),
        None => panic!("fusebox StagedFuture polled after completion"),
    }
}

/// Drives a waiting call: once admitted it is sent (the phase becomes `Called`); refused,
/// the phase becomes `Refused`.
#[inline(never)]
fn send<S, Req, St>(
    mut phase: Pin<&mut Phase<S, Req, St>>,
    mut admitted: Pin<&mut Option<St::Admitted>>,
    cx: &mut Context<'_>,
) -> Poll<()>
where
    S: Service<Req>,
    St: Stage<Req>,
{
    let sent = {
        let PhaseProj::Waiting { waiter } = phase.as_mut().project() else {
            return Poll::Ready(());
        };
        let waiter = waiter.as_mut().project();
        let Some((_, request)) = waiter.call.as_mut() else {
            return Poll::Pending;
        };
        match ready!(
            waiter
                .stage
                .poll_wait(waiter.waiting, request, waiter.scope, cx)
        ) {
            Admit::Ready(admission) => match waiter.call.take() {
                Some((mut service, request)) => {
                    admitted.set(Some(admission));
                    let _current = waiter.scope.enter();
                    Ok(service.call(request))
                }
                None => return Poll::Pending,
            },
            Admit::Wait(never) => match never {},
            Admit::Refuse(error) => Err(error),
            Admit::Fail(admission, error) => {
                admitted.set(Some(admission));
                Err(error)
            }
        }
    };
    match sent {
        Ok(future) => phase.set(Phase::Called { future }),
        Err(error) => phase.set(Phase::Refused { error: Some(error) }),
    }
    Poll::Ready(())
}

/// Tells the stages the answer, keeps the verdict they shared (the phase becomes `Done`)
/// and hands the answer on with what they still wait for.
#[inline(always)]
fn answered<S, R, Req, St, P>(
    mut response: R,
    mut phase: Pin<&mut Phase<S, Req, St>>,
    mut admitted: Pin<&mut Option<St::Admitted>>,
    mut timer: Pin<&mut St::Timer>,
) -> P::Output<St::End>
where
    S: Service<Req>,
    St: Stage<Req>,
    P: Reply<R>,
{
    let verdict = SharedVerdict::new();
    let end = match admitted.as_mut().as_pin_mut() {
        Some(stages) => St::on_answer(stages, P::answer(&response), &verdict),
        None => None,
    };
    admitted.set(None);
    // A timer armed while the call was pending goes with it, whoever keeps this future.
    timer.set(St::Timer::default());
    // Only a verdict has to be kept: with none (a plain answer, which no stage judges), the
    // phase stays as it is — `judgement` answers `None` for it as for `Done` — and the
    // transition, which drops the whole phase out of line, is not paid on every call.
    if let Some(judgement) = verdict.judgement() {
        // Replaced rather than set: `set` drops the whole phase out of line, a replacement
        // drops the fields of the one phase it finds.
        drop(phase.as_mut().project_replace(Phase::Done {
            judgement: Some(judgement),
        }));
        if let Some(exposed) = verdict.take_exposed() {
            P::expose(&mut response, exposed);
        }
    }
    P::wrap(response, end)
}

/// Tells the stages the call failed with `error` (the inner service's, a deadline's or a
/// refusal), keeps the verdict they shared (the phase becomes `Done`), and hands the
/// error on.
#[inline(never)]
fn failed<S, Req, St>(
    error: BoxError,
    mut phase: Pin<&mut Phase<S, Req, St>>,
    mut admitted: Pin<&mut Option<St::Admitted>>,
    mut timer: Pin<&mut St::Timer>,
) -> BoxError
where
    S: Service<Req>,
    St: Stage<Req>,
{
    let verdict = SharedVerdict::new();
    let end = match admitted.as_mut().as_pin_mut() {
        Some(stages) => St::on_answer(stages, Answer::Error(&*error), &verdict),
        None => None,
    };
    admitted.set(None);
    timer.set(St::Timer::default());
    phase.set(Phase::Done {
        judgement: verdict.judgement(),
    });
    if let Some(end) = end {
        end.on_end(StreamEnd::Dropped);
    }
    error
}
