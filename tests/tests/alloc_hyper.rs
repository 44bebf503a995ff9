//! A hyper-util client behind a Policy costs each request no allocation of its own.
//!
//! Requests to a real axum server on 127.0.0.1, in one process: the allocations counted
//! are the client's and the server's together, so the check is a comparison, not zero. The
//! client behind a Policy of all four layers (`fusebox::hyper::wrap`) must allocate exactly
//! as the bare client does per request; so must one with only a breaker keyed by host.
//!
//! Its own test binary, because it installs a counting global allocator; one test, because
//! that allocator sees every thread.

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use fusebox::{CircuitBreakerConfig, KeyBy, Policy, RetryConfig};
use fusebox_tests::alloc::{self, INSTRUMENTED_SYSTEM, StatsAlloc};
use http::{Request, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::alloc::System;
use std::time::Duration;
use tower::{Service, ServiceExt};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const CALLS: usize = 1_000;
const WARM_UP: usize = 200;

/// Allocations per request through `client` (after a warm-up), body read to its end, as
/// (allocations, reallocations), rounded to whole requests.
async fn per_request<S, B>(mut client: S, uri: &Uri) -> (usize, usize)
where
    S: Service<Request<Empty<Bytes>>, Response = http::Response<B>>,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let mut once = async || {
        let mut request = Request::new(Empty::new());
        *request.uri_mut() = uri.clone();
        let response = client
            .ready()
            .await
            .expect("ready")
            .call(request)
            .await
            .expect("a healthy call");
        assert!(response.status().is_success());
        response.into_body().collect().await.expect("a whole body");
    };
    for _ in 0..WARM_UP {
        once().await;
    }
    alloc::per_call(GLOBAL, CALLS, once).await
}

#[test]
fn a_policy_around_a_client_allocates_nothing_of_its_own() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("a bound address");
        let app = Router::new().route("/hello", get(|| async { "Hello, World!" }));
        tokio::spawn(async move { axum::serve(listener, app).await });
        let uri: Uri = format!("http://{addr}/hello").parse().expect("a valid URI");

        let bare: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let bare = per_request(bare, &uri).await;

        let policy = Policy::builder("hello")
            .timeout(Duration::from_secs(5))
            .concurrency_limit(64)
            .circuit_breaker(CircuitBreakerConfig::builder().name("hello"))
            .retry_budget(RetryConfig::builder().name("hello"))
            .build()
            .expect("a valid policy");
        let full = per_request(
            fusebox::hyper::wrap_with_body::<Empty<Bytes>, _>(&policy),
            &uri,
        )
        .await;
        assert_eq!(
            full, bare,
            "all four layers: allocations per request vs bare"
        );

        let policy = Policy::builder("hosts")
            .circuit_breaker(CircuitBreakerConfig::builder().name("hosts"))
            .breaker_key(KeyBy::Host)
            .build()
            .expect("a valid policy");
        let keyed = per_request(
            fusebox::hyper::wrap_with_body::<Empty<Bytes>, _>(&policy),
            &uri,
        )
        .await;
        assert_eq!(
            keyed, bare,
            "a breaker keyed by host: allocations per request vs bare"
        );
    });
}
