//! fusebox through OpenTelemetry, end to end and in process: spans from `tracing` through
//! `tracing-opentelemetry`, metrics from the `metrics` facade through
//! `metrics-exporter-opentelemetry`, both into the SDK's in-memory exporters (what the
//! `opentelemetry` example does with the stdout ones).
//!
//! A policy's breaker opens on a failing dependency; the exporters then hold the breaker's
//! state gauge at "open" and a `policy_call` span per call, with its fields as attributes
//! and the breaker's transition as an event of the call that opened it.
//!
//! One test in this binary: it installs the process's global `metrics` recorder (the
//! breaker registers some series when they first happen, through the global recorder).

use bytes::Bytes;
use fusebox::breaker::State;
use fusebox::retry::ReplayBody;
use fusebox::{CircuitBreakerConfig, Policy, trace};
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use std::convert::Infallible;
use std::time::Duration;
use tower::{Layer, ServiceExt};
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;

type Body = Empty<Bytes>;

/// The attribute `key` of `attributes`.
fn attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn text(value: &str) -> Value {
    Value::from(value.to_owned())
}

#[tokio::test(start_paused = true)]
async fn a_policy_whose_breaker_opens_is_seen_through_opentelemetry() {
    // Spans: tracing → tracing-opentelemetry → the SDK → memory.
    let spans = InMemorySpanExporter::default();
    let tracer_provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer_provider.tracer("fusebox-tests"))
        .with_filter(LevelFilter::DEBUG);
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(otel));

    // Metrics: the `metrics` facade → OpenTelemetry → memory, before the policy is built.
    let metrics_exporter = InMemoryMetricExporter::default();
    let (meter_provider, recorder) = metrics_exporter_opentelemetry::Recorder::builder("fusebox")
        .with_meter_provider(|builder| {
            builder.with_reader(PeriodicReader::builder(metrics_exporter.clone()).build())
        })
        .build();
    metrics::set_global_recorder(recorder).expect("the only recorder of this process");

    let policy = Policy::builder("inventory")
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .count_window(4)
                .minimum_calls(4)
                .failure_rate_threshold(50)
                .open_wait(Duration::from_secs(30))
                .open_wait_jitter(Duration::ZERO),
        )
        .build()
        .expect("a valid policy");
    let svc = policy.layer(tower::service_fn(|_: Request<ReplayBody<Body>>| async {
        let mut response = Response::new(Empty::<Bytes>::new());
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        Ok::<_, Infallible>(response)
    }));
    // Four 503s open the breaker; the fifth and sixth calls are rejected.
    for i in 0..6 {
        let request = Request::get(format!("http://inventory.internal/items/{i}"))
            .body(Empty::new())
            .expect("a request");
        let answer = svc.clone().oneshot(request).await;
        match (i < 4, answer) {
            (true, Ok(response)) => assert_eq!(response.status(), 503),
            (false, Err(error)) => assert!(error.is::<fusebox::error::CircuitOpen>(), "{error}"),
            (_, answer) => panic!("call {i}: {:?}", answer.map(|r| r.status())),
        }
    }
    tracer_provider.force_flush().expect("spans flushed");
    meter_provider.force_flush().expect("metrics flushed");

    // The breaker's state gauge, found by the name fusebox publishes, reads open.
    let exported = metrics_exporter.get_finished_metrics().expect("metrics");
    let state: Vec<(f64, Vec<KeyValue>)> = exported
        .iter()
        .flat_map(|resource| resource.scope_metrics())
        .flat_map(|scope| scope.metrics())
        .filter(|metric| metric.name() == fusebox::metrics::BREAKER_STATE)
        .flat_map(|metric| match metric.data() {
            AggregatedMetrics::F64(MetricData::Gauge(gauge)) => gauge
                .data_points()
                .map(|point| (point.value(), point.attributes().cloned().collect()))
                .collect::<Vec<_>>(),
            other => panic!("the breaker's state is a gauge: {other:?}"),
        })
        .collect();
    assert!(
        state.iter().any(|(value, attributes)| {
            *value == f64::from(State::Open.code())
                && attributes.iter().any(|kv| kv.value == text("inventory"))
        }),
        "the state gauge reads open for the policy's breaker: {state:?}"
    );

    // One span per call, with the policy's fields as attributes.
    let finished = spans.get_finished_spans().expect("spans");
    let calls: Vec<&SpanData> = finished
        .iter()
        .filter(|span| span.name == trace::POLICY_CALL)
        .collect();
    assert_eq!(calls.len(), 6, "{finished:#?}");
    for (i, call) in calls.iter().enumerate() {
        let attributes = &call.attributes;
        assert_eq!(attribute(attributes, "policy"), Some(&text("inventory")));
        assert_eq!(attribute(attributes, "route"), Some(&text("default")));
        assert_eq!(attribute(attributes, "attempts"), Some(&Value::I64(1)));
        if i < 4 {
            assert_eq!(attribute(attributes, "outcome"), Some(&text("failure")));
            assert_eq!(attribute(attributes, "status"), Some(&Value::I64(503)));
            assert_eq!(attribute(attributes, "rejection"), None);
        } else {
            assert_eq!(attribute(attributes, "outcome"), Some(&text("rejected")));
            assert_eq!(
                attribute(attributes, "rejection"),
                Some(&text("circuit_open"))
            );
            assert_eq!(attribute(attributes, "status"), None);
        }
    }
    // The fourth call opened the breaker: its transition is an event of that call's span.
    let opened: Vec<usize> = calls
        .iter()
        .enumerate()
        .filter(|(_, call)| {
            call.events.iter().any(|event| {
                attribute(&event.attributes, "to") == Some(&text("open"))
                    && attribute(&event.attributes, "from") == Some(&text("closed"))
            })
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(opened, [3], "the transition belongs to the fourth call");

    tracer_provider.shutdown().expect("spans shut down");
    meter_provider.shutdown().expect("metrics shut down");
}
