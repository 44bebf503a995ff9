//! The `Classifier` trait and the classifier every route gets by default.

use crate::call::Call;
use crate::error::ErrorKind;
use crate::grpc::GrpcClassifier;
use crate::http::HttpClassifier;
use crate::outcome::{Classified, RetryHint, Verdict};
use http::{HeaderMap, StatusCode, header};
use std::error::Error;
use std::io;

/// Decides what a finished call says about the dependency's health.
///
/// One classifier value serves every layer of a policy, so that a timeout, a rejection and
/// a response are counted the same way everywhere. The methods are called once per call and
/// must not allocate: they look at a status, a header or two, and an error chain.
pub trait Classifier: Clone + Send + Sync + 'static {
    /// Classifies a response from its status line and headers, or defers to the end of the
    /// stream (gRPC responses whose status comes in the trailers).
    fn classify_response(
        &self,
        call: &Call<'_>,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Classified;

    /// Classifies a response at the end of its body, from its trailers (if any).
    ///
    /// Only called after [`classify_response`](Classifier::classify_response) returned
    /// [`Classified::AtEndOfStream`]. For a gRPC-Web response, which has no HTTP trailers,
    /// the trailers are the `grpc-status` and `grpc-retry-pushback-ms` of the trailer frame
    /// that ends its body ([`grpc_web`](crate::grpc_web)), as [`ClassifiedBody`] found them.
    ///
    /// [`ClassifiedBody`]: crate::ClassifiedBody
    fn classify_eos(&self, call: &Call<'_>, trailers: Option<&HeaderMap>) -> Verdict;

    /// Classifies an error: from the inner service, from the response body mid-stream, or
    /// one of fusebox's own. The default is [`classify_error_chain`].
    fn classify_error(&self, call: &Call<'_>, error: &(dyn Error + 'static)) -> Verdict {
        let _ = call;
        classify_error_chain(error)
    }

    /// Takes from `default` — the default route's classifier, when this one is a named
    /// route's — every setting this classifier does not set itself. Called once per named
    /// route when a [`RouteTable`](crate::RouteTable) is built, so that a route that says only
    /// what differs (say, `count_throttling`) keeps the rest of the default route. The
    /// default keeps this classifier as it is: a classifier of your own inherits nothing
    /// unless it says how.
    fn inherit(&mut self, default: &Self) {
        let _ = default;
    }
}

/// The default classification of an error, from the first error in its `source()` chain
/// that fusebox knows ([`ErrorKind::of`]):
///
/// | error | verdict |
/// |---|---|
/// | [`CircuitOpen`], [`Overloaded`] (or tower's `load_shed` one), [`DeadlineExceeded`], [`BudgetExhausted`] | ignored: rejections that never reached the dependency |
/// | [`Elapsed`] (a fusebox timeout, or tower's `timeout` one) | failure, retryable |
/// | `io::Error` connection refused | failure; the request was not sent, so any request may be retried |
/// | `io::Error` reset, aborted, broken pipe, unexpected EOF, not connected, timed out | failure, retryable |
/// | anything else | failure, not retryable |
///
/// The first error in the chain that is recognised decides; transport errors from hyper and
/// hyper-util carry their `io::Error` as a source and are found that way.
///
/// [`CircuitOpen`]: crate::error::CircuitOpen
/// [`Overloaded`]: crate::error::Overloaded
/// [`DeadlineExceeded`]: crate::error::DeadlineExceeded
/// [`BudgetExhausted`]: crate::error::BudgetExhausted
/// [`Elapsed`]: crate::error::Elapsed
pub fn classify_error_chain(error: &(dyn Error + 'static)) -> Verdict {
    match ErrorKind::of(error) {
        ErrorKind::CircuitOpen(_)
        | ErrorKind::Overloaded(_)
        | ErrorKind::TowerOverloaded(_)
        | ErrorKind::DeadlineExceeded(_)
        | ErrorKind::BudgetExhausted(_) => Verdict::IGNORED,
        ErrorKind::Elapsed(_) | ErrorKind::TowerElapsed(_) => {
            Verdict::FAILURE.with_retry(RetryHint::Retryable)
        }
        ErrorKind::Io(io) => {
            let retry = match io.kind() {
                io::ErrorKind::ConnectionRefused => RetryHint::NotSent,
                io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::UnexpectedEof
                | io::ErrorKind::NotConnected
                | io::ErrorKind::TimedOut => RetryHint::Retryable,
                _ => RetryHint::Never,
            };
            Verdict::FAILURE.with_retry(retry)
        }
        ErrorKind::Other => Verdict::FAILURE,
    }
}

/// Which protocol a route speaks, for [`StandardClassifier`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Protocol {
    /// Decide per response: `content-type: application/grpc...` on a 200 is gRPC
    /// (gRPC-Web, `application/grpc-web...`, included), anything else is HTTP. Costs one
    /// header lookup per 200 response.
    #[default]
    Auto,
    /// Always HTTP status rules (no header lookup on success).
    Http,
    /// Always gRPC rules.
    Grpc,
}

