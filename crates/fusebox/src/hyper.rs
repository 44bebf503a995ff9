//! A hyper-util client behind a [`Policy`]: the outbound side of fusebox.
//!
//! The policy's retry layer sends [`ReplayBody<B>`] to the services below it (so that a
//! request can be replayed), so the client at the bottom must accept that body type;
//! [`client`] builds such a client (HTTP/1, pooled, on tokio) and [`wrap`] puts a policy in
//! front of one. For a client per dependency host, key the breaker by host
//! ([`KeyBy::Host`](crate::KeyBy::Host)) or by host and port
//! ([`KeyBy::Authority`](crate::KeyBy::Authority)): one host's outage then opens only its
//! own breaker.
//!
//! ```no_run
//! use bytes::Bytes;
//! use fusebox::{CircuitBreakerConfig, KeyBy, Policy};
//! use http_body_util::Full;
//! use tower::ServiceExt;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let policy = Policy::builder("partners")
//!     .timeout(std::time::Duration::from_millis(500))
//!     .circuit_breaker(CircuitBreakerConfig::builder().name("partners"))
//!     .breaker_key(KeyBy::Host)
//!     .build()?;
//! let client = fusebox::hyper::wrap::<Full<Bytes>, _>(&policy);
//! let request = http::Request::get("http://127.0.0.1:8080/rates").body(Full::new(Bytes::new()))?;
//! let response = client.oneshot(request).await?;
//! println!("{}", response.status());
//! # Ok(())
//! # }
//! ```

use crate::policy::{Policy, PolicyService};
use fusebox_classify::{Classifier, StandardClassifier};
use fusebox_retry::ReplayBody;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tower_layer::Layer;

/// The hyper-util client a policy wraps: plain HTTP, sending the retry layer's bodies.
pub type HyperClient<B> = Client<HttpConnector, ReplayBody<B>>;

/// A hyper-util client behind a policy.
pub type PolicyClient<B, C = StandardClassifier> = PolicyService<HyperClient<B>, C>;

/// A hyper-util client (HTTP/1, pooled, tokio) for requests with bodies of type `B`.
pub fn client<B>() -> HyperClient<B>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    Client::builder(TokioExecutor::new()).build_http()
}

/// A new [`client`] behind `policy`.
pub fn wrap<B, C: Classifier>(policy: &Policy<C>) -> PolicyClient<B, C>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    policy.layer(client())
}
