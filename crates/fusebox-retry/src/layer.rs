//! The layer: settings, routes and the one budget every service it builds shares.

use crate::budget::RetryBudget;
use crate::config::RetryConfig;
use crate::service::{Retry, Shared};
use fusebox_classify::{Classifier, ConfigError, RouteTable, StandardClassifier};
use std::fmt;
use std::sync::{Arc, Weak};
use tower_layer::Layer;

/// Wraps services in [`Retry`]: retries within a budget, classified per route.
///
/// The budget is created here, once: every service this layer builds, and every clone of
/// them, spends from the same budget. Cloning the layer shares it too.
pub struct RetryBudgetLayer<C = StandardClassifier> {
    shared: Arc<Shared<C>>,
}

impl RetryBudgetLayer {
    /// A layer with these settings and the default route table (the standard HTTP and gRPC
    /// classifier, retries allowed).
    pub fn new(config: RetryConfig) -> Self {
        RetryBudgetLayer {
            shared: Arc::new(Shared::new(config, RouteTable::default())),
        }
    }

    /// A builder, to classify calls by a route table.
    pub fn builder(config: RetryConfig) -> RetryBudgetLayerBuilder {
        RetryBudgetLayerBuilder {
            config,
            routes: RouteTable::default(),
        }
    }
}

impl Default for RetryBudgetLayer {
    fn default() -> Self {
        RetryBudgetLayer::new(RetryConfig::default())
    }
}

/// Builds a [`RetryBudgetLayer`] (the shape every fusebox layer's builder has).
#[derive(Debug, Clone)]
pub struct RetryBudgetLayerBuilder<C = StandardClassifier> {
    config: RetryConfig,
    routes: RouteTable<C>,
}

impl<C: Classifier> RetryBudgetLayerBuilder<C> {
    /// Classifies calls by `routes` (default: one route, the standard classifier).
    pub fn routes<C2: Classifier>(self, routes: RouteTable<C2>) -> RetryBudgetLayerBuilder<C2> {
        RetryBudgetLayerBuilder {
            config: self.config,
            routes,
        }
    }

    /// The layer, with its budget. Nothing here can be wrong (the configuration and the
    /// table were checked when they were built); the `Result` is the shape every fusebox
    /// layer's builder has.
    pub fn build(self) -> Result<RetryBudgetLayer<C>, ConfigError> {
        Ok(RetryBudgetLayer {
            shared: Arc::new(Shared::new(self.config, self.routes)),
        })
    }
}

impl<C> RetryBudgetLayer<C> {
    /// The budget every service of this layer spends from.
    pub fn budget(&self) -> &RetryBudget {
        &self.shared.budget
    }

    /// The settings calls read now: as built, or as the last
    /// [`reconfigure`](RetryBudgetLayer::reconfigure) set them.
    pub fn config(&self) -> Arc<RetryConfig> {
        self.shared.config.load_full()
    }

    /// Takes `config`'s settings from the next call on (a reload of a running layer),
    /// keeping the budget's window and counts. Calls in flight read the new settings from
    /// their next retry or hedge on. The layer's name (it labels every series) and the
    /// budget's window (`ttl`: its buckets are cut from it) are fixed when the layer is
    /// built: a `config` that changes either is refused, changing nothing, and the error
    /// says which. The jitter source keeps the seed it was built with.
    ///
    /// ```
    /// use fusebox_retry::{RetryBudgetLayer, RetryConfig, Reconfigure};
    /// use std::time::Duration;
    ///
    /// let layer = RetryBudgetLayer::new(RetryConfig::builder().name("rates").max_attempts(3).build()?);
    /// layer.reconfigure(RetryConfig::builder().name("rates").max_attempts(2).build()?)?;
    /// assert_eq!(layer.config().max_attempts(), 2);
    ///
    /// let other_window = RetryConfig::builder().name("rates").ttl(Duration::from_secs(30)).build()?;
    /// assert_eq!(layer.reconfigure(other_window), Err(Reconfigure::Ttl));
    /// assert_eq!(layer.config().max_attempts(), 2, "nothing changed");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reconfigure(&self, config: RetryConfig) -> Result<(), Reconfigure> {
        self.shared.reconfigure(config)
    }

    /// The route table.
    pub fn routes(&self) -> &RouteTable<C> {
        &self.shared.routes
    }
}

