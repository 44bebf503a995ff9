//! One endpoint of a pool: the inner service behind its own breaker, kept out of the
//! balancer's choice while the pool has ejected it.

use super::shared::{EJECT, Flight, PASS, Slot};
use fusebox_breaker::compose::{EosRecorder, Guard};
use fusebox_breaker::{BreakerStage, MemoryStore, State};
use fusebox_classify::context::Scope;
use fusebox_classify::stage::{Admit, Answer, Http, NoTimer, NoWait, Stage, Staged, StagedFuture};
use fusebox_classify::{BoxError, ClassifiedBody, Classifier, SharedVerdict, StandardClassifier};
use http::{Request, Response};
use http_body::Body;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};
use tower::load::Load;
use tower_service::Service;

/// The response body of a pool's endpoint: the breaker's.
pub type EndpointBody<B, C = StandardClassifier> = ClassifiedBody<B, EosRecorder<C, MemoryStore>>;

/// The future of an [`Endpoint`] called with `Request<B>`: the stage runner's.
pub type EndpointFuture<S, B, C = StandardClassifier> =
    StagedFuture<S, Request<B>, EndpointStage<C>, Http>;

/// An endpoint's per-call logic, as a [`Stage`]: its breaker's, except that a call the
/// breaker rejects is sent anyway while the pool keeps the tripped endpoint in (the cap is
/// reached, or the pool is in panic), and every call counts towards the endpoint's load
/// while it is in flight.
pub struct EndpointStage<C = StandardClassifier> {
    breaker: BreakerStage<C, MemoryStore>,
    slot: Arc<Slot>,
}

impl<C> Clone for EndpointStage<C> {
    fn clone(&self) -> Self {
        EndpointStage {
            breaker: self.breaker.clone(),
            slot: Arc::clone(&self.slot),
        }
    }
}

impl<C> fmt::Debug for EndpointStage<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointStage")
            .field("endpoint", &self.slot.key)
            .finish()
    }
}

/// What an admitted call holds: its breaker guard (none for a call sent past a tripped
/// breaker the pool keeps in) and its count in the endpoint's load.
pub struct Admitted<C: Classifier> {
    guard: Option<Guard<C, MemoryStore>>,
    flight: Arc<Flight>,
}

impl<C: Classifier> Drop for Admitted<C> {
    fn drop(&mut self) {
        // A probe cancelled before its answer (the caller's timeout, say) goes back to the
        // budget without a breaker event: without this, a balancer waiting on an ejected
        // endpoint whose budget was full would look again only when the half-open wait
        // ends, and a pool whose every endpoint is out would sit idle that long.
        if self.guard.as_ref().is_some_and(Guard::is_pending_probe) {
            self.flight.probe_given_back();
        }
    }
}

impl<C: Classifier> fmt::Debug for Admitted<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admitted")
            .field("guard", &self.guard)
            .finish()
    }
}

impl<B, C: Classifier> Stage<Request<B>> for EndpointStage<C> {
    type Admitted = Admitted<C>;
    type Waiting = NoWait;
    type End = EosRecorder<C, MemoryStore>;
    type Timer = NoTimer;

    #[inline(always)]
    fn admit(&self, request: &mut Request<B>, scope: &mut Scope) -> Admit<Admitted<C>, NoWait> {
        let guard = match self.breaker.admit_in(request, scope) {
            Ok(guard) => Some(guard),
            // Kept in by the pool: sent, and not recorded (the breaker's probes, which it
            // does admit, are what tell it the endpoint recovered).
            Err(_) if self.slot.mode() == PASS => None,
            Err(open) => return Admit::Refuse(Box::new(open)),
        };
        Admit::Ready(Admitted {
            guard,
            flight: Arc::clone(&self.slot.flight),
        })
    }

    fn poll_wait(
        &self,
        waiting: Pin<&mut NoWait>,
        _: &mut Request<B>,
        _: &mut Scope,
        _: &mut Context<'_>,
    ) -> Poll<Admit<Admitted<C>, NoWait>> {
        match *waiting.get_mut() {}
    }

    #[inline(always)]
    fn on_answer(
        admitted: Pin<&mut Admitted<C>>,
        answer: Answer<'_>,
        verdict: &SharedVerdict,
    ) -> Option<Self::End> {
        let guard = Pin::new(&mut admitted.get_mut().guard);
        <BreakerStage<C, MemoryStore> as Stage<Request<B>>>::on_answer(guard, answer, verdict)
    }
}

