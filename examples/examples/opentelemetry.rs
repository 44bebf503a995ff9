//! Run with: cargo run -p fusebox-examples --example opentelemetry
//!
//! fusebox's spans and metrics through OpenTelemetry, printed by OpenTelemetry's stdout
//! exporters (swap in an OTLP exporter to send them to a collector; nothing else changes):
//!
//! - **spans**: `tracing` → `tracing-opentelemetry` → the SDK's tracer provider. fusebox's
//!   `policy_call` span (one per call: `policy`, `route`, `attempts`, `outcome`,
//!   `rejection`, ...) is `DEBUG` under target `fusebox::policy`, so the layer's filter
//!   enables that target at `DEBUG` and every other at `INFO`;
//! - **metrics**: the `metrics` facade → `metrics-exporter-opentelemetry` (a `metrics`
//!   recorder over an OpenTelemetry meter) → the SDK's meter provider. The recorder is
//!   installed *before* the policy is built: each layer registers its metrics when it is
//!   built.
//!
//! A policy with a circuit breaker calls a dependency that fails every call: the breaker
//! opens after its `minimum_calls`, and the calls after that are rejected without reaching
//! the dependency. Shutting the providers down flushes both exporters, which print the
//! spans (the `policy_call` spans and, between them, the breaker's transition event as a
//! span event) and the metrics (`fusebox_breaker_state` at 1, open). The example stops by
//! itself.

// The example's output is its point.
#![allow(clippy::print_stdout)]

use bytes::Bytes;
use fusebox::classify::BoxError;
use fusebox::retry::ReplayBody;
use fusebox::{CircuitBreakerConfig, Policy, trace};
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::convert::Infallible;
use std::time::Duration;
use tower::{Layer, ServiceExt};
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    // Spans: tracing → OpenTelemetry → stdout. fusebox's call span is DEBUG.
    let tracer_provider = SdkTracerProvider::builder()
        .with_simple_exporter(opentelemetry_stdout::SpanExporter::default())
        .build();
    let filter = Targets::new()
        .with_default(LevelFilter::INFO)
        .with_target(trace::POLICY, LevelFilter::DEBUG);
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer_provider.tracer("fusebox-example"))
        .with_filter(filter);
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(otel))?;

    // Metrics: the `metrics` facade → OpenTelemetry → stdout, installed before the policy.
    let (meter_provider, recorder) =
        metrics_exporter_opentelemetry::Recorder::builder("fusebox-example")
            .with_meter_provider(|builder| {
                builder.with_periodic_exporter(opentelemetry_stdout::MetricExporter::default())
            })
            .build();
    metrics::set_global_recorder(recorder)?;

    let outcomes = run_calls().await?;
    println!("calls: {outcomes:?}");

    // Flush: each provider exports what it holds, then stops.
    tracer_provider.shutdown()?;
    meter_provider.shutdown()?;
    Ok(())
}

/// Ten calls through a policy whose dependency fails every one: the breaker opens after
/// four, and rejects the rest.
async fn run_calls() -> Result<Vec<String>, BoxError> {
    let policy = Policy::builder("inventory")
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .count_window(4)
                .minimum_calls(4)
                .failure_rate_threshold(50)
                .open_wait(Duration::from_secs(30)),
        )
        .build()?;
    let dependency = tower::service_fn(|_: Request<ReplayBody<Empty<Bytes>>>| async {
        let mut response = Response::new(Empty::<Bytes>::new());
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        Ok::<_, Infallible>(response)
    });
    let svc = policy.layer(dependency);
    let mut outcomes = Vec::new();
    for i in 0..10 {
        let request =
            Request::get(format!("http://inventory.internal/items/{i}")).body(Empty::new())?;
        let outcome = match svc.clone().oneshot(request).await {
            Ok(response) => response.status().to_string(),
            Err(error) => error.to_string(),
        };
        outcomes.push(outcome);
    }
    Ok(outcomes)
}
