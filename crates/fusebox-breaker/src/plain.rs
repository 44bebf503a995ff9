//! The breaker around any tower service, not only HTTP: a database pool, a cache client, a
//! message producer, anything whose calls end in `Result<T, E>`.
//!
//! [`CircuitBreakerLayer`](crate::CircuitBreakerLayer) judges HTTP and gRPC answers by their
//! status. A plain call has none: an `Ok` answer is a success, and an error is judged by the
//! classifier of the breaker's default route ([`Classifier::classify_error`], seeing a
//! [`Call::plain`](fusebox_classify::Call::plain): no method, not known to be safe to repeat). Transport errors and
//! fusebox's own [`Elapsed`](fusebox_classify::error::Elapsed) are failures, fusebox's
//! rejections are ignored, and a custom classifier can judge the service's own error types
//! by downcasting. An answer that should count as a failure is mapped to an error by an
//! inner layer (`tower::ServiceBuilder::map_result`).
//!
//! Everything else is the same breaker: the windows, the thresholds, the default route's
//! slow-call threshold, the open wait, the half-open probes, the generations, the operator
//! states and the handle. A [`PlainCircuitBreakerLayer`] made by
//! [`CircuitBreakerLayer::plain`](crate::CircuitBreakerLayer::plain) shares its state with
//! the layer it came from.
//!
//! The per-call path is the HTTP breaker's without the route lookup, the classification of a
//! response head and the response body wrapper: the answer is handed on untouched, in the
//! inner service's own type.

use crate::breaker::{BreakerHandle, EosRecorder, Guard, Leases, PlainCall, lease};
use crate::store::{MemoryStore, Store};
use fusebox_classify::context::Scope;
use fusebox_classify::stage::{
    Admit, Answer, NoTimer, NoWait, Opaque, Stage, Staged, StagedFuture,
};
use fusebox_classify::{BoxError, Classifier, SharedVerdict, StandardClassifier};
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_layer::Layer;
use tower_service::Service;

/// Puts a circuit breaker in front of any service, whatever its request and response
/// types. Made by [`CircuitBreakerLayer::plain`](crate::CircuitBreakerLayer::plain).
///
/// ```
/// use fusebox_breaker::{CircuitBreakerConfig, CircuitBreakerLayer, State};
/// use fusebox_classify::error::CircuitOpen;
/// use std::io;
/// use tower::{Service, ServiceBuilder, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let config = CircuitBreakerConfig::builder().name("inventory-db")
///     .count_window(4)
///     .minimum_calls(4)
///     .build()?;
/// let layer = CircuitBreakerLayer::new(config).plain();
/// let handle = layer.handle();
///
/// // A lookup whose connection keeps being refused.
/// let mut lookup = ServiceBuilder::new().layer(layer).service_fn(|sku: u32| async move {
///     if sku == 0 {
///         return Ok::<u32, io::Error>(0);
///     }
///     Err(io::Error::from(io::ErrorKind::ConnectionRefused))
/// });
///
/// assert_eq!(lookup.ready().await?.call(0).await?, 0);
/// for sku in 1..4 {
///     assert!(lookup.ready().await?.call(sku).await.is_err());
/// }
/// assert_eq!(handle.state(), State::Open);
///
/// let err = lookup.ready().await?.call(0).await.unwrap_err();
/// assert_eq!(err.downcast_ref::<CircuitOpen>().unwrap().breaker(), "inventory-db");
/// # Ok(())
/// # }
/// ```
pub struct PlainCircuitBreakerLayer<C = StandardClassifier, St = MemoryStore> {
    breaker: Arc<Leases<C, St>>,
}

impl<C, St> PlainCircuitBreakerLayer<C, St> {
    pub(crate) fn new(breaker: Arc<Leases<C, St>>) -> Self {
        PlainCircuitBreakerLayer { breaker }
    }
}

impl<C: Classifier, St: Store> PlainCircuitBreakerLayer<C, St> {
    /// An operator's handle on the breaker.
    pub fn handle(&self) -> BreakerHandle {
        BreakerHandle::new(self.breaker.shared().clone())
    }
}

impl<C, St> Clone for PlainCircuitBreakerLayer<C, St> {
    fn clone(&self) -> Self {
        PlainCircuitBreakerLayer {
            breaker: Arc::clone(&self.breaker),
        }
    }
}

impl<C, St: Store> fmt::Debug for PlainCircuitBreakerLayer<C, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlainCircuitBreakerLayer")
            .field("breaker", &self.breaker.name)
            .finish()
    }
}

impl<S, C, St> Layer<S> for PlainCircuitBreakerLayer<C, St> {
    type Service = PlainCircuitBreaker<S, C, St>;