impl<C: Send + Sync + 'static> RetryBudgetLayer<C> {
    /// A handle on the layer's budget and settings, whatever its classifier: for
    /// dashboards and lists of what a process runs (such as the `fusebox` facade's
    /// registry). Cheap to clone; it keeps the budget alive.
    pub fn handle(&self) -> RetryHandle {
        RetryHandle {
            shared: Arc::clone(&self.shared) as Arc<dyn View>,
        }
    }
}

/// What a [`RetryHandle`] reads, whatever the classifier.
trait View: Send + Sync + 'static {
    fn config(&self) -> Arc<RetryConfig>;
    fn name(&self) -> &str;
    fn budget(&self) -> &RetryBudget;
}

impl<C: Send + Sync + 'static> View for Shared<C> {
    fn config(&self) -> Arc<RetryConfig> {
        self.config.load_full()
    }
    fn name(&self) -> &str {
        &self.metrics.name
    }
    fn budget(&self) -> &RetryBudget {
        &self.budget
    }
}

/// A retry layer's budget and settings ([`RetryBudgetLayer::handle`]).
#[derive(Clone)]
pub struct RetryHandle {
    shared: Arc<dyn View>,
}

impl RetryHandle {
    /// The layer's name.
    pub fn name(&self) -> &str {
        self.shared.name()
    }

    /// The settings calls read now (see [`RetryBudgetLayer::reconfigure`]).
    pub fn config(&self) -> Arc<RetryConfig> {
        self.shared.config()
    }

    /// The budget every service of the layer spends from.
    pub fn budget(&self) -> &RetryBudget {
        self.shared.budget()
    }

    /// A handle that does not keep the budget alive.
    pub fn downgrade(&self) -> WeakRetryHandle {
        WeakRetryHandle {
            shared: Arc::downgrade(&self.shared),
        }
    }
}

impl fmt::Debug for RetryHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryHandle")
            .field("name", &self.name())
            .field("budget", &self.budget().snapshot())
            .finish()
    }
}

/// Why a [`RetryBudgetLayer`] did not take new settings in place
/// ([`RetryBudgetLayer::reconfigure`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reconfigure {
    /// The name differs: it labels every series, so it is fixed when the layer is built.
    Name,
    /// The budget's window (`ttl`) differs: its buckets are cut from it.
    Ttl,
}

impl fmt::Display for Reconfigure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reconfigure::Name => "the retry layer's name is fixed when it is built",
            Reconfigure::Ttl => "the budget's window (ttl) is fixed when the layer is built",
        })
    }
}

impl std::error::Error for Reconfigure {}

/// A [`RetryHandle`] that does not keep the budget alive ([`RetryHandle::downgrade`]).
#[derive(Clone)]
pub struct WeakRetryHandle {
    shared: Weak<dyn View>,
}

impl WeakRetryHandle {
    /// The handle, while the layer or any of its services is alive.
    pub fn upgrade(&self) -> Option<RetryHandle> {
        self.shared.upgrade().map(|shared| RetryHandle { shared })
    }
}

impl fmt::Debug for WeakRetryHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WeakRetryHandle")
            .field("alive", &(self.shared.strong_count() > 0))
            .finish()
    }
}

impl<C> Clone for RetryBudgetLayer<C> {
    fn clone(&self) -> Self {
        RetryBudgetLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<C> fmt::Debug for RetryBudgetLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryBudgetLayer")
            .field("shared", &self.shared)
            .finish()
    }
}

impl<S, C> Layer<S> for RetryBudgetLayer<C> {
    type Service = Retry<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        Retry::new(inner, Arc::clone(&self.shared))
    }
}
