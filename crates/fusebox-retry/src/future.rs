//! The response future of [`Retry`](crate::Retry): buffers the body, sends attempts,
//! judges each answer (classifying it, or reading the verdict the stages under it gave:
//! [`verdicts`](crate::verdicts)), waits out backoffs and races a hedge.
//!
//! A hand-written state machine (pin-projected, no `Box::pin`), so that the healthy path
//! (one attempt, a good answer) allocates nothing and does no more than poll the inner
//! future, classify the answer and return it.

use crate::config::RetryConfig;
use crate::error::{BodyExceedsSizeHint, BoxError, DeadlineExceeded, is_fusebox_rejection};
use crate::replay::{Buffered, ReplayBody};
use crate::service::{Bound, Shared, attempt_span, call_in};
use crate::verdicts::{AttemptVerdicts, Classify};
use fusebox_classify::shard::Lease;
use fusebox_classify::verdict::offer;
use fusebox_classify::{
    CallMeta, Classified, Classifier, Deadline, Judgement, Outcome, RetryHint, Verdict,
};
use http::{Request, Response, request};
use http_body::Body;
use pin_project::pin_project;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::Sleep;
use tower_service::Service;
use tracing::Span;

/// Whether a hedge may still be sent, is waiting for its timer or for the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hedge {
    /// Not armed yet (or re-armable after a retry).
    Idle,
    /// The hedge timer is running.
    Armed,
    /// The timer fired and the budget granted it: waiting for the service to be ready.
    Wanted,
    /// Sent, refused, or not applicable: no more hedges for this request.
    Spent,
}

/// What a request that may be repeated keeps between attempts.
pub(crate) struct Replay<S, D> {
    /// The service the next attempt goes to: the one the caller polled ready when the body
    /// had to be buffered first, else cloned from the spare when a retry or hedge needs it
    /// (boxed: see [`Bound`]).
    service: Option<Box<S>>,
    parts: request::Parts,
    buffer: Buffered<D>,
    attempts: u32,
    hedge: Hedge,
}

impl<S, D> Replay<S, D> {
    #[inline]
    pub(crate) fn new(service: Option<Box<S>>, parts: request::Parts, buffer: Buffered<D>) -> Self {
        Replay {
            service,
            parts,
            buffer,
            attempts: 0,
            hedge: Hedge::Idle,
        }
    }
}

