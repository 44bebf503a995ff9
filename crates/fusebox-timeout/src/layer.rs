//! The layers: [`TimeoutLayer`] for calls to a dependency, [`IncomingDeadlineLayer`] for a
//! server's incoming requests.

use crate::config::{DeadlineConfig, TimeoutConfig};
use crate::service::{BodyTimeout, IncomingDeadline, RouteNames, Timeout};
use crate::table::Timeouts;
use fusebox_classify::{Classifier, ConfigError, RouteTable, StandardClassifier};
use tower_layer::Layer;

/// Applies per-route timeouts, and callers' deadlines, to a service: builds [`Timeout`].
///
/// It holds configuration only: the shared [`RouteTable`] (each route's
/// [`timeout_duration`](fusebox_classify::Route::timeout_duration)) and a
/// [`TimeoutConfig`] (the timeout of routes without one, the body timeout, which headers
/// carry the budget downstream). Cloning it, or layering many services with it, shares the
/// table.
#[derive(Debug, Clone)]
pub struct TimeoutLayer<C = StandardClassifier> {
    routes: RouteTable<C>,
    /// The routes' names, made once for every service the layer builds.
    names: RouteNames,
    config: TimeoutConfig,
    /// Each route's timeout, shared by every service the layer builds (a reload sets it).
    timeouts: Timeouts,
}

impl TimeoutLayer {
    /// A layer with `config` and the default route table (one route, no timeout of its
    /// own: every call gets [`TimeoutConfig::default_timeout`]).
    pub fn new(config: TimeoutConfig) -> Self {
        let routes = RouteTable::default();
        TimeoutLayer {
            names: RouteNames::new(&routes, config.shared_name()),
            timeouts: Timeouts::new(&routes, &config),
            routes,
            config,
        }
    }

    /// A builder, to read each route's timeout from a route table.
    pub fn builder(config: TimeoutConfig) -> TimeoutLayerBuilder {
        TimeoutLayerBuilder {
            config,
            routes: RouteTable::default(),
        }
    }
}

/// Builds a [`TimeoutLayer`] (the shape every fusebox layer's builder has).
#[derive(Debug, Clone)]
pub struct TimeoutLayerBuilder<C = StandardClassifier> {
    config: TimeoutConfig,
    routes: RouteTable<C>,
}

impl<C: Classifier> TimeoutLayerBuilder<C> {
    /// Reads each route's timeout from `routes` (default: one route, no timeout of its own).
    pub fn routes<C2: Classifier>(self, routes: RouteTable<C2>) -> TimeoutLayerBuilder<C2> {
        TimeoutLayerBuilder {
            config: self.config,
            routes,
        }
    }

    /// The layer. Nothing here can be wrong (the configuration and the table were checked
    /// when they were built); the `Result` is the shape every fusebox layer's builder has.
    pub fn build(self) -> Result<TimeoutLayer<C>, ConfigError> {
        Ok(TimeoutLayer {
            names: RouteNames::new(&self.routes, self.config.shared_name()),
            timeouts: Timeouts::new(&self.routes, &self.config),
            routes: self.routes,
            config: self.config,
        })
    }
}

impl<C: Classifier> TimeoutLayer<C> {
    /// The route table.
    pub fn routes(&self) -> &RouteTable<C> {
        &self.routes
    }

    /// The configuration.
    pub fn config(&self) -> &TimeoutConfig {
        &self.config
    }

    /// The layer that bounds response bodies with the same table and configuration
    /// ([`TimeoutConfig::body_timeout`], and callers' deadlines).
    pub fn body_layer(&self) -> BodyTimeoutLayer<C> {
        BodyTimeoutLayer {
            routes: self.routes.clone(),
            names: self.names.clone(),
            timeout: self.config.body_timeout(),
        }
    }
}

impl<S, C: Classifier> Layer<S> for TimeoutLayer<C> {
    type Service = Timeout<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        Timeout::with_names(
            inner,
            self.names.clone(),
            self.routes.clone(),
            self.config.clone(),
            self.timeouts.clone(),
        )
    }
}

/// Bounds how long response bodies may take, from the headers to the end of the stream:
/// builds [`BodyTimeout`].
///
/// [`TimeoutLayer`] bounds the wait for the response *headers*; a body can then stream, or
/// stall, for much longer. This layer wraps each response body in a
/// [`TimeoutBody`](crate::TimeoutBody) whose timer runs until
/// [`TimeoutConfig::body_timeout`] or the caller's
/// [`Deadline`](fusebox_classify::Deadline), whichever comes first, and ends the stream
/// with an [`Elapsed`](crate::error::Elapsed) error when it fires. It is a layer of its own
/// (as tower-http separates its body timeouts) so that services that do not bound bodies
/// keep their response type and pay nothing for it.
#[derive(Debug, Clone)]
pub struct BodyTimeoutLayer<C = StandardClassifier> {
    routes: RouteTable<C>,
    /// The routes' names, made once for every service the layer builds.
    names: RouteNames,
    timeout: Option<std::time::Duration>,
}

impl BodyTimeoutLayer {
    /// A layer bounding bodies by `config`'s [`body_timeout`](TimeoutConfig::body_timeout)
    /// (none: bodies are bounded only by callers' deadlines), with the default route table;
    /// [`TimeoutLayer::body_layer`] gives one with the timeout layer's table.
    pub fn new(config: &TimeoutConfig) -> Self {
        let routes = RouteTable::default();
        BodyTimeoutLayer {
            names: RouteNames::new(&routes, config.shared_name()),
            routes,
            timeout: config.body_timeout(),
        }
    }
}

impl<C: Classifier> BodyTimeoutLayer<C> {
    /// The body timeout, if any.
    pub fn timeout(&self) -> Option<std::time::Duration> {
        self.timeout
    }
}

impl<S, C: Classifier> Layer<S> for BodyTimeoutLayer<C> {
    type Service = BodyTimeout<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        BodyTimeout::with_names(inner, self.names.clone(), self.routes.clone(), self.timeout)
    }
}

/// Reads a caller's timeout from incoming request headers (`grpc-timeout`, and optionally
/// a header of milliseconds) into a [`Deadline`](fusebox_classify::Deadline) in the
/// request's extensions: builds [`IncomingDeadline`].
///
/// It belongs on a server's inbound stack, in front of the handlers; a
/// [`TimeoutLayer`] on the outbound stack (the client to a dependency) then honours the
/// deadline and sends what remains of it downstream.
#[derive(Debug, Clone, Default)]
pub struct IncomingDeadlineLayer {
    config: DeadlineConfig,
}

impl IncomingDeadlineLayer {
    /// Reads `grpc-timeout` only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the headers `config` names.
    pub fn with_config(config: DeadlineConfig) -> Self {
        IncomingDeadlineLayer { config }
    }

    /// The configuration.
    pub fn config(&self) -> &DeadlineConfig {
        &self.config
    }
}

impl<S> Layer<S> for IncomingDeadlineLayer {
    type Service = IncomingDeadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IncomingDeadline::new(inner, self.config.clone())
    }
}
