//! The layers: [`TimeoutLayer`] for calls to a dependency, [`IncomingDeadlineLayer`] for a
//! server's incoming requests.

use crate::config::{DeadlineConfig, TimeoutConfig};
use crate::service::{IncomingDeadline, Timeout};
use fusebox_classify::{Classifier, RouteTable, StandardClassifier};
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
    config: TimeoutConfig,
}

impl<C: Classifier> TimeoutLayer<C> {
    /// A layer reading each route's timeout from `routes`, and everything else from
    /// `config`.
    pub fn new(routes: RouteTable<C>, config: TimeoutConfig) -> Self {
        TimeoutLayer { routes, config }
    }

    /// The route table.
    pub fn routes(&self) -> &RouteTable<C> {
        &self.routes
    }

    /// The configuration.
    pub fn config(&self) -> &TimeoutConfig {
        &self.config
    }
}

impl<S, C: Classifier> Layer<S> for TimeoutLayer<C> {
    type Service = Timeout<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        Timeout::new(inner, self.routes.clone(), self.config.clone())
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
