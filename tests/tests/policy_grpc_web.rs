//! gRPC-Web answers from a real HTTP server on 127.0.0.1, through a hyper-util client behind a
//! Policy: the status comes in a trailer frame at the end of the body (binary, `+json` and
//! base64 `-text` bodies), or in the headers of a trailers-only answer. Healthy streams are
//! successes; `grpc-status: 14` is a failure that opens the breaker. Paused time.

use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use fusebox::error::CircuitOpen;
use fusebox::{CircuitBreakerConfig, Policy};
use fusebox_tests::grpc_web::{base64, frame};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;
use tower::ServiceExt;

/// A gRPC-Web answer: `messages` then a trailer frame with `status`, in `content_type`,
/// streamed in small chunks so that frames are split across them. `/text` bodies are
/// base64, each frame padded on its own; `/only` answers are trailers-only.
async fn answer(Path((encoding, status)): Path<(String, u8)>) -> Response {
    let trailer = format!("grpc-status: {status}\r\ngrpc-message: \r\n");
    let frames = [
        frame(0, b"\x0a\x05hello"),
        frame(0, b""),
        frame(0x80, trailer.as_bytes()),
    ];
    let (content_type, body): (&str, Vec<u8>) = match encoding.as_str() {
        "proto" => ("application/grpc-web+proto", frames.concat()),
        "json" => ("application/grpc-web+json", frames.concat()),
        "bare" => ("application/grpc-web", frames.concat()),
        "text" => (
            "application/grpc-web-text",
            frames.iter().flat_map(|f| base64(f)).collect(),
        ),
        _ => {
            return Response::builder()
                .header("content-type", "application/grpc-web+proto")
                .header("grpc-status", status.to_string())
                .body(Body::empty())
                .expect("a response");
        }
    };
    let chunks: Vec<Result<Bytes, Infallible>> = body
        .chunks(7)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Response::builder()
        .header("content-type", content_type)
        .body(Body::from_stream(futures_util::stream::iter(chunks)))
        .expect("a response")
}

async fn serve() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("a bound address");
    let app = Router::new().route("/{encoding}/{status}", post(answer));
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn call(addr: SocketAddr, encoding: &str, status: u8) -> Request<Full<Bytes>> {
    Request::post(format!("http://{addr}/{encoding}/{status}"))
        .header("content-type", "application/grpc-web+proto")
        .body(Full::new(Bytes::from_static(b"\0\0\0\0\0")))
        .expect("a valid request")
}

/// A breaker that opens after 4 calls at 50 % failures.
fn policy() -> Policy {
    Policy::builder("web")
        .circuit_breaker(
            CircuitBreakerConfig::builder()
                .name("web")
                .count_window(4)
                .minimum_calls(4)
                .failure_rate_threshold(50)
                .open_wait(Duration::from_secs(60))
                .open_wait_jitter(Duration::ZERO),
        )
        .timeout(Duration::from_secs(5))
        .build()
        .expect("a valid policy")
}

#[tokio::test(start_paused = true)]
async fn healthy_grpc_web_streams_are_successes() {
    let addr = serve().await;
    let policy = policy();
    let client = fusebox::hyper::wrap(&policy);
    let handle = policy.breaker_handle().expect("a breaker");
    for round in 0..5 {
        for encoding in ["proto", "json", "bare", "text"] {
            let response = client
                .clone()
                .oneshot(call(addr, encoding, 0))
                .await
                .unwrap_or_else(|e| panic!("{encoding}: {e}"));
            assert_eq!(response.status(), StatusCode::OK);
            let body = response.into_body().collect().await.expect("a whole body");
            assert!(body.trailers().is_none(), "gRPC-Web sends no HTTP trailers");
            let window = handle.snapshot().window;
            assert_eq!(window.failures, 0, "{encoding}, round {round}: {window:?}");
        }
    }
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, fusebox::breaker::State::Closed);
    assert_eq!(
        snapshot.window.calls, 4,
        "every stream was counted, as a success"
    );
}

#[tokio::test(start_paused = true)]
async fn unavailable_in_the_trailer_frame_opens_the_breaker() {
    for encoding in ["proto", "json", "text", "only"] {
        let addr = serve().await;
        let policy = policy();
        let client = fusebox::hyper::wrap(&policy);
        let handle = policy.breaker_handle().expect("a breaker");
        for _ in 0..4 {
            let response = client
                .clone()
                .oneshot(call(addr, encoding, 14))
                .await
                .expect("an answer");
            assert_eq!(response.status(), StatusCode::OK, "gRPC-Web answers 200");
            response.into_body().collect().await.expect("a whole body");
        }
        assert_eq!(handle.snapshot().window.failures, 4, "{encoding}");
        let err = client
            .clone()
            .oneshot(call(addr, encoding, 0))
            .await
            .expect_err("open");
        assert!(err.is::<CircuitOpen>(), "{encoding}: {err}");
    }
}
