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
//! Every series carries `dependency` (the breaker's name); a keyed breaker's also carry
//! `key` (the key's name, as in its events), so that each key is its own series and
//! `max_keys` bounds their number. The names are constants here and the families, with
//! their HELP text, are [`FAMILIES`].
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | `fusebox_breaker_calls_total` | counter | `dependency`, `key`¹, `kind` | calls by outcome: `successful` (fast success), `failed` (a counted failure, slow or not), `slow` (slow success), `ignored` (outcome ignored, or the caller cancelled), `not_permitted` (rejected without being sent) |
//! | `fusebox_breaker_state` | gauge | `dependency`, `key`¹, `state` | 1 for the state the breaker is in, 0 for the five others (`closed`, `open`, `half_open`, `forced_open`, `disabled`, `metrics_only`) |
//! | `fusebox_breaker_transitions_total` | counter | `dependency`, `key`¹, `from`, `to` | transitions |
//! | `fusebox_breaker_probes_total` | counter | `dependency`, `key`¹, `result` (`success`, `failure`, `released`) | half-open probes by result |
//! | `fusebox_breaker_failure_ratio` | gauge | `dependency`, `key`¹ | the window's failure rate, 0–1, as of the last counted failure or slow call, or transition |
//! | `fusebox_breaker_slow_call_ratio` | gauge | `dependency`, `key`¹ | the window's slow-call rate, 0–1, likewise |
//! | `fusebox_breaker_failure_ratio_threshold` | gauge | `dependency`, `key`¹ | the failure-rate threshold, 0–1 |
//! | `fusebox_breaker_slow_call_ratio_threshold` | gauge | `dependency`, `key`¹ | the slow-call-rate threshold, 0–1 |
//! | `fusebox_breaker_state_seconds` | gauge | `dependency`, `key`¹, `state` | seconds spent in each state, added when the breaker leaves it (only grows: use `increase()`) |
//! | `fusebox_breaker_call_duration_seconds` | histogram | `dependency`, `route` | how long calls took (to the response head, for a streamed call), on every route once a recorder is installed when the breaker is built |
//!
//! ¹ keyed breakers only.
//!
//! The state is one series per state with the value 0 or 1 (what dashboards and alerts
//! select on: `fusebox_breaker_state{state="open"} == 1`) rather than one gauge holding a
//! code: a code cannot be summed or counted across breakers, and one family cannot be both.
//!
//! The call duration is measured only where the breaker reads the clock anyway: at
//! admission and at the end of calls on a route with a slow-call threshold. A route without
//! one costs no clock read and records no duration. It is not labelled by key: its series
//! are bounded by the route table, not by the keys.
//!
//! Metric handles are registered when the breaker (or a key's breaker) is made: install
//! the `metrics` recorder before building layers. When a keyed breaker forgets a key, the
//! key's `state` series are set to 0 and its series are no longer kept alive by
//! [`keep_alive`](fusebox_classify::series::keep_alive): an exporter with an idle timeout
//! drops them (see [`fusebox_classify::series`]).

use crate::config::CircuitBreakerConfig;
use crate::state::{Reason, State, Transition};
use crate::window::WindowTotals;
use fusebox_classify::route::PerRoute;
use fusebox_classify::series::{self, Family, Kind, Series, SeriesBuilder, label};
use fusebox_classify::{Classifier, RouteId, RouteTable};
use metrics::{Counter, Gauge, Histogram, Label};
use std::fmt;
use std::sync::{Arc, Mutex, Once, OnceLock, PoisonError};
use tokio::sync::broadcast;

/// Counter: calls by outcome (`kind`).
pub const CALLS_TOTAL: &str = "fusebox_breaker_calls_total";
/// Gauge: 1 for the state the breaker is in (`state`), 0 for the others.
pub const STATE: &str = "fusebox_breaker_state";
/// Counter: transitions (`from`, `to`).
pub const TRANSITIONS_TOTAL: &str = "fusebox_breaker_transitions_total";
/// Counter: half-open probes by `result`.
pub const PROBES_TOTAL: &str = "fusebox_breaker_probes_total";
/// Gauge: the window's failure rate, 0–1.
pub const FAILURE_RATIO: &str = "fusebox_breaker_failure_ratio";
/// Gauge: the window's slow-call rate, 0–1.
pub const SLOW_CALL_RATIO: &str = "fusebox_breaker_slow_call_ratio";
/// Gauge: the failure-rate threshold, 0–1.
pub const FAILURE_RATIO_THRESHOLD: &str = "fusebox_breaker_failure_ratio_threshold";
/// Gauge: the slow-call-rate threshold, 0–1.
pub const SLOW_CALL_RATIO_THRESHOLD: &str = "fusebox_breaker_slow_call_ratio_threshold";
/// Gauge: seconds spent in each `state`, up to the last transition out of it.
pub const STATE_SECONDS: &str = "fusebox_breaker_state_seconds";
/// Histogram: call duration in seconds, per `route`.
pub const CALL_DURATION_SECONDS: &str = "fusebox_breaker_call_duration_seconds";