impl<S: Clone, D> Replay<S, D> {
    /// The service for the next attempt, cloned from `bound`'s spare the first time.
    fn next_service<C>(&mut self, bound: &Bound<S, C>) -> &mut S {
        self.service.get_or_insert_with(|| {
            Box::new(
                bound
                    .spare()
                    .expect("a call that can be repeated kept a spare service"),
            )
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading the request body into the buffer.
    Buffering,
    /// About to send an attempt; `ready` when the service was already polled ready.
    Send { ready: bool },
    /// One or two attempts in flight (a hedge timer may be running).
    Running,
    /// Waiting out a backoff.
    Backoff,
    /// The deadline had passed before the first attempt: nothing is sent.
    Expired,
    /// The answer to an [`Expired`](Phase::Expired) request was returned: nothing was sent.
    Unsent,
    /// The answer was returned.
    Done,
}

/// The response future of [`Retry`](crate::Retry); `V` is where it takes each attempt's
/// verdict from ([`verdicts`](crate::verdicts)).
#[pin_project]
pub struct ResponseFuture<S, C, B, V = Classify>
where
    S: Service<Request<ReplayBody<B>>>,
    B: Body,
{
    #[pin]
    body: Option<B>,
    #[pin]
    primary: Option<S::Future>,
    /// The hedge in flight. Boxed: only hedged requests have one (a whole extra request),
    /// and inline it would make every healthy call's future larger to move.
    hedge: Option<Pin<Box<HedgeAttempt<S::Future>>>>,
    /// The backoff or hedge timer. Boxed: only retries and hedges need one, and inline it
    /// would make every healthy call's future larger to move.
    timer: Option<Pin<Box<Sleep>>>,
    primary_span: Span,
    phase: Phase,
    shared: Arc<Lease<Bound<S, C>>>,
    meta: CallMeta,
    deadline: Option<Deadline>,
    replay: Option<Replay<S, B::Data>>,
    verdicts: PhantomData<fn() -> V>,
}

impl<S, C, B, V> fmt::Debug for ResponseFuture<S, C, B, V>
where
    S: Service<Request<ReplayBody<B>>>,
    B: Body,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("phase", &self.phase)
            .field("meta", &self.meta)
            .field("attempts", &self.replay.as_ref().map(|r| r.attempts))
            .finish_non_exhaustive()
    }
}

impl<S, C, B, V> ResponseFuture<S, C, B, V>
where
    S: Service<Request<ReplayBody<B>>>,
    B: Body,
{
    /// The attempts sent so far: first attempt, retries and hedges (`0` while the body is
    /// being buffered, and for a request whose deadline had passed before anything was
    /// sent). Read by a caller that reports the call when it finishes (the `Policy`'s span).
    pub fn attempts(&self) -> u32 {
        match (&self.replay, self.phase) {
            (_, Phase::Expired | Phase::Unsent) => 0,
            (Some(replay), _) => replay.attempts,
            // Sent once, never repeated.
            (None, _) => 1,
        }
    }

    /// Once the answer was handed on: the verdict the stages under the retry gave it (the
    /// attempt whose answer it is), when the retry reads theirs
    /// ([`FromStages`](crate::verdicts::FromStages)) and they judged it; `None` before,
    /// and for an answer the retry made itself. Read by a caller that reports the call
    /// when it finishes (the `Policy`'s span).
    pub fn judgement(&self) -> Option<Judgement>
    where
        V: AttemptVerdicts<S::Future>,
    {
        if self.phase != Phase::Done {
            return None;
        }
        match (&self.hedge, &self.primary) {
            (Some(hedge), _) => V::judgement(&hedge.future),
            (None, Some(primary)) => V::judgement(primary),
            (None, None) => None,
        }
    }

    /// The first attempt is in flight; the request will not be repeated.
    #[inline]
    pub(crate) fn once(
        future: S::Future,
        span: Span,
        shared: Arc<Lease<Bound<S, C>>>,
        meta: CallMeta,
        deadline: Option<Deadline>,
    ) -> Self {
        ResponseFuture {
            body: None,
            primary: Some(future),
            hedge: None,
            timer: None,
            primary_span: span,
            phase: Phase::Running,
            shared,
            meta,
            deadline,
            replay: None,
            verdicts: PhantomData,
        }
    }

    /// The first attempt of a request with an empty body is in flight; `service` and
    /// `parts` make the next ones.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn repeatable(
        call: impl FnOnce(&Span, &request::Parts) -> S::Future,
        span: Span,
        shared: Arc<Lease<Bound<S, C>>>,
        meta: CallMeta,
        deadline: Option<Deadline>,
        parts: request::Parts,
        (timer, hedge): (Option<Pin<Box<Sleep>>>, Hedge),
    ) -> Self {
        // One struct literal in return position, so that it is built in place: this runs
        // on every healthy call.
        ResponseFuture {
            body: None,
            // Called here, in the struct literal, so that the attempt's future is built in
            // its place in this one instead of moved into it, and its request is made from
            // the head this one keeps.
            primary: Some(call(&span, &parts)),
            hedge: None,
            timer,
            primary_span: span,
            phase: Phase::Running,
            shared,
            meta,
            deadline,
            replay: Some(Replay {
                service: None,
                parts,
                buffer: Buffered::default(),
                attempts: 1,
                hedge,
            }),
            verdicts: PhantomData,
        }
    }

    /// The request's deadline had already passed: the future fails with
    /// [`DeadlineExceeded`] without sending anything.
    #[cold]
    pub(crate) fn expired(shared: Arc<Lease<Bound<S, C>>>, meta: CallMeta) -> Self {
        ResponseFuture {
            body: None,
            primary: None,
            hedge: None,
            timer: None,
            primary_span: Span::none(),
            phase: Phase::Expired,
            shared,
            meta,
            deadline: None,
            replay: None,
            verdicts: PhantomData,
        }
    }

    /// The body must be buffered before the first attempt; `replay.service` is ready.
    pub(crate) fn buffering(
        body: B,
        shared: Arc<Lease<Bound<S, C>>>,
        meta: CallMeta,
        deadline: Option<Deadline>,
        replay: Replay<S, B::Data>,
    ) -> Self {
        ResponseFuture {
            body: Some(body),
            primary: None,
            hedge: None,
            timer: None,
            primary_span: Span::none(),
            phase: Phase::Buffering,
            shared,
            meta,
            deadline,
            replay: Some(replay),
            verdicts: PhantomData,
        }
    }
}

