//! Run with: cargo run -p fusebox-examples --example config-file [-- path/to/policies.toml]
//!
//! Policies from a file: reads `examples/fusebox.toml` (or the TOML / YAML file given),
//! prints what each policy is made of, and builds it — giving the fallback function that a
//! route's `fallback = true` asks for, which only code can provide. Then it shows what a
//! broken file looks like to its author: every problem at once, each at its path.
//!
//! Then it puts one of the policies to work against a local dependency on 127.0.0.1 that
//! throttles with 429s: the `fraud-eu` policy's `POST /score` route counts 429s as
//! failures (`count_throttling = true`), so its breaker opens. It stops by itself.

// The example's output is its point.
#![allow(clippy::print_stdout)]

use bytes::Bytes;
use fusebox::config::PolicyFile;
use fusebox::{Fallback, Policy};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;
use tokio::net::TcpListener;
use tower::ServiceExt;

const BROKEN: &str = r#"
[defaults.breaker]
failure_rate_threshold = 150

[policies.payments.breaker]
minimum_cals = 10

[policies.payments.timeout]
default_timeout = 250

[policies.payments.routes."charge"]
retry = "no"
"#;

#[tokio::main]
async fn main() -> ExitCode {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/fusebox.toml").to_owned());
    let file = match PolicyFile::load(&path) {
        Ok(file) => file,
        Err(e) => {
            println!("{path} is invalid:");
            for problem in e.problems() {
                println!("  {problem}");
            }
            return ExitCode::FAILURE;
        }
    };
    println!("{path}: {} policies", file.policy_names().count());

    let mut fraud = None;
    for name in file.policy_names() {
        // Only code can give a fallback function; routes opt in from the file.
        let stale_rules = Fallback::new(|ctx| {
            Response::builder()
                .header("x-fallback", ctx.reason().as_str())
                .body(Bytes::from_static(b"{\"rules\":\"v0\",\"stale\":true}"))
                .expect("a valid response")
        });
        let built = file.policy(name).map(|p| {
            if p.wants_fallback() {
                p.fallback(stale_rules).build()
            } else {
                p.build()
            }
        });
        let policy = match built {
            Ok(Ok(policy)) => policy,
            Ok(Err(e)) | Err(e) => {
                println!("  {name}: {e}");
                return ExitCode::FAILURE;
            }
        };
        describe(&policy);
        if name == "fraud-eu" {
            fraud = Some(policy);
        }
    }

    println!("\nA broken file reports every problem, each at its path:");
    match PolicyFile::from_toml(BROKEN) {
        Ok(_) => {
            println!("  (unexpectedly valid)");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            for problem in e.problems() {
                println!("  {problem}");
            }
        }
    }

    let Some(fraud) = fraud else {
        println!("no fraud-eu policy in {path}");
        return ExitCode::SUCCESS;
    };
    tokio::select! {
        code = drive(fraud) => code,
        _ = tokio::signal::ctrl_c() => ExitCode::SUCCESS,
    }
}

fn describe(policy: &Policy) {
    println!("\n  policy {}", policy.name());
    if let Some(b) = policy.breaker_handle() {
        println!("    breaker `{}`: {}", b.name(), b.state());
    }
    if policy.keyed_breaker_handle().is_some() {
        println!("    one breaker per key");
    }
    if let Some(limit) = policy.limit_config() {
        println!("    concurrency limit: {:?}", limit.limit());
    }
    if let Some(t) = policy.timeout_config() {
        println!(
            "    timeout: {:?} unless the route says otherwise",
            t.default_timeout()
        );
    }
    if let Some(r) = policy.retry_config() {
        println!(
            "    retries: up to {} attempts, at most {} % extra traffic",
            r.max_attempts(),
            r.retry_ratio() * 100.0
        );
    }
    if policy.has_recovery_ramp() {
        println!("    recovery ramp after the breaker closes");
    }
    for (_, name, route) in policy.routes().iter() {
        println!(
            "    route {name}: timeout {:?}, slow at {:?}, retries {}",
            route.timeout_duration(),
            route.slow_call_threshold(),
            if route.retry_enabled() { "on" } else { "off" }
        );
    }
}

/// A partner that throttles every score with 429, behind the fraud-eu policy.
async fn drive(policy: Policy) -> ExitCode {
    let addr = match partner().await {
        Ok(addr) => addr,
        Err(e) => {
            println!("cannot start the partner: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("\nfraud-eu against a partner on {addr} that answers 429:");
    let client = fusebox::hyper::wrap(&policy);
    for i in 1..=25 {
        let request = Request::post(format!("http://{addr}/score"))
            .body(Full::new(Bytes::from_static(b"{\"amount\":42}")))
            .expect("a valid request");
        match client.clone().oneshot(request).await {
            Ok(response) => println!("  call {i:2}: {}", response.status()),
            Err(e) => println!("  call {i:2}: {e}"),
        }
    }
    match policy.breaker_handle().map(|b| b.state()) {
        Some(fusebox::breaker::State::Open) => {
            println!("the score route counts 429s: the breaker opened");
            ExitCode::SUCCESS
        }
        other => {
            println!("expected the breaker to open, it is {other:?}");
            ExitCode::FAILURE
        }
    }
}

async fn partner() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_req: Request<Incoming>| async {
                    let mut response = Response::new(Full::new(Bytes::from_static(b"slow down")));
                    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                    Ok::<_, Infallible>(response)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}
