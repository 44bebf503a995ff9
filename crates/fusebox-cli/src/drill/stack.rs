//! The drill client's middleware, composed from a policy — the one place that knows how.
//!
//! The layers go in the order `fusebox::Policy` uses: retry budget (outermost) → circuit
//! breaker → concurrency limit → body timeout → timeout (innermost) → hyper-util client,
//! each present when the policy has it, configured from the policy the facade read. The
//! drill stacks the layer crates itself rather than building a `fusebox::Policy` for two
//! reasons: a `Policy` keeps its breaker in memory, and `--store redis://` needs the
//! breaker on fusebox-redis's store; and the drill taps the calls between the layers
//! (below). A policy's recovery ramp and fallbacks are not part of the drill. Everything
//! that knows the composition is in [`build`].
//!
//! With a breaker keyed by a request header (`breaker.key = "header"`), the drill keeps
//! one breaker per key and stacks a dependency-wide breaker around them, both built from
//! the policy's breaker section: the dependency-wide one is the drill's main breaker (its
//! transitions, samples and expectations), and with `breaker.spread` it counts a failure
//! only when the failures are spread over enough keys — the shape a `fusebox::Policy`
//! with a key spread has. Without `breaker.spread` it counts every failure, which is what
//! a dependency-wide breaker over hot keys does unguarded.
//!
//! Three taps record, in one ordered log shared with the breaker's transitions, every
//! call that reaches the breaker (an attempt: retries count), every call the breaker
//! admits, and every call sent on to the dependency (past the limit). From that log the
//! drill counts retries and checks how many calls each half-open period let through.

use crate::config::{BreakerOverrides, PolicySpec};
use crate::input::InputError;
use bytes::Bytes;
use fusebox::KeyBy;
use fusebox::policy::BreakerKey;
use fusebox::pool::{PoolConfig, PoolEvent, PoolHandle, PoolLayer};
use fusebox_breaker::{
    BreakerEvent, BreakerHandle, CircuitBreakerLayer, InMemory, KeyedBreakerHandle,
    KeyedCircuitBreakerLayer, MakeStore, Store,
};
use fusebox_classify::StandardClassifier;
use fusebox_classify::{BoxError, ConfigError};
use fusebox_limit::{ConcurrencyLimitLayer, LimitHandle};
use fusebox_redis::OnRedis;
use fusebox_retry::{ReplayBody, RetryBudgetLayer, RetryConfig};
use fusebox_timeout::TimeoutLayer;
use http::{Request, Response};
use http_body::Body;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::buffer::Buffer;
use tower::discover::Change;
use tower::util::BoxCloneService;
use tower::{Layer, Service, ServiceExt};

/// The request the drill sends.
pub type DrillRequest = Request<Empty<Bytes>>;
/// The response body, boxed.
pub type DrillBody = UnsyncBoxBody<Bytes, BoxError>;
/// The client service.
pub type DrillService = BoxCloneService<DrillRequest, Response<DrillBody>, BoxError>;

/// Where a call was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tap {
    /// Reached the breaker (each retry is another attempt).
    Attempt,
    /// Admitted by the breaker.
    Admitted,
    /// Sent to the dependency (past the limit); `half_open`: the breaker's generation when
    /// it admitted the call while half-open (a probe), as its handle showed right after.
    Sent {
        /// The half-open period's generation, for a call admitted while half-open.
        half_open: Option<u64>,
    },
}

/// Put on a request by the tap right below the breaker: the breaker admitted it while
/// half-open, in this generation.
#[derive(Debug, Clone, Copy)]
struct AdmittedHalfOpen(u64);

/// Told of every tapped call, synchronously.
pub type TapFn = Arc<dyn Fn(Tap) + Send + Sync>;

/// A client wrapped in its policy, and handles on its layers.
#[derive(Debug)]
pub struct Stack {
    /// The service.
    pub service: DrillService,
    /// The breaker's handle.
    pub breaker: BreakerHandle,
    /// The limit's handle, if the policy has a limit.
    pub limit: Option<LimitHandle>,
    /// The keys' breakers, with a keyed breaker.
    pub keys: Option<KeyedBreakerHandle<BreakerKey>>,
}

