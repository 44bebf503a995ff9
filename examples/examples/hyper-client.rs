//! Run with: cargo run -p fusebox-examples --example hyper-client
//!
//! A hyper-util client behind a fusebox Policy, one breaker per host and port.
//!
//! Two dependencies run on 127.0.0.1: `stable` always answers, `flaky` answers 503 for its
//! first second and then recovers. The client calls both, ten times a second, through one
//! policy: a 250 ms timeout, a concurrency limit, a circuit breaker keyed by authority (so
//! flaky's outage opens only flaky's breaker) and a retry budget (so a 503 may be retried,
//! within 10 % extra traffic). Each line shows what each call became. The example stops by
//! itself after four seconds (or on Ctrl-C), and exits 0 if flaky's breaker opened while
//! stable's calls all succeeded.

// The example's output is its point.
#![allow(clippy::print_stdout)]

use bytes::Bytes;
use fusebox::breaker::State;
use fusebox::error::CircuitOpen;
use fusebox::policy::BreakerKey;
use fusebox::{CircuitBreakerConfig, KeyBy, Policy, RetryConfig};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tower::ServiceExt;

#[tokio::main]
async fn main() -> ExitCode {
    tokio::select! {
        code = run() => code,
        _ = tokio::signal::ctrl_c() => ExitCode::SUCCESS,
    }
}

async fn run() -> ExitCode {
    let started = Instant::now();
    let (Ok(stable), Ok(flaky)) = (
        serve(move || StatusCode::OK).await,
        serve(move || {
            if started.elapsed() < Duration::from_secs(1) {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::OK
            }
        })
        .await,
    ) else {
        println!("cannot bind 127.0.0.1");
        return ExitCode::FAILURE;
    };

    let policy = Policy::builder("partners")
        .timeout(Duration::from_millis(250))
        .concurrency_limit(32)
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .count_window(10)
                .minimum_calls(5)
                .failure_rate_threshold(50)
                .open_wait(Duration::from_millis(800))
                .open_wait_jitter(Duration::ZERO)
                .permitted_probes(2),
        )
        .breaker_key(KeyBy::Authority)
        .retry_budget(RetryConfig::builder().retry_ratio(0.1))
        .build();
    let policy = match policy {
        Ok(policy) => policy,
        Err(e) => {
            println!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let client = fusebox::hyper::wrap(&policy);
    let keys = policy
        .keyed_breaker_handle()
        .expect("the policy is keyed by authority");

    let mut flaky_opened = false;
    let mut stable_failed = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    for round in 0..40 {
        tick.tick().await;
        let mut line = format!("{:>5} ms", round * 100);
        for (name, addr) in [("stable", stable), ("flaky", flaky)] {
            let request = Request::get(format!("http://{addr}/quote"))
                .body(Full::new(Bytes::new()))
                .expect("a valid request");
            let outcome = match client.clone().oneshot(request).await {
                Ok(response) => {
                    let status = response.status();
                    // Read the body to its end: that is when the call is over.
                    let _ = response.into_body().collect().await;
                    status.as_u16().to_string()
                }
                Err(e) if e.is::<CircuitOpen>() => "open (not sent)".to_owned(),
                Err(e) => format!("error: {e}"),
            };
            if name == "stable" && outcome != "200" {
                stable_failed += 1;
            }
            line.push_str(&format!("   {name}: {outcome:<16}"));
        }
        let flaky_state = keys
            .get(&BreakerKey::host(flaky.to_string()))
            .map(|b| b.state());
        flaky_opened |= flaky_state == Some(State::Open);
        println!("{line}   flaky's breaker: {flaky_state:?}");
    }
    let budget = policy.retry_budget().map(|b| b.snapshot());
    println!("retry budget: {budget:?}");
    if flaky_opened && stable_failed == 0 {
        println!("flaky's breaker opened and closed again; stable never noticed");
        ExitCode::SUCCESS
    } else {
        println!("unexpected: flaky opened = {flaky_opened}, stable failures = {stable_failed}");
        ExitCode::FAILURE
    }
}

/// A dependency on 127.0.0.1 answering `status()` to every request.
async fn serve(
    status: impl Fn() -> StatusCode + Clone + Send + Sync + 'static,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let status = status.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_req: Request<Incoming>| {
                    let status = status();
                    async move {
                        let mut response = Response::new(Full::new(Bytes::from_static(b"{}")));
                        *response.status_mut() = status;
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
