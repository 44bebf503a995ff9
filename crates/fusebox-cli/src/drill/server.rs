//! The flaky dependency: a real HTTP/1 server on 127.0.0.1 that follows the scenario.
//!
//! Each request is answered as the phase at its arrival says: a response drawn from the
//! phase's mix (by weight), after a latency drawn from the response's distribution — or a
//! connection closed without an answer. In a ramped phase the share of requests that
//! follow it grows from 0 to 100 % over the phase; the rest follow the phase before. The
//! dice are seeded, so a scenario replays the same way given the same arrivals.
//!
//! With keys (`traffic.keys`), a request's key is read from the header the client's
//! keyed breaker reads, and the answer names it back in the same header (the shard a
//! server reports, say); a phase that `affects` only the first few keys applies to those
//! keys, the others behaving as in the phase before. With endpoints
//! (`traffic.endpoints`), the dependency runs as that many servers, each on its own port,
//! and `affects` counts endpoints. A capacity (`[dependency] capacity`, per endpoint)
//! makes requests past it wait in line for their turn, and a queue bound answers those
//! past the line 503 at once: a dependency that saturates.
//!
//! The server counts what it saw — arrivals, requests in flight, the most at once, and
//! each request's latency — which is the dependency's side of the drill report.

use crate::scenario::{Reply, Scenario, key_index};
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

/// One request as the dependency saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    /// Arrival, nanoseconds since the drill started.
    pub at: u64,
    /// The latency it was given, nanoseconds.
    pub latency: u64,
    /// The status, or 0 for a reset.
    pub status: u16,
}

#[derive(Debug, Default)]
struct Stats {
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    log: Mutex<Vec<Served>>,
}

/// The running dependency. Dropping it stops the server.
#[derive(Debug)]
pub struct Dependency {
    addrs: Vec<SocketAddr>,
    stats: Arc<Stats>,
    _stop: watch::Sender<()>,
}

struct Shared {
    scenario: Scenario,
    start: Instant,
    rng: Mutex<SmallRng>,
    stats: Arc<Stats>,
    /// The header naming a request's key, with keys.
    key_header: Option<HeaderName>,
}

/// One endpoint: its index (with endpoints) and its line.
struct Endpoint {
    index: Option<u32>,
    slots: Option<Semaphore>,
    waiting: AtomicU64,
}

impl Dependency {
    /// Starts the server on a free port of 127.0.0.1 (one per endpoint, with
    /// `traffic.endpoints`); `start` is the drill's time zero, `key_header` the header
    /// naming a request's key (with `traffic.keys`).
    pub async fn start(
        scenario: &Scenario,
        start: Instant,
        key_header: Option<HeaderName>,
    ) -> std::io::Result<Dependency> {
        let stats = Arc::new(Stats::default());
        let shared = Arc::new(Shared {
            scenario: scenario.clone(),
            start,
            rng: Mutex::new(SmallRng::seed_from_u64(scenario.seed)),
            stats: Arc::clone(&stats),
            key_header: key_header.filter(|_| scenario.traffic.keys.is_some()),
        });
        let (tx, rx) = watch::channel(());
        let indices: Vec<Option<u32>> = match scenario.traffic.endpoints {
            Some(n) => (0..n).map(Some).collect(),
            None => vec![None],
        };
        let mut addrs = Vec::with_capacity(indices.len());
        for index in indices {
            let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
            addrs.push(listener.local_addr()?);
            let capacity = scenario.capacity.capacity;
            let endpoint = Arc::new(Endpoint {
                index,
                slots: capacity.map(|c| Semaphore::new(c as usize)),
                waiting: AtomicU64::new(0),
            });
            serve(listener, Arc::clone(&shared), endpoint, rx.clone());
        }
        Ok(Dependency {
            addrs,
            stats,
            _stop: tx,
        })
    }

    /// Where it listens (the first endpoint's address, with endpoints).
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Where each endpoint listens.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The most requests it handled at once (every endpoint together).
    pub fn max_in_flight(&self) -> u64 {
        self.stats.max_in_flight.load(Ordering::Relaxed)
    }