/// The breakers of a drill's client: one, or one per key inside a dependency-wide one.
trait Breakers {
    /// The dependency-wide breaker's handle.
    fn handle(&self) -> BreakerHandle;
    /// The keys' breakers.
    fn keys(&self) -> Option<KeyedBreakerHandle<BreakerKey>>;
    /// `svc` behind the breakers.
    fn wrap<B>(&self, svc: Inner<B>) -> Inner<B>
    where
        B: Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>;
}

impl<St: Store> Breakers for CircuitBreakerLayer<StandardClassifier, St> {
    fn handle(&self) -> BreakerHandle {
        CircuitBreakerLayer::handle(self)
    }

    fn keys(&self) -> Option<KeyedBreakerHandle<BreakerKey>> {
        None
    }

    fn wrap<B>(&self, svc: Inner<B>) -> Inner<B>
    where
        B: Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        BoxCloneService::new(self.layer(svc).map_response(boxed))
    }
}

/// A breaker per key, inside a dependency-wide breaker.
struct Keyed {
    dependency: CircuitBreakerLayer<StandardClassifier, <InMemory as MakeStore>::Store>,
    keys: KeyedCircuitBreakerLayer<KeyBy, StandardClassifier, InMemory>,
}

impl Breakers for Keyed {
    fn handle(&self) -> BreakerHandle {
        self.dependency.handle()
    }

    fn keys(&self) -> Option<KeyedBreakerHandle<BreakerKey>> {
        Some(self.keys.handle())
    }

    fn wrap<B>(&self, svc: Inner<B>) -> Inner<B>
    where
        B: Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        let keyed: Inner<B> = BoxCloneService::new(self.keys.layer(svc).map_response(boxed));
        BoxCloneService::new(self.dependency.layer(keyed).map_response(boxed))
    }
}

fn boxed<B>(response: Response<B>) -> Response<DrillBody>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    response.map(|b| b.map_err(Into::into).boxed_unsync())
}

/// The policy's breaker section, its jitter seeded by `seed` unless the policy sets a
/// seed; `why` says, if there is none, why the drill needs one.
fn breaker_config(
    policy: &PolicySpec,
    seed: u64,
    why: &str,
) -> Result<fusebox_breaker::CircuitBreakerConfig, InputError> {
    match policy.breaker_with(&BreakerOverrides {
        default_seed: Some(seed),
        ..BreakerOverrides::default()
    }) {
        Some(Ok(c)) => Ok(c),
        Some(Err(e)) => Err(InputError::new(format!(
            "policy {:?}: invalid breaker: {e}",
            policy.name
        ))),
        None => Err(InputError::new(format!(
            "policy {:?} has no breaker: {why}",
            policy.name
        ))),
    }
}

/// Builds the client for `policy`: `seed` seeds the breaker's jitter (unless the policy
/// sets one), `listener` hears every breaker event, `tap` every call at each tap; with
/// `redis`, the breaker keeps its state there (shared by every replica on the same scope).
pub fn build(
    policy: &PolicySpec,
    seed: u64,
    listener: impl Fn(&BreakerEvent) + Send + Sync + 'static,
    tap: TapFn,
    redis: Option<OnRedis>,
) -> Result<Stack, InputError> {
    let config = breaker_config(policy, seed, "a drill exercises one")?;
    let listener: Arc<dyn Fn(&BreakerEvent) + Send + Sync> = Arc::new(listener);
    let heard = Arc::clone(&listener);
    let builder = CircuitBreakerLayer::builder(config.clone())
        .routes(policy.routes().clone())
        .on_event(move |e| heard(e));
    let invalid = |e: fusebox_classify::ConfigError| {
        InputError::new(format!(
            "policy {:?}: {}",
            policy.name,
            e.prefixed("breaker")
        ))
    };
    match (redis, policy.policy().breaker_key()) {
        (Some(_), Some(_)) => Err(InputError::new(format!(
            "policy {:?}: a drill keeps a keyed breaker in memory: leave out --store",
            policy.name
        ))),
        (Some(redis), None) => {
            with_breaker(policy, builder.store(redis).build().map_err(invalid)?, &tap)
                .map_err(invalid)
        }
        (None, None) => {
            with_breaker(policy, builder.build().map_err(invalid)?, &tap).map_err(invalid)
        }
        (None, Some(key_by)) => {
            let heard = Arc::clone(&listener);
            let mut keys = CircuitBreakerLayer::builder(config)
                .routes(policy.routes().clone())
                .on_event(move |e| heard(e));
            let (max_keys, idle) = policy.policy().breaker_key_limits();
            if let Some(max) = max_keys {
                keys = keys.max_keys(max);
            }
            if let Some(idle) = idle {
                keys = keys.idle_timeout(idle);
            }
            let keys = keys.build_keyed(key_by.clone()).map_err(invalid)?;
            let dependency = match policy.policy().key_spread() {
                Some(spread) => builder.key_spread(keys.handle().spread_gate(*spread)),
                None => builder,
            };
            let dependency = dependency.build().map_err(invalid)?;
            with_breaker(policy, Keyed { dependency, keys }, &tap).map_err(invalid)
        }
    }
}

