//! The breaker service.

use crate::breaker::{BreakerHandle, Guard, Leases, lease};
use crate::future::{ResponseBody, ResponseFuture};
use crate::store::{MemoryStore, Store};
use fusebox_classify::error::CircuitOpen;
use fusebox_classify::{BoxError, Classifier, StandardClassifier};
use http::{Request, Response};
use http_body::Body;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// A service behind a circuit breaker. Built by
/// [`CircuitBreakerLayer`](crate::CircuitBreakerLayer); every clone shares the breaker.
pub struct CircuitBreaker<S, C = StandardClassifier, St = MemoryStore> {
    inner: S,
    breaker: Arc<Leases<C, St>>,
}

impl<S, C, St> CircuitBreaker<S, C, St> {
    pub(crate) fn new(inner: S, breaker: Arc<Leases<C, St>>) -> Self {
        CircuitBreaker { inner, breaker }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, consuming the breaker service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, C: Classifier, St: Store> CircuitBreaker<S, C, St> {
    /// Admits `request` or rejects it, without calling the inner service: for a service
    /// that runs the breaker as one stage of its own future (see [`Guard`]).
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
        let leases = &*self.breaker;
        let meta = leases.table.meta(request);
        leases.admit_with(meta, || lease(leases))
    }

    /// An operator's handle on the breaker.
    pub fn handle(&self) -> BreakerHandle {
        BreakerHandle::new(self.breaker.shared().clone())
    }
}

impl<S: Clone, C, St> Clone for CircuitBreaker<S, C, St> {
    fn clone(&self) -> Self {
        CircuitBreaker {
            inner: self.inner.clone(),
            breaker: Arc::clone(&self.breaker),
        }
    }
}

impl<S: fmt::Debug, C, St: Store> fmt::Debug for CircuitBreaker<S, C, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("inner", &self.inner)
            .field("breaker", &self.breaker.name)
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
    type Future = ResponseFuture<S::Future, C, St>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Admission is decided per call, in `call`: an open breaker rejects at once instead
        // of holding `poll_ready` (and with it the caller's whole stack) pending.
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    #[inline(always)]
    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        match self.admit(&request) {
            Ok(guard) => ResponseFuture::called(self.inner.call(request), guard),
            Err(open) => ResponseFuture::rejected(open),
        }
    }
}
