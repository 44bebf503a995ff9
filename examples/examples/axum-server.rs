//! Run with: cargo run -p fusebox-examples --example axum-server [-- --serve]
//!
//! An axum server whose routes sit behind one fusebox Policy, with no error-handling
//! boilerplate: `fusebox::axum::PolicyLayer` answers fusebox's own errors itself.
//!
//! - `GET /users/{id}` has a 100 ms timeout (its route key is axum's `MatchedPath`); a
//!   slow user (`/users/slow`) gets `504 Gateway Timeout`.
//! - `GET /report` is expensive: the policy's concurrency limit of 2 sheds the third
//!   concurrent report with `503 Service Unavailable` and `Retry-After`.
//! - `GET /flaky` fails with 500s; the breaker opens on them and then answers `503` with
//!   `Retry-After` without running the handler.
//!
//! The server binds 127.0.0.1 on a free port. By default the example calls it itself,
//! prints each answer and stops; with `--serve` it keeps serving until Ctrl-C.

// The example's output is its point.
#![allow(clippy::print_stdout)]

use axum::Router;
use axum::extract::Path;
use axum::routing::get;
use bytes::Bytes;
use fusebox::axum::PolicyLayer;
use fusebox::{CircuitBreakerConfig, Policy, Route, RouteTable};
use http::{StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> ExitCode {
    let serve_only = std::env::args().any(|a| a == "--serve");
    let (addr, server) = match start().await {
        Ok(started) => started,
        Err(e) => {
            println!("cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("listening on http://{addr}");
    if serve_only {
        println!("try /users/7, /users/slow, /report, /flaky; Ctrl-C to stop");
        tokio::select! {
            _ = server => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        return ExitCode::SUCCESS;
    }
    tokio::select! {
        code = demo(addr) => code,
        _ = tokio::signal::ctrl_c() => ExitCode::SUCCESS,
    }
}

async fn user(Path(id): Path<String>) -> String {
    if id == "slow" {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    format!("user {id}\n")
}

async fn report() -> &'static str {
    tokio::time::sleep(Duration::from_millis(300)).await;
    "report\n"
}

async fn flaky() -> (StatusCode, &'static str) {
    (StatusCode::INTERNAL_SERVER_ERROR, "database unavailable\n")
}

async fn start() -> Result<(SocketAddr, tokio::task::JoinHandle<()>), Box<dyn std::error::Error>> {
    // Route keys are axum's route templates, as `MatchedPath` carries them.
    let routes = RouteTable::builder(Route::default())
        .route(
            "GET /users/{id}",
            Route::default().timeout(Duration::from_millis(100)),
        )
        .build()?;
    let policy = Policy::builder("api")
        .routes(routes)
        .timeout(Duration::from_secs(1))
        .concurrency_limit(2)
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .name("api")
                .count_window(10)
                .minimum_calls(5)
                .open_wait(Duration::from_secs(10)),
        )
        .build()?;
    // One policy for the router: `route_layer` builds a service per route, all sharing the
    // same breaker and limit.
    let app = Router::new()
        .route("/users/{id}", get(user))
        .route("/report", get(report))
        .route("/flaky", get(flaky))
        .route_layer(PolicyLayer::new(policy));
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((addr, server))
}

async fn demo(addr: SocketAddr) -> ExitCode {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let call = |path: &'static str| {
        let client = client.clone();
        async move {
            let request = http::Request::get(format!("http://{addr}{path}"))
                .body(Empty::new())
                .expect("a valid request");
            match client.request(request).await {
                Ok(response) => {
                    let status = response.status();
                    let retry_after = response
                        .headers()
                        .get(header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .map(|v| format!(" (Retry-After: {v})"))
                        .unwrap_or_default();
                    let body = response
                        .into_body()
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    println!(
                        "GET {path:<12} -> {status}{retry_after}: {}",
                        String::from_utf8_lossy(&body).trim()
                    );
                    status
                }
                Err(e) => {
                    println!("GET {path:<12} -> error: {e}");
                    StatusCode::BAD_GATEWAY
                }
            }
        }
    };

    let mut ok = call("/users/7").await == StatusCode::OK;
    ok &= call("/users/slow").await == StatusCode::GATEWAY_TIMEOUT;

    // Three reports at once: the third finds the limit full.
    let (a, b, c) = tokio::join!(call("/report"), call("/report"), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        call("/report").await
    });
    ok &= [a, b].contains(&StatusCode::OK) && c == StatusCode::SERVICE_UNAVAILABLE;

    // A failing handler: its 500s pass through until the breaker opens.
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(call("/flaky").await);
    }
    ok &= statuses.last() == Some(&StatusCode::SERVICE_UNAVAILABLE);
    if ok {
        println!("every answer was what the policy promised");
        ExitCode::SUCCESS
    } else {
        println!("unexpected answers");
        ExitCode::FAILURE
    }
}