/// Every family the breaker records, with its labels and HELP text (`key` only on keyed
/// breakers).
pub const FAMILIES: &[Family] = &[
    Family {
        name: CALLS_TOTAL,
        kind: Kind::Counter,
        labels: &["dependency", "key", "kind"],
        help: "Calls through the circuit breaker by outcome: successful, failed, slow (slow successes), ignored (or cancelled), not_permitted (rejected).",
    },
    Family {
        name: STATE,
        kind: Kind::Gauge,
        labels: &["dependency", "key", "state"],
        help: "1 for the circuit breaker's current state, 0 for the others.",
    },
    Family {
        name: TRANSITIONS_TOTAL,
        kind: Kind::Counter,
        labels: &["dependency", "key", "from", "to"],
        help: "Circuit breaker state transitions.",
    },
    Family {
        name: PROBES_TOTAL,
        kind: Kind::Counter,
        labels: &["dependency", "key", "result"],
        help: "Half-open probes by result: success, failure, released (cancelled or ignored).",
    },
    Family {
        name: FAILURE_RATIO,
        kind: Kind::Gauge,
        labels: &["dependency", "key"],
        help: "The circuit breaker window's failure rate (0-1), as of its last failure, slow call or transition.",
    },
    Family {
        name: SLOW_CALL_RATIO,
        kind: Kind::Gauge,
        labels: &["dependency", "key"],
        help: "The circuit breaker window's slow-call rate (0-1), as of its last failure, slow call or transition.",
    },
    Family {
        name: FAILURE_RATIO_THRESHOLD,
        kind: Kind::Gauge,
        labels: &["dependency", "key"],
        help: "The failure rate (0-1) at which the circuit breaker opens.",
    },
    Family {
        name: SLOW_CALL_RATIO_THRESHOLD,
        kind: Kind::Gauge,
        labels: &["dependency", "key"],
        help: "The slow-call rate (0-1) at which the circuit breaker opens.",
    },
    Family {
        name: STATE_SECONDS,
        kind: Kind::Gauge,
        labels: &["dependency", "key", "state"],
        help: "Seconds the circuit breaker spent in each state, added when it leaves the state.",
    },
    Family {
        name: CALL_DURATION_SECONDS,
        kind: Kind::Histogram,
        labels: &["dependency", "route"],
        help: "Duration of calls through the circuit breaker (to the response head), on routes with a slow-call threshold.",
    },
];

/// Describes the breaker's families to the installed recorder, once per process; every
/// breaker does it when it registers its handles.
pub fn describe() {
    static ONCE: Once = Once::new();
    series::describe_once(&ONCE, FAMILIES);
}

const STATES: [State; 6] = [
    State::Closed,
    State::Open,
    State::HalfOpen,
    State::ForcedOpen,
    State::Disabled,
    State::MetricsOnly,
];

/// A call's outcome, as `fusebox_breaker_calls_total` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallKind {
    Successful,
    Failed,
    Slow,
    Ignored,
}

/// The call counters a breaker bumps as it records each call's verdict.
struct Calls {
    successful: Counter,
    failed: Counter,
    slow: Counter,
    ignored: Counter,
}

/// The handles of one breaker (or one key of a keyed breaker).
struct BreakerSeries {
    base: Vec<Label>,
    group: Arc<Series>,
    calls: Calls,
    not_permitted: Counter,
    state: [Gauge; 6],
    state_seconds: [Gauge; 6],
    probe_success: Counter,
    probe_failure: Counter,
    probe_released: Counter,
    failure_ratio: Gauge,
    slow_ratio: Gauge,
    failure_threshold: Gauge,
    slow_threshold: Gauge,
    /// Registered on each pair's first transition (most pairs never happen).
    transitions: Mutex<Vec<(State, State, Counter)>>,
}

