//! Test support for fusebox's cross-crate tests: a real hyper server on 127.0.0.1 whose
//! behaviour the test controls and whose view of the traffic the test can read, and a
//! hyper client to call it.
//!
//! Run the tests in a runtime with paused time (`#[tokio::test(start_paused = true)]`):
//! the server lives in the same runtime, so injected latency is paused time too, and a
//! drill that spans minutes of open waits finishes in milliseconds.

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub mod alloc;
pub mod capture;
pub mod dependency;
pub mod redis_server;

/// What the reload tests read of a reload's report.
pub mod reload {
    use fusebox::reload::{Effect, Reload};

    /// How `report` applied the change at `path` (there must be one).
    pub fn effect_at(report: &Reload, path: &str) -> Effect {
        report
            .changes
            .iter()
            .find(|c| c.path == path)
            .unwrap_or_else(|| panic!("{path}: {report}"))
            .effect
            .clone()
    }
}

/// gRPC-Web bodies for the tests that serve them.
pub mod grpc_web {
    /// A gRPC-Web frame: `flags` (`0x80` for the trailer frame), the payload's length, the
    /// payload.
    pub fn frame(flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![flags];
        f.extend_from_slice(
            &u32::try_from(payload.len())
                .expect("a short payload")
                .to_be_bytes(),
        );
        f.extend_from_slice(payload);
        f
    }

    /// Standard base64 with padding, as gRPC-Web text bodies are written.
    pub fn base64(bytes: &[u8]) -> Vec<u8> {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .encode(bytes)
            .into_bytes()
    }
}

/// What the server does with the next request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Answers with this status after `latency`, with these extra headers.
    Status {
        /// The status code.
        status: u16,
        /// How long the server takes (paused time in tests).
        latency: Duration,
        /// Extra response headers, e.g. `("retry-after", "2")`.
        headers: Vec<(String, String)>,
    },
    /// Closes the connection without answering (the client sees a reset / incomplete
    /// message), after `latency`.
    Reset {
        /// How long before the connection is dropped.
        latency: Duration,
    },
}

impl Reply {
    /// `status` at once.
    pub fn status(status: u16) -> Reply {
        Reply::Status {
            status,
            latency: Duration::ZERO,
            headers: Vec::new(),
        }
    }

    /// `status` after `latency`.
    pub fn slow(status: u16, latency: Duration) -> Reply {
        Reply::Status {
            status,
            latency,
            headers: Vec::new(),
        }
    }

    /// Adds a response header.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::Status { headers, .. } = &mut self {
            headers.push((name.to_owned(), value.to_owned()));
        }
        self
    }
}

/// Decides the reply to each request: from its method, path, headers and arrival number
/// (0-based, over the server's life).
pub type Behaviour = Arc<dyn Fn(&RequestSeen, usize) -> Reply + Send + Sync>;

/// What the server saw of one request.
#[derive(Debug, Clone)]
pub struct RequestSeen {
    /// The method.
    pub method: http::Method,
    /// The path and query.
    pub path: String,
    /// The request headers.
    pub headers: HeaderMap,
    /// The request body.
    pub body: Bytes,
}

#[derive(Default)]
struct Stats {
    received: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    completed: AtomicUsize,
    log: Mutex<Vec<RequestSeen>>,
    by_path: Mutex<HashMap<String, usize>>,
}

