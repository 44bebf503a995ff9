//! The response future of [`Retry`](crate::Retry): buffers the body, sends attempts,
//! classifies each answer, waits out backoffs and races a hedge.
//!
//! A hand-written state machine (pin-projected, no `Box::pin`), so that the healthy path
//! (one attempt, a good answer) allocates nothing and does no more than poll the inner
//! future, classify the answer and return it.

use crate::error::{BodyExceedsSizeHint, BoxError, is_fusebox_rejection};
use crate::replay::{Buffered, ReplayBody};
use crate::service::{Shared, attempt_span};
use fusebox_classify::{CallMeta, Classified, Classifier, Deadline, Outcome, RetryHint};
use http::{Request, Response, request};
use http_body::Body;
use pin_project::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::Sleep;
use tower_service::Service;
use tracing::Span;

/// Whether a hedge may still be sent, is waiting for its timer or for the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hedge {
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
    service: S,
    parts: request::Parts,
    buffer: Buffered<D>,
    attempts: u32,
    hedge: Hedge,
}

impl<S, D> Replay<S, D> {
    pub(crate) fn new(service: S, parts: request::Parts, buffer: Buffered<D>) -> Self {
        Replay {
            service,
            parts,
            buffer,
            attempts: 0,
            hedge: Hedge::Idle,
        }
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
    /// The answer was returned.
    Done,
}

/// The response future of [`Retry`](crate::Retry).
#[pin_project]
pub struct ResponseFuture<S, C, B>
where
    S: Service<Request<ReplayBody<B>>>,
    B: Body,
{
    #[pin]
    body: Option<B>,
    #[pin]
    primary: Option<S::Future>,
    #[pin]
    hedge: Option<S::Future>,
    #[pin]
    timer: Option<Sleep>,
    primary_span: Span,
    hedge_span: Span,
    phase: Phase,
    shared: Arc<Shared<C>>,
    meta: CallMeta,
    deadline: Option<Deadline>,
    replay: Option<Replay<S, B::Data>>,
}

impl<S, C, B> fmt::Debug for ResponseFuture<S, C, B>
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

impl<S, C, B> ResponseFuture<S, C, B>
where
    S: Service<Request<ReplayBody<B>>>,
    B: Body,
{
    /// The first attempt is in flight.
    pub(crate) fn running(
        future: S::Future,
        span: Span,
        shared: Arc<Shared<C>>,
        meta: CallMeta,
        deadline: Option<Deadline>,
        mut replay: Option<Replay<S, B::Data>>,
    ) -> Self {
        let mut timer = None;
        if let Some(r) = &mut replay {
            r.attempts = 1;
            timer = arm_hedge(&shared, &meta, r);
        }
        ResponseFuture {
            body: None,
            primary: Some(future),
            hedge: None,
            timer,
            primary_span: span,
            hedge_span: Span::none(),
            phase: Phase::Running,
            shared,
            meta,
            deadline,
            replay,
        }
    }

    /// The body must be buffered before the first attempt; `replay.service` is ready.
    pub(crate) fn buffering(
        body: B,
        shared: Arc<Shared<C>>,
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
            hedge_span: Span::none(),
            phase: Phase::Buffering,
            shared,
            meta,
            deadline,
            replay: Some(replay),
        }
    }
}

/// Starts the hedge timer if this request may be hedged now.
fn arm_hedge<C, S, D>(
    shared: &Shared<C>,
    meta: &CallMeta,
    replay: &mut Replay<S, D>,
) -> Option<Sleep> {
    let delay = shared.config.hedge_delay()?;
    if replay.hedge != Hedge::Idle
        || !meta.idempotent()
        || replay.attempts >= shared.config.max_attempts()
    {
        return None;
    }
    replay.hedge = Hedge::Armed;
    Some(tokio::time::sleep(delay))
}

/// What to do with one attempt's result.
enum Step<T> {
    /// This is the answer.
    Return(Result<T, BoxError>),
    /// A retryable failure while another attempt is still in flight: wait for that one.
    Discard,
    /// Retry after this delay (already taken from the budget).
    Retry(Duration),
}

