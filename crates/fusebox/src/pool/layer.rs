//! The pool layer and its builder, and the discover stream it makes: every endpoint the
//! inner stream inserts gets its own breaker.

use super::config::PoolConfig;
use super::endpoint::Endpoint;
use super::limit::{EndpointLimit, unmeasured};
use super::shared::{PoolListener, Shared, Slot};
use super::status::{PoolEvent, PoolHandle};
use fusebox_breaker::{CircuitBreakerConfig, CircuitBreakerLayer};
use fusebox_classify::{BoxError, Classifier, RouteTable, StandardClassifier};
use fusebox_limit::LimitHandle;
use futures_util::Stream;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tower::balance::p2c::Balance;
use tower::discover::{Change, Discover};
use tower_layer::Layer;

/// Gives every endpoint of a [`Discover`] stream its own circuit breaker, for tower's p2c
/// [`Balance`]; see the [module docs](super).
///
/// One layer value is one pool: the streams it wraps (and the balancers over them) share
/// one ejection cap and one panic threshold, and its [`handle`](Self::handle) sees all
/// their endpoints.
pub struct PoolLayer<C = StandardClassifier> {
    shared: Arc<Shared>,
    table: RouteTable<C>,
}

impl<C: Clone> Clone for PoolLayer<C> {
    fn clone(&self) -> Self {
        PoolLayer {
            shared: Arc::clone(&self.shared),
            table: self.table.clone(),
        }
    }
}

impl<C> fmt::Debug for PoolLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolLayer")
            .field("dependency", &self.shared.name)
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl PoolLayer {
    /// A builder: every endpoint's breaker is built from `breaker` (its name is the pool's
    /// dependency, and each endpoint's breaker carries the endpoint's key).
    pub fn builder(breaker: CircuitBreakerConfig) -> PoolLayerBuilder {
        PoolLayerBuilder {
            breaker,
            config: PoolConfig::default(),
            table: RouteTable::default(),
            listeners: Vec::new(),
        }
    }
}

impl<C: Classifier> PoolLayer<C> {
    /// An operator's handle on the pool.
    pub fn handle(&self) -> PoolHandle {
        PoolHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// tower's p2c balancer over `discover`'s endpoints, each behind its breaker.
    pub fn balance<D, Req>(&self, discover: D) -> Balance<PoolDiscover<D, C>, Req>
    where
        D: Discover + Unpin,
        D::Key: Clone + Unpin + std::hash::Hash + fmt::Display,
        D::Error: Into<BoxError>,
        Endpoint<D::Service, C>: tower_service::Service<Req, Error = BoxError>,
    {
        Balance::new(self.layer(discover))
    }

    /// The pool's view of `discover`'s endpoints, each behind its breaker, with each
    /// endpoint's headroom measured by its concurrency limit ([`EndpointLimit`]): a tripped
    /// endpoint is ejected only when the endpoints left serving have room, by their limits'
    /// current limits minus their calls in flight, for its share of the calls in flight
    /// (see the [module docs](super#measured-headroom)). Give it to tower's `Balance`, or
    /// use [`balance_measured`](Self::balance_measured).
    pub fn measured<D>(&self, discover: D) -> PoolDiscover<D, C>
    where
        D: Discover,
        D::Service: EndpointLimit,
    {
        let mut pool = self.layer(discover);
        pool.measure = <D::Service as EndpointLimit>::limit_handle;
        pool
    }

    /// tower's p2c balancer over [`measured`](Self::measured) endpoints.
    pub fn balance_measured<D, Req>(&self, discover: D) -> Balance<PoolDiscover<D, C>, Req>
    where
        D: Discover + Unpin,
        D::Key: Clone + Unpin + std::hash::Hash + fmt::Display,
        D::Error: Into<BoxError>,
        D::Service: EndpointLimit,
        Endpoint<D::Service, C>: tower_service::Service<Req, Error = BoxError>,
    {
        Balance::new(self.measured(discover))
    }
}

impl<D: Discover, C: Classifier> Layer<D> for PoolLayer<C> {
    type Service = PoolDiscover<D, C>;

