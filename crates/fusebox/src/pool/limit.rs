//! Measured headroom: an endpoint whose calls go through a fusebox concurrency limit tells
//! the pool how many more calls it takes now, read from the limit's handle.

use fusebox_limit::{ConcurrencyLimit, LimitHandle};

/// An endpoint service whose calls go through a fusebox concurrency limit
/// ([`ConcurrencyLimitLayer`](fusebox_limit::ConcurrencyLimitLayer)): a pool built with
/// [`PoolLayer::measured`](super::PoolLayer::measured) reads each endpoint's headroom from
/// its limit — the limit's current limit (fixed, or wherever an adaptive limit stands now)
/// minus its calls in flight — instead of a fixed
/// [`endpoint_capacity`](super::PoolConfigBuilder::endpoint_capacity).
///
/// Implemented for fusebox's [`ConcurrencyLimit`] service, the endpoint as
/// `ConcurrencyLimitLayer::layer` makes it. Implement it for a service of your own that
/// holds a limit further in (a client wrapped in a limit, then in something else), handing
/// back the limit's handle; `None` says the endpoint has no measured limit (the pool falls
/// back to `endpoint_capacity` for it, or counts it as having room).
///
/// The handle is taken once, when the endpoint joins the pool, and read whenever the pool
/// decides which tripped endpoints go out (a breaker moved, an endpoint joined or left, or
/// [`PoolHandle::status`](super::PoolHandle::status) was asked): never on a call.
pub trait EndpointLimit {
    /// The limit this endpoint's calls go through, if any.
    fn limit_handle(&self) -> Option<LimitHandle>;
}

impl<S, C: Send + Sync + 'static, P> EndpointLimit for ConcurrencyLimit<S, C, P> {
    fn limit_handle(&self) -> Option<LimitHandle> {
        Some(self.handle())
    }
}

