//! An in-process dependency whose behaviour a test switches while calls flow (healthy,
//! failing with 503, or slower than any timeout), counting the calls that reach it: what
//! the reload tests put behind a running policy.

use bytes::Bytes;
use fusebox::retry::ReplayBody;
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;
use tower::Service;

/// Answers 200 after 10 ms.
pub const HEALTHY: u32 = 0;
/// Answers 503 at once.
pub const FAILING: u32 = 1;
/// Answers 200 after 1.5 s.
pub const SLOW: u32 = 2;

/// A dependency whose behaviour [`set`](Dependency::set) switches, counting the calls that
/// reach it. Clones share both.
#[derive(Debug, Clone, Default)]
pub struct Dependency {
    mode: Arc<AtomicU32>,
    calls: Arc<AtomicUsize>,
}

impl Dependency {
    /// Switches the behaviour: [`HEALTHY`], [`FAILING`] or [`SLOW`].
    pub fn set(&self, mode: u32) {
        self.mode.store(mode, Ordering::SeqCst);
    }

    /// How many calls have reached it.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// A service answering as the dependency currently behaves (run it on paused time).
    pub fn service(
        &self,
    ) -> impl Service<
        Request<ReplayBody<Empty<Bytes>>>,
        Response = Response<Empty<Bytes>>,
        Error = std::convert::Infallible,
        Future = impl Send,
    > + Clone
    + Send
    + 'static {
        let dep = self.clone();
        tower::service_fn(move |_req: Request<ReplayBody<Empty<Bytes>>>| {
            let dep = dep.clone();
            async move {
                dep.calls.fetch_add(1, Ordering::SeqCst);
                let status = match dep.mode.load(Ordering::SeqCst) {
                    FAILING => StatusCode::SERVICE_UNAVAILABLE,
                    SLOW => {
                        tokio::time::sleep(Duration::from_millis(1500)).await;
                        StatusCode::OK
                    }
                    _ => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        StatusCode::OK
                    }
                };
                Ok(Response::builder()
                    .status(status)
                    .body(Empty::new())
                    .expect("a response"))
            }
        })
    }
}
