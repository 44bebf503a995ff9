//! Run with: cargo run -p fusebox-examples --example admin [-- --serve]
//!
//! An admin page for a service's breakers: a `fusebox::Registry` lists every policy the
//! service built, `fusebox::admin::AdminRouter` serves the listing and operators' commands
//! under `/admin`, and `readiness_router` answers a readiness probe at `/ready`.
//!
//! The admin router is mounted behind an authentication layer (here a stand-in that wants
//! an operator's session header; in a real service, whatever knows your operators), and its
//! command route also wants the admin token: a request without it is refused with 401. The
//! token comes from `FUSEBOX_ADMIN_TOKEN`, or is made up at start (and not printed).
//!
//! The server binds 127.0.0.1 on a free port. By default the example calls it itself —
//! lists the breakers, tries to force `payments` open without the token and then with it,
//! watches readiness fail while the mandatory `payments` is held open, and resets it — and
//! stops; with `--serve` it keeps serving until Ctrl-C.

// The example's output is its point.
#![allow(clippy::print_stdout)]

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use fusebox::admin::{AdminRouter, Credential, readiness_router};
use fusebox::axum::PolicyLayer;
use fusebox::{CircuitBreakerConfig, KeyBy, Policy, Registry};
use http::{StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::process::ExitCode;
use tokio::net::TcpListener;

/// The header the stand-in authentication layer wants, and its value.
const SESSION_HEADER: &str = "x-operator-session";
const SESSION: &str = "operator-session-of-the-example";

#[tokio::main]
async fn main() -> ExitCode {
    let serve_only = std::env::args().any(|a| a == "--serve");
    let token = std::env::var("FUSEBOX_ADMIN_TOKEN").unwrap_or_else(|_| made_up_token());
    let (addr, server) = match start(&token).await {
        Ok(started) => started,
        Err(e) => {
            println!("cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("listening on http://{addr}");
    if serve_only {
        println!(
            "try: curl -H '{SESSION_HEADER}: {SESSION}' http://{addr}/admin/breakers ; curl http://{addr}/ready ; Ctrl-C to stop"
        );
        tokio::select! {
            _ = server => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        return ExitCode::SUCCESS;
    }
    match tour(addr, &token).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A token for this run only, when none is given.
fn made_up_token() -> String {
    let state = std::collections::hash_map::RandomState::new();
    format!("{:016x}{:016x}", state.hash_one(1u8), state.hash_one(2u8))
}

type Started = (SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>);

async fn start(token: &str) -> Result<Started, Box<dyn std::error::Error>> {
    let registry = Registry::new();
    // The service cannot answer without payments; recommendations are a nice-to-have.
    registry.require("payments");
    let payments = Policy::builder("payments")
        .circuit_breaker(CircuitBreakerConfig::builder())
        .concurrency_limit(64)
        .registry(&registry)
        .build()?;
    let partners = Policy::builder("partners")
        .circuit_breaker(CircuitBreakerConfig::builder())
        .breaker_key(KeyBy::Host)
        .registry(&registry)
        .build()?;

    let admin = AdminRouter::new(registry.clone(), Credential::bearer("admin-token", token))
        .into_router()
        .layer(middleware::from_fn(authenticate));
    let app = Router::new()
        .route("/pay", get(|| async { "paid" }))
        .route_layer(PolicyLayer::new(payments))
        .route(
            "/partner",
            get(|| async { "partner" }).route_layer(PolicyLayer::new(partners)),
        )
        .nest("/admin", admin)
        .merge(readiness_router(registry));

    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((addr, server))
}

/// The stand-in for your authentication: only operators with a session get through.
async fn authenticate(request: Request, next: Next) -> Response {
    let authenticated = request
        .headers()
        .get(SESSION_HEADER)
        .is_some_and(|v| v.as_bytes() == SESSION.as_bytes());
    if authenticated {
        next.run(request).await
    } else {
        (StatusCode::UNAUTHORIZED, "log in first").into_response()
    }
}

async fn tour(addr: SocketAddr, token: &str) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let send = |method: &'static str, path: &str, bearer: Option<String>, body: &'static str| {
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("http://{addr}{path}"))
            .header(SESSION_HEADER, SESSION)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(bearer) = bearer {
            request = request.header(header::AUTHORIZATION, bearer);
        }
        let request = request.body(Full::new(Bytes::from_static(body.as_bytes())));
        let client = client.clone();
        async move {
            let response = client.request(request?).await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, Box<dyn std::error::Error>>((
                status,
                String::from_utf8_lossy(&body).into_owned(),
            ))
        }
    };
    let force_open = r#"{"name": "payments", "command": "force_open"}"#;
    let reset = r#"{"name": "payments", "command": "reset"}"#;

    let (status, body) = send("GET", "/admin/breakers", None, "").await?;
    println!("GET /admin/breakers → {status}\n  {body}");
    let (status, _) = send("POST", "/admin/breakers/command", None, force_open).await?;
    println!("POST force_open without the token → {status}");
    let (status, body) = send(
        "POST",
        "/admin/breakers/command",
        Some(format!("Bearer {token}")),
        force_open,
    )
    .await?;
    println!("POST force_open with the token → {status}: {body}");
    let (status, body) = send("GET", "/ready", None, "").await?;
    println!("GET /ready → {status}: {body}");
    let (status, body) = send(
        "POST",
        "/admin/breakers/command",
        Some(format!("Bearer {token}")),
        reset,
    )
    .await?;
    println!("POST reset with the token → {status}: {body}");
    let (status, body) = send("GET", "/ready", None, "").await?;
    println!("GET /ready → {status}: {body}");
    if status != StatusCode::OK {
        return Err("the service should be ready again".into());
    }
    Ok(())
}
