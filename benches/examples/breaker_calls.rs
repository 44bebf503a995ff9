//! Healthy calls through one fusebox circuit breaker, for counting instructions per call.
//!
//! `cargo build --release -p fusebox-benches --example breaker_calls`, then
//! `valgrind --tool=callgrind target/release/examples/breaker_calls plain 1000000` (or
//! `http`). The breaker is the breaker bench's `fusebox_count_slow_off` (a count window of
//! 100, no slow-call threshold) over a service that answers at once; every call is polled
//! ready and to completion with a no-op waker. Run it with two call counts and divide the
//! difference of the instruction totals by the difference of the counts: what is left is
//! the instructions of one call, without the set-up.

use bytes::Bytes;
use fusebox_breaker::{CircuitBreakerConfig, CircuitBreakerLayer};
use http::{Request, Response};
use http_body_util::Empty;
use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use tower::{Layer, Service};

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
    match kind.as_str() {
        "plain" => {
            let bare = tower::service_fn(|n: u64| async move { Ok::<_, Infallible>(n) });
            run(layer().plain().layer(bare), calls, || black_box(7u64));
        }
        "http" => {
            let bare = tower::service_fn(|_: Request<()>| async {
                Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
            });
            run(layer().layer(bare), calls, || {
                let mut request = Request::new(());
                black_box(&mut request);
                request
            });
        }
        other => panic!("`plain` or `http`, not {other:?}"),
    }
}