fn with_breaker<W: Breakers>(
    policy: &PolicySpec,
    breakers: W,
    tap: &TapFn,
) -> Result<Stack, ConfigError> {
    let keys = breakers.keys();
    Ok(match policy.retry() {
        Some(retry) => {
            let (inner, handle, limit) =
                inner::<ReplayBody<Empty<Bytes>>, W>(policy, &breakers, tap)?;
            let layer = RetryBudgetLayer::builder(RetryConfig::clone(&retry))
                .routes(policy.routes().clone())
                .build()?;
            let service = BoxCloneService::new(layer.layer(inner).map_response(boxed));
            Stack {
                service,
                breaker: handle,
                limit,
                keys,
            }
        }
        None => {
            let (service, handle, limit) = inner::<Empty<Bytes>, W>(policy, &breakers, tap)?;
            Stack {
                service,
                breaker: handle,
                limit,
                keys,
            }
        }
    })
}

type Inner<B> = BoxCloneService<Request<B>, Response<DrillBody>, BoxError>;

/// Breaker → limit → timeout → client, for request bodies of type `B` (the retry layer
/// wraps bodies to replay them).
fn inner<B, W: Breakers>(
    policy: &PolicySpec,
    breakers: &W,
    tap: &TapFn,
) -> Result<(Inner<B>, BreakerHandle, Option<LimitHandle>), ConfigError>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    let client: Client<_, B> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1024)
        .build_http();
    let mut svc: Inner<B> = BoxCloneService::new(
        client
            .map_response(boxed)
            .map_err(|e| -> BoxError { Box::new(e) }),
    );
    if let Some(t) = policy.timeout() {
        let layer = TimeoutLayer::builder(t.clone())
            .routes(policy.routes().clone())
            .build()?;
        svc = BoxCloneService::new(layer.layer(svc).map_response(boxed));
        if t.body_timeout().is_some() {
            let body = layer.body_layer();
            svc = BoxCloneService::new(body.layer(svc).map_response(boxed));
        }
    }
    let sent = Arc::clone(tap);
    svc = BoxCloneService::new(svc.map_request(move |req: Request<B>| {
        let half_open = req.extensions().get::<AdmittedHalfOpen>().map(|h| h.0);
        sent(Tap::Sent { half_open });
        req
    }));
    let mut limit = None;
    if let Some(l) = policy.limit() {
        let layer = ConcurrencyLimitLayer::builder(l.clone())
            .routes(policy.routes().clone())
            .build()?;
        limit = Some(layer.handle());
        svc = BoxCloneService::new(layer.layer(svc).map_response(boxed));
    }
    let handle = breakers.handle();
    let (admitted, view) = (Arc::clone(tap), handle.clone());
    svc = BoxCloneService::new(svc.map_request(move |mut req: Request<B>| {
        // What the breaker was when it let this call through: a probe, if half-open. Read
        // here, in the call's own flow, so that a transition reported later by another task
        // cannot reorder it.
        let s = view.snapshot();
        if s.state == fusebox_breaker::State::HalfOpen {
            req.extensions_mut().insert(AdmittedHalfOpen(s.generation));
        }
        admitted(Tap::Admitted);
        req
    }));
    svc = breakers.wrap(svc);
    svc = tapped(svc, tap, Tap::Attempt);
    Ok((svc, handle, limit))
}

fn tapped<B: Send + 'static>(svc: Inner<B>, tap: &TapFn, at: Tap) -> Inner<B> {
    let tap = Arc::clone(tap);
    BoxCloneService::new(svc.map_request(move |req: Request<B>| {
        tap(at);
        req
    }))
}

