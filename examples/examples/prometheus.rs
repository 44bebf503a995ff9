//! Run with: cargo run -p fusebox-examples --example prometheus [-- --serve]
//!
//! fusebox's metrics in Prometheus: `metrics-exporter-prometheus` is installed as the
//! `metrics` recorder *before* the policy is built (layers register their metrics when they
//! are built), and its registry is served at `http://127.0.0.1:<port>/metrics`.
//!
//! A policy with all four layers calls a local dependency that fails half the time, for
//! two seconds; then the example scrapes its own `/metrics` endpoint and prints fusebox's
//! series: breaker state and transitions, limit and in-flight gauges, timeouts, retry
//! attempts and budget refusals, fallbacks, and the call-duration histogram (with buckets
//! set for it). The names are documented in `fusebox::metrics`; `dashboards/fusebox.json`
//! is a Grafana dashboard of them. It stops by itself, or serves until Ctrl-C with
//! `--serve`.

// The example's output is its point.
#![allow(clippy::print_stdout)]

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use fusebox::{CircuitBreakerConfig, Fallback, Policy, RetryConfig, Route, RouteTable};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tower::ServiceExt;

#[tokio::main]
async fn main() -> ExitCode {
    tokio::select! {
        code = run() => code,
        _ = tokio::signal::ctrl_c() => ExitCode::SUCCESS,
    }
}

async fn run() -> ExitCode {
    let serve_only = std::env::args().any(|a| a == "--serve");
    // Buckets (in seconds) for the call-duration histogram: without them this exporter
    // renders a summary, which Grafana's histogram_quantile cannot read.
    let builder = PrometheusBuilder::new().set_buckets_for_metric(
        Matcher::Full(fusebox::metrics::BREAKER_CALL_DURATION_SECONDS.to_owned()),
        &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5],
    );
    let handle = match builder.and_then(|b| b.install_recorder()) {
        Ok(handle) => handle,
        Err(e) => {
            println!("cannot install the recorder: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (Ok(metrics_addr), Ok(dependency)) =
        (serve_metrics(handle).await, flaky_dependency().await)
    else {
        println!("cannot bind 127.0.0.1");
        return ExitCode::FAILURE;
    };
    println!("metrics at http://{metrics_addr}/metrics");

    let policy = match build_policy() {
        Ok(policy) => policy,
        Err(e) => {
            println!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let client = fusebox::hyper::wrap(&policy);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    for i in 0..200u32 {
        tick.tick().await;
        let path = if i.is_multiple_of(10) {
            "/slow"
        } else {
            "/pay"
        };
        let request = Request::get(format!("http://{dependency}{path}"))
            .body(Full::new(Bytes::new()))
            .expect("a valid request");
        if let Ok(response) = client.clone().oneshot(request).await {
            let _ = response.into_body().collect().await;
        }
    }

    let scraped = scrape(metrics_addr).await;
    println!("fusebox's series after 200 calls:");
    for line in scraped.lines().filter(|l| l.starts_with("fusebox_")) {
        println!("  {line}");
    }
    if serve_only {
        println!("serving http://{metrics_addr}/metrics until Ctrl-C");
        std::future::pending::<()>().await;
    }
    let expected = [
        "fusebox_breaker_state",
        "fusebox_breaker_calls_total",
        "fusebox_breaker_call_duration_seconds_bucket",
        "fusebox_limit_in_flight",
        "fusebox_timeout_elapsed_total",
        "fusebox_retry_attempts_total",
        "fusebox_policy_fallbacks_total",
    ];
    if expected.iter().all(|name| scraped.contains(name)) {
        ExitCode::SUCCESS
    } else {
        println!("some of {expected:?} are missing");
        ExitCode::FAILURE
    }
}

fn build_policy() -> Result<Policy, fusebox::ConfigError> {
    let routes =
        RouteTable::builder(Route::default().slow_call_duration(Duration::from_millis(200)))
            .route(
                "GET /slow",
                Route::default().timeout(Duration::from_millis(50)),
            )
            .build()?;
    Policy::builder("payments")
        .routes(routes)
        .timeout(Duration::from_millis(500))
        .concurrency_limit(16)
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .count_window(20)
                .minimum_calls(10)
                .failure_rate_threshold(40)
                .open_wait(Duration::from_millis(300)),
        )
        .retry_budget(RetryConfig::builder().retry_ratio(0.2))
        .fallback(
            Fallback::new(|_| Response::new(Bytes::from_static(b"{\"queued\":true}")))
                .route("default"),
        )
        .build()
}

async fn serve_metrics(
    handle: metrics_exporter_prometheus::PrometheusHandle,
) -> std::io::Result<SocketAddr> {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let handle = handle.clone();
            async move { handle.render() }
        }),
    );
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}

/// Fails every other call with 503; `/slow` takes 200 ms.
async fn flaky_dependency() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let count = Arc::new(AtomicU64::new(0));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let n = count.fetch_add(1, Ordering::Relaxed);
                    async move {
                        if req.uri().path() == "/slow" {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        let mut response = Response::new(Full::new(Bytes::new()));
                        if n.is_multiple_of(2) {
                            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                        }
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

async fn scrape(addr: SocketAddr) -> String {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let request = Request::get(format!("http://{addr}/metrics"))
        .body(Empty::new())
        .expect("a valid request");
    match client.request(request).await {
        Ok(response) => match response.into_body().collect().await {
            Ok(body) => String::from_utf8_lossy(&body.to_bytes()).into_owned(),
            Err(e) => format!("scrape failed: {e}"),
        },
        Err(e) => format!("scrape failed: {e}"),
    }
}
