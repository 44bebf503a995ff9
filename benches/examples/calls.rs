//! Healthy calls through one fusebox circuit breaker, a full `Policy`, or tower's stack,
//! for counting what one call costs: instructions (callgrind), copies (an `LD_PRELOAD`
//! counter of `memcpy` and `memmove`).
//!
//! `cargo build --release -p fusebox-benches --example calls`, then
//! `valgrind --tool=callgrind target/release/examples/calls plain 1000000`. Kinds:
//!
//! - `plain`, `http`: the breaker bench's `fusebox_count_slow_off` (a count window of 100,
//!   no slow-call threshold), for plain requests or HTTP ones;
//! - `plain-bare`, `http-bare`: the same calls with no breaker;
//! - `policy`, `tower-stack`: the policy bench's full `Policy` (retry budget, breaker,
//!   limit, timeout) and tower's stack (tower's `Retry` over a `TpsBudget`, fusebox's
//!   breaker, tower's `ConcurrencyLimit` and `Timeout`), for the bench's request;
//! - `policy-none`, `bare`: a `Policy` with no layer, and no layer at all, for the same
//!   request (what a policy's frame costs a call, whatever is configured);
//! - `retry`, `tower-retry`: the retry bench's fusebox retry layer (default settings) and
//!   tower's `Retry` over a `TpsBudget`, for the same request.
//!
//! Every call goes to a service that answers at once, and is polled ready and to
//! completion with a no-op waker. Run it with two call counts and divide the difference of
//! the totals by the difference of the counts: what is left is one call, without the
//! set-up.

use bytes::Bytes;
use fusebox::retry::ReplayBody;
use fusebox::{Policy, RetryConfig};
use fusebox_benches::services::{TowerRetryPolicy, URI, ready_ok};
use fusebox_breaker::{CircuitBreakerConfig, CircuitBreakerLayer};
use http::{Request, Response, Uri};
use http_body_util::Empty;
use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tower::{Layer, Service, ServiceBuilder};

fn layer() -> CircuitBreakerLayer {
    CircuitBreakerLayer::new(
        CircuitBreakerConfig::builder()
            .name("calls")
            .count_window(100)
            .minimum_calls(100)
            .failure_rate_threshold(50)
            .build()
            .expect("a valid breaker config"),
    )
}

/// Polls `svc` ready and `make()`'s call to its answer, `calls` times.
#[inline(never)]
fn run<S, R>(mut svc: S, calls: u64, make: impl Fn() -> R)
where
    S: Service<R>,
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..calls {
        match svc.poll_ready(&mut cx) {
            Poll::Ready(ready) => ready.expect("a closed breaker admits"),
            Poll::Pending => panic!("an always-ready service is ready"),
        }
        let mut call = pin!(svc.call(make()));
        match call.as_mut().poll(&mut cx) {
            Poll::Ready(answer) => {
                black_box(answer.expect("a healthy call answers"));
            }
            Poll::Pending => panic!("an always-ready service answers at once"),
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "plain".into());
    let calls: u64 = args
        .next()
        .map_or(1_000_000, |n| n.parse().expect("a call count"));
    let plain = || tower::service_fn(|n: u64| async move { Ok::<_, Infallible>(n) });
    let http = || {
        tower::service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
        })
    };
    let http_request = || {
        let mut request = Request::new(());
        black_box(&mut request);
        request
    };
    match kind.as_str() {
        "plain" => run(layer().plain().layer(plain()), calls, || black_box(7u64)),
        "plain-bare" => run(plain(), calls, || black_box(7u64)),
        "http" => run(layer().layer(http()), calls, http_request),
        "http-bare" => run(http(), calls, http_request),
        "policy" | "tower-stack" | "policy-none" | "bare" | "retry" | "tower-retry" => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("a runtime");
            let _entered = rt.enter();
            let request = || {
                let mut request = Request::new(Empty::<Bytes>::new());
                *request.uri_mut() = Uri::from_static(URI);
                black_box(request)
            };
            if kind == "bare" {
                run(ready_ok::<Empty<Bytes>>(), calls, request);
            } else if kind == "retry" {
                let retry = fusebox::retry::RetryBudgetLayer::new(RetryConfig::default());
                run(
                    retry.layer(ready_ok::<ReplayBody<Empty<Bytes>>>()),
                    calls,
                    request,
                );
            } else if kind == "tower-retry" {
                let retry = tower::retry::RetryLayer::new(TowerRetryPolicy::new());
                run(retry.layer(ready_ok::<Empty<Bytes>>()), calls, request);
            } else if kind == "policy-none" {
                let policy = Policy::builder("calls").build().expect("a valid policy");
                run(
                    policy.layer(ready_ok::<ReplayBody<Empty<Bytes>>>()),
                    calls,
                    request,
                );
            } else if kind == "policy" {
                let policy = Policy::builder("calls")
                    .timeout(Duration::from_secs(1))
                    .concurrency_limit(1000)
                    .circuit_breaker(
                        fusebox::CircuitBreakerConfig::builder()
                            .count_window(100)
                            .minimum_calls(100)
                            .failure_rate_threshold(50),
                    )
                    .retry_budget(RetryConfig::builder().name("calls"))
                    .build()
                    .expect("a valid policy");
                run(
                    policy.layer(ready_ok::<ReplayBody<Empty<Bytes>>>()),
                    calls,
                    request,
                );
            } else {
                let stack = ServiceBuilder::new()
                    .layer(tower::retry::RetryLayer::new(TowerRetryPolicy::new()))
                    .layer(layer())
                    .layer(tower::limit::ConcurrencyLimitLayer::new(1000))
                    .layer(tower::timeout::TimeoutLayer::new(Duration::from_secs(1)))
                    .service(ready_ok::<Empty<Bytes>>());
                run(stack, calls, request);
            }
        }
        other => panic!(
            "`plain`, `plain-bare`, `http`, `http-bare`, `policy`, `tower-stack`, \
             `policy-none`, `bare`, `retry` or `tower-retry`, not {other:?}"
        ),
    }
}