    fn layer(&self, inner: D) -> PoolDiscover<D, C> {
        PoolDiscover {
            inner,
            shared: Arc::clone(&self.shared),
            table: self.table.clone(),
            slots: Vec::new(),
            measure: unmeasured::<D::Service>,
        }
    }
}

/// Builds a [`PoolLayer`].
pub struct PoolLayerBuilder<C = StandardClassifier> {
    breaker: CircuitBreakerConfig,
    config: PoolConfig,
    table: RouteTable<C>,
    listeners: Vec<PoolListener>,
}

impl<C> fmt::Debug for PoolLayerBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolLayerBuilder")
            .field("breaker", &self.breaker)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<C: Classifier> PoolLayerBuilder<C> {
    /// Classifies every endpoint's calls per route with `table` (default: one route, the
    /// [`StandardClassifier`]).
    pub fn routes<C2: Classifier>(self, table: RouteTable<C2>) -> PoolLayerBuilder<C2> {
        PoolLayerBuilder {
            breaker: self.breaker,
            config: self.config,
            table,
            listeners: self.listeners,
        }
    }

    /// The ejection cap, the panic threshold and the endpoints' capacity (default:
    /// [`PoolConfig::default`]).
    pub fn config(mut self, config: PoolConfig) -> Self {
        self.config = config;
        self
    }

    /// Calls `listener` with every pool event, synchronously, on the task that polls the
    /// balancer (the endpoints' breakers' own events go to their breakers' subscribers).
    pub fn on_event(mut self, listener: impl Fn(&PoolEvent) + Send + Sync + 'static) -> Self {
        self.listeners.push(Arc::new(listener));
        self
    }

    /// The layer. Nothing is left to check: the breaker's configuration and the pool's
    /// ([`PoolConfig::builder`]) were validated when they were built.
    pub fn build(self) -> PoolLayer<C> {
        PoolLayer {
            shared: Arc::new(Shared::new(self.config, self.breaker, self.listeners)),
            table: self.table,
        }
    }
}

/// A [`Discover`] stream whose endpoints each have their own breaker ([`Endpoint`]);
/// made by [`PoolLayer`]. Each time the balancer polls it, it first brings the pool's
/// decision up to date if a breaker moved (one atomic load when none did).
///
/// An endpoint's key names its breaker's series and events (`key`): its `Display`.
pub struct PoolDiscover<D: Discover, C = StandardClassifier> {
    inner: D,
    shared: Arc<Shared>,
    table: RouteTable<C>,
    slots: Vec<(D::Key, Arc<Slot>)>,
    /// How an inserted endpoint's limit is found ([`PoolLayer::measured`]), or that it is
    /// not looked for.
    measure: fn(&D::Service) -> Option<LimitHandle>,
}

impl<D: Discover + fmt::Debug, C> fmt::Debug for PoolDiscover<D, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolDiscover")
            .field("inner", &self.inner)
            .field("dependency", &self.shared.name)
            .field("endpoints", &self.slots.len())
            .finish()
    }
}

impl<D: Discover, C: Classifier> PoolDiscover<D, C> {
    /// An operator's handle on the pool.
    pub fn handle(&self) -> PoolHandle {
        PoolHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    fn forget(&mut self, key: &D::Key) {
        if let Some(i) = self.slots.iter().position(|(k, _)| k == key) {
            let (_, slot) = self.slots.swap_remove(i);
            self.shared.remove(&slot);
        }
    }

    fn endpoint(
        &mut self,
        key: D::Key,
        service: D::Service,
    ) -> Result<Endpoint<D::Service, C>, BoxError>
    where
        D::Key: fmt::Display,
    {
        // A key inserted again replaces its endpoint, as tower's balancer does.
        self.forget(&key);
        let label: Arc<str> = key.to_string().into();
        let signal = self.shared.signal();
        let ring = Arc::clone(&signal);
        let layer = CircuitBreakerLayer::builder(self.shared.breaker.clone())
            .routes(self.table.clone())
            .key(Arc::clone(&label))
            .on_event(move |_| ring.ring())
            .build()?;
        let slot =
            Arc::new(Slot::new(label, layer.handle(), signal).limited((self.measure)(&service)));
        self.slots.push((key, Arc::clone(&slot)));
        self.shared.insert(Arc::clone(&slot));
        Ok(Endpoint::new(service, layer.stage(), slot))
    }
}

impl<D, C> Stream for PoolDiscover<D, C>
where
    D: Discover + Unpin,
    D::Key: Clone + Unpin + fmt::Display,
    D::Error: Into<BoxError>,
    C: Classifier,
{
    type Item = Result<Change<D::Key, Endpoint<D::Service, C>>, BoxError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        this.shared.refresh();
        let change = match ready!(Pin::new(&mut this.inner).poll_discover(cx)) {
            None => return Poll::Ready(None),
            Some(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
            Some(Ok(change)) => change,
        };
        Poll::Ready(Some(match change {
            Change::Insert(key, service) => this
                .endpoint(key.clone(), service)
                .map(|endpoint| Change::Insert(key, endpoint)),
            Change::Remove(key) => {
                this.forget(&key);
                Ok(Change::Remove(key))
            }
        }))
    }
}

impl<D: Discover, C> Drop for PoolDiscover<D, C> {
    fn drop(&mut self) {
        for (_, slot) in self.slots.drain(..) {
            self.shared.remove(&slot);
        }
    }
}
