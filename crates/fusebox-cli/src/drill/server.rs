//! The flaky dependency: a real HTTP/1 server on 127.0.0.1 that follows the scenario.
//!
//! Each request is answered as the phase at its arrival says: a response drawn from the
//! phase's mix (by weight), after a latency drawn from the response's distribution — or a
//! connection closed without an answer. In a ramped phase the share of requests that
//! follow it grows from 0 to 100 % over the phase; the rest follow the phase before. The
//! dice are seeded, so a scenario replays the same way given the same arrivals.
//!
//! The server counts what it saw — arrivals, requests in flight, the most at once, and
//! each request's latency — which is the dependency's side of the drill report.

use crate::scenario::{Reply, Scenario};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
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
use tokio::sync::watch;
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
    addr: SocketAddr,
    stats: Arc<Stats>,
    _stop: watch::Sender<()>,
}

struct Shared {
    scenario: Scenario,
    start: Instant,
    rng: Mutex<SmallRng>,
    stats: Arc<Stats>,
}

impl Dependency {
    /// Starts the server on a free port of 127.0.0.1; `start` is the drill's time zero.
    pub async fn start(scenario: &Scenario, start: Instant) -> std::io::Result<Dependency> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(Stats::default());
        let shared = Arc::new(Shared {
            scenario: scenario.clone(),
            start,
            rng: Mutex::new(SmallRng::seed_from_u64(scenario.seed)),
            stats: Arc::clone(&stats),
        });
        let (tx, mut rx) = watch::channel(());
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
                let mut stop = rx.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let shared = Arc::clone(&shared);
                        async move { handle(req, &shared).await }
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
        Ok(Dependency {
            addr,
            stats,
            _stop: tx,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The most requests it handled at once.
    pub fn max_in_flight(&self) -> u64 {
        self.stats.max_in_flight.load(Ordering::Relaxed)
    }

    /// Every request it received, in order of arrival.
    pub fn served(&self) -> Vec<Served> {
        self.stats.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

struct InFlight<'a>(&'a Stats);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn handle(
    _req: Request<Incoming>,
    shared: &Shared,
) -> Result<Response<Full<Bytes>>, std::io::Error> {
    let now = Instant::now().saturating_duration_since(shared.start);
    let (reply, latency) = {
        let scenario = &shared.scenario;
        let (i, progress) = scenario.phase_at(now);
        let mut rng = match shared.rng.lock() {
            Ok(r) => r,
            Err(poisoned) => poisoned.into_inner(),
        };
        let phase = if scenario.phases[i].ramp && i > 0 && rng.random::<f64>() >= progress {
            &scenario.phases[i - 1]
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
        Reply::Status(status) => {
            let mut response = Response::new(Full::new(Bytes::from_static(b"fusebox drill\n")));
            *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            Ok(response)
        }
        Reply::Reset => Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "the scenario resets this connection",
        )),
    }
}
