//! A hyper-util client behind a [`Policy`]: the outbound side of fusebox.
//!
//! The policy's retry layer sends [`ReplayBody<B>`] to the services below it (so that a
//! request can be replayed), so the client at the bottom must accept that body type. The
//! functions here build such clients (HTTP/1, pooled, on tokio) for requests with
//! [`Full<Bytes>`] bodies, the common case — [`client`], and [`wrap`] to put a policy in
//! front of one — or for another body type ([`client_with_body`], [`wrap_with_body`]).
//!
//! With the feature `hyper-rustls`, the same for HTTPS (and plain `http://` URLs) through
//! rustls on the `ring` provider: `https_client` and `wrap_https` trust the platform's root
//! certificates; `https_client_with_tls` takes a `rustls::ClientConfig` of your own, such as
//! `tls_config` makes from a root store (a private CA, a test certificate).
//!
//! For a client per dependency host, key the breaker by host
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
//! let client = fusebox::hyper::wrap(&policy);
//! let request = http::Request::get("http://127.0.0.1:8080/rates").body(Full::new(Bytes::new()))?;
//! let response = client.oneshot(request).await?;
//! println!("{}", response.status());
//! # Ok(())
//! # }
//! ```

use crate::policy::{Policy, PolicyService};
use bytes::Bytes;
use fusebox_classify::{Classifier, StandardClassifier};
use fusebox_retry::ReplayBody;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tower_layer::Layer;

/// The hyper-util client a policy wraps: plain HTTP, sending the retry layer's bodies (of
/// requests with bodies of type `B`).
pub type HyperClient<B = Full<Bytes>> = Client<HttpConnector, ReplayBody<B>>;

/// A hyper-util client behind a policy.
pub type PolicyClient<B = Full<Bytes>, C = StandardClassifier> = PolicyService<HyperClient<B>, C>;

/// A hyper-util client (HTTP/1, pooled, tokio) for requests with [`Full<Bytes>`] bodies.
pub fn client() -> HyperClient {
    client_with_body()
}

/// A hyper-util client (HTTP/1, pooled, tokio) for requests with bodies of type `B`:
/// `client_with_body::<Empty<Bytes>>()`.
pub fn client_with_body<B>() -> HyperClient<B>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    Client::builder(TokioExecutor::new()).build_http()
}

/// A new [`client`] behind `policy`, for requests with [`Full<Bytes>`] bodies.
pub fn wrap<C: Classifier>(policy: &Policy<C>) -> PolicyClient<Full<Bytes>, C> {
    policy.layer(client())
}

/// A new [`client_with_body`] behind `policy`, for requests with bodies of type `B`:
/// `wrap_with_body::<Empty<Bytes>, _>(&policy)`.
pub fn wrap_with_body<B, C: Classifier>(policy: &Policy<C>) -> PolicyClient<B, C>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    policy.layer(client_with_body())
}

#[cfg(feature = "hyper-rustls")]
#[cfg_attr(docsrs, doc(cfg(feature = "hyper-rustls")))]
pub use self::tls::{
    HttpsClient, PolicyHttpsClient, https_client, https_client_with_body, https_client_with_tls,
    tls_config, wrap_https,
};

#[cfg(feature = "hyper-rustls")]
mod tls {
    use super::*;
    use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
    use rustls::{ClientConfig, RootCertStore};
    use std::io;
    use std::sync::Arc;

    /// A hyper-util client over HTTPS (and plain HTTP), sending the retry layer's bodies.
    pub type HttpsClient<B = Full<Bytes>> = Client<HttpsConnector<HttpConnector>, ReplayBody<B>>;

    /// An HTTPS client behind a policy.
    pub type PolicyHttpsClient<B = Full<Bytes>, C = StandardClassifier> =
        PolicyService<HttpsClient<B>, C>;

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    /// A TLS configuration that trusts the certificates in `roots` (and no others), on the
    /// `ring` provider with its safe default protocol versions (TLS 1.2 and 1.3), without
    /// client certificates.
    pub fn tls_config(roots: RootCertStore) -> Result<ClientConfig, rustls::Error> {
        Ok(ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth())
    }

    /// An HTTPS client (HTTP/1, pooled, tokio) for requests with [`Full<Bytes>`] bodies that
    /// trusts the platform's root certificates.
    ///
    /// Fails when the platform's certificate store cannot be read or holds no usable
    /// certificate.
    pub fn https_client() -> io::Result<HttpsClient> {
        let connector = HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(provider())?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Client::builder(TokioExecutor::new()).build(connector))
    }

    /// An HTTPS client (HTTP/1, pooled, tokio) for requests with [`Full<Bytes>`] bodies
    /// that connects with `tls` (its root store decides which servers are trusted).
    pub fn https_client_with_tls(tls: ClientConfig) -> HttpsClient {
        https_client_with_body(tls)
    }

    /// [`https_client_with_tls`] for requests with bodies of type `B`.
    pub fn https_client_with_body<B>(tls: ClientConfig) -> HttpsClient<B>
    where
        B: http_body::Body + Send + 'static,
        B::Data: Send,
    {
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Client::builder(TokioExecutor::new()).build(connector)
    }

    /// A new [`https_client`] (the platform's root certificates) behind `policy`. For a root
    /// store of your own, `policy.layer(https_client_with_tls(tls))`.
    pub fn wrap_https<C: Classifier>(
        policy: &Policy<C>,
    ) -> io::Result<PolicyHttpsClient<Full<Bytes>, C>> {
        Ok(policy.layer(https_client()?))
    }
}