/// The hedge timer of a first attempt, and the hedge state to go with it.
#[inline]
pub(crate) fn first_hedge(
    config: &RetryConfig,
    meta: &CallMeta,
) -> (Option<Pin<Box<Sleep>>>, Hedge) {
    match config.hedge_delay() {
        Some(delay) if meta.idempotent() && config.max_attempts() > 1 => {
            (Some(Box::pin(tokio::time::sleep(delay))), Hedge::Armed)
        }
        _ => (None, Hedge::Idle),
    }
}

/// Starts the hedge timer if this request may be hedged now.
fn arm_hedge<C, S, D>(
    shared: &Shared<C>,
    meta: &CallMeta,
    replay: &mut Replay<S, D>,
) -> Option<Pin<Box<Sleep>>> {
    let config = shared.config.load();
    let delay = config.hedge_delay()?;
    if replay.hedge != Hedge::Idle || !meta.idempotent() || replay.attempts >= config.max_attempts()
    {
        return None;
    }
    replay.hedge = Hedge::Armed;
    Some(Box::pin(tokio::time::sleep(delay)))
}

/// A hedge attempt and its span.
#[pin_project]
struct HedgeAttempt<F> {
    #[pin]
    future: F,
    span: Span,
}

impl<F: Future> Future for HedgeAttempt<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = this.span.enter();
        this.future.poll(cx)
    }
}

/// What to do with one attempt's result.
enum Step {
    /// This is the answer.
    Return,
    /// A retryable failure while another attempt is still in flight: wait for that one.
    Discard,
    /// Retry after this delay (already taken from the budget).
    Retry(Duration),
}

/// Classifies an attempt's result and decides. A success returns at once: that is the
/// healthy path, and it records nothing (the request's deposit counted the attempt).
///
/// `judged` is the verdict the stages under the retry gave the answer, if they did: it is
/// the classifier's when it is this table's for this route, and the answer is not
/// classified again.
#[inline]
fn decide<C, S, D, ResB>(
    shared: &Shared<C>,
    meta: &CallMeta,
    deadline: Option<Deadline>,
    replay: Option<&Replay<S, D>>,
    other_in_flight: bool,
    result: &Result<Response<ResB>, BoxError>,
    judged: Option<Judgement>,
) -> Step
where
    C: Classifier,
{
    let routes = &shared.routes;
    let known = judged.and_then(|j| j.of(routes, meta.route()));
    let call = || meta.call(routes);
    let route = || routes.route(meta.route());
    let verdict = match result {
        Ok(response) => {
            let classified = match known {
                Some(classified) => classified,
                None => {
                    let classified = route().classifier().classify_response(
                        &call(),
                        response.status(),
                        response.headers(),
                    );
                    offer(Judgement::new(routes, meta.route(), classified));
                    classified
                }
            };
            match classified {
                Classified::Ready(verdict) => verdict,
                // Decided by the trailers: the answer is streaming to the caller already,
                // so it cannot be retried, and it is not counted by the cut-off.
                Classified::AtEndOfStream => return Step::Return,
            }
        }
        Err(error) => {
            let verdict = match known {
                Some(Classified::Ready(verdict)) => verdict,
                _ => {
                    let verdict = route().classifier().classify_error(&call(), &**error);
                    offer(Judgement::new(routes, meta.route(), verdict.into()));
                    verdict
                }
            };
            if is_fusebox_rejection(&**error) {
                verdict.with_retry(RetryHint::Never)
            } else {
                verdict
            }
        }
    };
    if verdict.outcome() == Outcome::Success {
        return Step::Return;
    }
    after_failure(shared, meta, deadline, replay, other_in_flight, verdict)
}

/// The rest of [`decide`] for an attempt that did not succeed: record it, and retry if the
/// request, the hint and the budget allow.
#[cold]
#[inline(never)]
fn after_failure<C, S, D>(
    shared: &Shared<C>,
    meta: &CallMeta,
    deadline: Option<Deadline>,
    replay: Option<&Replay<S, D>>,
    other_in_flight: bool,
    verdict: Verdict,
) -> Step {
    shared.budget.record(verdict.outcome());
    let hint = verdict.retry();
    let wanted = match hint {
        RetryHint::NotSent => true,
        RetryHint::Retryable | RetryHint::After(_) => meta.idempotent(),
        // Never, and any hint this layer does not know: not retried.
        _ => false,
    };
    let Some(replay) = replay.filter(|_| wanted) else {
        return Step::Return;
    };
    if other_in_flight {
        return Step::Discard;
    }
    match shared.plan_retry(hint, replay.attempts, deadline) {
        Ok(delay) => Step::Retry(delay),
        Err(refusal) => {
            shared.refused(refusal, replay.attempts);
            Step::Return
        }
    }
}

