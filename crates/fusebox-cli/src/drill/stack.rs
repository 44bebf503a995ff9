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
//! Three taps record, in one ordered log shared with the breaker's transitions, every
//! call that reaches the breaker (an attempt: retries count), every call the breaker
//! admits, and every call sent on to the dependency (past the limit). From that log the
//! drill counts retries and checks how many calls each half-open period let through.

use crate::config::{BreakerOverrides, PolicySpec};
use crate::input::InputError;
use bytes::Bytes;
use fusebox_breaker::{BreakerEvent, BreakerHandle, CircuitBreakerLayer, Store};
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
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use tower::util::BoxCloneService;
use tower::{Layer, ServiceExt};

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
}

fn boxed<B>(response: Response<B>) -> Response<DrillBody>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    response.map(|b| b.map_err(Into::into).boxed_unsync())
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
    let config = match policy.breaker_with(&BreakerOverrides {
        default_seed: Some(seed),
        ..BreakerOverrides::default()
    }) {
        Some(Ok(c)) => c,
        Some(Err(e)) => {
            return Err(InputError::new(format!(
                "policy {:?}: invalid breaker: {e}",
                policy.name
            )));
        }
        None => {
            return Err(InputError::new(format!(
                "policy {:?} has no breaker: a drill exercises one",
                policy.name
            )));
        }
    };
    let builder = CircuitBreakerLayer::builder(config)
        .routes(policy.routes().clone())
        .on_event(listener);
    let invalid = |e: fusebox_classify::ConfigError| {
        InputError::new(format!(
            "policy {:?}: {}",
            policy.name,
            e.prefixed("breaker")
        ))
    };
    match redis {
        Some(redis) => with_breaker(policy, builder.store(redis).build().map_err(invalid)?, &tap),
        None => with_breaker(policy, builder.build().map_err(invalid)?, &tap),
    }
    .map_err(invalid)
}

fn with_breaker<St: Store>(
    policy: &PolicySpec,
    breaker: CircuitBreakerLayer<StandardClassifier, St>,
    tap: &TapFn,
) -> Result<Stack, ConfigError> {
    Ok(match policy.retry() {
        Some(retry) => {
            let (inner, handle, limit) =
                inner::<ReplayBody<Empty<Bytes>>, St>(policy, breaker, tap)?;
            let layer = RetryBudgetLayer::builder(RetryConfig::clone(&retry))
                .routes(policy.routes().clone())
                .build()?;
            let service = BoxCloneService::new(layer.layer(inner).map_response(boxed));
            Stack {
                service,
                breaker: handle,
                limit,
            }
        }
        None => {
            let (service, handle, limit) = inner::<Empty<Bytes>, St>(policy, breaker, tap)?;
            Stack {
                service,
                breaker: handle,
                limit,
            }
        }
    })
}

type Inner<B> = BoxCloneService<Request<B>, Response<DrillBody>, BoxError>;

/// Breaker → limit → timeout → client, for request bodies of type `B` (the retry layer
/// wraps bodies to replay them).
fn inner<B, St>(
    policy: &PolicySpec,
    breaker: CircuitBreakerLayer<StandardClassifier, St>,
    tap: &TapFn,
) -> Result<(Inner<B>, BreakerHandle, Option<LimitHandle>), ConfigError>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
    St: Store,
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
    let handle = breaker.handle();
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
    svc = BoxCloneService::new(breaker.layer(svc).map_response(boxed));
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
