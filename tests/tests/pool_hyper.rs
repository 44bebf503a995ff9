//! A pool of real HTTP servers on 127.0.0.1 behind tower's p2c balancer, each endpoint with
//! its own fusebox breaker (`fusebox::pool`): ejection, probes that reach only the ejected
//! endpoint, the cap on ejection, and the healthy panic. Paused time.

use bytes::Bytes;
use fusebox::BoxError;
use fusebox::breaker::State;
use fusebox::pool::{
    PoolConfig, PoolDiscover, PoolEvent, PoolEventKind, PoolHandle, PoolLayer, Status, WouldEject,
};
use fusebox_tests::{HttpClient, Reply, TestServer, client, four_call_breaker};
use futures_util::future::join_all;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tower::balance::p2c::Balance;
use tower::discover::Change;
use tower::{Service, ServiceExt};

/// An endpoint: a hyper client sending every request to `addr`.
#[derive(Clone)]
struct Forward {
    client: HttpClient,
    addr: SocketAddr,
}

impl Service<Request<Full<Bytes>>> for Forward {
    type Response = Response<Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = hyper_util::client::legacy::ResponseFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Full<Bytes>>) -> Self::Future {
        let path = request.uri().path().to_owned();
        *request.uri_mut() = format!("http://{}{path}", self.addr)
            .parse()
            .expect("a valid URI");
        self.client.request(request)
    }
}

fn endpoint(addr: SocketAddr) -> Forward {
    Forward {
        client: client(),
        addr,
    }
}

/// The discover stream of a fixed pool.
type Changes =
    futures_util::stream::Iter<std::vec::IntoIter<Result<Change<SocketAddr, Forward>, Infallible>>>;

/// The balancer over a fixed pool.
type Pool = Balance<PoolDiscover<Changes>, Request<Full<Bytes>>>;

/// The events a pool told its listener.
type Events = Arc<Mutex<Vec<PoolEvent>>>;

/// Starts `replies.len()` servers, and a balancer over them whose endpoints each have a
/// four-call breaker (open for a minute, two probes that must both succeed).
async fn pool(
    replies: &[Reply],
    config: PoolConfig,
) -> (Vec<TestServer>, Pool, PoolHandle, Events) {
    let mut servers = Vec::new();
    for reply in replies {
        servers.push(TestServer::start(reply.clone()).await);
    }
    let breaker = four_call_breaker("inventory")
        .permitted_probes(2)
        .probe_successes(2)
        .build()
        .expect("a valid breaker config");
    let events = Events::default();
    let seen = Arc::clone(&events);
    let layer = PoolLayer::builder(breaker)
        .config(config)
        .on_event(move |e| seen.lock().expect("events lock").push(e.clone()))
        .build();
    let handle = layer.handle();
    let changes: Vec<_> = servers
        .iter()
        .map(|s| Ok::<_, Infallible>(Change::Insert(s.addr(), endpoint(s.addr()))))
        .collect();
    let balance = layer.balance(futures_util::stream::iter(changes));
    (servers, balance, handle, events)
}

/// One call through the balancer: its status, once its body is read.
async fn call<S, B>(balance: &mut S) -> Result<StatusCode, BoxError>
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = BoxError>,
    B: http_body::Body,
    B::Error: Into<BoxError>,
{
    let response = balance
        .ready()
        .await?
        .call(Request::new(Full::new(Bytes::new())))
        .await?;
    let status = response.status();
    response.into_body().collect().await.map_err(Into::into)?;
    Ok(status)
}

/// Calls until `done` holds of the pool's status (at most `limit` calls); how many it took.
async fn call_until<S, B>(
    balance: &mut S,
    handle: &PoolHandle,
    limit: usize,
    done: impl Fn(&fusebox::pool::PoolStatus) -> bool,
) -> usize
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = BoxError>,
    B: http_body::Body,
    B::Error: Into<BoxError>,
{
    for n in 0..limit {
        if done(&handle.status()) {
            return n;
        }
        call(balance).await.expect("no call is rejected");
    }
    panic!("not reached in {limit} calls: {}", handle.status());
}

fn key(server: &TestServer) -> String {
    server.addr().to_string()
}