    fn layer(&self, inner: S) -> Self::Service {
        PlainCircuitBreaker {
            staged: Staged::new(
                inner,
                PlainStage {
                    breaker: Arc::clone(&self.breaker),
                },
            ),
        }
    }
}

/// The breaker's per-call logic for any request, as a [`Stage`]: the HTTP breaker's
/// stage without the route lookup (every call is on the default route) and without a
/// response head to judge (an `Ok` answer is a success).
pub struct PlainStage<C = StandardClassifier, St = MemoryStore> {
    breaker: Arc<Leases<C, St>>,
}

impl<C, St> Clone for PlainStage<C, St> {
    fn clone(&self) -> Self {
        PlainStage {
            breaker: Arc::clone(&self.breaker),
        }
    }
}

impl<C, St: Store> fmt::Debug for PlainStage<C, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlainStage")
            .field("breaker", &self.breaker.name)
            .finish()
    }
}

impl<R, C: Classifier, St: Store> Stage<R> for PlainStage<C, St> {
    type Admitted = Option<Guard<C, St, PlainCall>>;
    type Waiting = NoWait;
    type End = EosRecorder<C, St, PlainCall>;
    type Timer = NoTimer;

    #[inline]
    fn admit(&self, _: &mut R, _: &mut Scope) -> Admit<Self::Admitted, NoWait> {
        let leases = &*self.breaker;
        Guard::admission(leases.admit_plain(|| lease(leases)))
    }

    fn poll_wait(
        &self,
        waiting: Pin<&mut NoWait>,
        _: &mut R,
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

/// A service behind a circuit breaker, whatever its request and response types. Built by
/// [`PlainCircuitBreakerLayer`]; every clone shares the breaker.
///
/// It is the stage runner ([`Staged`]) over the [`PlainStage`], handing answers on
/// untouched ([`Opaque`]).
pub struct PlainCircuitBreaker<S, C = StandardClassifier, St = MemoryStore> {
    staged: Staged<S, PlainStage<C, St>, Opaque>,
}

impl<S, C, St> PlainCircuitBreaker<S, C, St> {
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
}

impl<S, C: Classifier, St: Store> PlainCircuitBreaker<S, C, St> {
    /// An operator's handle on the breaker.
    pub fn handle(&self) -> BreakerHandle {
        BreakerHandle::new(self.staged.stage().breaker.shared().clone())
    }
}

impl<S: Clone, C, St> Clone for PlainCircuitBreaker<S, C, St> {
    fn clone(&self) -> Self {
        PlainCircuitBreaker {
            staged: self.staged.clone(),
        }
    }
}

impl<S: fmt::Debug, C, St: Store> fmt::Debug for PlainCircuitBreaker<S, C, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlainCircuitBreaker")
            .field("inner", self.staged.get_ref())
            .field("breaker", &self.staged.stage().breaker.name)
            .finish()
    }
}

/// The future of [`PlainCircuitBreaker`] around `S` called with `R`: the stage runner's
/// future over the plain stage; it answers in the inner service's own type.
pub type PlainFuture<S, R, C, St> = StagedFuture<S, R, PlainStage<C, St>, Opaque>;

impl<S, R, C, St> Service<R> for PlainCircuitBreaker<S, C, St>
where
    S: Service<R>,
    S::Error: Into<BoxError>,
    C: Classifier,
    St: Store,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = PlainFuture<S, R, C, St>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // As for HTTP: admission is decided per call, an open breaker rejects at once.
        self.staged.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, request: R) -> Self::Future {
        self.staged.call(request)
    }
}

#[cfg(test)]
mod tests {
    use crate::{CircuitBreakerConfig, CircuitBreakerLayer, EventKind, Reason, State};
    use fusebox_classify::error::{CircuitOpen, Overloaded};
    use fusebox_classify::{
        Call, Classified, Classifier, Route, RouteTable, StandardClassifier, Verdict,
    };
    use http::{HeaderMap, StatusCode};
    use std::error::Error;
    use std::io;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tokio_test::{assert_pending, assert_ready, task};
    use tower::{Layer, Service, ServiceExt};
    use tower_test::mock;

    fn config() -> crate::CircuitBreakerConfigBuilder {
        CircuitBreakerConfig::builder()
            .name("db")
            .count_window(4)
            .minimum_calls(4)
            .failure_rate_threshold(50)
            .open_wait(Duration::from_secs(10))
            .open_wait_jitter(Duration::ZERO)
            .permitted_probes(1)
            .seed(7)
    }