/// One endpoint of a pool, as the balancer sees it: the inner service behind the
/// endpoint's breaker. Ready as the inner service is while the pool uses the endpoint;
/// while the pool has ejected it, pending until its open wait ends (a timer wakes the
/// balancer then), and while half-open, ready only with room in the probe budget. Its
/// [`Load`] is its calls in flight.
pub struct Endpoint<S, C = StandardClassifier> {
    staged: Staged<S, EndpointStage<C>, Http>,
    /// The timer of an ejected endpoint: made the first time it is needed, then reset.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<S: fmt::Debug, C> fmt::Debug for Endpoint<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("endpoint", &self.slot().key)
            .field("inner", self.staged.get_ref())
            .finish()
    }
}

impl<S, C> Endpoint<S, C> {
    pub(crate) fn new(inner: S, breaker: BreakerStage<C, MemoryStore>, slot: Arc<Slot>) -> Self {
        Endpoint {
            staged: Staged::new(inner, EndpointStage { breaker, slot }),
            sleep: None,
        }
    }

    fn slot(&self) -> &Slot {
        &self.staged.stage().slot
    }

    /// The endpoint's key, as its breaker's metrics label it.
    pub fn key(&self) -> &str {
        &self.slot().key
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        self.staged.get_ref()
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        self.staged.get_mut()
    }

    /// The inner service, consuming the endpoint.
    pub fn into_inner(self) -> S {
        self.staged.into_inner()
    }

    /// Whether an ejected endpoint may take a call now; if not, arranges to be woken when
    /// that may change: its open wait's end (a timer), or its breaker's next event.
    #[cold]
    fn poll_ejected(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let slot = &self.staged.stage().slot;
            // Before reading the state: an event after the read wakes this task.
            slot.signal.waker.register(cx.waker());
            if slot.mode() != EJECT {
                return Poll::Ready(());
            }
            let snapshot = slot.handle.snapshot();
            let recheck = match snapshot.state {
                State::Open => match snapshot.until_half_open {
                    Some(wait) if !wait.is_zero() => wait,
                    // The wait is over: the next call moves the breaker to half-open.
                    _ => return Poll::Ready(()),
                },
                State::HalfOpen => {
                    let config = slot.handle.config();
                    let budget = config.as_ref().map_or(1, |c| c.permitted_probes());
                    if snapshot.probes_admitted < budget {
                        return Poll::Ready(());
                    }
                    // The probes in flight decide, and their transition wakes this task;
                    // a probe given back (cancelled, ignored) makes no event, so look
                    // again after the half-open wait, or the open wait.
                    config
                        .map(|c| c.max_half_open_wait().unwrap_or(c.open_wait()))
                        .unwrap_or(Duration::from_secs(1))
                }
                // Held open by an operator: woken by the reset's transition.
                State::ForcedOpen => return Poll::Pending,
                _ => return Poll::Ready(()),
            };
            // A wait past the end of tokio's time (a configured wait of centuries): look
            // again in a day, not a panic.
            let now = Instant::now();
            let deadline = now
                .checked_add(recheck)
                .unwrap_or_else(|| now + Duration::from_secs(86_400));
            let sleep = match &mut self.sleep {
                Some(sleep) => {
                    sleep.as_mut().reset(deadline);
                    sleep
                }
                None => self
                    .sleep
                    .insert(Box::pin(tokio::time::sleep_until(deadline))),
            };
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

impl<S, C> Load for Endpoint<S, C> {
    type Metric = usize;

    /// Calls in flight.
    #[inline]
    fn load(&self) -> usize {
        self.slot().in_flight()
    }
}

impl<S, C, ReqBody, ResBody> Service<Request<ReqBody>> for Endpoint<S, C>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Error: Into<BoxError>,
    ResBody: Body,
    C: Classifier,
{
    type Response = Response<EndpointBody<ResBody, C>>;
    type Error = BoxError;
    type Future = EndpointFuture<S, ReqBody, C>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if self.slot().mode() == EJECT && self.poll_ejected(cx).is_pending() {
            return Poll::Pending;
        }
        self.staged.poll_ready(cx)
    }

    #[inline(always)]
    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        self.staged.call(request)
    }
}
