//! The services and policies the client-side benches put at both ends of a stack: the bare
//! inner service, a failing one, the request URI, and tower's own retry policy over a
//! `TpsBudget` (the peer fusebox's retry layer and Policy are measured against), and
//! [`KeepHead`], the least a retry must do on every call.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Empty;
use pin_project::pin_project;
use std::convert::Infallible;
use std::future::{Future, Ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::retry::budget::{Budget, TpsBudget};
use tower::{Layer, Service};

/// What the bare service answers.
pub type Reply = Result<Response<Empty<Bytes>>, Infallible>;

/// The absolute URI of every bench request, as a client sends it.
pub const URI: &str = "http://127.0.0.1:8080/users/42";

/// The bare service: answers 200 at once with a ready future, allocates nothing.
pub fn ready_ok<B>()
-> impl Service<Request<B>, Response = Response<Empty<Bytes>>, Error = Infallible, Future = Ready<Reply>>
+ Clone
+ Send
+ Sync
+ 'static {
    tower::service_fn(|_: Request<B>| std::future::ready(Ok(Response::new(Empty::new()))))
}

/// A dependency that is down: answers 503 at once, from a small `async` block (no response
/// carried in the future), allocates nothing. For tripping a breaker before timing its
/// rejections.
pub fn unavailable<B>() -> impl Service<
    Request<B>,
    Response = Response<Empty<Bytes>>,
    Error = Infallible,
    Future = impl std::future::Future<Output = Reply> + Send + 'static,
> + Clone
+ Send
+ 'static {
    tower::service_fn(|_: Request<B>| async {
        let mut response = Response::new(Empty::new());
        *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
        Ok(response)
    })
}

/// tower's retry policy over a `TpsBudget`, as tower's documentation builds one: clone the
/// request up front, deposit on a success, withdraw for a retry of a 5xx or an error.
#[derive(Clone, Debug)]
pub struct TowerRetryPolicy {
    budget: Arc<TpsBudget>,
    attempts: usize,
}

impl TowerRetryPolicy {
    /// A 10 s budget with a floor of 10 retries per second and a 20 % ratio (fusebox's retry
    /// defaults), and at most two retries per request.
    pub fn new() -> Self {
        TowerRetryPolicy {
            budget: Arc::new(TpsBudget::new(Duration::from_secs(10), 10, 0.2)),
            attempts: 2,
        }
    }
}

impl Default for TowerRetryPolicy {
    fn default() -> Self {
        TowerRetryPolicy::new()
    }
}

impl<B: Clone, R, E> tower::retry::Policy<Request<B>, Response<R>, E> for TowerRetryPolicy {
    type Future = Ready<()>;

    fn retry(
        &mut self,
        _request: &mut Request<B>,
        result: &mut Result<Response<R>, E>,
    ) -> Option<Self::Future> {
        match result {
            Ok(response) if !response.status().is_server_error() => {
                self.budget.deposit();
                None
            }
            _ if self.attempts > 0 && self.budget.withdraw() => {
                self.attempts -= 1;
                Some(std::future::ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, request: &Request<B>) -> Option<Request<B>> {
        Some(request.clone())
    }
}

/// A floor for a retry layer: what any layer that may send a request again must do on every
/// call, and nothing more. It keeps a copy of the request's head (method, URI, version,
/// headers, extensions) until the answer is in, since the request itself is moved into
/// the inner service; it never retries, keeps no budget and judges no answer.
///
/// Stacked over tower's `Timeout`, it is the floor of a Policy with a retry budget and a
/// timeout (`http_load`'s `floor` side): a Policy can only cost more.
#[derive(Clone, Debug)]
pub struct KeepHead<S> {
    inner: S,
}

/// Wraps a service in [`KeepHead`].
#[derive(Clone, Copy, Debug, Default)]
pub struct KeepHeadLayer;

impl<S> Layer<S> for KeepHeadLayer {
    type Service = KeepHead<S>;

    fn layer(&self, inner: S) -> KeepHead<S> {
        KeepHead { inner }
    }
}

impl<S, B> Service<Request<B>> for KeepHead<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = KeptHead<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let head = parts.clone();
        KeptHead {
            inner: self.inner.call(Request::from_parts(parts, body)),
            head: Some(head),
        }
    }
}

/// [`KeepHead`]'s future: the inner call's, with the copy of the head beside it, dropped
/// when the answer is in.
#[pin_project]
#[derive(Debug)]
pub struct KeptHead<F> {
    #[pin]
    inner: F,
    head: Option<http::request::Parts>,
}

impl<F: Future> Future for KeptHead<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let out = std::task::ready!(this.inner.poll(cx));
        // The answer is in: a retry would have decided now, and let its copy go.
        drop(this.head.take());
        Poll::Ready(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::pin::pin;
    use tokio::sync::oneshot;
    use tower::ServiceExt;

    /// The inner service gets the request as sent; the copy of its head is kept while the
    /// answer is pending, and let go once it is in.
    #[test]
    fn keeps_a_copy_of_the_head_until_the_answer() {
        let rt = crate::current_thread();
        rt.block_on(async {
            let (answer, answered) = oneshot::channel::<()>();
            let answered = std::sync::Mutex::new(Some(answered));
            let inner = tower::service_fn(move |request: Request<&'static str>| {
                assert_eq!(request.method(), http::Method::PUT);
                assert_eq!(request.uri(), "http://127.0.0.1/users/42");
                assert_eq!(request.headers()["x-id"], "7");
                assert_eq!(*request.body(), "body");
                let answered = answered.lock().expect("unpoisoned").take();
                async move {
                    if let Some(answered) = answered {
                        let _ = answered.await;
                    }
                    Ok::<_, Infallible>(Response::new(request.into_body()))
                }
            });
            let mut service = KeepHeadLayer.layer(inner);
            let request = Request::put("http://127.0.0.1/users/42")
                .header("x-id", "7")
                .body("body")
                .expect("a valid request");
            let service = service.ready().await.expect("ready");
            let mut future = pin!(service.call(request));
            assert!(poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx).is_pending())).await);
            let head = future.head.as_ref().expect("kept while pending");
            assert_eq!(head.method, http::Method::PUT);
            assert_eq!(head.uri, "http://127.0.0.1/users/42");
            assert_eq!(head.headers["x-id"], "7");
            answer.send(()).expect("the call waits for its answer");
            let response = poll_fn(|cx| future.as_mut().poll(cx))
                .await
                .expect("answered");
            assert_eq!(*response.body(), "body");
            assert!(future.head.is_none(), "let go once the answer is in");
        });
    }
}