impl BreakerSeries {
    fn new(name: &str, key: Option<&str>) -> Self {
        describe();
        let b = SeriesBuilder::new(name).label_opt("key", key);
        let calls = |kind: &'static str| b.counter(CALLS_TOTAL, &[("kind", label(kind))]);
        let probes = |result: &'static str| b.counter(PROBES_TOTAL, &[("result", label(result))]);
        let per_state =
            |name: &'static str| STATES.map(|s| b.gauge(name, &[("state", label(s.as_str()))]));
        let series = BreakerSeries {
            base: b.base_labels().to_vec(),
            calls: Calls {
                successful: calls("successful"),
                failed: calls("failed"),
                slow: calls("slow"),
                ignored: calls("ignored"),
            },
            not_permitted: calls("not_permitted"),
            state: per_state(STATE),
            state_seconds: per_state(STATE_SECONDS),
            probe_success: probes("success"),
            probe_failure: probes("failure"),
            probe_released: probes("released"),
            failure_ratio: b.gauge(FAILURE_RATIO, &[]),
            slow_ratio: b.gauge(SLOW_CALL_RATIO, &[]),
            failure_threshold: b.gauge(FAILURE_RATIO_THRESHOLD, &[]),
            slow_threshold: b.gauge(SLOW_CALL_RATIO_THRESHOLD, &[]),
            transitions: Mutex::new(Vec::new()),
            group: b.finish(),
        };
        series.set_state(State::Closed);
        series
    }

    fn set_state(&self, state: State) {
        for (s, gauge) in STATES.iter().zip(&self.state) {
            gauge.set(if *s == state { 1.0 } else { 0.0 });
        }
    }

    fn transition(&self, t: &Transition) {
        let mut transitions = self
            .transitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let counter = match transitions
            .iter()
            .find(|(from, to, _)| *from == t.from && *to == t.to)
        {
            Some((_, _, counter)) => counter.clone(),
            None => {
                let mut labels = self.base.clone();
                labels.push(Label::new("from", t.from.as_str()));
                labels.push(Label::new("to", t.to.as_str()));
                let counter = metrics::counter!(TRANSITIONS_TOTAL, labels);
                self.group.keep_counter(&counter);
                transitions.push((t.from, t.to, counter.clone()));
                counter
            }
        };
        drop(transitions);
        counter.increment(1);
        let index = STATES.iter().position(|s| *s == t.from).unwrap_or(0);
        self.state_seconds[index].increment(t.time_in_previous.as_secs_f64());
        self.set_state(t.to);
    }
}

impl Drop for BreakerSeries {
    /// The key is forgotten: no state holds (a scrape taken before an idle exporter drops
    /// the series reads 0 for every state, not the last one).
    fn drop(&mut self) {
        for gauge in &self.state {
            gauge.set(0.0);
        }
    }
}

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
///
/// A keyed breaker's sink makes one sink per key ([`for_key`](EventSink::for_key)): the
/// same subscribers and listeners, the key's own metric series.
#[derive(Clone)]
pub struct EventSink {
    inner: Arc<SinkInner>,
    series: Slot,
}

/// A sink's metric series. None at all while no recorder is installed: a keyed breaker's
/// key then costs no handle (see `tests/tests/keyed_memory.rs`).
#[derive(Clone)]
enum Slot {
    /// An unkeyed breaker's, made on first use: a keyed breaker's own sink records
    /// nothing (its keys' sinks do), so it never makes them.
    Lazy(Arc<OnceLock<Option<Box<BreakerSeries>>>>),
    /// A key's, made with its sink.
    Key(Option<Arc<BreakerSeries>>),
}

struct SinkInner {
    name: Arc<str>,
    tx: broadcast::Sender<BreakerEvent>,
    listeners: Vec<Listener>,
    /// The call-duration histograms, by route: one set for the layer and its keys (none
    /// while no recorder is installed).
    durations: OnceLock<Option<PerRoute<Histogram>>>,
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
    /// A sink for the breaker `name`; its metric handles are registered on first use.
    pub fn new(name: Arc<str>, listeners: Vec<Listener>) -> Self {
        let (tx, _) = broadcast::channel(256);
        EventSink {
            inner: Arc::new(SinkInner {
                name,
                tx,
                listeners,
                durations: OnceLock::new(),
            }),
            series: Slot::Lazy(Arc::new(OnceLock::new())),
        }
    }

