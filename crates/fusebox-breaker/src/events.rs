//! What a breaker tells the world: `tracing` events, `metrics`, and a subscription.
//!
//! Every transition produces a `tracing` event (target `fusebox::breaker`; WARN when the
//! breaker opens, INFO otherwise) carrying the breaker's name and key, the reason, the
//! window's calls, failures and slow calls, both rates, and for an opening the open wait
//! and its jitter. The same [`BreakerEvent`] goes to subscribers
//! ([`BreakerHandle::subscribe`](crate::BreakerHandle::subscribe)) and to any
//! listener set on the layer.
//!
//! # Metrics
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | `fusebox_breaker_state` | gauge | `breaker` | 0 closed, 1 open, 2 half-open, 3 forced open, 4 disabled, 5 metrics-only (unkeyed breakers) |
//! | `fusebox_breaker_transitions_total` | counter | `breaker`, `from`, `to` | transitions |
//! | `fusebox_breaker_rejected_total` | counter | `breaker` | calls rejected without being sent |
//! | `fusebox_breaker_probes_total` | counter | `breaker`, `result` (`success`, `failure`, `released`) | half-open probes by result |
//! | `fusebox_breaker_failure_rate` | gauge | `breaker` | the window's failure rate, percent, as of the last counted failure or transition |
//! | `fusebox_breaker_slow_call_rate` | gauge | `breaker` | the window's slow-call rate, percent, likewise |
//! | `fusebox_breaker_state_milliseconds_total` | counter | `breaker`, `state` | time spent in each state, added at each transition |
//!
//! Metric handles are registered when the breaker is built: install the `metrics`
//! recorder before building layers.

use crate::state::{Reason, State, Transition};
use crate::window::WindowTotals;
use metrics::{Counter, Gauge};
use std::fmt;
use std::sync::Arc;
use tokio::sync::broadcast;

/// What happened to a breaker.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BreakerEvent {
    /// The breaker's name.
    pub breaker: Arc<str>,
    /// The key, for keyed breakers.
    pub key: Option<Arc<str>>,
    /// What happened.
    pub kind: EventKind,
}

impl BreakerEvent {
    /// An event of the breaker named `breaker` (and of its `key`, for keyed breakers): for
    /// custom stores and for tests of listeners.
    pub fn new(breaker: Arc<str>, key: Option<Arc<str>>, kind: EventKind) -> Self {
        BreakerEvent { breaker, key, kind }
    }
}

/// The kinds of [`BreakerEvent`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum EventKind {
    /// The breaker changed state.
    Transition(Transition),
    /// A METRICS_ONLY breaker's trip condition started (`would_open: true`) or stopped
    /// holding: what the breaker would have done.
    ShadowTrip {
        /// Whether the breaker would be open now.
        would_open: bool,
        /// The condition that holds (meaningful when `would_open`).
        reason: Reason,
        /// The window at that moment.
        window: WindowTotals,
    },
}

/// A function told of every event, synchronously, on the thread that caused it. Keep it
/// short: it runs on the request path of the call that caused the transition.
pub type Listener = Arc<dyn Fn(&BreakerEvent) + Send + Sync>;

/// Where a breaker (or every key of a keyed breaker) sends its events. Cheap to clone.
#[derive(Clone)]
pub struct EventSink {
    inner: Arc<SinkInner>,
}

struct SinkInner {
    name: Arc<str>,
    tx: broadcast::Sender<BreakerEvent>,
    listeners: Vec<Listener>,
    rejected: Counter,
    probe_success: Counter,
    probe_failure: Counter,
    probe_released: Counter,
    failure_rate: Gauge,
    slow_rate: Gauge,
    state: Gauge,
}

impl fmt::Debug for EventSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventSink")
            .field("breaker", &self.inner.name)
            .field("listeners", &self.inner.listeners.len())
            .finish()
    }
}

impl EventSink {
    /// A sink for the breaker `name`, registering its metric handles.
    pub fn new(name: Arc<str>, listeners: Vec<Listener>) -> Self {
        let (tx, _) = broadcast::channel(256);
        let label = name.to_string();
        let probes = |result: &'static str| metrics::counter!("fusebox_breaker_probes_total", "breaker" => label.clone(), "result" => result);
        let inner = SinkInner {
            rejected: metrics::counter!("fusebox_breaker_rejected_total", "breaker" => label.clone()),
            probe_success: probes("success"),
            probe_failure: probes("failure"),
            probe_released: probes("released"),
            failure_rate: metrics::gauge!("fusebox_breaker_failure_rate", "breaker" => label.clone()),
            slow_rate: metrics::gauge!("fusebox_breaker_slow_call_rate", "breaker" => label.clone()),
            state: metrics::gauge!("fusebox_breaker_state", "breaker" => label),
            name,
            tx,
            listeners,
        };
        inner.state.set(f64::from(State::Closed.code()));
        EventSink {
            inner: Arc::new(inner),
        }
    }

