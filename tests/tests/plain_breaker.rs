//! The breaker for any service (`CircuitBreakerLayer::plain`) around a client that is not
//! HTTP: a line-protocol lookup over real TCP connections to a server on 127.0.0.1, which
//! the test stops and starts again on the same port.
//!
//! While the server is down, connecting fails with "connection refused", a failure by the
//! default classification, and the breaker opens. While open it rejects calls without
//! connecting (the client counts its connection attempts). After the open wait (paused
//! time, advanced by hand) one probe goes out; the server is back and answers it, and the
//! breaker closes.

use fusebox::breaker::State;
use fusebox::error::CircuitOpen;
use fusebox::{CircuitBreakerConfig, CircuitBreakerLayer};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tower::{Layer, Service, ServiceExt};

const OPEN_WAIT: Duration = Duration::from_secs(10);

/// Serves `get <key>` lines with `value-of-<key>`, one request per connection, counting
/// the requests it answered.
fn serve(listener: TcpListener, answered: Arc<AtomicUsize>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let answered = Arc::clone(&answered);
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut line = String::new();
                if BufReader::new(read).read_line(&mut line).await.is_ok() {
                    let key = line.trim().trim_start_matches("get ");
                    answered.fetch_add(1, Ordering::SeqCst);
                    let _ = write
                        .write_all(format!("value-of-{key}\n").as_bytes())
                        .await;
                }
            });
        }
    })
}

/// The client: one connection per lookup, counting its connection attempts.
fn lookup(
    addr: SocketAddr,
    attempts: Arc<AtomicUsize>,
) -> impl Service<String, Response = String, Error = io::Error> + Clone {
    tower::service_fn(move |key: String| {
        let attempts = Arc::clone(&attempts);
        async move {
            attempts.fetch_add(1, Ordering::SeqCst);
            let mut stream = TcpStream::connect(addr).await?;
            stream.write_all(format!("get {key}\n").as_bytes()).await?;
            let mut line = String::new();
            BufReader::new(stream).read_line(&mut line).await?;
            Ok(line.trim_end().to_owned())
        }
    })
}

#[tokio::test(start_paused = true)]
async fn opens_on_refused_connections_rejects_without_connecting_and_closes_on_a_probe() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
    let addr = listener.local_addr().expect("its address");
    let answered = Arc::new(AtomicUsize::new(0));
    let server = serve(listener, Arc::clone(&answered));

    let layer = CircuitBreakerLayer::new(
        CircuitBreakerConfig::builder()
            .name("lookup")
            .count_window(4)
            .minimum_calls(4)
            .failure_rate_threshold(50)
            .open_wait(OPEN_WAIT)
            .open_wait_jitter(Duration::ZERO)
            .permitted_probes(1)
            .build()
            .expect("a valid config"),
    )
    .plain();
    let handle = layer.handle();
    let attempts = Arc::new(AtomicUsize::new(0));
    let mut client = layer.layer(lookup(addr, Arc::clone(&attempts)));

    // Healthy: answers from the server.
    for key in ["a", "b", "c", "d"] {
        let value = client.ready().await.unwrap().call(key.into()).await;
        assert_eq!(value.expect("an answer"), format!("value-of-{key}"));
    }
    assert_eq!(answered.load(Ordering::SeqCst), 4);
    assert_eq!(handle.snapshot().window.calls, 4);

    // The server goes away: its port refuses connections.
    server.abort();
    let _ = server.await;
    for _ in 0..2 {
        let err = client.ready().await.unwrap().call("e".into()).await;
        let err = err.expect_err("refused");
        let io = err
            .downcast_ref::<io::Error>()
            .expect("the client's own error");
        assert_eq!(io.kind(), io::ErrorKind::ConnectionRefused);
    }
    let snapshot = handle.snapshot();
    assert_eq!(
        snapshot.state,
        State::Open,
        "2 refusals in the last 4 calls"
    );
    assert_eq!(snapshot.window.failures, 2);

    // Open: rejected at once, nothing sent.
    let before = attempts.load(Ordering::SeqCst);
    for _ in 0..5 {
        let err = client.ready().await.unwrap().call("f".into()).await;
        let open = err.expect_err("rejected");
        let open = open.downcast_ref::<CircuitOpen>().expect("by the breaker");
        assert_eq!(open.breaker(), "lookup");
        assert!(open.retry_after() <= OPEN_WAIT);
    }
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        before,
        "no connection attempted"
    );

    // The server is back on the same port; after the open wait, one probe closes it.
    let listener = TcpListener::bind(addr).await.expect("the same port again");
    let _server = serve(listener, Arc::clone(&answered));
    tokio::time::advance(OPEN_WAIT).await;
    let value = client.ready().await.unwrap().call("g".into()).await;
    assert_eq!(value.expect("the probe's answer"), "value-of-g");
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(
        answered.load(Ordering::SeqCst),
        5,
        "the probe reached the server"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), before + 1);
}
