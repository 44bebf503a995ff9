//! The service: admits each call in `call`, never in `poll_ready`.

use crate::adaptive::CallInfo;
use crate::admission::{Acquire, Admitted, Queued};
use crate::body::ResponseBody;
use crate::future::ResponseFuture;
use crate::limiter::{Lane, Lanes};
use crate::observe::LimitHandle;
use crate::partition::{Partitioner, Unpartitioned};
use fusebox_classify::shard::Leases;
use fusebox_classify::{BoxError, Classifier, StandardClassifier};
use http::{Request, Response};
use http_body::Body;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// A concurrency limit around `S`, built by
/// [`ConcurrencyLimitLayer`](crate::ConcurrencyLimitLayer); see the [crate docs](crate).
///
/// `poll_ready` is the inner service's own; admission happens in `call`: a call that finds
/// the limit full is shed with [`Overloaded`](crate::Overloaded) or waits in the bounded
/// queue inside its response future. Waiting needs the inner service after `call` has
/// returned, which is why `S: Clone`: the ready inner service travels with the queued
/// request, and this service keeps a fresh clone that the next `poll_ready` drives.
pub struct ConcurrencyLimit<S, C = StandardClassifier, P = Unpartitioned> {
    inner: S,
    /// The unreserved pool's lane first, then one per partition.
    lanes: Lanes<C>,
    partitioner: P,
}

impl<S, C, P> ConcurrencyLimit<S, C, P> {
    pub(crate) fn new(inner: S, lanes: Lanes<C>, partitioner: P) -> Self {
        ConcurrencyLimit {
            inner,
            lanes,
            partitioner,
        }
    }

    /// The lane of a partitioner's answer: the unreserved pool's (0) for none, or for an
    /// index outside the partition list.
    #[inline]
    fn lane(&self, partition: Option<usize>) -> usize {
        match partition {
            Some(i) if i < self.lanes.len() - 1 => i + 1,
            _ => 0,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// A read-only view of the limit this service shares with its layer.
    pub fn handle(&self) -> LimitHandle
    where
        C: Send + Sync + 'static,
    {
        LimitHandle::new(self.lanes[0].shared().clone())
    }
}

impl<S: Clone, C, P: Clone> Clone for ConcurrencyLimit<S, C, P> {
    fn clone(&self) -> Self {
        ConcurrencyLimit {
            inner: self.inner.clone(),
            lanes: Arc::clone(&self.lanes),
            partitioner: self.partitioner.clone(),
        }
    }
}

impl<S: fmt::Debug, C, P> fmt::Debug for ConcurrencyLimit<S, C, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimit")
            .field("inner", &self.inner)
            .field("limiter", self.lanes[0].limiter())
            .finish_non_exhaustive()
    }
}

impl<S, C, P, ReqB, ResB> Service<Request<ReqB>> for ConcurrencyLimit<S, C, P>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    ResB: Body,
    C: Classifier,
    P: Partitioner<ReqB>,
{
    type Response = Response<ResponseBody<ResB, C>>;
    type Error = BoxError;
    type Future = ResponseFuture<S, ReqB, C>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    #[inline(always)]
    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        match self.acquire(&request) {
            Acquire::Admitted(admitted) => {
                ResponseFuture::called(self.inner.call(request), admitted)
            }
            Acquire::Queued(queued) => self.wait(queued, request),
            Acquire::Shed(error) => ResponseFuture::shed(error),
        }
    }
}

impl<S, C: Classifier, P> ConcurrencyLimit<S, C, P> {
    /// Admits `request`, queues it or sheds it, without calling the inner service: for a
    /// service that runs the limit as one stage of its own future (see [`Acquire`]).
    /// [`call`](Service::call) is this, then the inner call.
    #[inline]
    pub fn acquire<B>(&self, request: &Request<B>) -> Acquire<C>
    where
        P: Partitioner<B>,
    {
        let index = self.lane(self.partitioner.partition(request));
        let lane = &self.lanes[index];
        let limiter = lane.limiter();
        let call = if limiter.is_adaptive() {
            Some(CallInfo::new(limiter, request))
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
            Ok(ticket) => {
                let max_wait = limiter.queue.map(|q| q.max_wait()).unwrap_or_default();
                let deadline = tokio::time::Instant::now() + max_wait;
                Acquire::Queued(Queued::new(ticket, deadline, call))
            }
            Err(why) => Acquire::Shed(limiter.shed(why)),
        }
    }

    /// A queued call takes the service the caller polled ready with it; this service
    /// keeps a fresh clone.
    #[inline(never)]
    fn wait<B>(&mut self, queued: Queued<C>, request: Request<B>) -> ResponseFuture<S, B, C>
    where
        S: Service<Request<B>> + Clone,
    {
        let fresh = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, fresh);
        ResponseFuture::queued(queued, ready, request)
    }
}