/// How a pool that does not measure reads an endpoint's limit: it has none.
pub(crate) fn unmeasured<S>(_: &S) -> Option<LimitHandle> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{
        PoolConfig, PoolDiscover, PoolEvent, PoolEventKind, PoolLayer, Status, WouldEject,
    };
    use fusebox_breaker::CircuitBreakerConfig;
    use fusebox_limit::{AimdConfig, ConcurrencyLimitConfig, ConcurrencyLimitLayer};
    use futures_util::StreamExt;
    use http::{Request, Response, StatusCode};
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tower::discover::{Change, ServiceList};
    use tower::{Service, ServiceExt, service_fn};
    use tower_layer::Layer;

    /// An endpoint's dependency: a call asking `x-answer: hang` never answers (it stays in
    /// flight until dropped); any other is answered 503.
    fn dependency() -> impl Service<
        Request<String>,
        Response = Response<String>,
        Error = Infallible,
        Future = impl Future<Output = Result<Response<String>, Infallible>> + Send,
    > + Clone
    + Send {
        service_fn(|r: Request<String>| async move {
            if r.headers().get("x-answer").is_some_and(|v| v == "hang") {
                std::future::pending::<()>().await;
            }
            Ok(Response::builder()
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .body(String::new())
                .unwrap())
        })
    }

    fn request(answer: &'static str) -> Request<String> {
        Request::builder()
            .header("x-answer", answer)
            .body(String::new())
            .unwrap()
    }

    /// A pool whose breakers trip after 4 failures, ejecting up to half of it; and what
    /// its listener saw.
    fn new_pool() -> (PoolLayer, Arc<Mutex<Vec<PoolEvent>>>) {
        let breaker = CircuitBreakerConfig::builder()
            .name("orders")
            .count_window(4)
            .minimum_calls(4)
            .open_wait(Duration::from_secs(60))
            .open_wait_jitter(Duration::ZERO)
            .build()
            .unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&events);
        let pool = PoolLayer::builder(breaker)
            .config(
                PoolConfig::builder()
                    .max_ejection_percent(50)
                    .build()
                    .unwrap(),
            )
            .on_event(move |e| seen.lock().unwrap().push(e.clone()))
            .build();
        (pool, events)
    }

    /// Every endpoint `discover` inserts (the stream is kept: its endpoints leave the pool
    /// when it is dropped).
    async fn endpoints<D>(discover: &mut D, n: usize) -> Vec<D::Item>
    where
        D: futures_util::Stream + Unpin,
    {
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(discover.next().await.expect("an endpoint"));
        }
        out
    }

    fn inserted<K, S>(items: Vec<Result<Change<K, S>, fusebox_classify::BoxError>>) -> Vec<S> {
        items
            .into_iter()
            .map(|c| match c {
                Ok(Change::Insert(_, endpoint)) => endpoint,
                _ => panic!("not an insertion"),
            })
            .collect()
    }

    /// Answers 503 on `endpoint` `n` times.
    async fn fail<S>(endpoint: &mut S, n: usize)
    where
        S: Service<Request<String>>,
        S::Error: std::fmt::Debug,
    {
        for _ in 0..n {
            endpoint
                .ready()
                .await
                .unwrap()
                .call(request("503"))
                .await
                .unwrap();
        }
    }

    /// `n` calls left in flight on `endpoint` (in flight until the futures are dropped).
    async fn hold<S>(endpoint: &mut S, n: usize) -> Vec<S::Future>
    where
        S: Service<Request<String>>,
        S::Error: std::fmt::Debug,
    {
        let mut held = Vec::new();
        for _ in 0..n {
            held.push(endpoint.ready().await.unwrap().call(request("hang")));
        }
        held
    }

    fn fixed(max: usize) -> ConcurrencyLimitLayer {
        ConcurrencyLimitLayer::new(
            ConcurrencyLimitConfig::builder()
                .name("orders")
                .max_concurrency(max)
                .build()
                .unwrap(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn fixed_limits_read_from_their_handles_keep_a_tripped_endpoint_in_until_there_is_room() {
        let (pool, events) = new_pool();
        let handle = pool.handle();
        let services = || {
            (0..4)
                .map(|_| fixed(2).layer(dependency()))
                .collect::<Vec<_>>()
        };
        let mut discover: PoolDiscover<_> = pool.measured(ServiceList::new(services()));
        let mut e = inserted(endpoints(&mut discover, 4).await);
        assert_eq!(e[1].get_ref().limit_handle().map(|l| l.limit()), Some(2));

        // Each of the three healthy endpoints is at its limit: 2 of 2 calls in flight.
        let mut held = Vec::new();
        for endpoint in &mut e[1..] {
            held.push(hold(endpoint, 2).await);
        }
        fail(&mut e[0], 4).await;
        let status = handle.status();
        let reason = WouldEject::NoHeadroom {
            headroom: 0,
            share: 2, // 6 calls in flight over 4 endpoints, rounded up
        };
        assert_eq!(status.endpoints[0].status, Status::WouldEject);
        assert_eq!(status.endpoints[0].would_eject, Some(reason));
        assert_eq!(
            events.lock().unwrap().last().map(|e| e.kind.clone()),
            Some(PoolEventKind::WouldEject { reason })
        );

        // Two calls on endpoint 1 end: it has room for 2, the share is 1, and 0 goes out.
        held.remove(0);
        assert_eq!(handle.status().endpoints[0].status, Status::Ejected);
        assert_eq!(
            events.lock().unwrap().last().map(|e| e.kind.clone()),
            Some(PoolEventKind::Ejected {
                ejected: 1,
                max_ejected: 2
            })
        );

        // Not measured (and no endpoint_capacity), the same load does not keep it in.
        let (unmeasured, _) = new_pool();
        let mut plain = unmeasured.layer(ServiceList::new(services()));
        let mut e = inserted(endpoints(&mut plain, 4).await);
        let mut held = Vec::new();
        for endpoint in &mut e[1..] {
            held.push(hold(endpoint, 2).await);
        }
        fail(&mut e[0], 4).await;
        assert_eq!(
            unmeasured.handle().status().endpoints[0].status,
            Status::Ejected
        );
        drop(held);
    }

    #[tokio::test(start_paused = true)]
    async fn an_adaptive_limit_that_backed_off_leaves_no_room_for_a_tripped_endpoint() {
        let (pool, _) = new_pool();
        let handle = pool.handle();
        let adaptive = || {
            ConcurrencyLimitLayer::new(
                ConcurrencyLimitConfig::builder()
                    .name("orders")
                    .aimd(
                        AimdConfig::new()
                            .initial_limit(4)
                            .min_limit(1)
                            .max_limit(8)
                            .backoff_ratio(0.5),
                    )
                    .build()
                    .unwrap(),
            )
            .layer(dependency())
        };
        let mut discover: PoolDiscover<_> = pool.measured(ServiceList::new(
            (0..3).map(|_| adaptive()).collect::<Vec<_>>(),
        ));
        let mut e = inserted(endpoints(&mut discover, 3).await);
        // One failed call each: the healthy endpoints' limits back off from 4 to 2 (their
        // breakers, 1 failure of 4, stay closed).
        for endpoint in &mut e[1..] {
            fail(endpoint, 1).await;
            assert_eq!(
                endpoint.get_ref().limit_handle().map(|l| l.limit()),
                Some(2)
            );
        }
        let mut held = Vec::new();
        for endpoint in &mut e[1..] {
            held.push(hold(endpoint, 2).await);
        }
        fail(&mut e[0], 4).await;
        // A configured capacity of 4 would see room for 4; the limits say there is none.
        let status = handle.status();
        assert_eq!(status.endpoints[0].status, Status::WouldEject);
        assert_eq!(
            status.endpoints[0].would_eject,
            Some(WouldEject::NoHeadroom {
                headroom: 0,
                share: 2, // 4 calls in flight over 3 endpoints, rounded up
            })
        );
        drop(held);
        assert_eq!(handle.status().endpoints[0].status, Status::Ejected);
    }
}
