//! [`ServiceBuilderExt`]: one `ServiceBuilder` method per fusebox layer, so that a stack
//! reads as the layers it holds.

use tower::ServiceBuilder;
use tower::layer::util::Stack;

#[cfg(feature = "breaker")]
use fusebox_breaker::{CircuitBreakerConfig, CircuitBreakerLayer};
#[cfg(feature = "limit")]
use fusebox_limit::{ConcurrencyLimitConfig, ConcurrencyLimitLayer};
#[cfg(feature = "retry")]
use fusebox_retry::{RetryBudgetLayer, RetryConfig};
#[cfg(feature = "timeout")]
use fusebox_timeout::{TimeoutConfig, TimeoutLayer};

#[cfg(feature = "policy")]
use crate::policy::Policy;

mod sealed {
    // Reachable only as the supertrait of `ServiceBuilderExt`: nobody else implements it.
    #[allow(unreachable_pub)]
    pub trait Sealed<L> {}

    impl<L> Sealed<L> for tower::ServiceBuilder<L> {}
}

/// fusebox's layers as methods of [`tower::ServiceBuilder`].
///
/// `ServiceBuilder::new().circuit_breaker(config)` is
/// `ServiceBuilder::new().layer(CircuitBreakerLayer::new(config))`: each method adds the
/// layer its `new` makes, which classifies every route with the default route table, and
/// the first layer added is the outermost. A layer with a route table of its own
/// (`XLayer::builder(config).routes(table).build()?`) goes in with
/// [`ServiceBuilder::layer`], as does any layer built another way.
///
/// tower's `ServiceBuilder` has inherent `concurrency_limit`, `timeout` and `retry` methods
/// (behind tower's features) for tower's own layers, and an inherent method wins over a
/// trait's: fusebox's are named apart, [`fusebox_concurrency_limit`],
/// [`fusebox_timeout`] and [`retry_budget`].
///
/// Sealed: implemented for `ServiceBuilder` only.
///
/// [`fusebox_concurrency_limit`]: ServiceBuilderExt::fusebox_concurrency_limit
/// [`fusebox_timeout`]: ServiceBuilderExt::fusebox_timeout
/// [`retry_budget`]: ServiceBuilderExt::retry_budget
///
/// ```
/// use fusebox::{CircuitBreakerConfig, ServiceBuilderExt, TimeoutConfig};
/// use std::time::Duration;
/// use tower::ServiceBuilder;
///
/// let svc = ServiceBuilder::new()
///     .circuit_breaker(CircuitBreakerConfig::builder().name("payments").build()?)
///     .fusebox_timeout(TimeoutConfig::builder().default_timeout(Duration::from_millis(250)).build()?)
///     .service_fn(|_req: http::Request<String>| async {
///         Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
///     });
/// # let _ = svc;
/// # Ok::<(), fusebox::ConfigError>(())
/// ```
///
/// A [`Policy`] holds all four layers in their order around one route table:
///
/// ```
/// use fusebox::{Policy, ServiceBuilderExt};
/// use std::time::Duration;
/// use tower::ServiceBuilder;
///
/// let policy = Policy::builder("payments")
///     .circuit_breaker(fusebox::CircuitBreakerConfig::builder())
///     .timeout(Duration::from_millis(250))
///     .build()?;
/// let svc = ServiceBuilder::new()
///     .policy(policy)
///     .service_fn(|_req: http::Request<String>| async {
///         Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
///     });
/// # let _ = svc;
/// # Ok::<(), fusebox::ConfigError>(())
/// ```
pub trait ServiceBuilderExt<L>: sealed::Sealed<L> + Sized {
    /// Adds a [`CircuitBreakerLayer`] with `config` and the default route table.
    ///
    /// ```
    /// use fusebox::{CircuitBreakerConfig, ServiceBuilderExt};
    ///
    /// let config = CircuitBreakerConfig::builder().name("payments").minimum_calls(20).build()?;
    /// let builder = tower::ServiceBuilder::new().circuit_breaker(config);
    /// # let _ = builder;
    /// # Ok::<(), fusebox::ConfigError>(())
    /// ```
    #[cfg(feature = "breaker")]
    #[cfg_attr(docsrs, doc(cfg(feature = "breaker")))]
    fn circuit_breaker(
        self,
        config: CircuitBreakerConfig,
    ) -> ServiceBuilder<Stack<CircuitBreakerLayer, L>>;

