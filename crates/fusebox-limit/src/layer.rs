//! The layer: one limit, shared by every service it builds and every clone of it.

use crate::config::ConcurrencyLimitConfig;
use crate::limiter::{Lane, Lanes, Limiter};
use crate::observe::LimitHandle;
use crate::partition::{Partitions, Unpartitioned};
use crate::service::ConcurrencyLimit;
use fusebox_classify::{Classifier, ConfigError, RouteTable, StandardClassifier};
use std::fmt;
use std::sync::Arc;
use tower_layer::Layer;

/// Applies a concurrency limit; see the [crate docs](crate).
///
/// The limit's state is created here, once: every clone of this layer value and every
/// service [`layer`](Layer::layer) builds share it, so that "at most 64 calls to the fraud
/// service" holds across all the connections and tasks that call it. Build two layer values
/// for two independent limits.
pub struct ConcurrencyLimitLayer<C = StandardClassifier, P = Unpartitioned> {
    /// The root lane (the limiter) first, then one per partition.
    lanes: Lanes<C>,
    config: ConcurrencyLimitConfig,
    partitioner: P,
}

impl ConcurrencyLimitLayer {
    /// A limit whose adaptive algorithm (if any) classifies calls with the default route
    /// table (HTTP and gRPC status rules, no slow-call threshold).
    pub fn new(config: ConcurrencyLimitConfig) -> Self {
        Self::assemble(config, RouteTable::default(), false)
    }

    /// A builder, to classify calls by a route table.
    pub fn builder(config: ConcurrencyLimitConfig) -> ConcurrencyLimitLayerBuilder {
        ConcurrencyLimitLayerBuilder {
            config,
            routes: RouteTable::default(),
            expose: false,
        }
    }
}

impl<C: Classifier> ConcurrencyLimitLayer<C> {
    fn assemble(config: ConcurrencyLimitConfig, routes: RouteTable<C>, expose: bool) -> Self {
        ConcurrencyLimitLayer {
            lanes: Lane::all(Limiter::new(&config, routes, &[]).exposing(expose)),
            config,
            partitioner: Unpartitioned,
        }
    }
}

/// Builds a [`ConcurrencyLimitLayer`] (the shape every fusebox layer's builder has).
#[derive(Debug, Clone)]
pub struct ConcurrencyLimitLayerBuilder<C = StandardClassifier> {
    config: ConcurrencyLimitConfig,
    routes: RouteTable<C>,
    expose: bool,
}

impl<C: Classifier> ConcurrencyLimitLayerBuilder<C> {
    /// Classifies calls with `routes`: each route's classifier and slow-call threshold
    /// decide which calls an adaptive limit counts as drops (default: one route, the
    /// standard classifier, no slow-call threshold).
    pub fn routes<C2: Classifier>(
        self,
        routes: RouteTable<C2>,
    ) -> ConcurrencyLimitLayerBuilder<C2> {
        ConcurrencyLimitLayerBuilder {
            config: self.config,
            routes,
            expose: self.expose,
        }
    }

    /// Leaves each answer's verdict in its response's extensions, as a
    /// [`fusebox_classify::AnswerVerdict`] (default `false`): read it with
    /// `response.extensions().get::<AnswerVerdict>()`. The verdict is the route
    /// classifier's, classified once for every stage of the call (an adaptive limit judges
    /// by it; a fixed limit classifies the answer only to expose it). It costs an allocation
    /// per response (the extensions' map and the value), which is why it is off unless
    /// asked for. An error has no extensions: its verdict is not exposed.
    pub fn expose_verdict(mut self, expose: bool) -> Self {
        self.expose = expose;
        self
    }

    /// The layer, with its limit. Nothing here can be wrong (the configuration and the
    /// table were checked when they were built); the `Result` is the shape every fusebox
    /// layer's builder has.
    pub fn build(self) -> Result<ConcurrencyLimitLayer<C>, ConfigError> {
        Ok(ConcurrencyLimitLayer::assemble(
            self.config,
            self.routes,
            self.expose,
        ))
    }
}

impl<C: Classifier, P> ConcurrencyLimitLayer<C, P> {
    /// The same limit, partitioned: each partition is guaranteed its share (see
    /// [`partition`](crate::partition)).
    ///
    /// This creates the limit's state anew (with the partitions' counts): call it before
    /// cloning the layer or building services with it.
    pub fn partitioned<K, F>(
        self,
        partitions: Partitions<K, F>,
    ) -> ConcurrencyLimitLayer<C, Partitions<K, F>> {
        let limiter = self.lanes[0].limiter();
        let (table, expose) = (limiter.table.clone(), limiter.expose);
        ConcurrencyLimitLayer {
            lanes: Lane::all(
                Limiter::new(&self.config, table, partitions.shares()).exposing(expose),
            ),
            config: self.config,
            partitioner: partitions,
        }
    }

    /// A read-only view of the limit.
    pub fn handle(&self) -> LimitHandle {
        LimitHandle::new(self.lanes[0].shared().clone())
    }

    /// The configuration.
    pub fn config(&self) -> &ConcurrencyLimitConfig {
        &self.config
    }
}

impl<C, P: Clone> Clone for ConcurrencyLimitLayer<C, P> {
    fn clone(&self) -> Self {
        ConcurrencyLimitLayer {
            lanes: Arc::clone(&self.lanes),
            config: self.config.clone(),
            partitioner: self.partitioner.clone(),
        }
    }
}

impl<C, P> fmt::Debug for ConcurrencyLimitLayer<C, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimitLayer")
            .field("config", &self.config)
            .field("limiter", self.lanes[0].limiter())
            .finish_non_exhaustive()
    }
}

impl<S, C, P: Clone> Layer<S> for ConcurrencyLimitLayer<C, P> {
    type Service = ConcurrencyLimit<S, C, P>;

    fn layer(&self, inner: S) -> Self::Service {
        ConcurrencyLimit::new(inner, Arc::clone(&self.lanes), self.partitioner.clone())
    }
}
