//! The breaker service: the breaker's stage, run by the one stage runner.

use crate::breaker::{BreakerHandle, EosRecorder, Guard, Leases, lease};
use crate::future::{ResponseBody, ResponseFuture};
use crate::store::{MemoryStore, Store};
use fusebox_classify::context::Scope;
use fusebox_classify::error::CircuitOpen;
use fusebox_classify::stage::{Admit, Answer, Http, NoTimer, NoWait, Stage, Staged};
use fusebox_classify::{BoxError, Classifier, SharedVerdict, StandardClassifier};
use http::{Request, Response};
use http_body::Body;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// The circuit breaker's per-call logic for HTTP requests, as a
/// [`Stage`]: admit or reject by the breaker's state, then record the answer's verdict
/// (from the response head, or from the trailers at the end of the stream).
///
/// [`CircuitBreaker`] runs it alone; fusebox's `Policy` runs it with the limit's and the
/// timeout's stages in one future.
pub struct BreakerStage<C = StandardClassifier, St = MemoryStore> {
    breaker: Arc<Leases<C, St>>,
}

impl<C, St> BreakerStage<C, St> {
    pub(crate) fn new(breaker: Arc<Leases<C, St>>) -> Self {
        BreakerStage { breaker }
    }

    /// The breaker and its per-thread leases.
    pub(crate) fn leases(&self) -> &Arc<Leases<C, St>> {
        &self.breaker
    }
}

impl<C, St> Clone for BreakerStage<C, St> {
    fn clone(&self) -> Self {
        BreakerStage {
            breaker: Arc::clone(&self.breaker),
        }
    }
}

impl<C, St: Store> fmt::Debug for BreakerStage<C, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerStage")
            .field("breaker", &self.breaker.name)
            .finish()
    }
}

impl<C: Classifier, St: Store> BreakerStage<C, St> {
    /// Admits `request` or rejects it.
    #[inline(always)]
    pub fn admit_request<B>(&self, request: &Request<B>) -> Result<Guard<C, St>, CircuitOpen> {
        self.admit_in(request, &mut Scope::new())
    }

    /// Admits `request` or rejects it, reading its route from the call's `scope`.
    #[inline(always)]
    pub fn admit_in<B>(
        &self,
        request: &Request<B>,
        scope: &mut Scope,
    ) -> Result<Guard<C, St>, CircuitOpen> {
        let leases = &*self.breaker;
        let meta = leases.table.meta_in(request, scope);
        leases.admit_with(meta, || lease(leases))
    }

    /// An operator's handle on the breaker.
    pub fn handle(&self) -> BreakerHandle {
        BreakerHandle::new(self.breaker.shared().clone())
    }
}

impl<B, C: Classifier, St: Store> Stage<Request<B>> for BreakerStage<C, St> {
    type Admitted = Option<Guard<C, St>>;
    type Waiting = NoWait;
    type End = EosRecorder<C, St>;
    type Timer = NoTimer;

    #[inline(always)]
    fn admit(&self, request: &mut Request<B>, scope: &mut Scope) -> Admit<Self::Admitted, NoWait> {
        Guard::admission(self.admit_in(request, scope))
    }

    fn poll_wait(
        &self,
        waiting: Pin<&mut NoWait>,
        _: &mut Request<B>,
        _: &mut Scope,
        _: &mut Context<'_>,
    ) -> Poll<Admit<Self::Admitted, NoWait>> {
        match *waiting.get_mut() {}
    }

    #[inline(always)]
    fn on_answer(
        admitted: Pin<&mut Self::Admitted>,
        answer: Answer<'_>,
        verdict: &SharedVerdict,
    ) -> Option<Self::End> {
        Guard::answer(admitted.get_mut(), answer, verdict)
    }
}

/// A service behind a circuit breaker. Built by
/// [`CircuitBreakerLayer`](crate::CircuitBreakerLayer); every clone shares the breaker.
///
/// It is the stage runner ([`Staged`]) over the breaker's [`BreakerStage`].
pub struct CircuitBreaker<S, C = StandardClassifier, St = MemoryStore> {
    staged: Staged<S, BreakerStage<C, St>, Http>,
}

impl<S, C, St> CircuitBreaker<S, C, St> {
    pub(crate) fn new(inner: S, breaker: Arc<Leases<C, St>>) -> Self {
        CircuitBreaker {
            staged: Staged::new(inner, BreakerStage::new(breaker)),
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

    /// The inner service, consuming the breaker service.
    pub fn into_inner(self) -> S {
        self.staged.into_inner()
    }

    /// The breaker's stage.
    pub fn stage(&self) -> &BreakerStage<C, St> {
        self.staged.stage()
    }
}

impl<S, C: Classifier, St: Store> CircuitBreaker<S, C, St> {
    /// Admits `request` or rejects it, without calling the inner service: for a caller
    /// that drives the breaker by hand (see [`Guard`]).
    /// [`call`](Service::call) is this, then the inner call.
    ///
    /// ```
    /// use fusebox_breaker::{CircuitBreakerConfig, CircuitBreakerLayer, State};
    /// use http::{HeaderMap, Request, StatusCode};
    /// use tower::Layer;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// let config = CircuitBreakerConfig::builder().name("fraud-eu")
    ///     .count_window(4)
    ///     .minimum_calls(4)
    ///     .build()?;
    /// // The breaker's decisions, without an inner service to call.
    /// let breaker = CircuitBreakerLayer::new(config).layer(());
    /// let request = Request::get("/charge").body(())?;
    /// for _ in 0..4 {
    ///     let mut guard = breaker.admit(&request)?;
    ///     // The answer came back: classify it with the route's classifier, record it.
    ///     let verdict = guard
    ///         .classify_response(StatusCode::SERVICE_UNAVAILABLE, &HeaderMap::new())
    ///         .expect("an HTTP verdict is in the head");
    ///     guard.finish_in_place(verdict);
    /// }
    /// assert_eq!(breaker.handle().state(), State::Open);
    /// let open = breaker.admit(&request).unwrap_err();
    /// assert_eq!(open.breaker(), "fraud-eu");
    /// # Ok(())
    /// # }
    /// ```
    #[inline(always)]
    pub fn admit<B>(&self, request: &Request<B>) -> Result<Guard<C, St>, CircuitOpen> {
        self.stage().admit_request(request)
    }

    /// An operator's handle on the breaker.
    pub fn handle(&self) -> BreakerHandle {
        self.stage().handle()
    }
}

impl<S: Clone, C, St> Clone for CircuitBreaker<S, C, St> {
    fn clone(&self) -> Self {
        CircuitBreaker {
            staged: self.staged.clone(),
        }
    }
}

impl<S: fmt::Debug, C, St: Store> fmt::Debug for CircuitBreaker<S, C, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("inner", self.staged.get_ref())
            .field("breaker", &self.stage().breaker.name)
            .finish()
    }
}

impl<S, C, St, ReqBody, ResBody> Service<Request<ReqBody>> for CircuitBreaker<S, C, St>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Error: Into<BoxError>,
    ResBody: Body,
    C: Classifier,
    St: Store,
{
    type Response = Response<ResponseBody<ResBody, C, St>>;
    type Error = BoxError;
    type Future = ResponseFuture<S, ReqBody, C, St>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Admission is decided per call, in `call`: an open breaker rejects at once instead
        // of holding `poll_ready` (and with it the caller's whole stack) pending.
        self.staged.poll_ready(cx)
    }

    #[inline(always)]
    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        self.staged.call(request)
    }
}