    /// Adds a [`ConcurrencyLimitLayer`] with `config` and the default route table. Named
    /// apart from tower's own `ServiceBuilder::concurrency_limit`.
    ///
    /// ```
    /// use fusebox::{ConcurrencyLimitConfig, ServiceBuilderExt};
    ///
    /// let config = ConcurrencyLimitConfig::builder().max_concurrency(64).build()?;
    /// let builder = tower::ServiceBuilder::new().fusebox_concurrency_limit(config);
    /// # let _ = builder;
    /// # Ok::<(), fusebox::ConfigError>(())
    /// ```
    #[cfg(feature = "limit")]
    #[cfg_attr(docsrs, doc(cfg(feature = "limit")))]
    fn fusebox_concurrency_limit(
        self,
        config: ConcurrencyLimitConfig,
    ) -> ServiceBuilder<Stack<ConcurrencyLimitLayer, L>>;

    /// Adds a [`TimeoutLayer`] with `config` and the default route table. Named apart from
    /// tower's own `ServiceBuilder::timeout`.
    ///
    /// ```
    /// use fusebox::{ServiceBuilderExt, TimeoutConfig};
    /// use std::time::Duration;
    ///
    /// let config = TimeoutConfig::builder().default_timeout(Duration::from_secs(1)).build()?;
    /// let builder = tower::ServiceBuilder::new().fusebox_timeout(config);
    /// # let _ = builder;
    /// # Ok::<(), fusebox::ConfigError>(())
    /// ```
    #[cfg(feature = "timeout")]
    #[cfg_attr(docsrs, doc(cfg(feature = "timeout")))]
    fn fusebox_timeout(self, config: TimeoutConfig) -> ServiceBuilder<Stack<TimeoutLayer, L>>;

    /// Adds a [`RetryBudgetLayer`] with `config` and the default route table.
    ///
    /// ```
    /// use fusebox::{RetryConfig, ServiceBuilderExt};
    ///
    /// let config = RetryConfig::builder().retry_ratio(0.1).build()?;
    /// let builder = tower::ServiceBuilder::new().retry_budget(config);
    /// # let _ = builder;
    /// # Ok::<(), fusebox::ConfigError>(())
    /// ```
    #[cfg(feature = "retry")]
    #[cfg_attr(docsrs, doc(cfg(feature = "retry")))]
    fn retry_budget(self, config: RetryConfig) -> ServiceBuilder<Stack<RetryBudgetLayer, L>>;

    /// Adds a [`Policy`]: its retry budget, circuit breaker, concurrency limit and timeout,
    /// in that order, around its route table.
    ///
    /// ```
    /// use fusebox::{Policy, ServiceBuilderExt};
    ///
    /// let policy = Policy::builder("search").concurrency_limit(32).build()?;
    /// let builder = tower::ServiceBuilder::new().policy(policy);
    /// # let _ = builder;
    /// # Ok::<(), fusebox::ConfigError>(())
    /// ```
    #[cfg(feature = "policy")]
    #[cfg_attr(docsrs, doc(cfg(feature = "policy")))]
    fn policy<C>(self, policy: Policy<C>) -> ServiceBuilder<Stack<Policy<C>, L>>;
}

impl<L> ServiceBuilderExt<L> for ServiceBuilder<L> {
    #[cfg(feature = "breaker")]
    fn circuit_breaker(
        self,
        config: CircuitBreakerConfig,
    ) -> ServiceBuilder<Stack<CircuitBreakerLayer, L>> {
        self.layer(CircuitBreakerLayer::new(config))
    }

    #[cfg(feature = "limit")]
    fn fusebox_concurrency_limit(
        self,
        config: ConcurrencyLimitConfig,
    ) -> ServiceBuilder<Stack<ConcurrencyLimitLayer, L>> {
        self.layer(ConcurrencyLimitLayer::new(config))
    }

    #[cfg(feature = "timeout")]
    fn fusebox_timeout(self, config: TimeoutConfig) -> ServiceBuilder<Stack<TimeoutLayer, L>> {
        self.layer(TimeoutLayer::new(config))
    }

    #[cfg(feature = "retry")]
    fn retry_budget(self, config: RetryConfig) -> ServiceBuilder<Stack<RetryBudgetLayer, L>> {
        self.layer(RetryBudgetLayer::new(config))
    }

    #[cfg(feature = "policy")]
    fn policy<C>(self, policy: Policy<C>) -> ServiceBuilder<Stack<Policy<C>, L>> {
        self.layer(policy)
    }
}