/// Classifies an attempt's result, records it, and decides.
fn decide<C, S, D, ResB, E>(
    shared: &Shared<C>,
    meta: &CallMeta,
    deadline: Option<Deadline>,
    replay: Option<&Replay<S, D>>,
    other_in_flight: bool,
    result: Result<Response<ResB>, E>,
) -> Step<Response<ResB>>
where
    C: Classifier,
    E: Into<BoxError>,
{
    let routes = &shared.routes;
    let call = meta.call(routes);
    let classifier = routes.route(meta.route()).classifier();
    let (verdict, result) = match result {
        Ok(response) => {
            match classifier.classify_response(&call, response.status(), response.headers()) {
                Classified::Ready(verdict) => (Some(verdict), Ok(response)),
                // Decided by the trailers: the answer is streaming to the caller already,
                // so it cannot be retried, and it is not counted by the cut-off.
                Classified::AtEndOfStream => (None, Ok(response)),
            }
        }
        Err(error) => {
            let error: BoxError = error.into();
            let mut verdict = classifier.classify_error(&call, &*error);
            if is_fusebox_rejection(&*error) {
                verdict = verdict.with_retry(RetryHint::Never);
            }
            (Some(verdict), Err(error))
        }
    };
    let Some(verdict) = verdict else {
        return Step::Return(result);
    };
    if verdict.outcome() != Outcome::Success {
        shared.budget.record(verdict.outcome());
    }
    let hint = verdict.retry();
    let wanted = match hint {
        RetryHint::Never => false,
        RetryHint::NotSent => true,
        RetryHint::Retryable | RetryHint::After(_) => meta.idempotent(),
    };
    let Some(replay) = replay.filter(|_| wanted) else {
        return Step::Return(result);
    };
    if other_in_flight {
        return Step::Discard;
    }
    match shared.plan_retry(hint, replay.attempts, deadline) {
        Ok(delay) => Step::Retry(delay),
        Err(refusal) => {
            shared.refused(refusal, replay.attempts);
            Step::Return(result)
        }
    }
}

impl<S, C, B, ResB> Future for ResponseFuture<S, C, B>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    C: Classifier,
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
                                        let cap = this.shared.config.max_replay_body_bytes() as u64;
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
                    if !ready && let Err(error) = ready!(replay.service.poll_ready(cx)) {
                        *this.phase = Phase::Done;
                        return Poll::Ready(Err(error.into()));
                    }
                    replay.attempts += 1;
                    if replay.attempts > 1 {
                        this.shared.metrics.attempts.increment(1);
                    }
                    let span = attempt_span(replay.attempts);
                    let attempt = Request::from_parts(replay.parts.clone(), replay.buffer.replay());
                    let future = span.in_scope(|| replay.service.call(attempt));
                    this.primary.set(Some(future));
                    *this.primary_span = span;
                    if replay.hedge == Hedge::Idle {
                        let timer = arm_hedge(this.shared, this.meta, replay);
                        this.timer.set(timer);
                    }
                    *this.phase = Phase::Running;
                }
                Phase::Backoff => {
                    if let Some(timer) = this.timer.as_mut().as_pin_mut() {
                        ready!(timer.poll(cx));
                    }
                    this.timer.set(None);
                    *this.phase = Phase::Send { ready: false };
                }
                Phase::Running => {
                    // The primary attempt.
                    if let Some(future) = this.primary.as_mut().as_pin_mut() {
                        let polled = {
                            let _entered = this.primary_span.enter();
                            future.poll(cx)
                        };
                        if let Poll::Ready(result) = polled {
                            this.primary.set(None);
                            let step = decide(
                                this.shared,
                                this.meta,
                                *this.deadline,
                                this.replay.as_ref(),
                                this.hedge.is_some(),
                                result,
                            );
                            match step {
                                Step::Return(answer) => {
                                    *this.phase = Phase::Done;
                                    // Cancels a hedge still in flight.
                                    this.hedge.set(None);
                                    this.timer.set(None);
                                    return Poll::Ready(answer);
                                }
                                Step::Discard => {}
                                Step::Retry(delay) => {
                                    this.timer.set(Some(tokio::time::sleep(delay)));
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
                    if let Some(future) = this.hedge.as_mut().as_pin_mut() {
                        let polled = {
                            let _entered = this.hedge_span.enter();
                            future.poll(cx)
                        };
                        if let Poll::Ready(result) = polled {
                            this.hedge.set(None);
                            let step = decide(
                                this.shared,
                                this.meta,
                                *this.deadline,
                                this.replay.as_ref(),
                                this.primary.is_some(),
                                result,
                            );
                            match step {
                                Step::Return(answer) => {
                                    *this.phase = Phase::Done;
                                    // Cancels the primary attempt still in flight.
                                    this.primary.set(None);
                                    this.timer.set(None);
                                    return Poll::Ready(answer);
                                }
                                Step::Discard => {}
                                Step::Retry(delay) => {
                                    this.timer.set(Some(tokio::time::sleep(delay)));
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
                        if let Some(timer) = this.timer.as_mut().as_pin_mut() {
                            ready!(timer.poll(cx));
                        }
                        this.timer.set(None);
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
                        match replay.service.poll_ready(cx) {
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
                                let future = span.in_scope(|| replay.service.call(attempt));
                                this.hedge.set(Some(future));
                                *this.hedge_span = span;
                                // Poll the hedge once so that it registers its waker.
                                continue;
                            }
                        }
                    }
                    return Poll::Pending;
                }
                Phase::Done => panic!("retry ResponseFuture polled after completion"),
            }
        }
    }
}