fn kinds(events: &Events, endpoint: &str) -> Vec<PoolEventKind> {
    events
        .lock()
        .expect("events lock")
        .iter()
        .filter(|e| e.endpoint.as_deref() == Some(endpoint))
        .map(|e| e.kind.clone())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_failing_endpoint_is_ejected_probed_alone_and_returns() {
    let ok = Reply::status(200);
    let (servers, mut balance, handle, events) = pool(
        &[ok.clone(), ok.clone(), ok.clone(), Reply::status(503)],
        PoolConfig::default(),
    )
    .await;
    let sick = &servers[3];
    let sick_key = key(sick);

    // Its breaker trips on its fourth failure, and the pool takes it out at once.
    call_until(&mut balance, &handle, 400, |s| s.ejected == 1).await;
    assert_eq!(sick.received(), 4, "no call reached it once it tripped");
    let status = handle.status();
    assert_eq!(status.with_status(Status::Ejected), [sick_key.as_str()]);
    assert_eq!((status.ejected, status.max_ejected), (1, 1));
    assert_eq!(
        status.endpoint(&sick_key).map(|e| e.breaker),
        Some(State::Open)
    );

    // Ejected: the calls spread over the three others, and every one succeeds.
    let before: Vec<usize> = servers.iter().map(TestServer::received).collect();
    for _ in 0..60 {
        assert_eq!(call(&mut balance).await.unwrap(), StatusCode::OK);
    }
    assert_eq!(sick.received(), 4);
    for (server, before) in servers[..3].iter().zip(&before) {
        assert!(
            server.received() > *before,
            "every healthy endpoint takes calls"
        );
    }

    // It recovers; its open wait ends. The balancer may pick it again, and exactly its
    // two probes reach it: issued together, the third call that would have gone to it
    // finds it pending and goes elsewhere.
    sick.set(Reply::status(200));
    tokio::time::advance(Duration::from_secs(61)).await;
    let mut calls = Vec::new();
    for _ in 0..40 {
        let ready = balance.ready().await.expect("a ready endpoint");
        calls.push(ready.call(Request::new(Full::new(Bytes::new()))));
    }
    assert_eq!(
        handle.status().endpoint(&sick_key).map(|e| e.status),
        Some(Status::Probing)
    );
    for response in join_all(calls).await {
        assert_eq!(
            response.expect("no call is rejected").status(),
            StatusCode::OK
        );
    }
    assert_eq!(sick.received(), 4 + 2, "the probe budget, and nothing more");
    for server in &servers[..3] {
        let breaker = handle.breaker(&key(server)).expect("its breaker");
        assert_eq!(breaker.state(), State::Closed, "the others never probed");
    }

    // Both probes succeeded: it serves again.
    let status = handle.status();
    assert_eq!(
        status.endpoint(&sick_key).map(|e| e.status),
        Some(Status::Serving)
    );
    assert_eq!(status.ejected, 0);
    for _ in 0..60 {
        assert_eq!(call(&mut balance).await.unwrap(), StatusCode::OK);
    }
    assert!(sick.received() > 6, "it takes calls again");
    assert_eq!(
        kinds(&events, &sick_key),
        [
            PoolEventKind::Ejected {
                ejected: 1,
                max_ejected: 1
            },
            PoolEventKind::Returned
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn with_a_25_percent_cap_two_tripped_of_four_eject_one_and_the_other_would() {
    let ok = Reply::status(200);
    let fail = Reply::status(503);
    let config = PoolConfig::builder()
        .max_ejection_percent(25)
        .build()
        .unwrap();
    let (servers, mut balance, handle, events) =
        pool(&[ok.clone(), ok, fail.clone(), fail], config).await;

    call_until(&mut balance, &handle, 800, |s| {
        s.ejected == 1 && s.would_eject == 1
    })
    .await;
    let status = handle.status();
    assert_eq!(status.max_ejected, 1);
    assert!(!status.panic, "two of four healthy is not under 50 %");
    let ejected = status.with_status(Status::Ejected)[0].to_owned();
    let kept = status.with_status(Status::WouldEject)[0].to_owned();
    let mut tripped = vec![ejected.clone(), kept.clone()];
    tripped.sort();
    let mut failing = vec![key(&servers[2]), key(&servers[3])];
    failing.sort();
    assert_eq!(tripped, failing);
    let reason = WouldEject::CapReached {
        ejected: 1,
        max_ejected: 1,
    };
    assert_eq!(
        status.endpoint(&kept).and_then(|e| e.would_eject),
        Some(reason)
    );
    assert_eq!(
        status.endpoint(&kept).map(|e| e.breaker),
        Some(State::Open),
        "its breaker did trip"
    );
    assert_eq!(
        kinds(&events, &kept),
        [PoolEventKind::WouldEject { reason }]
    );
    assert!(status.to_string().contains("would_eject"), "{status}");

    // The kept endpoint's calls pass its open breaker: they reach it and answer 503; the
    // ejected one gets none.
    let by_key = |k: &str| servers.iter().find(|s| key(s) == k).expect("a server");
    let (ejected_before, kept_before) = (by_key(&ejected).received(), by_key(&kept).received());
    let mut unavailable = 0;
    for _ in 0..80 {
        if call(&mut balance).await.expect("no call is rejected") == StatusCode::SERVICE_UNAVAILABLE
        {
            unavailable += 1;
        }
    }
    assert_eq!(by_key(&ejected).received(), ejected_before);
    let kept_calls = by_key(&kept).received() - kept_before;
    assert!(kept_calls > 0);
    assert_eq!(unavailable, kept_calls, "each call it took answered 503");
}

#[tokio::test(start_paused = true)]
async fn under_the_panic_threshold_every_endpoint_is_used_until_health_recovers() {
    let fail = Reply::status(503);
    // A cap with room for two: the panic, not the cap, keeps the third in.
    let config = PoolConfig::builder()
        .max_ejection_percent(50)
        .build()
        .unwrap();
    let (servers, mut balance, handle, events) = pool(
        &[Reply::status(200), fail.clone(), fail.clone(), fail],
        config,
    )
    .await;

    call_until(&mut balance, &handle, 2000, |s| s.panic).await;
    let status = handle.status();
    assert_eq!(status.ejected, 0, "in panic nothing is out");
    assert_eq!(status.healthy, 1);
    assert_eq!(status.with_status(Status::WouldEject).len(), 3);
    assert!(matches!(
        status.endpoints[1].would_eject,
        Some(WouldEject::Panic {
            healthy: 1,
            endpoints: 4,
            panic_threshold: 50
        })
    ));

    // Every endpoint takes calls, the tripped ones included.
    let before: Vec<usize> = servers.iter().map(TestServer::received).collect();
    for _ in 0..80 {
        call(&mut balance).await.expect("no call is rejected");
    }
    for (server, before) in servers.iter().zip(&before) {
        assert!(server.received() > *before, "{} took no call", key(server));
    }

    // They recover; after their open waits, their probes close them and the panic ends.
    for server in &servers[1..] {
        server.set(Reply::status(200));
    }
    tokio::time::advance(Duration::from_secs(61)).await;
    call_until(&mut balance, &handle, 400, |s| s.healthy == 4).await;
    let status = handle.status();
    assert!(!status.panic);
    assert_eq!(status.with_status(Status::Serving).len(), 4);
    let panics: Vec<bool> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e.kind {
            PoolEventKind::Panic { active, .. } => Some(active),
            _ => None,
        })
        .collect();
    assert_eq!(panics, [true, false]);
}

#[tokio::test(start_paused = true)]
async fn a_removed_endpoint_leaves_the_pool_and_its_share_of_the_cap() {
    let servers = [
        TestServer::start(Reply::status(200)).await,
        TestServer::start(Reply::status(200)).await,
    ];
    let layer = PoolLayer::builder(four_call_breaker("inventory").build().unwrap()).build();
    let handle = layer.handle();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for s in &servers {
        tx.send(Ok::<_, Infallible>(Change::Insert(
            s.addr(),
            endpoint(s.addr()),
        )))
        .unwrap();
    }
    let discover = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    let mut balance = layer.balance(discover);
    call(&mut balance).await.unwrap();
    assert_eq!(handle.status().endpoints.len(), 2);

    tx.send(Ok(Change::Remove(servers[0].addr()))).unwrap();
    call(&mut balance).await.unwrap();
    let status = handle.status();
    assert_eq!(status.endpoints.len(), 1);
    assert_eq!(&*status.endpoints[0].endpoint, key(&servers[1]));
    assert!(handle.breaker(&key(&servers[0])).is_none());
    let before = servers[0].received();
    for _ in 0..10 {
        call(&mut balance).await.unwrap();
    }
    assert_eq!(
        servers[0].received(),
        before,
        "a removed endpoint takes no call"
    );
}

/// The balancer over a pool, its response future and its endpoints can move between
/// threads (a multi-threaded runtime, a spawned task).
#[test]
fn the_pool_is_send() {
    fn send<T: Send + 'static>() {}
    send::<Pool>();
    send::<<Pool as Service<Request<Full<Bytes>>>>::Future>();
    send::<fusebox::pool::Endpoint<Forward>>();
    send::<PoolHandle>();
}