    /// Every request it received, in order of arrival.
    pub fn served(&self) -> Vec<Served> {
        self.stats.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

/// Accepts connections on `listener` until the drill stops.
fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    endpoint: Arc<Endpoint>,
    mut rx: watch::Receiver<()>,
) {
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(conn) => conn,
                    Err(_) => continue,
                },
                _ = rx.changed() => return,
            };
            let _ = stream.set_nodelay(true);
            let shared = Arc::clone(&shared);
            let endpoint = Arc::clone(&endpoint);
            let mut stop = rx.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let shared = Arc::clone(&shared);
                    let endpoint = Arc::clone(&endpoint);
                    async move { handle(req, &shared, &endpoint).await }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                tokio::select! {
                    _ = conn => {}
                    _ = stop.changed() => {}
                }
            });
        }
    });
}

struct InFlight<'a>(&'a Stats);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Decrements a counter when dropped.
struct Count<'a>(&'a AtomicU64);

impl Drop for Count<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn handle(
    req: Request<Incoming>,
    shared: &Shared,
    endpoint: &Endpoint,
) -> Result<Response<Full<Bytes>>, std::io::Error> {
    // The request's key: its header's value, kept to name it back; its index, for the
    // phases that affect only the first few keys.
    let key: Option<HeaderValue> = shared
        .key_header
        .as_ref()
        .and_then(|h| req.headers().get(h))
        .cloned();
    let part = match &shared.key_header {
        Some(_) => key
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .and_then(key_index),
        None => endpoint.index,
    };
    // A saturated dependency: past its capacity a request waits in line, past the line
    // it is refused at once.
    let _slot = match &endpoint.slots {
        Some(slots) => {
            let waiting = Count(&endpoint.waiting);
            let ahead = endpoint.waiting.fetch_add(1, Ordering::Relaxed);
            let full = slots.available_permits() == 0
                && shared
                    .scenario
                    .capacity
                    .queue
                    .is_some_and(|q| ahead >= u64::from(q));
            if full {
                // Refused: still a request the dependency saw.
                drop(waiting);
                let now = Instant::now().saturating_duration_since(shared.start);
                if let Ok(mut log) = shared.stats.log.lock() {
                    log.push(Served {
                        at: now.as_nanos() as u64,
                        latency: 0,
                        status: StatusCode::SERVICE_UNAVAILABLE.as_u16(),
                    });
                }
                return Ok(answer(shared, StatusCode::SERVICE_UNAVAILABLE, key));
            }
            let permit = slots.acquire().await.ok();
            drop(waiting);
            permit
        }
        None => None,
    };
    let now = Instant::now().saturating_duration_since(shared.start);
    let (reply, latency) = {
        let scenario = &shared.scenario;
        let (i, progress) = scenario.phase_at(now);
        let mut rng = match shared.rng.lock() {
            Ok(r) => r,
            Err(poisoned) => poisoned.into_inner(),
        };
        let i = scenario.phase_for(i, part);
        let phase = if scenario.phases[i].ramp && i > 0 && rng.random::<f64>() >= progress {
            &scenario.phases[scenario.phase_for(i - 1, part)]
        } else {
            &scenario.phases[i]
        };
        let response = phase.pick(rng.random::<f64>());
        let latency = response
            .latency
            .sample(rng.random::<f64>(), rng.random::<f64>());
        (response.reply, latency)
    };
    let stats = &shared.stats;
    let now_in = stats.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
    stats.max_in_flight.fetch_max(now_in, Ordering::Relaxed);
    let _guard = InFlight(stats);
    if let Ok(mut log) = stats.log.lock() {
        log.push(Served {
            at: now.as_nanos() as u64,
            latency: latency.as_nanos() as u64,
            status: match reply {
                Reply::Status(s) => s,
                Reply::Reset => 0,
            },
        });
    }
    if latency > Duration::ZERO {
        tokio::time::sleep(latency).await;
    }
    match reply {
        Reply::Status(status) => Ok(answer(
            shared,
            StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
            key,
        )),
        Reply::Reset => Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "the scenario resets this connection",
        )),
    }
}

/// An answer with `status`, naming the request's `key` back.
fn answer(shared: &Shared, status: StatusCode, key: Option<HeaderValue>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(b"fusebox drill\n")));
    *response.status_mut() = status;
    if let (Some(name), Some(value)) = (&shared.key_header, key) {
        response.headers_mut().insert(name.clone(), value);
    }
    response
}
