//! Run with: cargo run -p fusebox-examples --example pool
//!
//! A circuit breaker per endpoint of a load-balanced pool (`fusebox::pool`, feature
//! `balance`): four replicas of one dependency on 127.0.0.1 behind tower's p2c balancer.
//!
//! Replica `c` answers 503 for its first second, then recovers. Its breaker trips, the
//! pool ejects it (the cap: 10 % of four endpoints, at least one), and the balancer
//! spreads the calls over the other three; after its open wait, its two probes — and only
//! they — reach it, succeed, and it serves again. Each pool event and, every half second,
//! the pool's status are printed. The example stops by itself after three seconds (or on
//! Ctrl-C), and exits 0 if `c` was ejected and came back while every call answered.

// The example's output is its point.
#![allow(clippy::print_stdout)]

use bytes::Bytes;
use fusebox::CircuitBreakerConfig;
use fusebox::pool::{PoolEventKind, PoolLayer};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tower::discover::Change;
use tower::{Service, ServiceExt};

#[tokio::main]
async fn main() -> ExitCode {
    tokio::select! {
        code = run() => code,
        _ = tokio::signal::ctrl_c() => ExitCode::SUCCESS,
    }
}

async fn run() -> ExitCode {
    let started = Instant::now();
    let mut replicas = Vec::new();
    for name in ["a", "b", "c", "d"] {
        let sick = name == "c";
        let status = move || {
            if sick && started.elapsed() < Duration::from_secs(1) {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::OK
            }
        };
        match serve(status).await {
            Ok(addr) => replicas.push((name, addr)),
            Err(e) => {
                println!("cannot bind 127.0.0.1: {e}");
                return ExitCode::FAILURE;
            }
        }
    }

    let breaker = CircuitBreakerConfig::builder()
        .name("quotes")
        .count_window(10)
        .minimum_calls(5)
        .failure_rate_threshold(50)
        .open_wait(Duration::from_millis(1200))
        .open_wait_jitter(Duration::ZERO)
        .permitted_probes(2)
        .probe_successes(2)
        .build();
    let ejected = Arc::new(AtomicBool::new(false));
    let returned = Arc::new(AtomicBool::new(false));
    let (e, r) = (Arc::clone(&ejected), Arc::clone(&returned));
    let layer = breaker.map(|breaker| {
        PoolLayer::builder(breaker)
            .on_event(move |event| {
                let endpoint = event.endpoint.as_deref().unwrap_or("-");
                println!(
                    "{:>6} ms  pool event: {endpoint} {:?}",
                    started.elapsed().as_millis(),
                    event.kind
                );
                match event.kind {
                    PoolEventKind::Ejected { .. } => e.store(true, Ordering::Relaxed),
                    PoolEventKind::Returned => r.store(true, Ordering::Relaxed),
                    _ => {}
                }
            })
            .build()
    });
    let layer = match layer {
        Ok(layer) => layer,
        Err(e) => {
            println!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let handle = layer.handle();
    // The endpoints' keys are their names: their breakers' series and events carry them.
    let changes: Vec<_> = replicas
        .iter()
        .map(|&(name, addr)| Ok::<_, Infallible>(Change::Insert(name, Replica::new(addr))))
        .collect();
    let mut balance = layer.balance(futures_util::stream::iter(changes));

    let mut failed = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    for round in 1..=300 {
        tick.tick().await;
        let request = Request::get("/quote")
            .body(Full::new(Bytes::new()))
            .expect("a valid request");
        let answer = match balance.ready().await {
            Ok(ready) => ready.call(request).await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(response) => {
                let _ = response.into_body().collect().await;
            }
            Err(e) => {
                failed += 1;
                println!("call failed: {e}");
            }
        }
        if round % 50 == 0 {
            println!(
                "{:>6} ms  status:\n{}\n",
                started.elapsed().as_millis(),
                handle.status()
            );
        }
    }
    let (ejected, returned) = (
        ejected.load(Ordering::Relaxed),
        returned.load(Ordering::Relaxed),
    );
    if ejected && returned && failed == 0 {
        println!("c was ejected, probed, and came back; no call failed");
        ExitCode::SUCCESS
    } else {
        println!("unexpected: ejected = {ejected}, returned = {returned}, failed calls = {failed}");
        ExitCode::FAILURE
    }
}

/// One replica: a hyper client sending every request to `addr`.
#[derive(Clone)]
struct Replica {
    client: Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
}

impl Replica {
    fn new(addr: SocketAddr) -> Self {
        Replica {
            client: Client::builder(TokioExecutor::new()).build_http(),
            addr,
        }
    }
}

impl Service<Request<Full<Bytes>>> for Replica {
    type Response = Response<Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = hyper_util::client::legacy::ResponseFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Full<Bytes>>) -> Self::Future {
        let uri = format!("http://{}{}", self.addr, request.uri().path());
        if let Ok(uri) = uri.parse() {
            *request.uri_mut() = uri;
        }
        self.client.request(request)
    }
}

/// A replica on 127.0.0.1 answering `status()` to every request.
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
