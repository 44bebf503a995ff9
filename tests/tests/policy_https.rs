//! `fusebox::hyper` over HTTPS (feature `hyper-rustls`), against a TLS server on 127.0.0.1
//! whose certificate the test makes (rcgen) and the client trusts through a root store of
//! its own: the policy's breaker judges the answers that come back over TLS, and a client
//! that does not trust the certificate never gets an answer. No network.

use bytes::Bytes;
use fusebox::Policy;
use fusebox::error::CircuitOpen;
use fusebox_tests::{four_call_breaker, get};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::{Layer, ServiceExt};

/// An HTTPS server on 127.0.0.1 (a free port) with a certificate for `127.0.0.1` made for
/// it; it answers every request with the status in `status` and counts what it answered.
struct TlsServer {
    addr: SocketAddr,
    certificate: CertificateDer<'static>,
    status: Arc<AtomicU16>,
    answered: Arc<AtomicUsize>,
}

impl TlsServer {
    async fn start(status: u16) -> TlsServer {
        let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()])
            .expect("a self-signed certificate");
        let certificate = made.cert.der().clone();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.signing_key.serialize_der()));
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS 1.2 and 1.3")
        .with_no_client_auth()
        .with_single_cert(vec![certificate.clone()], key)
        .expect("the certificate and its key");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("bound address");
        let status = Arc::new(AtomicU16::new(status));
        let answered = Arc::new(AtomicUsize::new(0));
        let (st, an) = (Arc::clone(&status), Arc::clone(&answered));
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, st, an) = (acceptor.clone(), Arc::clone(&st), Arc::clone(&an));
                tokio::spawn(async move {
                    // A client that does not trust the certificate ends the handshake.
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |_req: Request<Incoming>| {
                        let code = st.load(Ordering::SeqCst);
                        an.fetch_add(1, Ordering::SeqCst);
                        async move {
                            let mut response =
                                Response::new(Full::new(Bytes::from_static(b"secure")));
                            *response.status_mut() = StatusCode::from_u16(code).expect("a status");
                            Ok::<_, std::convert::Infallible>(response)
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        TlsServer {
            addr,
            certificate,
            status,
            answered,
        }
    }

    fn url(&self) -> String {
        format!("https://{}/", self.addr)
    }

    /// A TLS configuration that trusts this server's certificate and nothing else.
    fn trusting_client(&self) -> rustls::ClientConfig {
        let mut roots = RootCertStore::empty();
        roots
            .add(self.certificate.clone())
            .expect("a parsable certificate");
        fusebox::hyper::tls_config(roots).expect("TLS 1.2 and 1.3 on ring")
    }
}

fn policy() -> Policy {
    Policy::builder("secure-partner")
        .circuit_breaker(four_call_breaker("secure-partner"))
        .build()
        .expect("a valid policy")
}

fn chain(err: &(dyn Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

#[tokio::test(start_paused = true)]
async fn answers_over_tls_open_the_breaker() {
    let server = TlsServer::start(200).await;
    let policy = policy();
    let client = policy.layer(fusebox::hyper::https_client_with_tls(
        server.trusting_client(),
    ));

    let response = client
        .clone()
        .oneshot(get(&server.url()))
        .await
        .expect("an answer over TLS");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response
            .into_body()
            .collect()
            .await
            .expect("a body")
            .to_bytes(),
        "secure"
    );

    // The dependency starts failing: the breaker counts the 503s that come back over TLS.
    server.status.store(503, Ordering::SeqCst);
    for _ in 0..3 {
        let response = client
            .clone()
            .oneshot(get(&server.url()))
            .await
            .expect("an answer");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    let err = client
        .clone()
        .oneshot(get(&server.url()))
        .await
        .expect_err("the breaker is open");
    let open = err
        .downcast_ref::<CircuitOpen>()
        .expect("rejected by the breaker");
    assert_eq!(open.breaker(), "secure-partner");
    assert_eq!(
        server.answered.load(Ordering::SeqCst),
        4,
        "the rejected call was never sent"
    );
}

#[tokio::test(start_paused = true)]
async fn a_certificate_the_client_does_not_trust_gets_no_answer() {
    let server = TlsServer::start(200).await;
    // A root store with another certificate: the server's is not trusted.
    let stranger = TlsServer::start(200).await;
    let client = policy().layer(fusebox::hyper::https_client_with_tls(
        stranger.trusting_client(),
    ));
    let err = client
        .oneshot(get(&server.url()))
        .await
        .expect_err("an untrusted server");
    let text = chain(&*err);
    assert!(text.contains("certificate"), "{text}");
    assert_eq!(server.answered.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn the_https_client_also_speaks_plain_http() {
    let server = fusebox_tests::TestServer::start(fusebox_tests::Reply::status(200)).await;
    let client = policy().layer(fusebox::hyper::https_client_with_tls(
        fusebox::hyper::tls_config(RootCertStore::empty()).expect("a TLS configuration"),
    ));
    let response = client
        .oneshot(get(&server.url("/plain")))
        .await
        .expect("an answer");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(server.received_on("/plain"), 1);
}
