//! A call is resolved once, by the outermost fusebox layer: layers stacked by hand inside
//! it read its resolution (route, idempotency) from the call's scope instead of working it
//! out again, whatever middleware sits between them — unless that middleware rewrote the
//! request's path, when the inner layer resolves the new request itself.
//!
//! What shows it: a middleware between a breaker (outside) and a retry layer (inside) adds
//! an `Idempotency-Key` to a `POST`. A retry layer that worked the call out itself would
//! see the key and retry a 503; reading the breaker's resolution (made before the key was
//! there), it does not.

use bytes::Bytes;
use fusebox_breaker::{CircuitBreakerConfig, CircuitBreakerLayer};
use fusebox_classify::{BoxError, IDEMPOTENCY_KEY};
use fusebox_retry::{ReplayBody, RetryBudgetLayer, RetryConfig};
use http::{HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::Full;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tower::util::MapRequestLayer;
use tower::{Layer, Service, ServiceExt};

type Body = Full<Bytes>;

/// A dependency that answers its first call 503 and every later one 200, counting calls.
fn flaky(
    calls: Arc<AtomicUsize>,
) -> impl Service<
    Request<ReplayBody<Body>>,
    Response = Response<Body>,
    Error = BoxError,
    Future = impl Future<Output = Result<Response<Body>, BoxError>> + Send,
> + Clone
+ Send {
    tower::service_fn(move |_: Request<ReplayBody<Body>>| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        async move {
            let status = if n == 0 {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::OK
            };
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = status;
            Ok::<_, BoxError>(response)
        }
    })
}

fn retry() -> RetryBudgetLayer {
    RetryBudgetLayer::new(
        RetryConfig::builder()
            .seed(Some(7))
            .base_delay(Duration::from_millis(10))
            .max_attempts(2)
            .build()
            .expect("a valid retry config"),
    )
}

fn breaker() -> CircuitBreakerLayer {
    CircuitBreakerLayer::new(
        CircuitBreakerConfig::builder()
            .name("orders")
            .build()
            .expect("a valid breaker config"),
    )
}

fn post() -> Request<Body> {
    Request::post("http://orders.test/orders")
        .body(Full::new(Bytes::new()))
        .expect("a valid request")
}

fn add_key(mut request: Request<Body>) -> Request<Body> {
    request
        .headers_mut()
        .insert(IDEMPOTENCY_KEY, HeaderValue::from_static("order-1"));
    request
}

/// Adds the key and rebuilds the URI from its text: the same path, in a new buffer.
fn add_key_and_rewrite(request: Request<Body>) -> Request<Body> {
    let mut request = add_key(request);
    let text = request.uri().to_string();
    *request.uri_mut() = Uri::try_from(text).expect("the same URI");
    request
}

/// The status the caller got and how many calls the dependency saw.
async fn run<S, B>(service: S, calls: &AtomicUsize) -> (StatusCode, usize)
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    let response = service.oneshot(post()).await.expect("an answer");
    (response.status(), calls.load(Ordering::SeqCst))
}

#[tokio::test(start_paused = true)]
async fn a_retry_layer_alone_sees_the_key_and_retries() {
    let calls = Arc::new(AtomicUsize::new(0));
    let service = MapRequestLayer::new(add_key).layer(retry().layer(flaky(calls.clone())));
    assert_eq!(run(service, &calls).await, (StatusCode::OK, 2));
}

#[tokio::test(start_paused = true)]
async fn inside_a_breaker_the_retry_reads_the_breakers_resolution() {
    let calls = Arc::new(AtomicUsize::new(0));
    let service =
        breaker().layer(MapRequestLayer::new(add_key).layer(retry().layer(flaky(calls.clone()))));
    // The breaker resolved the POST before the key was added: not safe to repeat.
    assert_eq!(
        run(service, &calls).await,
        (StatusCode::SERVICE_UNAVAILABLE, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn a_rewritten_request_is_resolved_again() {
    let calls = Arc::new(AtomicUsize::new(0));
    let service = breaker().layer(
        MapRequestLayer::new(add_key_and_rewrite).layer(retry().layer(flaky(calls.clone()))),
    );
    assert_eq!(run(service, &calls).await, (StatusCode::OK, 2));
}

#[tokio::test(start_paused = true)]
async fn the_scope_is_current_only_while_the_call_is_handed_on() {
    // The same request text sent twice through two separate stacks: the second retry
    // layer, with no breaker around it, resolves the call itself and sees its key.
    let first = Arc::new(AtomicUsize::new(0));
    let outer =
        breaker().layer(MapRequestLayer::new(add_key).layer(retry().layer(flaky(first.clone()))));
    assert_eq!(
        run(outer, &first).await,
        (StatusCode::SERVICE_UNAVAILABLE, 1)
    );
    let second = Arc::new(AtomicUsize::new(0));
    let alone = MapRequestLayer::new(add_key).layer(retry().layer(flaky(second.clone())));
    assert_eq!(run(alone, &second).await, (StatusCode::OK, 2));
}