/// The classifier every route gets unless it names another: HTTP status rules for HTTP
/// responses and gRPC status rules for gRPC ones.
#[derive(Debug, Clone, Default)]
pub struct StandardClassifier {
    http: HttpClassifier,
    grpc: GrpcClassifier,
    protocol: Protocol,
    /// Whether the protocol was fixed (not left to detection by default).
    protocol_set: bool,
}

impl StandardClassifier {
    /// The defaults of [`HttpClassifier`] and [`GrpcClassifier`], protocol detected per
    /// response.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses these HTTP rules.
    pub fn http(mut self, http: HttpClassifier) -> Self {
        self.http = http;
        self
    }

    /// Uses these gRPC rules.
    pub fn grpc(mut self, grpc: GrpcClassifier) -> Self {
        self.grpc = grpc;
        self
    }

    /// Fixes the protocol instead of detecting it per response.
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self.protocol_set = true;
        self
    }

    /// The protocol setting, if it was set.
    pub fn protocol_setting(&self) -> Option<Protocol> {
        self.protocol_set.then_some(self.protocol)
    }

    /// Counts 429 Too Many Requests and gRPC RESOURCE_EXHAUSTED as failures (or, with
    /// `false`, ignores both: the default).
    pub fn count_throttling(mut self, count: bool) -> Self {
        self.http = self.http.count_too_many_requests(count);
        self.grpc = self.grpc.count_resource_exhausted(count);
        self
    }

    /// The HTTP rules.
    pub fn http_rules(&self) -> &HttpClassifier {
        &self.http
    }

    /// The gRPC rules.
    pub fn grpc_rules(&self) -> &GrpcClassifier {
        &self.grpc
    }

    #[inline]
    fn is_grpc(&self, status: StatusCode, headers: &HeaderMap) -> bool {
        match self.protocol {
            Protocol::Http => false,
            Protocol::Grpc => true,
            Protocol::Auto => {
                status == StatusCode::OK
                    && headers
                        .get(header::CONTENT_TYPE)
                        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
            }
        }
    }
}

impl Classifier for StandardClassifier {
    #[inline]
    fn classify_response(
        &self,
        call: &Call<'_>,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Classified {
        if self.is_grpc(status, headers) {
            self.grpc.classify_response(call, status, headers)
        } else {
            self.http.classify_response(call, status, headers)
        }
    }

    fn classify_eos(&self, call: &Call<'_>, trailers: Option<&HeaderMap>) -> Verdict {
        // Only gRPC defers to the end of the stream.
        self.grpc.classify_eos(call, trailers)
    }

