//! The service: the limit's stage, run by the one stage runner. Admits each call in
//! `call`, never in `poll_ready`.

use crate::adaptive::CallInfo;
use crate::admission::{Acquire, Admitted, Queued};
use crate::body::{Completion, ResponseBody};
use crate::future::ResponseFuture;
use crate::limiter::{Lane, Lanes};
use crate::observe::LimitHandle;
use crate::partition::{Partitioner, Unpartitioned};
use fusebox_classify::context::Scope;
use fusebox_classify::shard::Leases;
use fusebox_classify::stage::{Admit, Answer, Handoff, Http, NoTimer, NoWait, Stage, Staged};
use fusebox_classify::{BoxError, Classifier, SharedVerdict, StandardClassifier};
use http::{Request, Response};
use http_body::Body;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// The concurrency limit's per-call logic, as a [`Stage`]: admit, queue or shed a call,
/// then give its permit back with the answer (or at the end of the response body) and
/// feed an adaptive limit the answer's verdict and latency.
///
/// [`ConcurrencyLimit`] runs it alone; fusebox's `Policy` runs it between the breaker's
/// and the timeout's stages in one future.
pub struct LimitStage<C = StandardClassifier, P = Unpartitioned> {
    /// The unreserved pool's lane first, then one per partition.
    lanes: Lanes<C>,
    partitioner: P,
}

impl<C, P: Clone> Clone for LimitStage<C, P> {
    fn clone(&self) -> Self {
        LimitStage {
            lanes: Arc::clone(&self.lanes),
            partitioner: self.partitioner.clone(),
        }
    }
}

impl<C, P> fmt::Debug for LimitStage<C, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitStage")
            .field("limiter", self.lanes[0].limiter())
            .finish_non_exhaustive()
    }
}

impl<C, P> LimitStage<C, P> {
    /// The lane of a partitioner's answer: the unreserved pool's (0) for none, or for an
    /// index outside the partition list.
    #[inline]
    fn lane(&self, partition: Option<usize>) -> usize {
        match partition {
            Some(i) if i < self.lanes.len() - 1 => i + 1,
            _ => 0,
        }
    }

    /// A read-only view of the limit this stage shares with its layer.
    pub fn handle(&self) -> LimitHandle
    where
        C: Send + Sync + 'static,
    {
        LimitHandle::new(self.lanes[0].shared().clone())
    }
}

impl<C: Classifier, P> LimitStage<C, P> {
    /// Admits `request`, queues it or sheds it (see [`Acquire`]).
    #[inline]
    pub fn acquire<B>(&self, request: &Request<B>) -> Acquire<C>
    where
        P: Partitioner<B>,
    {
        self.acquire_in(request, &mut Scope::new())
    }

    /// [`acquire`](LimitStage::acquire), reading the call's route from its `scope` (an
    /// adaptive limit judges calls by their route).
    #[inline]
    pub fn acquire_in<B>(&self, request: &Request<B>, scope: &mut Scope) -> Acquire<C>
    where
        P: Partitioner<B>,
    {
        let index = self.lane(self.partitioner.partition(request));
        let lane = &self.lanes[index];
        let limiter = lane.limiter();
        // An adaptive limit judges the call by its route; a limit that exposes its verdicts
        // classifies the answer to leave the verdict on it.
        let call = if limiter.is_adaptive() || limiter.expose {
            Some(CallInfo::new(limiter, request, scope))
        } else {
            None
        };
        match Lane::try_acquire(lane) {
            Some(permit) => Acquire::Admitted(Admitted::new(permit, call)),
            None => Self::enqueue(lane, call),
        }
    }

    /// A call that found the limit full: queued if there is a queue with room, else shed.
    #[inline(never)]
    fn enqueue(lane: &Leases<Lane<C>>, call: Option<CallInfo>) -> Acquire<C> {
        let limiter = lane.limiter();
        match Lane::enqueue(lane) {
            Ok((ticket, max_wait)) => {
                let deadline = tokio::time::Instant::now() + max_wait;
                Acquire::Queued(Queued::new(ticket, deadline, call))
            }
            Err(why) => Acquire::Shed(limiter.shed(why)),
        }
    }
}

impl<B, C: Classifier, P: Partitioner<B>> Stage<Request<B>> for LimitStage<C, P> {
    type Admitted = Option<Admitted<C>>;
    type Waiting = Queued<C>;
    type End = Completion<C>;
    type Timer = NoTimer;

