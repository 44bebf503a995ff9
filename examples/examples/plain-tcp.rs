//! Run with: cargo run -p fusebox-examples --example plain-tcp
//!
//! fusebox's breaker around a client that is not HTTP: a line-protocol key-value lookup
//! over TCP to a server on 127.0.0.1 (`get <key>` → `<value>`), wrapped with
//! `CircuitBreakerLayer::new(config).plain()`.
//!
//! The server runs for 1.5 s, goes away for 2 s (its port refuses connections), then comes
//! back on the same port. The client looks a key up every 50 ms. Refused connections are
//! failures by the default classification, so the breaker opens; while open it rejects
//! lookups without connecting; after its open wait it lets one probe through, re-opens
//! while the server is still down, and closes once a probe gets an answer.
//!
//! The run stops by itself after 6 s (or on Ctrl-C) and exits 0 only if the breaker opened
//! and closed again.

// The example's output is its point.
#![allow(clippy::print_stdout)]

use fusebox::breaker::{EventKind, State};
use fusebox::error::CircuitOpen;
use fusebox::{CircuitBreakerConfig, CircuitBreakerLayer};
use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tower::{Service, ServiceBuilder, ServiceExt};

const DOWN_AT: Duration = Duration::from_millis(1500);
const UP_AT: Duration = Duration::from_millis(3500);
const RUN_FOR: Duration = Duration::from_secs(6);
const LOOKUP_EVERY: Duration = Duration::from_millis(50);

/// Answers `get <key>` with `value-of-<key>`, one lookup per connection.
fn serve(listener: TcpListener) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut line = String::new();
                if BufReader::new(read).read_line(&mut line).await.is_ok() {
                    let key = line.trim().trim_start_matches("get ");
                    let _ = write
                        .write_all(format!("value-of-{key}\n").as_bytes())
                        .await;
                }
            });
        }
    })
}

/// The client: one connection per lookup.
fn lookup(addr: SocketAddr) -> impl Service<String, Response = String, Error = io::Error> + Clone {
    tower::service_fn(move |key: String| async move {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(format!("get {key}\n").as_bytes()).await?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).await?;
        Ok(line.trim_end().to_owned())
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let listener = match TcpListener::bind("127.0.0.1:0").await {
        Ok(listener) => listener,
        Err(e) => {
            println!("cannot listen on 127.0.0.1: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Ok(addr) = listener.local_addr() else {
        println!("the listener has no address");
        return ExitCode::FAILURE;
    };
    let mut server = Some(serve(listener));

    let config = match CircuitBreakerConfig::builder()
        .name("kv-lookup")
        .count_window(10)
        .minimum_calls(5)
        .failure_rate_threshold(50)
        .open_wait(Duration::from_millis(500))
        .open_wait_jitter(Duration::from_millis(100))
        .permitted_probes(1)
        .build()
    {
        Ok(config) => config,
        Err(e) => {
            println!("invalid configuration: {e}");
            return ExitCode::FAILURE;
        }
    };
    let layer = CircuitBreakerLayer::new(config).plain();
    let handle = layer.handle();
    let mut events = handle.subscribe();
    let mut client = ServiceBuilder::new().layer(layer).service(lookup(addr));

    println!("kv server on {addr}: up until {DOWN_AT:?}, down until {UP_AT:?}, then up");
    let started = Instant::now();
    let (mut answered, mut failed, mut rejected) = (0_u32, 0_u32, 0_u32);
    let mut opened = false;
    let mut closed_after_opening = false;
    let mut tick = tokio::time::interval(LOOKUP_EVERY);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut n = 0_u32;
    while started.elapsed() < RUN_FOR {
        tokio::select! {
            _ = tick.tick() => {}
            _ = &mut ctrl_c => {
                println!("interrupted");
                break;
            }
        }
        let t = started.elapsed();
        if t >= DOWN_AT && t < UP_AT {
            if let Some(server) = server.take() {
                server.abort();
                let _ = server.await;
                println!("{:>6.2}s  server stopped", t.as_secs_f64());
            }
        } else if t >= UP_AT && server.is_none() {
            match TcpListener::bind(addr).await {
                Ok(listener) => {
                    server = Some(serve(listener));
                    println!("{:>6.2}s  server back on {addr}", t.as_secs_f64());
                }
                Err(e) => println!(
                    "{:>6.2}s  cannot listen on {addr} yet: {e}",
                    t.as_secs_f64()
                ),
            }
        }

        n += 1;
        let result = match client.ready().await {
            Ok(ready) => ready.call(format!("k{n}")).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(_) => answered += 1,
            Err(e) if e.is::<CircuitOpen>() => rejected += 1,
            Err(_) => failed += 1,
        }

        while let Ok(event) = events.try_recv() {
            if let EventKind::Transition(tr) = event.kind {
                println!(
                    "{:>6.2}s  {} -> {} ({}; window: {} calls, {} failed)",
                    t.as_secs_f64(),
                    tr.from,
                    tr.to,
                    tr.reason,
                    tr.window.calls,
                    tr.window.failures
                );
                opened |= tr.to == State::Open;
                closed_after_opening |= opened && tr.to == State::Closed;
            }
        }
    }

    println!(
        "{n} lookups: {answered} answered, {failed} failed (refused), {rejected} rejected by the breaker without connecting; final state {}",
        handle.state()
    );
    if opened && closed_after_opening && handle.state() == State::Closed {
        println!("ok: the breaker opened while the server was down and closed once it was back");
        ExitCode::SUCCESS
    } else {
        println!("FAILED: expected the breaker to open and close again");
        ExitCode::FAILURE
    }
}