/// A real HTTP/1 + HTTP/2 server on 127.0.0.1 (a free port), serving until dropped.
pub struct TestServer {
    addr: SocketAddr,
    behaviour: Arc<Mutex<Behaviour>>,
    stats: Arc<Stats>,
    _shutdown: watch::Sender<()>,
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl TestServer {
    /// Starts a server that answers every request with `reply`.
    pub async fn start(reply: Reply) -> TestServer {
        Self::with_behaviour(Arc::new(move |_: &RequestSeen, _| reply.clone())).await
    }

    /// Starts a server whose replies `behaviour` decides.
    pub async fn with_behaviour(behaviour: Behaviour) -> TestServer {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("bound address");
        let behaviour = Arc::new(Mutex::new(behaviour));
        let stats = Arc::new(Stats::default());
        let (tx, mut rx) = watch::channel(());
        let (b, s) = (Arc::clone(&behaviour), Arc::clone(&stats));
        tokio::spawn(async move {
            loop {
                let (stream, _) = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok(conn) => conn,
                        Err(_) => continue,
                    },
                    _ = rx.changed() => return,
                };
                let (b, s) = (Arc::clone(&b), Arc::clone(&s));
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (b, s) = (Arc::clone(&b), Arc::clone(&s));
                        async move { handle(req, b, s).await }
                    });
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let _ = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        TestServer {
            addr,
            behaviour,
            stats,
            _shutdown: tx,
        }
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Replaces the behaviour (takes effect for the next request).
    pub fn set(&self, reply: Reply) {
        self.set_behaviour(Arc::new(move |_: &RequestSeen, _| reply.clone()));
    }

    /// Replaces the behaviour with a function.
    pub fn set_behaviour(&self, behaviour: Behaviour) {
        *self.behaviour.lock().expect("behaviour lock") = behaviour;
    }

    /// Requests that reached the server.
    pub fn received(&self) -> usize {
        self.stats.received.load(Ordering::SeqCst)
    }

    /// Requests the server finished answering (or resetting).
    pub fn completed(&self) -> usize {
        self.stats.completed.load(Ordering::SeqCst)
    }

    /// Requests being handled now.
    pub fn in_flight(&self) -> usize {
        self.stats.in_flight.load(Ordering::SeqCst)
    }

    /// The most requests ever handled at once.
    pub fn max_in_flight(&self) -> usize {
        self.stats.max_in_flight.load(Ordering::SeqCst)
    }

    /// Requests received on `path`.
    pub fn received_on(&self, path: &str) -> usize {
        let by_path = self.stats.by_path.lock().expect("stats lock");
        by_path.get(path).copied().unwrap_or(0)
    }

    /// Every request received, in order of arrival.
    pub fn requests(&self) -> Vec<RequestSeen> {
        self.stats.log.lock().expect("stats lock").clone()
    }
}

async fn handle(
    req: Request<Incoming>,
    behaviour: Arc<Mutex<Behaviour>>,
    stats: Arc<Stats>,
) -> Result<Response<Full<Bytes>>, std::io::Error> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let seen = RequestSeen {
        method: parts.method,
        path: parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_default(),
        headers: parts.headers,
        body,
    };
    let n = stats.received.fetch_add(1, Ordering::SeqCst);
    let now = stats.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    stats.max_in_flight.fetch_max(now, Ordering::SeqCst);
    *stats
        .by_path
        .lock()
        .expect("stats lock")
        .entry(seen.path.split('?').next().unwrap_or("").to_owned())
        .or_default() += 1;
    let reply = {
        let f = behaviour.lock().expect("behaviour lock").clone();
        f(&seen, n)
    };
    stats.log.lock().expect("stats lock").push(seen);
    // Count the request out even if the client gives up and the handler is dropped.
    let _guard = InFlight(Arc::clone(&stats));
    match reply {
        Reply::Status {
            status,
            latency,
            headers,
        } => {
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            let mut response = Response::new(Full::new(Bytes::from_static(b"ok")));
            *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            for (k, v) in headers {
                if let (Ok(k), Ok(v)) = (
                    http::HeaderName::from_bytes(k.as_bytes()),
                    http::HeaderValue::from_str(&v),
                ) {
                    response.headers_mut().append(k, v);
                }
            }
            Ok(response)
        }
        Reply::Reset { latency } => {
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "injected reset",
            ))
        }
    }
}

struct InFlight(Arc<Stats>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.completed.fetch_add(1, Ordering::SeqCst);
    }
}

/// A plain hyper-util client (HTTP/1, pooled) for calling a [`TestServer`].
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A new client.
pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A GET request to `url` with an empty body.
pub fn get(url: &str) -> Request<Full<Bytes>> {
    Request::get(url)
        .body(Full::new(Bytes::new()))
        .expect("a valid URL")
}

/// A breaker that opens after 4 calls at 50 % failures (a count window of 4) and stays open
/// for a minute, without jitter.
pub fn four_call_breaker(name: &str) -> fusebox::breaker::CircuitBreakerConfigBuilder {
    fusebox::CircuitBreakerConfig::builder()
        .name(name)
        .count_window(4)
        .minimum_calls(4)
        .failure_rate_threshold(50)
        .open_wait(Duration::from_secs(60))
        .open_wait_jitter(Duration::ZERO)
}

/// An address on 127.0.0.1 where nothing listens (a port bound and released at once), for
/// drills of a dependency that refuses connections.
pub async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind 127.0.0.1:0");
    listener.local_addr().expect("bound address")
}

// Every Rust snippet of the repository's README runs as a doctest of this crate, which
// depends on the facade with every feature. Not in the facade itself: its rustdoc (the
// docs.rs page) keeps an introduction of its own, and the README, which is the facade's
// crates.io page, would have to be included from outside its package. `.ci/package` runs
// the same snippets against the packaged crates.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
