//! How much memory keyed circuit breakers hold: bytes per key, and whether the total stays
//! flat when far more distinct keys pass than the cap allows.
//!
//! Shared by the `keyed_memory` bench (the full million keys) and the `keyed_memory` test
//! in `tests/` (fewer keys, with limits that fail it). Memory is what a counting global
//! allocator — installed by the caller, which owns the process — says is live: bytes
//! requested and not yet freed (the allocator's own rounding and headers are not counted).
//! The breakers are fusebox's keyed `CircuitBreakerLayer` with a count window of 100 calls
//! in the default in-memory store, one breaker per `u64` key; each key is made by one call
//! through the layer.

use bytes::Bytes;
use fusebox_breaker::{
    CircuitBreakerConfig, CircuitBreakerLayer, InMemory, KeyedBreakerHandle, KeyedCircuitBreaker,
    RequestHead,
};
use fusebox_classify::StandardClassifier;
use http::{Request, Response};
use http_body_util::Empty;
use stats_alloc::StatsAlloc;
use std::alloc::System;
use std::convert::Infallible;
use std::future::Ready;
use tokio::runtime::Runtime;
use tower::{Layer, Service, ServiceExt};

/// The key of a request, carried in its extensions.
#[derive(Debug, Clone, Copy)]
pub struct Key(pub u64);

/// The key function: the request's [`Key`] (0 when it has none).
pub fn by_key(head: &RequestHead<'_>) -> u64 {
    head.extensions().get::<Key>().map_or(0, |k| k.0)
}

type Inner =
    tower::util::ServiceFn<fn(Request<()>) -> Ready<Result<Response<Empty<Bytes>>, Infallible>>>;

/// A keyed breaker (one per `u64` key) in front of a service that answers 200 at once.
pub type Keyed =
    KeyedCircuitBreaker<Inner, fn(&RequestHead<'_>) -> u64, StandardClassifier, InMemory>;

fn ok(_: Request<()>) -> Ready<Result<Response<Empty<Bytes>>, Infallible>> {
    std::future::ready(Ok(Response::new(Empty::new())))
}

/// A keyed breaker with a count window of `window` calls, at most `max_keys` keys, and its
/// operator handle.
pub fn keyed(window: u32, max_keys: usize) -> (Keyed, KeyedBreakerHandle<u64>) {
    let config = CircuitBreakerConfig::builder()
        .name("keyed")
        .count_window(window)
        .minimum_calls(window.min(20))
        .build()
        .expect("a valid breaker config");
    let key_fn: fn(&RequestHead<'_>) -> u64 = by_key;
    let layer = CircuitBreakerLayer::builder(config)
        .max_keys(max_keys)
        .build_keyed(key_fn)
        .expect("a valid keyed layer");
    let handle = layer.handle();
    let inner: Inner = tower::service_fn(ok as fn(_) -> _);
    (layer.layer(inner), handle)
}

/// Makes one call with key `key` through `service`, and drops the response.
pub async fn call(service: &mut Keyed, key: u64) {
    let mut request = Request::new(());
    request.extensions_mut().insert(Key(key));
    let ready = service.ready().await.expect("the keyed breaker is ready");
    let response = ready.call(request).await.expect("a healthy call");
    drop(response);
}

/// Bytes the counting allocator `global` holds live now.
pub fn live_bytes(global: &StatsAlloc<System>) -> usize {
    let s = global.stats();
    s.bytes_allocated.saturating_sub(s.bytes_deallocated)
}

/// What [`bytes_per_key`] found.
#[derive(Debug, Clone, Copy)]
pub struct PerKey {
    /// Keys held by the keyed breaker at the end.
    pub keys: usize,
    /// Live bytes added by them (breakers, names, windows and the map's buckets).
    pub bytes: usize,
}

impl PerKey {
    /// Bytes per key held.
    pub fn per_key(&self) -> f64 {
        self.bytes as f64 / self.keys.max(1) as f64
    }
}

/// Live bytes per key after `keys` distinct keys, with a cap large enough to keep them all.
pub fn bytes_per_key(global: &StatsAlloc<System>, rt: &Runtime, window: u32, keys: u64) -> PerKey {
    let cap = usize::try_from(keys)
        .unwrap_or(usize::MAX)
        .saturating_mul(4);
    let (mut service, handle) = keyed(window, cap);
    let before = live_bytes(global);
    rt.block_on(async {
        for key in 0..keys {
            call(&mut service, key).await;
        }
    });
    let bytes = live_bytes(global).saturating_sub(before);
    PerKey {
        keys: handle.len(),
        bytes,
    }
}

/// One point of a churn run.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Distinct keys called so far.
    pub keys_seen: u64,
    /// Keys held by the keyed breaker.
    pub keys_held: usize,
    /// Live bytes added since the layer was built.
    pub live: usize,
    /// The most live bytes seen at any sample so far.
    pub peak: usize,
}

/// Calls `total` distinct keys in turn through a keyed breaker capped at `max_keys`,
/// sampling every `every` keys; returns the samples.
pub fn churn(
    global: &StatsAlloc<System>,
    rt: &Runtime,
    window: u32,
    max_keys: usize,
    total: u64,
    every: u64,
) -> Vec<Sample> {
    let (mut service, handle) = keyed(window, max_keys);
    let every = every.max(1);
    // Sized up front: the samples must not grow while memory is being sampled.
    let mut samples = Vec::with_capacity(usize::try_from(total / every).unwrap_or(0) + 1);
    let before = live_bytes(global);
    let mut peak = 0;
    rt.block_on(async {
        for key in 0..total {
            call(&mut service, key).await;
            if (key + 1) % every == 0 {
                let live = live_bytes(global).saturating_sub(before);
                peak = peak.max(live);
                samples.push(Sample {
                    keys_seen: key + 1,
                    keys_held: handle.len(),
                    live,
                    peak,
                });
            }
        }
    });
    samples
}