    /// Answers `Ok(n)` for even `n`, a refused connection for odd `n`; counts its calls.
    fn parity(
        calls: Arc<AtomicUsize>,
    ) -> impl Service<
        u32,
        Response = u32,
        Error = io::Error,
        Future = impl Future<Output = Result<u32, io::Error>>,
    > + Clone {
        tower::service_fn(move |n: u32| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if n.is_multiple_of(2) {
                    Ok(n)
                } else {
                    Err(io::Error::from(io::ErrorKind::ConnectionRefused))
                }
            }
        })
    }

    #[tokio::test(start_paused = true)]
    async fn errors_open_it_and_an_open_breaker_never_calls_the_service() {
        let layer = CircuitBreakerLayer::new(config().build().unwrap()).plain();
        let handle = layer.handle();
        let calls = Arc::new(AtomicUsize::new(0));
        let mut svc = layer.layer(parity(Arc::clone(&calls)));

        assert_eq!(svc.ready().await.unwrap().call(2).await.unwrap(), 2);
        assert_eq!(svc.ready().await.unwrap().call(4).await.unwrap(), 4);
        let err = svc.ready().await.unwrap().call(1).await.unwrap_err();
        let io = err.downcast_ref::<io::Error>().expect("the inner error");
        assert_eq!(io.kind(), io::ErrorKind::ConnectionRefused);
        assert_eq!(handle.state(), State::Closed, "3 calls < minimum_calls");
        let _ = svc.ready().await.unwrap().call(3).await.unwrap_err();

        let snapshot = handle.snapshot();
        assert_eq!(snapshot.state, State::Open, "2 failures of 4 = 50 %");
        assert_eq!(snapshot.window.calls, 4);
        assert_eq!(snapshot.window.failures, 2);

        let err = svc.ready().await.unwrap().call(2).await.unwrap_err();
        let open = err.downcast_ref::<CircuitOpen>().expect("rejected");
        assert_eq!(open.breaker(), "db");
        assert_eq!(open.retry_after(), Duration::from_secs(10));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            4,
            "the rejection never reached it"
        );
    }

    /// Four calls shed with `shed()`: ignored, or failures that open the breaker when it
    /// counts overload.
    async fn shed_calls<E>(shed: fn() -> E)
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        for count_overloaded in [false, true] {
            let layer = CircuitBreakerLayer::new(
                config().count_overloaded(count_overloaded).build().unwrap(),
            )
            .plain();
            let handle = layer.handle();
            let mut svc = layer.layer(tower::service_fn(move |_: ()| async move {
                Err::<(), _>(shed())
            }));
            for _ in 0..4 {
                let err = svc.ready().await.unwrap().call(()).await.unwrap_err();
                assert!(err.is::<E>(), "passed on as it came");
            }
            let snapshot = handle.snapshot();
            if count_overloaded {
                assert_eq!(snapshot.state, State::Open);
                assert_eq!(snapshot.window.failures, 4);
            } else {
                assert_eq!(snapshot.state, State::Closed);
                assert_eq!(snapshot.window.calls, 0, "ignored calls are not counted");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn fuseboxs_own_rejections_are_ignored_unless_overload_counts() {
        shed_calls(|| Overloaded::new(8, Duration::from_millis(5))).await;
    }

    #[tokio::test(start_paused = true)]
    async fn towers_load_shedding_is_judged_as_fuseboxs_overload() {
        shed_calls(fusebox_classify::error::TowerOverloaded::new).await;
    }

    #[tokio::test(start_paused = true)]
    async fn slow_answers_trip_it_on_the_default_routes_threshold() {
        let layer = CircuitBreakerLayer::builder(
            config()
                .failure_rate_threshold(100)
                .slow_call_rate_threshold(50)
                .build()
                .unwrap(),
        )
        .routes(RouteTable::single(
            Route::default().slow_call_duration(Duration::from_millis(100)),
        ))
        .build()
        .expect("an in-memory breaker always builds")
        .plain();
        let reasons = Arc::new(Mutex::new(Vec::new()));
        let mut events = layer.handle().subscribe();
        let mut svc = layer.layer(tower::service_fn(|ms: u64| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, io::Error>(ms)
        }));
        // At the threshold counts as slow; just under it does not.
        for ms in [99, 100, 10, 250] {
            assert_eq!(svc.ready().await.unwrap().call(ms).await.unwrap(), ms);
        }
        while let Ok(event) = events.try_recv() {
            if let EventKind::Transition(t) = event.kind {
                reasons
                    .lock()
                    .unwrap()
                    .push((t.to, t.reason, t.window.slow));
            }
        }
        assert_eq!(
            *reasons.lock().unwrap(),
            vec![(State::Open, Reason::SlowCallRate, 2)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_probe_gives_its_permit_back() {
        let layer = CircuitBreakerLayer::new(config().build().unwrap()).plain();
        let handle = layer.handle();
        let (inner, mut server) = mock::pair::<u32, u32>();
        let mut svc = layer.layer(inner);
        server.allow(100);
        for n in 0..4 {
            let mut call = task::spawn(svc.ready().await.unwrap().call(n));
            assert_pending!(call.poll());
            let (_, reply) = server.next_request().await.unwrap();
            reply.send_error(io::Error::from(io::ErrorKind::ConnectionReset));
            assert!(assert_ready!(call.poll()).is_err());
        }
        assert_eq!(handle.state(), State::Open);
        tokio::time::advance(Duration::from_secs(10)).await;

        // The one probe: admitted, then dropped before its answer.
        let mut probe = task::spawn(svc.ready().await.unwrap().call(10));
        assert_pending!(probe.poll());
        assert_eq!(handle.snapshot().probes_admitted, 1);
        let second = svc.ready().await.unwrap().call(11).await.unwrap_err();
        assert!(second.is::<CircuitOpen>(), "one probe at a time");
        drop(probe);

        // Its permit is back: the next call is the probe, and its success closes.
        let mut probe = task::spawn(svc.ready().await.unwrap().call(12));
        assert_pending!(probe.poll());
        let (request, _) = server.next_request().await.unwrap(); // the cancelled one
        assert_eq!(request, 10);
        let (request, reply) = server.next_request().await.unwrap();
        assert_eq!(request, 12);
        reply.send_response(12);
        assert_eq!(assert_ready!(probe.poll()).unwrap(), 12);
        assert_eq!(handle.state(), State::Closed);
    }

    /// Ignores "not found" and records which calls it was shown.
    #[derive(Clone, Default)]
    struct NotFoundIsFine {
        seen: Arc<Mutex<Vec<(String, bool, bool)>>>,
    }

    impl Classifier for NotFoundIsFine {
        fn classify_response(&self, c: &Call<'_>, s: StatusCode, h: &HeaderMap) -> Classified {
            StandardClassifier::new().classify_response(c, s, h)
        }
        fn classify_eos(&self, c: &Call<'_>, t: Option<&HeaderMap>) -> Verdict {
            StandardClassifier::new().classify_eos(c, t)
        }
        fn classify_error(&self, call: &Call<'_>, error: &(dyn Error + 'static)) -> Verdict {
            self.seen.lock().unwrap().push((
                call.route_name().to_owned(),
                call.method().is_some(),
                call.idempotent(),
            ));
            match error.downcast_ref::<io::Error>() {
                Some(e) if e.kind() == io::ErrorKind::NotFound => Verdict::IGNORED,
                _ => Verdict::FAILURE,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_custom_classifier_judges_the_errors_as_plain_calls() {
        let classifier = NotFoundIsFine::default();
        let layer = CircuitBreakerLayer::builder(config().build().unwrap())
            .routes(RouteTable::single(Route::new(classifier.clone())))
            .build()
            .expect("an in-memory breaker always builds")
            .plain();
        let handle = layer.handle();
        let mut svc = layer.layer(tower::service_fn(|kind: io::ErrorKind| async move {
            Err::<(), _>(io::Error::from(kind))
        }));
        for _ in 0..4 {
            let _ = svc
                .ready()
                .await
                .unwrap()
                .call(io::ErrorKind::NotFound)
                .await;
        }
        assert_eq!(handle.snapshot().window.calls, 0, "not found is ignored");
        assert_eq!(handle.state(), State::Closed);
        for _ in 0..4 {
            let _ = svc
                .ready()
                .await
                .unwrap()
                .call(io::ErrorKind::BrokenPipe)
                .await;
        }
        assert_eq!(handle.state(), State::Open);
        let seen = classifier.seen.lock().unwrap();
        assert_eq!(seen.len(), 8);
        assert!(
            seen.iter()
                .all(|s| *s == ("default".to_owned(), false, false)),
            "a plain call on the default route: no method, not known to be repeatable"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn shares_its_state_with_the_http_layer_it_came_from() {
        let layer = CircuitBreakerLayer::new(config().build().unwrap());
        let plain = layer.plain();
        let mut db = plain.layer(parity(Arc::new(AtomicUsize::new(0))));
        for n in [1, 3, 5, 7] {
            let _ = db.ready().await.unwrap().call(n).await;
        }
        assert_eq!(plain.handle().state(), State::Open);
        assert_eq!(layer.handle().state(), State::Open, "one breaker");
        let mut http = layer.layer(tower::service_fn(|_: http::Request<()>| async {
            Ok::<_, io::Error>(http::Response::new(
                http_body_util::Empty::<bytes::Bytes>::new(),
            ))
        }));
        let err = http
            .ready()
            .await
            .unwrap()
            .call(http::Request::new(()))
            .await
            .unwrap_err();
        assert!(err.is::<CircuitOpen>());
        layer.handle().reset();
        assert_eq!(db.ready().await.unwrap().call(2).await.unwrap(), 2);
        assert_eq!(plain.handle().snapshot().window.calls, 1);
    }
}
