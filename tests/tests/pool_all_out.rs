//! A pool whose every endpoint is ejected (no cap, no panic) comes back: after the open
//! wait each endpoint probes and, healthy again, serves — also when the probes that filled
//! every endpoint's budget are cancelled by their callers before they are answered, which
//! gives them back to the budget without a breaker event.

use bytes::Bytes;
use fusebox::CircuitBreakerConfig;
use fusebox::pool::{PoolConfig, PoolLayer, Status};
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use std::convert::Infallible;
use std::hash::{BuildHasherDefault, DefaultHasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;
use tower::balance::p2c::Balance;
use tower::discover::Change;
use tower::util::rng::HasherRng;
use tower::{Layer, Service, ServiceExt};

const SICK: u8 = 0;
const HUNG: u8 = 1;
const WELL: u8 = 2;

/// Three endpoints sharing one behaviour: 503 (`SICK`), no answer for an hour (`HUNG`), or
/// 200 (`WELL`); every one trips on 4 failures, waits 1 s open, and probes twice; the half-
/// open wait is the default (30 s).
fn pool(
    mode: &Arc<AtomicU8>,
) -> (
    impl Service<Request<()>, Response = Response<impl Sized>, Error = fusebox::BoxError>,
    fusebox::PoolHandle,
) {
    let breaker = CircuitBreakerConfig::builder()
        .name("quotes")
        .count_window(4)
        .minimum_calls(4)
        .open_wait(Duration::from_secs(1))
        .open_wait_jitter(Duration::ZERO)
        .permitted_probes(2)
        .build()
        .expect("a valid breaker");
    let config = PoolConfig::builder()
        .max_ejection_percent(100)
        .panic_threshold(0)
        .build()
        .expect("a valid pool");
    let layer = PoolLayer::builder(breaker).config(config).build();
    let handle = layer.handle();
    let changes: Vec<_> = (0..3)
        .map(|i| {
            let mode = Arc::clone(mode);
            let svc = tower::service_fn(move |_: Request<()>| {
                let mode = mode.load(Ordering::Relaxed);
                async move {
                    let mut response = Response::new(Empty::<Bytes>::new());
                    match mode {
                        SICK => *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE,
                        HUNG => tokio::time::sleep(Duration::from_secs(3600)).await,
                        _ => {}
                    }
                    Ok::<_, Infallible>(response)
                }
            });
            Ok::<_, Infallible>(Change::Insert(format!("e{i}"), svc))
        })
        .collect();
    // tower's balancer seeded: with entropy, now and then one endpoint drew too few of the
    // calls to finish its probes (under 2 of 20, about one run in three hundred).
    let seeded = HasherRng::with_hasher(BuildHasherDefault::<DefaultHasher>::default());
    let balance = Balance::from_rng(layer.layer(futures_util::stream::iter(changes)), seeded);
    (balance, handle)
}

/// Trips every endpoint: 12 calls answered 503.
async fn eject_all<S>(balance: &mut S, handle: &fusebox::PoolHandle)
where
    S: Service<Request<()>, Error = fusebox::BoxError>,
{
    for _ in 0..12 {
        let ready = balance.ready().await.expect("the pool is ready");
        let _ = ready.call(Request::new(())).await;
    }
    let status = handle.status();
    assert_eq!(status.ejected, 3, "{status}");
}

/// Twenty calls, each answered 200 within a second.
async fn serves<S, B>(balance: &mut S, handle: &fusebox::PoolHandle)
where
    S: Service<Request<()>, Response = Response<B>, Error = fusebox::BoxError>,
{
    for _ in 0..20 {
        let answer = tokio::time::timeout(Duration::from_secs(1), async {
            balance.ready().await?.call(Request::new(())).await
        })
        .await
        .unwrap_or_else(|_| panic!("no endpoint took the call: {}", handle.status()));
        assert_eq!(answer.expect("answered").status(), StatusCode::OK);
    }
    let status = handle.status();
    assert_eq!(status.with_status(Status::Serving).len(), 3, "{status}");
}

#[tokio::test(start_paused = true)]
async fn a_pool_with_every_endpoint_ejected_probes_and_returns() {
    let mode = Arc::new(AtomicU8::new(SICK));
    let (mut balance, handle) = pool(&mode);
    eject_all(&mut balance, &handle).await;
    mode.store(WELL, Ordering::Relaxed);
    serves(&mut balance, &handle).await;
}

#[tokio::test(start_paused = true)]
async fn probes_cancelled_before_their_answer_are_sent_again_at_once() {
    let mode = Arc::new(AtomicU8::new(SICK));
    let (mut balance, handle) = pool(&mode);
    eject_all(&mut balance, &handle).await;

    // After the open wait, every endpoint's probe budget is taken by calls that hang.
    mode.store(HUNG, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut probes = Vec::new();
    for _ in 0..6 {
        let ready = tokio::time::timeout(Duration::from_secs(1), balance.ready()).await;
        let svc = ready
            .unwrap_or_else(|_| panic!("no probe could be sent: {}", handle.status()))
            .expect("the pool is ready");
        probes.push(svc.call(Request::new(())));
    }
    assert!(
        tokio::time::timeout(Duration::from_secs(1), balance.ready())
            .await
            .is_err(),
        "every budget is full: {}",
        handle.status()
    );
    // The callers give up: each probe goes back to its endpoint's budget, and the next
    // calls are probes again at once, not when the 30 s half-open wait ends.
    drop(probes);
    mode.store(WELL, Ordering::Relaxed);
    serves(&mut balance, &handle).await;
}