    /// The sink of one key of a keyed breaker: this sink's subscribers and listeners, and
    /// metric series of its own, labelled `key`, registered now. They go when the last
    /// clone of the returned sink does (the key's breaker is forgotten).
    pub fn for_key(&self, key: Arc<str>) -> Self {
        let series =
            series::recording().then(|| Arc::new(BreakerSeries::new(&self.inner.name, Some(&key))));
        EventSink {
            inner: Arc::clone(&self.inner),
            series: Slot::Key(series),
        }
    }

    #[inline]
    fn series(&self) -> Option<&BreakerSeries> {
        match &self.series {
            Slot::Lazy(cell) => cell
                .get_or_init(|| {
                    series::recording()
                        .then(|| Box::new(BreakerSeries::new(&self.inner.name, None)))
                })
                .as_deref(),
            Slot::Key(series) => series.as_deref(),
        }
    }

    /// Counts a call by its outcome.
    #[inline]
    pub(crate) fn call(&self, kind: CallKind) {
        if let Some(s) = self.series() {
            let calls = &s.calls;
            match kind {
                CallKind::Successful => calls.successful.increment(1),
                CallKind::Failed => calls.failed.increment(1),
                CallKind::Slow => calls.slow.increment(1),
                CallKind::Ignored => calls.ignored.increment(1),
            }
        }
    }

    /// Registers the call-duration histograms of `table`'s routes, once per layer.
    pub(crate) fn durations<C: Classifier>(&self, table: &RouteTable<C>) {
        self.inner.durations.get_or_init(|| {
            series::recording().then(|| table.per_route(|id| self.duration_histogram(table, id)))
        });
    }

    fn duration_histogram<C: Classifier>(
        &self,
        table: &RouteTable<C>,
        route: RouteId,
    ) -> Histogram {
        SeriesBuilder::new(&self.inner.name).histogram(
            CALL_DURATION_SECONDS,
            &[("route", table.name(route).to_owned().into())],
        )
    }

    /// Records the duration of a call on route `route` of `table` (the table the
    /// histograms were registered for; a route added to it since gets its histogram now).
    #[inline]
    pub(crate) fn duration<C: Classifier>(
        &self,
        route: RouteId,
        duration: std::time::Duration,
        table: &RouteTable<C>,
    ) {
        let Some(Some(durations)) = self.inner.durations.get() else {
            return;
        };
        let histogram = match durations.get(route) {
            Some(h) => h,
            None => self.added_route(durations, route, table),
        };
        histogram.record(duration.as_secs_f64());
    }

    #[cold]
    #[inline(never)]
    fn added_route<'a, C: Classifier>(
        &self,
        durations: &'a PerRoute<Histogram>,
        route: RouteId,
        table: &RouteTable<C>,
    ) -> &'a Histogram {
        table
            .grow(durations, route, |id| self.duration_histogram(table, id))
            .unwrap_or_else(|| durations.get_or_default(RouteId::DEFAULT))
    }

    /// Publishes `config`'s thresholds (what the window's rates are compared with). Stores
    /// call it when they are made.
    pub fn thresholds(&self, config: &CircuitBreakerConfig) {
        if let Some(s) = self.series() {
            s.failure_threshold
                .set(f64::from(config.failure_rate_threshold) / 100.0);
            s.slow_threshold
                .set(f64::from(config.slow_call_rate_threshold) / 100.0);
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

    /// Counts a rejected call (`kind="not_permitted"`).
    #[inline]
    pub fn rejected(&self) {
        if let Some(s) = self.series() {
            s.not_permitted.increment(1);
        }
    }

    /// Counts a probe's result: `Some(true)` success, `Some(false)` failure, `None` released.
    pub fn probe(&self, result: Option<bool>) {
        let Some(s) = self.series() else { return };
        match result {
            Some(true) => s.probe_success.increment(1),
            Some(false) => s.probe_failure.increment(1),
            None => s.probe_released.increment(1),
        }
    }

    /// Publishes the window's rates.
    pub fn rates(&self, window: WindowTotals) {
        let Some(s) = self.series() else { return };
        s.failure_ratio.set(window.failure_rate() / 100.0);
        s.slow_ratio.set(window.slow_rate() / 100.0);
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
        if let Some(s) = self.series() {
            s.transition(&t);
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