    fn inherit(&mut self, default: &Self) {
        self.http.inherit(&default.http);
        self.grpc.inherit(&default.grpc);
        if !self.protocol_set && default.protocol_set {
            self.protocol = default.protocol;
            self.protocol_set = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{CircuitOpen, Elapsed, TowerElapsed, TowerOverloaded};
    use crate::outcome::Outcome;
    use crate::route::RouteId;
    use http::{HeaderValue, Method};

    fn call() -> Call<'static> {
        Call::new(RouteId::DEFAULT, "default", &Method::GET, true)
    }

    #[derive(Debug)]
    struct Wrapper(Box<dyn Error + Send + Sync>);
    impl std::fmt::Display for Wrapper {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("wrapper")
        }
    }
    impl Error for Wrapper {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&*self.0)
        }
    }

    #[test]
    fn error_chain_defaults() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        let v = classify_error_chain(&refused);
        assert_eq!(v.outcome(), Outcome::Failure);
        assert_eq!(v.retry(), RetryHint::NotSent);

        let reset = Wrapper(Box::new(io::Error::from(io::ErrorKind::ConnectionReset)));
        assert_eq!(classify_error_chain(&reset).retry(), RetryHint::Retryable);

        let open = CircuitOpen::new("b".into(), None, std::time::Duration::ZERO, false);
        assert_eq!(classify_error_chain(&open).outcome(), Outcome::Ignored);
        let wrapped_open = Wrapper(Box::new(open));
        assert_eq!(
            classify_error_chain(&wrapped_open).outcome(),
            Outcome::Ignored
        );

        let elapsed = Elapsed::new("r".into(), std::time::Duration::from_millis(5));
        assert_eq!(
            classify_error_chain(&elapsed),
            Verdict::FAILURE.with_retry(RetryHint::Retryable)
        );
        let other = io::Error::other("boom");
        assert_eq!(classify_error_chain(&other), Verdict::FAILURE);
        // tower's own timeout and load shedding mean what fusebox's do.
        let tower_timeout = Wrapper(Box::new(TowerElapsed::new()));
        assert_eq!(
            classify_error_chain(&tower_timeout),
            Verdict::FAILURE.with_retry(RetryHint::Retryable)
        );
        let tower_shed = Wrapper(Box::new(TowerOverloaded::new()));
        assert_eq!(classify_error_chain(&tower_shed), Verdict::IGNORED);
        assert_eq!(
            classify_error_chain(&Wrapper("plain".into())),
            Verdict::FAILURE
        );
        let c = StandardClassifier::new();
        assert_eq!(
            c.classify_error(&call(), &refused).outcome(),
            Outcome::Failure
        );
    }

    #[test]
    fn standard_detects_grpc() {
        let c = StandardClassifier::new();
        let mut grpc = HeaderMap::new();
        grpc.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc+proto"),
        );
        assert_eq!(
            c.classify_response(&call(), StatusCode::OK, &grpc),
            Classified::AtEndOfStream
        );
        assert_eq!(
            c.classify_response(&call(), StatusCode::OK, &HeaderMap::new()),
            Classified::Ready(Verdict::SUCCESS)
        );
        let http_only = StandardClassifier::new().protocol(Protocol::Http);
        assert_eq!(
            http_only.classify_response(&call(), StatusCode::OK, &grpc),
            Classified::Ready(Verdict::SUCCESS)
        );
        let counted = StandardClassifier::new().count_throttling(true);
        assert!(matches!(
            counted.classify_response(&call(), StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new()),
            Classified::Ready(v) if v.is_failure()
        ));
    }

    #[test]
    fn grpc_web_is_grpc_trailers_only_from_its_headers() {
        let c = StandardClassifier::new();
        for ct in [
            "application/grpc-web",
            "application/grpc-web+proto",
            "application/grpc-web-text",
        ] {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
            assert_eq!(
                c.classify_response(&call(), StatusCode::OK, &h),
                Classified::AtEndOfStream
            );
            h.insert("grpc-status", HeaderValue::from_static("14"));
            assert_eq!(
                c.classify_response(&call(), StatusCode::OK, &h),
                Classified::Ready(Verdict::FAILURE.with_retry(RetryHint::Retryable)),
                "{ct}: a trailers-only answer"
            );
            h.insert("grpc-status", HeaderValue::from_static("0"));
            assert_eq!(
                c.classify_response(&call(), StatusCode::OK, &h),
                Classified::Ready(Verdict::SUCCESS)
            );
        }
    }
}