/// A pool drill's client, and the handle on its pool.
#[derive(Debug)]
pub struct PoolStack {
    /// The service.
    pub service: DrillService,
    /// The pool's handle: every endpoint's status and breaker.
    pub pool: PoolHandle,
}

/// One endpoint of a pool drill: the client, sending every request to `addr`.
struct EndpointClient<B> {
    client: Client<HttpConnector, B>,
    addr: SocketAddr,
}

impl<B> Clone for EndpointClient<B> {
    fn clone(&self) -> Self {
        EndpointClient {
            client: self.client.clone(),
            addr: self.addr,
        }
    }
}

impl<B> Service<Request<B>> for EndpointClient<B>
where
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Response = Response<hyper::body::Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = hyper_util::client::legacy::ResponseFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let path = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        if let Ok(uri) = format!("http://{}{path}", self.addr).parse() {
            *request.uri_mut() = uri;
        }
        self.client.request(request)
    }
}

/// Builds the client of a pool drill: retry budget → concurrency limit → timeout → tower's
/// p2c balancer over one endpoint per address in `addrs` (`e0`, `e1`, …), each behind
/// its own breaker built from the policy's breaker section (`fusebox::pool`), with the
/// ejection rules of `pool`. `seed` seeds the breakers' jitter (unless the policy sets
/// one); `listener` hears every pool event; `tap` sees every attempt.
pub fn build_pool(
    policy: &PolicySpec,
    pool: PoolConfig,
    addrs: &[SocketAddr],
    seed: u64,
    listener: impl Fn(&PoolEvent) + Send + Sync + 'static,
    tap: TapFn,
) -> Result<PoolStack, InputError> {
    let invalid = |e: ConfigError| InputError::new(format!("policy {:?}: {e}", policy.name));
    let config = breaker_config(policy, seed, "a pool drill gives each endpoint one")?;
    let layer = PoolLayer::builder(config)
        .routes(policy.routes().clone())
        .config(pool)
        .on_event(listener)
        .build();
    let handle = layer.handle();
    let service = match policy.retry() {
        Some(retry) => {
            let inner =
                pooled::<ReplayBody<Empty<Bytes>>>(policy, &layer, addrs, &tap).map_err(invalid)?;
            let retry = RetryBudgetLayer::builder(RetryConfig::clone(&retry))
                .routes(policy.routes().clone())
                .build()
                .map_err(invalid)?;
            BoxCloneService::new(retry.layer(inner).map_response(boxed))
        }
        None => pooled::<Empty<Bytes>>(policy, &layer, addrs, &tap).map_err(invalid)?,
    };
    Ok(PoolStack {
        service,
        pool: handle,
    })
}

/// Limit → timeout → balancer (behind a buffer, so that every call task shares it) →
/// endpoints, for request bodies of type `B`.
fn pooled<B>(
    policy: &PolicySpec,
    layer: &PoolLayer<StandardClassifier>,
    addrs: &[SocketAddr],
    tap: &TapFn,
) -> Result<Inner<B>, ConfigError>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    let client: Client<HttpConnector, B> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1024)
        .build_http();
    let endpoints: Vec<_> = addrs
        .iter()
        .enumerate()
        .map(|(i, &addr)| {
            Ok::<_, std::convert::Infallible>(Change::Insert(
                format!("e{i}"),
                EndpointClient {
                    client: client.clone(),
                    addr,
                },
            ))
        })
        .collect();
    let balance = layer.balance(futures_util::stream::iter(endpoints));
    // Room for every call the drill may have in flight, so that a call waits for an
    // endpoint inside its timeout, never for a place in the buffer.
    let buffer = Buffer::new(balance, 10_000);
    let mut svc: Inner<B> = BoxCloneService::new(buffer.map_response(boxed));
    if let Some(t) = policy.timeout() {
        let layer = TimeoutLayer::builder(t.clone())
            .routes(policy.routes().clone())
            .build()?;
        svc = BoxCloneService::new(layer.layer(svc).map_response(boxed));
    }
    if let Some(l) = policy.limit() {
        let layer = ConcurrencyLimitLayer::builder(l.clone())
            .routes(policy.routes().clone())
            .build()?;
        svc = BoxCloneService::new(layer.layer(svc).map_response(boxed));
    }
    Ok(tapped(svc, tap, Tap::Attempt))
}
