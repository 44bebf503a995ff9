//! Run with: cargo run -p fusebox-examples --example tonic-client-server
//!
//! fusebox with tonic, on both sides of a gRPC call on 127.0.0.1.
//!
//! - **Server**: `Server::builder().layer(fusebox::tonic::ServerLayer::new(policy))`. The
//!   layer reads the caller's `grpc-timeout` into a deadline the service can see, bounds
//!   the handlers with the policy's timeout and limit, and answers fusebox's own errors as
//!   gRPC statuses.
//! - **Client**: `fusebox::tonic::channel(&policy, channel)`: a circuit breaker around the
//!   `Channel`, judging each call by its `grpc-status` (in the trailers), and a timeout
//!   that turns into DEADLINE_EXCEEDED.
//!
//! The `Prices` service is written by hand over `tonic::server::Grpc` and a prost message
//! (what `tonic-build` would generate), so the example needs no `protoc`. Its `Get` method
//! fails with UNAVAILABLE for its first second; the client's breaker opens, answers UNAVAILABLE
//! itself with a `grpc-retry-pushback-ms` hint, and closes again once probes succeed. The
//! example stops by itself (or on Ctrl-C).

// The example's output is its point.
#![allow(clippy::print_stdout)]

use fusebox::tonic::{RETRY_PUSHBACK_MS, ServerLayer};
use fusebox::{CircuitBreakerConfig, Deadline, Policy};
use http::uri::PathAndQuery;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::body::Body;
use tonic::transport::{Channel, Server};
use tonic::{Code, Status};
use tonic_prost::ProstCodec;

/// `prices.Price`: a price in cents for a SKU.
#[derive(Clone, PartialEq, prost::Message)]
struct Price {
    #[prost(string, tag = "1")]
    sku: String,
    #[prost(uint64, tag = "2")]
    cents: u64,
    /// What was left of the caller's deadline when the server got the call.
    #[prost(uint64, tag = "3")]
    budget_ms: u64,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The `prices.Prices` service: `Get` fails with UNAVAILABLE for its first second.
#[derive(Clone)]
struct Prices {
    started: tokio::time::Instant,
    calls: Arc<AtomicU64>,
}

impl tonic::server::NamedService for Prices {
    const NAME: &'static str = "prices.Prices";
}

impl tower::Service<http::Request<Body>> for Prices {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let prices = self.clone();
        match request.uri().path() {
            "/prices.Prices/Get" => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(ProstCodec::<Price, Price>::default());
                Ok(grpc.unary(GetPrice(prices), request).await)
            }),
            _ => Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) }),
        }
    }
}

struct GetPrice(Prices);

impl tonic::server::UnaryService<Price> for GetPrice {
    type Response = Price;
    type Future = BoxFuture<Result<tonic::Response<Price>, Status>>;

    fn call(&mut self, request: tonic::Request<Price>) -> Self::Future {
        self.0.calls.fetch_add(1, Ordering::SeqCst);
        let warming_up = self.0.started.elapsed() < Duration::from_secs(1);
        // The caller's grpc-timeout, as the server-side policy read it.
        let budget = request
            .extensions()
            .get::<Deadline>()
            .map(|d| d.remaining());
        let sku = request.into_inner().sku;
        Box::pin(async move {
            if warming_up {
                return Err(Status::unavailable("price cache warming up"));
            }
            Ok(tonic::Response::new(Price {
                sku,
                cents: 1999,
                budget_ms: budget.map_or(0, |b| b.as_millis() as u64),
            }))
        })
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tokio::select! {
        code = run() => code,
        _ = tokio::signal::ctrl_c() => ExitCode::SUCCESS,
    }
}

async fn run() -> ExitCode {
    let addr = match serve().await {
        Ok(addr) => addr,
        Err(e) => {
            println!("cannot start the server: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("gRPC server on {addr}");
    let policy = Policy::builder("prices-client")
        .timeout(Duration::from_millis(300))
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .name("prices")
                .count_window(10)
                .minimum_calls(5)
                .failure_rate_threshold(50)
                .open_wait(Duration::from_millis(500))
                .open_wait_jitter(Duration::ZERO)
                .permitted_probes(1),
        )
        .build();
    let policy = match policy {
        Ok(policy) => policy,
        Err(e) => {
            println!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let channel = match Channel::from_shared(format!("http://{addr}")) {
        Ok(endpoint) => endpoint.connect_lazy(),
        Err(e) => {
            println!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let mut grpc = tonic::client::Grpc::new(fusebox::tonic::channel(&policy, channel));

    let (mut rejected, mut answered) = (0, 0);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    for i in 0..30 {
        tick.tick().await;
        if let Err(e) = grpc.ready().await {
            println!("not ready: {e}");
            return ExitCode::FAILURE;
        }
        let mut request = tonic::Request::new(Price {
            sku: format!("sku-{i}"),
            ..Price::default()
        });
        request.set_timeout(Duration::from_millis(250));
        let result = grpc
            .unary(
                request,
                PathAndQuery::from_static("/prices.Prices/Get"),
                ProstCodec::<Price, Price>::default(),
            )
            .await;
        match result {
            Ok(response) => {
                answered += 1;
                let price = response.into_inner();
                println!(
                    "{i:2}: {} costs {} cents (the server saw {} ms of our 250 ms deadline left)",
                    price.sku, price.cents, price.budget_ms
                );
            }
            Err(status) if status.code() == Code::Unavailable => {
                match status.metadata().get(RETRY_PUSHBACK_MS) {
                    Some(pushback) => {
                        rejected += 1;
                        println!(
                            "{i:2}: UNAVAILABLE from the client's breaker (retry in {} ms): {}",
                            pushback.to_str().unwrap_or("?"),
                            status.message()
                        );
                    }
                    None => println!("{i:2}: UNAVAILABLE from the server: {}", status.message()),
                }
            }
            Err(status) => println!("{i:2}: {:?}: {}", status.code(), status.message()),
        }
    }
    let state = policy.breaker_handle().map(|b| b.state());
    println!(
        "breaker now {state:?}; {rejected} calls rejected without being sent, {answered} answered"
    );
    if rejected > 0 && answered > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

async fn serve() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let server_policy = Policy::builder("prices-server")
        .timeout(Duration::from_secs(1))
        .concurrency_limit(64)
        .build()
        .map_err(std::io::Error::other)?;
    let incoming = futures_util::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    });
    let server = Server::builder()
        .layer(ServerLayer::new(server_policy))
        .add_service(Prices {
            started: tokio::time::Instant::now(),
            calls: Arc::new(AtomicU64::new(0)),
        });
    tokio::spawn(server.serve_with_incoming(incoming));
    Ok(addr)
}
