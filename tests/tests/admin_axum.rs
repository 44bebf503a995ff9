//! The admin router on a real axum server on 127.0.0.1: commands without the credential,
//! with a wrong one and with the right one (only the last changes a breaker, read back
//! through the registry), the listing and readiness as JSON, and the log of every change,
//! which names who asked and never shows the secret.

use axum::Router;
use bytes::Bytes;
use fusebox::admin::{AdminRouter, Credential, readiness_router};
use fusebox::breaker::State;
use fusebox::{CircuitBreakerConfig, KeyBy, Policy, Registry};
use fusebox_tests::client;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;

const SECRET: &str = "s3cr3t-t0ken-value";

async fn serve(app: Router) -> SocketAddr {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("bound address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: &str,
) -> (StatusCode, serde_json::Value) {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(auth) = auth {
        request = request.header(header::AUTHORIZATION, auth);
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("a valid request");
    let response = client().request(request).await.expect("the server answers");
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    let json = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    (status, json)
}

/// A log of everything `fusebox::admin` writes, as text.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("the log").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("the log")).into_owned()
    }
}

fn state(registry: &Registry, name: &str) -> State {
    registry
        .list()
        .entries
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.breaker.as_ref())
        .and_then(|b| b.current.as_ref())
        .map(|s| s.state)
        .expect("a listed breaker")
}

// A current-thread runtime: the server's tasks run on this thread, under the log
// subscriber set for it.
#[tokio::test]
async fn only_the_right_credential_changes_a_breaker_and_every_change_is_logged() {
    let log = Log::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let registry = Registry::new();
    let payments = Policy::builder("payments")
        .circuit_breaker(CircuitBreakerConfig::builder())
        .registry(&registry)
        .build()
        .unwrap();
    let admin = AdminRouter::new(registry.clone(), Credential::bearer("ops-team", SECRET));
    let app = Router::new().nest("/admin", admin.into_router());
    let addr = serve(app).await;
    let force_open = r#"{"name": "payments", "command": "force_open"}"#;

    // No credential.
    let (status, _) = send(addr, "POST", "/admin/breakers/command", None, force_open).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(state(&registry, "payments"), State::Closed);

    // A wrong one, a wrong scheme, an empty one, the right one with a byte more.
    for auth in [
        "Bearer not-the-secret",
        &format!("Basic {SECRET}"),
        "Bearer ",
        &format!("Bearer {SECRET}x"),
        SECRET,
    ] {
        let (status, _) = send(
            addr,
            "POST",
            "/admin/breakers/command",
            Some(auth),
            force_open,
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{auth:?}");
        assert_eq!(state(&registry, "payments"), State::Closed, "{auth:?}");
    }

    // The right one.
    let bearer = format!("Bearer {SECRET}");
    let (status, body) = send(
        addr,
        "POST",
        "/admin/breakers/command",
        Some(&bearer),
        force_open,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["from"], "closed");
    assert_eq!(body["to"], "forced_open");
    assert_eq!(body["by"], "ops-team");
    assert_eq!(state(&registry, "payments"), State::ForcedOpen);
    assert_eq!(
        payments.breaker_handle().unwrap().state(),
        State::ForcedOpen
    );

    // Every operator state, by the right credential (the scheme's name in any case).
    for (command, want) in [
        ("disable", State::Disabled),
        ("metrics_only", State::MetricsOnly),
        ("reset", State::Closed),
    ] {
        let body = format!(r#"{{"name": "payments", "command": "{command}"}}"#);
        let auth = format!("bearer {SECRET}");
        let (status, _) = send(addr, "POST", "/admin/breakers/command", Some(&auth), &body).await;
        assert_eq!(status, StatusCode::OK, "{command}");
        assert_eq!(state(&registry, "payments"), want, "{command}");
    }

    // Refusals that do not touch a breaker: unknown names, bad bodies.
    let (status, _) = send(
        addr,
        "POST",
        "/admin/breakers/command",
        Some(&bearer),
        r#"{"name": "nope", "command": "reset"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = send(
        addr,
        "POST",
        "/admin/breakers/command",
        Some(&bearer),
        r#"{"name": "payments", "command": "explode"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(state(&registry, "payments"), State::Closed);

    // The listing, without the credential (reads are open unless protected).
    let (status, listing) = send(addr, "GET", "/admin/breakers", None, "").await;
    assert_eq!(status, StatusCode::OK);
    let entry = &listing["entries"][0];
    assert_eq!(entry["name"], "payments");
    assert_eq!(entry["kind"], "policy");
    assert_eq!(entry["breaker"]["current"]["state"], "closed");
    assert_eq!(entry["breaker"]["config"]["failure_rate_threshold"], 50);

    // The log: who asked, what changed, and never the secret.
    let text = log.text();
    assert!(text.contains("fusebox::admin"), "{text}");
    assert!(
        text.contains("by=\"ops-team\"") || text.contains("by=ops-team"),
        "{text}"
    );
    assert!(text.contains("forced_open"), "{text}");
    assert!(text.contains("wrong credential"), "{text}");
    assert!(text.contains("missing credential"), "{text}");
    assert_eq!(
        text.matches("breaker commanded").count(),
        4,
        "one line per change: {text}"
    );
    assert!(!text.contains(SECRET), "the secret is never logged: {text}");
    assert!(
        !text.contains("not-the-secret"),
        "nor what a refused request presented: {text}"
    );
}

#[tokio::test]
async fn protected_reads_a_custom_header_and_readiness() {
    let registry = Registry::new();
    registry.require("partners");
    let partners = Policy::builder("partners")
        .circuit_breaker(CircuitBreakerConfig::builder())
        .breaker_key(KeyBy::Host)
        .registry(&registry)
        .build()
        .unwrap();
    let credential = Credential::header(
        "deploy-bot",
        http::HeaderName::from_static("x-admin-token"),
        SECRET,
    );
    let app = Router::new()
        .nest(
            "/admin",
            AdminRouter::new(registry.clone(), credential)
                .protect_reads(true)
                .into_router(),
        )
        .merge(readiness_router(registry.clone()));
    let addr = serve(app).await;

    let (status, _) = send(addr, "GET", "/admin/breakers", None, "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "reads are protected");
    let (status, _) = send(
        addr,
        "GET",
        "/admin/breakers",
        Some(&format!("Bearer {SECRET}")),
        "",
    )
    .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "the secret goes in its own header"
    );

    let request = Request::get(format!("http://{addr}/admin/breakers"))
        .header("x-admin-token", SECRET)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = client().request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    // Readiness: no key yet means nothing is known to be open.
    let (status, body) = send(addr, "GET", "/ready", None, "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["ready"], true);

    // A keyed breaker commanded without a key is refused, and changes nothing.
    let request = Request::post(format!("http://{addr}/admin/breakers/command"))
        .header("x-admin-token", SECRET)
        .body(Full::new(Bytes::from_static(
            br#"{"name": "partners", "command": "force_open"}"#,
        )))
        .unwrap();
    let response = client().request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(partners.keyed_breaker_handle().unwrap().is_empty());

    // An unregistered mandatory dependency makes readiness fail.
    drop(partners);
    let (status, body) = send(addr, "GET", "/ready", None, "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["not_ready"][0]["name"], "partners");
    assert_eq!(body["not_ready"][0]["reason"], "not_registered");
}