impl<S, C, B, V, ResB> Future for ResponseFuture<S, C, B, V>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    C: Classifier,
    V: AttemptVerdicts<S::Future>,
    B: Body,
    B::Data: Clone,
    B::Error: Into<BoxError>,
{
    type Output = Result<Response<ResB>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match *this.phase {
                Phase::Buffering => {
                    let replay = this
                        .replay
                        .as_mut()
                        .expect("a buffering request keeps its replay state");
                    if let Some(mut body) = this.body.as_mut().as_pin_mut() {
                        match ready!(body.as_mut().poll_frame(cx)) {
                            Some(Ok(frame)) => {
                                match frame.into_data() {
                                    Ok(data) => {
                                        let cap = this.shared.config.load().max_replay_body_bytes()
                                            as u64;
                                        if replay.buffer.push(data) > cap {
                                            *this.phase = Phase::Done;
                                            this.body.set(None);
                                            return Poll::Ready(Err(
                                                BodyExceedsSizeHint::new(cap).into()
                                            ));
                                        }
                                    }
                                    Err(frame) => {
                                        if let Ok(trailers) = frame.into_trailers() {
                                            replay.buffer.set_trailers(trailers);
                                        }
                                    }
                                }
                                if !body.is_end_stream() {
                                    continue;
                                }
                            }
                            Some(Err(error)) => {
                                *this.phase = Phase::Done;
                                this.body.set(None);
                                return Poll::Ready(Err(error.into()));
                            }
                            None => {}
                        }
                    }
                    this.body.set(None);
                    *this.phase = Phase::Send { ready: true };
                }
                Phase::Send { ready } => {
                    let replay = this
                        .replay
                        .as_mut()
                        .expect("a request being sent again keeps its replay state");
                    let service = replay.next_service(this.shared);
                    if !ready && let Err(error) = ready!(service.poll_ready(cx)) {
                        *this.phase = Phase::Done;
                        return Poll::Ready(Err(error.into()));
                    }
                    replay.attempts += 1;
                    if replay.attempts > 1 {
                        this.shared.metrics.attempts.increment(1);
                    }
                    let span = attempt_span(replay.attempts);
                    let attempt = Request::from_parts(replay.parts.clone(), replay.buffer.replay());
                    let scope = this.shared.routes.scope_for(
                        &attempt,
                        this.meta.route(),
                        this.meta.idempotent(),
                    );
                    let future = call_in(&span, &scope, replay.next_service(this.shared), attempt);
                    this.primary.set(Some(future));
                    *this.primary_span = span;
                    if replay.hedge == Hedge::Idle {
                        let timer = arm_hedge(this.shared, this.meta, replay);
                        *this.timer = timer;
                    }
                    *this.phase = Phase::Running;
                }
                Phase::Backoff => {
                    if let Some(timer) = this.timer.as_mut() {
                        ready!(timer.as_mut().poll(cx));
                    }
                    *this.timer = None;
                    *this.phase = Phase::Send { ready: false };
                }
                Phase::Running => {
                    // The primary attempt.
                    if let Some(mut future) = this.primary.as_mut().as_pin_mut() {
                        let polled = {
                            let _entered = this.primary_span.enter();
                            future.as_mut().poll(cx)
                        };
                        if let Poll::Ready(result) = polled {
                            let judged = V::judgement(future.as_ref().get_ref());
                            if !V::KEEPS_ANSWERED {
                                this.primary.set(None);
                            }
                            let result = result.map_err(Into::into);
                            let step = decide(
                                this.shared,
                                this.meta,
                                *this.deadline,
                                this.replay.as_ref(),
                                this.hedge.is_some(),
                                &result,
                                judged,
                            );
                            if V::KEEPS_ANSWERED && !matches!(step, Step::Return) {
                                this.primary.set(None);
                            }
                            match step {
                                Step::Return => {
                                    *this.phase = Phase::Done;
                                    // Cancels a hedge still in flight (checked first: the
                                    // healthy path has neither, and skips the drop calls).
                                    if this.hedge.is_some() {
                                        *this.hedge = None;
                                    }
                                    if this.timer.is_some() {
                                        *this.timer = None;
                                    }
                                    return Poll::Ready(result);
                                }
                                Step::Discard => {}
                                Step::Retry(delay) => {
                                    *this.timer = Some(Box::pin(tokio::time::sleep(delay)));
                                    // A hedge whose timer had not fired yet may hedge the
                                    // retry instead; one already granted counts as spent.
                                    if let Some(replay) = this.replay.as_mut() {
                                        match replay.hedge {
                                            Hedge::Armed => replay.hedge = Hedge::Idle,
                                            Hedge::Wanted => replay.hedge = Hedge::Spent,
                                            Hedge::Idle | Hedge::Spent => {}
                                        }
                                    }
                                    *this.phase = Phase::Backoff;
                                    continue;
                                }
                            }
                        }
                    }
                    // The hedge.
                    if let Some(hedge) = this.hedge.as_mut() {
                        let polled = hedge.as_mut().poll(cx);
                        if let Poll::Ready(result) = polled {
                            let judged = V::judgement(&hedge.future);
                            let result = result.map_err(Into::into);
                            let step = decide(
                                this.shared,
                                this.meta,
                                *this.deadline,
                                this.replay.as_ref(),
                                this.primary.is_some(),
                                &result,
                                judged,
                            );
                            if !(V::KEEPS_ANSWERED && matches!(step, Step::Return)) {
                                *this.hedge = None;
                            }
                            match step {
                                Step::Return => {
                                    *this.phase = Phase::Done;
                                    // Cancels the primary attempt still in flight.
                                    this.primary.set(None);
                                    *this.timer = None;
                                    return Poll::Ready(result);
                                }
                                Step::Discard => {}
                                Step::Retry(delay) => {
                                    *this.timer = Some(Box::pin(tokio::time::sleep(delay)));
                                    *this.phase = Phase::Backoff;
                                    continue;
                                }
                            }
                        }
                    }
                    let Some(replay) = this.replay.as_mut() else {
                        return Poll::Pending;
                    };
                    // The hedge timer.
                    if replay.hedge == Hedge::Armed {
                        if let Some(timer) = this.timer.as_mut() {
                            ready!(timer.as_mut().poll(cx));
                        }
                        *this.timer = None;
                        replay.hedge = match this.shared.plan_hedge(replay.attempts, *this.deadline)
                        {
                            Ok(()) => Hedge::Wanted,
                            Err(refusal) => {
                                this.shared.refused(refusal, replay.attempts);
                                Hedge::Spent
                            }
                        };
                    }
                    // A granted hedge waits for the service.
                    if replay.hedge == Hedge::Wanted {
                        match replay.next_service(this.shared).poll_ready(cx) {
                            Poll::Pending => return Poll::Pending,
                            Poll::Ready(Err(_)) => {
                                // The service cannot take the hedge; the primary attempt
                                // still runs and decides.
                                replay.hedge = Hedge::Spent;
                                return Poll::Pending;
                            }
                            Poll::Ready(Ok(())) => {
                                replay.attempts += 1;
                                replay.hedge = Hedge::Spent;
                                this.shared.metrics.attempts.increment(1);
                                let span = attempt_span(replay.attempts);
                                let attempt = Request::from_parts(
                                    replay.parts.clone(),
                                    replay.buffer.replay(),
                                );
                                let scope = this.shared.routes.scope_for(
                                    &attempt,
                                    this.meta.route(),
                                    this.meta.idempotent(),
                                );
                                let future = call_in(
                                    &span,
                                    &scope,
                                    replay.next_service(this.shared),
                                    attempt,
                                );
                                *this.hedge = Some(Box::pin(HedgeAttempt { future, span }));
                                // Poll the hedge once so that it registers its waker.
                                continue;
                            }
                        }
                    }
                    return Poll::Pending;
                }
                Phase::Expired => {
                    *this.phase = Phase::Unsent;
                    return Poll::Ready(Err(DeadlineExceeded::new().into()));
                }
                Phase::Done | Phase::Unsent => {
                    panic!("retry ResponseFuture polled after completion")
                }
            }
        }
    }
}