    /// The breaker's name.
    pub fn name(&self) -> &Arc<str> {
        &self.inner.name
    }

    /// A new subscription to every event from now on. A subscriber that falls more than
    /// 256 events behind loses the oldest (and is told so by `broadcast`'s `Lagged`).
    pub fn subscribe(&self) -> broadcast::Receiver<BreakerEvent> {
        self.inner.tx.subscribe()
    }

    /// Counts a rejected call.
    #[inline]
    pub fn rejected(&self) {
        self.inner.rejected.increment(1);
    }

    /// Counts a probe's result: `Some(true)` success, `Some(false)` failure, `None` released.
    pub fn probe(&self, result: Option<bool>) {
        match result {
            Some(true) => self.inner.probe_success.increment(1),
            Some(false) => self.inner.probe_failure.increment(1),
            None => self.inner.probe_released.increment(1),
        }
    }

    /// Publishes the window's rates.
    pub fn rates(&self, window: WindowTotals) {
        self.inner.failure_rate.set(window.failure_rate());
        self.inner.slow_rate.set(window.slow_rate());
    }

    /// Reports a transition everywhere: tracing, metrics, subscribers, listeners.
    pub fn transition(&self, key: Option<&Arc<str>>, t: Transition) {
        let name = &self.inner.name;
        let key_str = key.map(|k| &**k).unwrap_or("");
        let open_ms = t.open_for.map(|d| d.as_millis() as u64).unwrap_or(0);
        let jitter_ms = t.jitter.map(|d| d.as_millis() as u64).unwrap_or(0);
        macro_rules! transition_event {
            ($level:expr) => {
                tracing::event!(
                    target: "fusebox::breaker",
                    $level,
                    breaker = %name,
                    key = key_str,
                    from = t.from.as_str(),
                    to = t.to.as_str(),
                    reason = t.reason.as_str(),
                    calls = t.window.calls,
                    failures = t.window.failures,
                    slow = t.window.slow,
                    failure_rate = t.window.failure_rate(),
                    slow_rate = t.window.slow_rate(),
                    open_ms,
                    jitter_ms,
                    generation = t.generation,
                    "circuit breaker {} -> {}",
                    t.from,
                    t.to,
                )
            };
        }
        if t.to == State::Open || t.to == State::ForcedOpen {
            transition_event!(tracing::Level::WARN);
        } else {
            transition_event!(tracing::Level::INFO);
        }
        let label = name.to_string();
        metrics::counter!(
            "fusebox_breaker_transitions_total",
            "breaker" => label.clone(),
            "from" => t.from.as_str(),
            "to" => t.to.as_str()
        )
        .increment(1);
        metrics::counter!(
            "fusebox_breaker_state_milliseconds_total",
            "breaker" => label,
            "state" => t.from.as_str()
        )
        .increment(t.time_in_previous.as_millis() as u64);
        if key.is_none() {
            self.inner.state.set(f64::from(t.to.code()));
        }
        self.rates(t.window);
        self.publish(BreakerEvent {
            breaker: Arc::clone(name),
            key: key.cloned(),
            kind: EventKind::Transition(t),
        });
    }

    /// Reports a METRICS_ONLY breaker's shadow trip.
    pub fn shadow_trip(
        &self,
        key: Option<&Arc<str>>,
        would_open: bool,
        reason: Reason,
        window: WindowTotals,
    ) {
        tracing::info!(
            target: "fusebox::breaker",
            breaker = %self.inner.name,
            key = key.map(|k| &**k).unwrap_or(""),
            would_open,
            reason = reason.as_str(),
            calls = window.calls,
            failures = window.failures,
            slow = window.slow,
            failure_rate = window.failure_rate(),
            slow_rate = window.slow_rate(),
            "metrics-only circuit breaker would {}",
            if would_open { "open" } else { "close" },
        );
        self.publish(BreakerEvent {
            breaker: Arc::clone(&self.inner.name),
            key: key.cloned(),
            kind: EventKind::ShadowTrip {
                would_open,
                reason,
                window,
            },
        });
    }

    fn publish(&self, event: BreakerEvent) {
        for listener in &self.inner.listeners {
            listener(&event);
        }
        // No subscriber is not an error.
        let _ = self.inner.tx.send(event);
    }
}