    #[inline(always)]
    fn admit(
        &self,
        request: &mut Request<B>,
        scope: &mut Scope,
    ) -> Admit<Self::Admitted, Queued<C>> {
        match self.acquire_in(request, scope) {
            Acquire::Admitted(admitted) => Admit::Ready(Some(admitted)),
            Acquire::Queued(queued) => Admit::Wait(queued),
            Acquire::Shed(error) => Admit::Refuse(error.into()),
        }
    }

    fn poll_wait(
        &self,
        waiting: Pin<&mut Queued<C>>,
        _: &mut Request<B>,
        _: &mut Scope,
        cx: &mut Context<'_>,
    ) -> Poll<Admit<Self::Admitted, NoWait>> {
        waiting.poll_admit(cx).map(|admitted| match admitted {
            Ok(admitted) => Admit::Ready(Some(admitted)),
            Err(shed) => Admit::Refuse(shed.into()),
        })
    }

    #[inline(always)]
    fn on_answer(
        admitted: Pin<&mut Self::Admitted>,
        answer: Answer<'_>,
        verdict: &SharedVerdict,
    ) -> Option<Self::End> {
        let admitted = admitted.get_mut().take()?;
        match answer {
            // A plain permit goes back with the head.
            Answer::Head { .. } | Answer::Done if admitted.is_plain() => None,
            Answer::Head { status, headers } => admitted.classify(status, headers, verdict),
            Answer::Done => None,
            Answer::Error(error) => {
                admitted.on_error_shared(error, verdict);
                None
            }
        }
    }
}

/// A queued call takes the service the caller polled ready with it; the limit's service
/// keeps a fresh clone, which is why the limit needs `S: Clone`.
impl<S: Clone, C> Handoff<S> for Queued<C> {
    #[inline]
    fn take(&self, inner: &mut S) -> S {
        let fresh = inner.clone();
        std::mem::replace(inner, fresh)
    }
}

/// A concurrency limit around `S`, built by
/// [`ConcurrencyLimitLayer`](crate::ConcurrencyLimitLayer); see the [crate docs](crate).
///
/// `poll_ready` is the inner service's own; admission happens in `call`: a call that finds
/// the limit full is shed with [`Overloaded`](crate::Overloaded) or waits in the bounded
/// queue inside its response future. Waiting needs the inner service after `call` has
/// returned, which is why `S: Clone`: the ready inner service travels with the queued
/// request, and this service keeps a fresh clone that the next `poll_ready` drives.
///
/// It is the stage runner ([`Staged`]) over the limit's [`LimitStage`].
pub struct ConcurrencyLimit<S, C = StandardClassifier, P = Unpartitioned> {
    staged: Staged<S, LimitStage<C, P>, Http>,
}

impl<S, C, P> ConcurrencyLimit<S, C, P> {
    pub(crate) fn new(inner: S, lanes: Lanes<C>, partitioner: P) -> Self {
        ConcurrencyLimit {
            staged: Staged::new(inner, LimitStage { lanes, partitioner }),
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        self.staged.get_ref()
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        self.staged.get_mut()
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.staged.into_inner()
    }

    /// The limit's stage.
    pub fn stage(&self) -> &LimitStage<C, P> {
        self.staged.stage()
    }

    /// A read-only view of the limit this service shares with its layer.
    pub fn handle(&self) -> LimitHandle
    where
        C: Send + Sync + 'static,
    {
        self.stage().handle()
    }
}

impl<S: Clone, C, P: Clone> Clone for ConcurrencyLimit<S, C, P> {
    fn clone(&self) -> Self {
        ConcurrencyLimit {
            staged: self.staged.clone(),
        }
    }
}

impl<S: fmt::Debug, C, P> fmt::Debug for ConcurrencyLimit<S, C, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimit")
            .field("inner", self.staged.get_ref())
            .field("limiter", self.stage().lanes[0].limiter())
            .finish_non_exhaustive()
    }
}

impl<S, C, P, ReqB, ResB> Service<Request<ReqB>> for ConcurrencyLimit<S, C, P>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    ResB: Body,
    C: Classifier,
    P: Partitioner<ReqB> + Clone,
{
    type Response = Response<ResponseBody<ResB, C>>;
    type Error = BoxError;
    type Future = ResponseFuture<S, ReqB, C, P>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.staged.poll_ready(cx)
    }

    #[inline(always)]
    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        self.staged.call(request)
    }
}

impl<S, C: Classifier, P> ConcurrencyLimit<S, C, P> {
    /// Admits `request`, queues it or sheds it, without calling the inner service: for a
    /// caller that drives the limit by hand (see [`Acquire`]). [`call`](Service::call) is
    /// this, then the inner call.
    #[inline]
    pub fn acquire<B>(&self, request: &Request<B>) -> Acquire<C>
    where
        P: Partitioner<B>,
    {
        self.stage().acquire(request)
    }
}
