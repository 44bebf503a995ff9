//! What a pool and its endpoints share: one slot per endpoint (its breaker's handle, how
//! the balancer may use it, its calls in flight) and the pool's decision of which tripped
//! endpoints are out, made again whenever a breaker moves or the pool changes.

use super::config::{PoolConfig, absorbs, share};
use super::status::{EndpointStatus, PoolEvent, PoolEventKind, PoolStatus, Status, WouldEject};
use fusebox_breaker::{BreakerHandle, CircuitBreakerConfig, State};
use fusebox_classify::series::{Family, Kind, SeriesBuilder};
use fusebox_limit::LimitHandle;
use futures_util::task::AtomicWaker;
use metrics::Gauge;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, PoisonError};

/// The endpoint serves: its breaker is closed (or an operator let it through).
pub(crate) const SERVE: u8 = 0;
/// The endpoint's breaker tripped but the pool keeps it in (cap reached, panic, no
/// headroom): what the breaker rejects goes to the endpoint anyway.
pub(crate) const PASS: u8 = 1;
/// The endpoint is ejected: ready only when its breaker admits probes.
pub(crate) const EJECT: u8 = 2;

/// A listener of the pool's events.
pub(crate) type PoolListener = Arc<dyn Fn(&PoolEvent) + Send + Sync>;

/// What one endpoint's service, its breaker's listener and the pool share.
pub(crate) struct Slot {
    pub(crate) key: Arc<str>,
    pub(crate) handle: BreakerHandle,
    /// [`SERVE`], [`PASS`] or [`EJECT`]: read by the endpoint on every `poll_ready`.
    mode: AtomicU8,
    /// One count per call in flight, plus this one: the endpoint's load.
    pub(crate) flight: Arc<Flight>,
    /// The signal its breaker's events ring.
    pub(crate) signal: Arc<Signal>,
    /// The concurrency limit its calls go through, when the pool measures headroom
    /// ([`PoolLayer::measured`](super::PoolLayer::measured)).
    limit: Option<LimitHandle>,
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slot")
            .field("key", &self.key)
            .field("mode", &self.mode())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl Slot {
    pub(crate) fn new(key: Arc<str>, handle: BreakerHandle, signal: Arc<Signal>) -> Self {
        Slot {
            key,
            handle,
            mode: AtomicU8::new(SERVE),
            flight: Arc::new(Flight(Arc::clone(&signal))),
            signal,
            limit: None,
        }
    }

    /// The same slot, its headroom measured by `limit` (if any).
    pub(crate) fn limited(mut self, limit: Option<LimitHandle>) -> Self {
        self.limit = limit;
        self
    }

    /// How many more calls the endpoint takes now: its limit's current limit minus the
    /// limit's calls in flight when it has one, else `capacity` minus its calls in flight;
    /// `None` when neither is known (no bound).
    fn room(&self, capacity: Option<u32>) -> Option<u64> {
        match (&self.limit, capacity) {
            (Some(limit), _) => Some(limit.limit().saturating_sub(limit.in_flight()) as u64),
            (None, Some(capacity)) => {
                Some(u64::from(capacity).saturating_sub(self.in_flight() as u64))
            }
            (None, None) => None,
        }
    }

    #[inline(always)]
    pub(crate) fn mode(&self) -> u8 {
        self.mode.load(Ordering::Acquire)
    }

    /// Calls in flight on the endpoint.
    #[inline]
    pub(crate) fn in_flight(&self) -> usize {
        Arc::strong_count(&self.flight) - 1
    }
}

/// What a call in flight holds of its endpoint: its count in the load (one reference), and
/// the way to wake the balancer waiting on the endpoint when the call gives back a probe.
#[derive(Debug)]
pub(crate) struct Flight(Arc<Signal>);

impl Flight {
    /// A probe went back unrecorded (its call was dropped): the breaker tells no one, so
    /// wake the balancer waiting on the endpoint, which may send another probe now rather
    /// than when the half-open wait ends.
    #[cold]
    pub(crate) fn probe_given_back(&self) {
        self.0.waker.wake();
    }
}

/// Rung by an endpoint's breaker on each of its events: the pool must judge again, and a
/// balancer waiting on the endpoint must poll it again.
#[derive(Debug)]
pub(crate) struct Signal {
    pub(crate) waker: AtomicWaker,
    pool: Arc<AtomicBool>,
}

impl Signal {
    pub(crate) fn ring(&self) {
        self.pool.store(true, Ordering::Release);
        self.waker.wake();
    }
}

/// One endpoint as the pool's decision sees it.
#[derive(Debug)]
struct Entry {
    slot: Arc<Slot>,
    /// When the pool first saw its breaker tripped (an order, not a time); 0 while healthy.
    tripped: u64,
    status: Status,
    reason: Option<WouldEject>,
}

#[derive(Debug, Default)]
struct Decided {
    entries: Vec<Entry>,
    trips: u64,
    panic: bool,
    ejected: usize,
    would_eject: usize,
    healthy: usize,
}

/// The pool's gauges (see the module docs' metrics table).
struct PoolSeries {
    endpoints: Gauge,
    ejected: Gauge,
    max_ejected: Gauge,
    would_eject: Gauge,
    panic: Gauge,
    _group: Arc<fusebox_classify::series::Series>,
}

/// Gauge: endpoints in the pool.
pub const ENDPOINTS: &str = "fusebox_pool_endpoints";
/// Gauge: endpoints ejected now.
pub const EJECTED: &str = "fusebox_pool_ejected";
/// Gauge: the most endpoints that may be ejected at once.
pub const MAX_EJECTED: &str = "fusebox_pool_max_ejected";
/// Gauge: tripped endpoints kept in (cap reached, panic, or no headroom).
pub const WOULD_EJECT: &str = "fusebox_pool_would_eject";
/// Gauge: 1 while the pool panics (uses every endpoint), else 0.
pub const PANIC: &str = "fusebox_pool_panic";

/// The pool's metric families.
pub const FAMILIES: &[Family] = &[
    Family {
        name: ENDPOINTS,
        kind: Kind::Gauge,
        labels: &["dependency"],
        help: "Endpoints in the balanced pool.",
    },
    Family {
        name: EJECTED,
        kind: Kind::Gauge,
        labels: &["dependency"],
        help: "Endpoints of the pool ejected now (their breaker tripped, within the cap).",
    },
    Family {
        name: MAX_EJECTED,
        kind: Kind::Gauge,
        labels: &["dependency"],
        help: "The most endpoints of the pool that may be ejected at once.",
    },
    Family {
        name: WOULD_EJECT,
        kind: Kind::Gauge,
        labels: &["dependency"],
        help: "Endpoints whose breaker tripped but that the pool keeps in (cap reached, panic, or no headroom).",
    },
    Family {
        name: PANIC,
        kind: Kind::Gauge,
        labels: &["dependency"],
        help: "1 while the pool has too few healthy endpoints and uses every one, else 0.",
    },
];

/// Describes the pool's families to the installed recorder, once per process; every pool
/// does it when it registers its gauges.
pub fn describe() {
    static ONCE: Once = Once::new();
    fusebox_classify::series::describe_once(&ONCE, FAMILIES);
}

impl PoolSeries {
    fn new(name: &str) -> Option<Self> {
        if !fusebox_classify::series::recording() {
            return None;
        }
        describe();
        let b = SeriesBuilder::new(name);
        Some(PoolSeries {
            endpoints: b.gauge(ENDPOINTS, &[]),
            ejected: b.gauge(EJECTED, &[]),
            max_ejected: b.gauge(MAX_EJECTED, &[]),
            would_eject: b.gauge(WOULD_EJECT, &[]),
            panic: b.gauge(PANIC, &[]),
            _group: b.finish(),
        })
    }
}

/// The pool: its settings, its endpoints and their last decision.
pub(crate) struct Shared {
    pub(crate) name: Arc<str>,
    pub(crate) config: PoolConfig,
    pub(crate) breaker: CircuitBreakerConfig,
    /// Set by any endpoint's breaker event: judge again before the balancer next picks.
    dirty: Arc<AtomicBool>,
    decided: Mutex<Decided>,
    listeners: Vec<PoolListener>,
    series: Option<PoolSeries>,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("name", &self.name)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn new(
        config: PoolConfig,
        breaker: CircuitBreakerConfig,
        listeners: Vec<PoolListener>,
    ) -> Self {
        let name: Arc<str> = breaker.name().into();
        Shared {
            series: PoolSeries::new(&name),
            name,
            config,
            breaker,
            dirty: Arc::new(AtomicBool::new(false)),
            decided: Mutex::new(Decided::default()),
            listeners,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Decided> {
        self.decided.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A signal for a new endpoint's breaker to ring.
    pub(crate) fn signal(&self) -> Arc<Signal> {
        Arc::new(Signal {
            waker: AtomicWaker::new(),
            pool: Arc::clone(&self.dirty),
        })
    }

    /// Judges again if a breaker moved since the last decision. One load when none did.
    #[inline]
    pub(crate) fn refresh(&self) {
        if self.dirty.load(Ordering::Relaxed) && self.dirty.swap(false, Ordering::AcqRel) {
            self.decide();
        }
    }

    pub(crate) fn insert(&self, slot: Arc<Slot>) {
        self.lock().entries.push(Entry {
            slot,
            tripped: 0,
            status: Status::Serving,
            reason: None,
        });
        self.decide();
    }

    pub(crate) fn remove(&self, slot: &Arc<Slot>) {
        self.lock().entries.retain(|e| !Arc::ptr_eq(&e.slot, slot));
        self.decide();
    }

    /// Decides which tripped endpoints are out: an operator's forced opens first (always),
    /// then those already out, then the others in the order the pool saw them trip (it
    /// decides whenever a breaker moves, so that is the order they tripped; ties go to the
    /// endpoint that joined first), while the cap has room, the pool is not in panic and
    /// the survivors have the headroom; every other tripped endpoint stays in.
    pub(crate) fn decide(&self) {
        let mut events = Vec::new();
        {
            let mut d = self.lock();
            let d = &mut *d;
            let n = d.entries.len();
            // Read every breaker once.
            let states: Vec<State> = d.entries.iter().map(|e| e.slot.handle.state()).collect();
            for (e, state) in d.entries.iter_mut().zip(&states) {
                if is_tripped(*state) {
                    if e.tripped == 0 {
                        d.trips += 1;
                        e.tripped = d.trips;
                    }
                } else {
                    e.tripped = 0;
                }
            }
            let tripped = d.entries.iter().filter(|e| e.tripped != 0).count();
            let healthy = n - tripped;
            let panic = self.config.in_panic(healthy, n);
            let cap = self.config.max_ejected(n);
            if panic != d.panic {
                events.push(self.event(
                    None,
                    PoolEventKind::Panic {
                        active: panic,
                        healthy,
                        endpoints: n,
                        panic_threshold: self.config.panic_threshold(),
                    },
                ));
            }
            // An operator's forced opens first, then those out before (they stay out), then
            // the earliest tripped.
            let mut order: Vec<usize> = (0..n).filter(|&i| d.entries[i].tripped != 0).collect();
            order.sort_by_key(|&i| {
                let e = &d.entries[i];
                (
                    states[i] != State::ForcedOpen,
                    !matches!(e.status, Status::Ejected | Status::Probing),
                    e.tripped,
                )
            });
            let mut out = vec![false; n];
            let mut reasons: Vec<Option<WouldEject>> = vec![None; n];
            let mut ejected = 0;
            for &i in &order {
                // An operator's forced open is obeyed whatever the cap.
                if states[i] == State::ForcedOpen {
                    out[i] = true;
                    ejected += 1;
                    continue;
                }
                if panic {
                    reasons[i] = Some(WouldEject::Panic {
                        healthy,
                        endpoints: n,
                        panic_threshold: self.config.panic_threshold(),
                    });
                    continue;
                }
                if ejected >= cap {
                    reasons[i] = Some(WouldEject::CapReached {
                        ejected,
                        max_ejected: cap,
                    });
                    continue;
                }
                // The headroom decides whether an endpoint goes out, not whether it stays
                // out: once out, its calls are on the others, whose headroom then shows
                // them — judged again, it would be let back in and sent out by turns.
                let already_out = matches!(d.entries[i].status, Status::Ejected | Status::Probing);
                if !already_out
                    && let Some((headroom, in_flight, serving)) =
                        headroom(&d.entries, &out, i, self.config.endpoint_capacity())
                    && !absorbs(headroom, in_flight, serving)
                {
                    reasons[i] = Some(WouldEject::NoHeadroom {
                        headroom,
                        share: share(in_flight, serving),
                    });
                    continue;
                }
                out[i] = true;
                ejected += 1;
            }
            for (i, e) in d.entries.iter_mut().enumerate() {
                let status = if out[i] {
                    if states[i] == State::HalfOpen {
                        Status::Probing
                    } else {
                        Status::Ejected
                    }
                } else if e.tripped != 0 {
                    Status::WouldEject
                } else {
                    Status::Serving
                };
                let was_out = matches!(e.status, Status::Ejected | Status::Probing);
                let mode = match status {
                    Status::Serving => SERVE,
                    Status::WouldEject => PASS,
                    Status::Ejected | Status::Probing => EJECT,
                };
                if e.slot.mode.swap(mode, Ordering::AcqRel) != mode {
                    // A balancer waiting on it must look again.
                    e.slot.signal.waker.wake();
                }
                let kind = match status {
                    Status::Ejected | Status::Probing if !was_out => Some(PoolEventKind::Ejected {
                        ejected,
                        max_ejected: cap,
                    }),
                    // Told when it is first kept in, and when the kind of reason changes
                    // (not each time the numbers behind it do).
                    Status::WouldEject
                        if e.status != Status::WouldEject
                            || e.reason.map(|r| r.as_str()) != reasons[i].map(|r| r.as_str()) =>
                    {
                        reasons[i].map(|reason| PoolEventKind::WouldEject { reason })
                    }
                    Status::Serving if e.status != Status::Serving => Some(PoolEventKind::Returned),
                    _ => None,
                };
                if let Some(kind) = kind {
                    events.push(self.event(Some(&e.slot.key), kind));
                }
                e.status = status;
                e.reason = reasons[i];
            }
            d.panic = panic;
            d.ejected = ejected;
            d.would_eject = d
                .entries
                .iter()
                .filter(|e| e.status == Status::WouldEject)
                .count();
            d.healthy = healthy;
            if let Some(s) = &self.series {
                s.endpoints.set(n as f64);
                s.ejected.set(ejected as f64);
                s.max_ejected.set(cap as f64);
                s.would_eject.set(d.would_eject as f64);
                s.panic.set(if panic { 1.0 } else { 0.0 });
            }
        }
        // Told outside the lock: a listener may read the pool's status.
        for event in events {
            self.publish(event);
        }
    }

    fn event(&self, endpoint: Option<&Arc<str>>, kind: PoolEventKind) -> PoolEvent {
        PoolEvent {
            dependency: Arc::clone(&self.name),
            endpoint: endpoint.cloned(),
            kind,
        }
    }

    /// Every endpoint with its status, and the pool's counts, as of now.
    pub(crate) fn status(&self) -> PoolStatus {
        self.decide();
        let d = self.lock();
        PoolStatus {
            endpoints: d
                .entries
                .iter()
                .map(|e| EndpointStatus {
                    endpoint: Arc::clone(&e.slot.key),
                    status: e.status,
                    breaker: e.slot.handle.state(),
                    in_flight: e.slot.in_flight(),
                    would_eject: e.reason,
                })
                .collect(),
            ejected: d.ejected,
            max_ejected: self.config.max_ejected(d.entries.len()),
            would_eject: d.would_eject,
            healthy: d.healthy,
            panic: d.panic,
        }
    }

    pub(crate) fn breaker_of(&self, key: &str) -> Option<BreakerHandle> {
        self.lock()
            .entries
            .iter()
            .find(|e| &*e.slot.key == key)
            .map(|e| e.slot.handle.clone())
    }

    fn publish(&self, event: PoolEvent) {
        log(&event);
        for listener in &self.listeners {
            listener(&event);
        }
    }
}

/// Whether a breaker in `state` counts its endpoint as tripped.
fn is_tripped(state: State) -> bool {
    matches!(state, State::Open | State::HalfOpen | State::ForcedOpen)
}

/// For ejecting entry `i`: the free calls of the endpoints that would keep serving (not out,
/// not `i`: each one's measured limit, else `capacity`, minus its calls in flight), the
/// calls in flight on the whole pool, and how many endpoints serve now (`i` included);
/// `None` when an endpoint that would keep serving has no known bound (no measured limit
/// and no `capacity`), or when no endpoint has a measured limit and there is no
/// `capacity`: the pool then does not look at load.
fn headroom(
    entries: &[Entry],
    out: &[bool],
    i: usize,
    capacity: Option<u32>,
) -> Option<(u64, u64, u64)> {
    if capacity.is_none() && entries.iter().all(|e| e.slot.limit.is_none()) {
        return None;
    }
    let mut free = 0u64;
    let mut in_flight = 0u64;
    let mut serving = 0u64;
    for (j, e) in entries.iter().enumerate() {
        in_flight = in_flight.saturating_add(e.slot.in_flight() as u64);
        if out[j] {
            continue;
        }
        serving += 1;
        if j != i {
            free = free.saturating_add(e.slot.room(capacity)?);
        }
    }
    Some((free, in_flight, serving))
}

fn log(event: &PoolEvent) {
    let endpoint = event.endpoint.as_deref().unwrap_or("");
    match &event.kind {
        PoolEventKind::Ejected {
            ejected,
            max_ejected,
        } => tracing::warn!(
            target: super::TARGET,
            dependency = %event.dependency,
            endpoint,
            ejected,
            max_ejected,
            "endpoint ejected"
        ),
        PoolEventKind::WouldEject { reason } => tracing::warn!(
            target: super::TARGET,
            dependency = %event.dependency,
            endpoint,
            reason = reason.as_str(),
            detail = %reason,
            "endpoint would be ejected, kept in: {reason}"
        ),
        PoolEventKind::Returned => tracing::info!(
            target: super::TARGET,
            dependency = %event.dependency,
            endpoint,
            "endpoint back in the pool"
        ),
        PoolEventKind::Panic {
            active,
            healthy,
            endpoints,
            panic_threshold,
        } => tracing::warn!(
            target: super::TARGET,
            dependency = %event.dependency,
            active,
            healthy,
            endpoints,
            panic_threshold,
            "pool panic {}",
            if *active { "started: every endpoint is used" } else { "ended" }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusebox_breaker::{CircuitBreaker, CircuitBreakerLayer};
    use http::{HeaderMap, Request, StatusCode};
    use std::time::Duration;
    use tower_layer::Layer;

    type Breaker = CircuitBreaker<()>;

    /// A pool of `n` endpoints named `e0`, `e1`, ... whose breakers trip after 4 failures;
    /// each endpoint's breaker as a service with no inner service, to drive by hand.
    /// What a listener of the test pool saw.
    type Seen = Arc<Mutex<Vec<PoolEvent>>>;

    fn pool(config: PoolConfig, n: usize) -> (Shared, Vec<(Arc<Slot>, Breaker)>, Seen) {
        let breaker = CircuitBreakerConfig::builder()
            .name("orders")
            .count_window(4)
            .minimum_calls(4)
            .open_wait(Duration::from_secs(60))
            .open_wait_jitter(Duration::ZERO)
            .build()
            .unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&events);
        let listener: PoolListener =
            Arc::new(move |e: &PoolEvent| seen.lock().unwrap().push(e.clone()));
        let shared = Shared::new(config, breaker.clone(), vec![listener]);
        let endpoints = (0..n)
            .map(|i| {
                let signal = shared.signal();
                let ring = Arc::clone(&signal);
                let layer = CircuitBreakerLayer::builder(breaker.clone())
                    .key(format!("e{i}"))
                    .on_event(move |_| ring.ring())
                    .build()
                    .unwrap();
                let slot = Arc::new(Slot::new(format!("e{i}").into(), layer.handle(), signal));
                shared.insert(Arc::clone(&slot));
                (slot, layer.layer(()))
            })
            .collect();
        (shared, endpoints, events)
    }

    fn trip(breaker: &Breaker) {
        let request = Request::new(());
        for _ in 0..4 {
            let mut guard = breaker.admit(&request).unwrap();
            let verdict = guard
                .classify_response(StatusCode::SERVICE_UNAVAILABLE, &HeaderMap::new())
                .unwrap();
            guard.finish_in_place(verdict);
        }
        assert_eq!(breaker.handle().state(), State::Open);
    }

    fn statuses(shared: &Shared) -> Vec<Status> {
        shared.status().endpoints.iter().map(|e| e.status).collect()
    }

    #[tokio::test]
    async fn a_breaker_event_marks_the_pool_for_a_new_decision() {
        let (shared, endpoints, _) = pool(PoolConfig::default(), 4);
        assert!(!shared.dirty.load(Ordering::Relaxed));
        trip(&endpoints[0].1);
        assert!(
            shared.dirty.load(Ordering::Relaxed),
            "the trip rang the pool"
        );
        assert_eq!(endpoints[0].0.mode(), SERVE, "not decided yet");
        shared.refresh();
        assert_eq!(endpoints[0].0.mode(), EJECT);
        assert!(!shared.dirty.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn room_freed_by_a_recovery_goes_to_the_endpoint_kept_in() {
        let config = PoolConfig::builder()
            .max_ejection_percent(25)
            .build()
            .unwrap();
        let (shared, endpoints, events) = pool(config, 4);
        trip(&endpoints[2].1);
        shared.refresh();
        trip(&endpoints[1].1);
        use Status::*;
        assert_eq!(statuses(&shared), [Serving, WouldEject, Ejected, Serving]);
        assert_eq!(endpoints[1].0.mode(), PASS);

        // The ejected one recovers (an operator resets it): the one kept in goes out.
        endpoints[2].1.handle().reset();
        assert_eq!(statuses(&shared), [Serving, Ejected, Serving, Serving]);
        let kinds: Vec<_> = events
            .lock()
            .unwrap()
            .iter()
            .map(|e| (e.endpoint.as_deref().map(str::to_owned), e.kind.clone()))
            .collect();
        let e = |k: &str| Some(k.to_owned());
        assert_eq!(
            kinds,
            [
                (
                    e("e2"),
                    PoolEventKind::Ejected {
                        ejected: 1,
                        max_ejected: 1
                    }
                ),
                (
                    e("e1"),
                    PoolEventKind::WouldEject {
                        reason: super::WouldEject::CapReached {
                            ejected: 1,
                            max_ejected: 1
                        }
                    }
                ),
                (
                    e("e1"),
                    PoolEventKind::Ejected {
                        ejected: 1,
                        max_ejected: 1
                    }
                ),
                (e("e2"), PoolEventKind::Returned),
            ]
        );
    }

    #[tokio::test]
    async fn an_operator_forced_open_is_out_whatever_the_cap() {
        let config = PoolConfig::builder()
            .max_ejection_percent(25)
            .build()
            .unwrap();
        let (shared, endpoints, _) = pool(config, 4);
        trip(&endpoints[0].1);
        endpoints[3].1.handle().force_open();
        use Status::*;
        // The forced one is out (it is obeyed, and counts first); the cap has no room left
        // for the tripped one.
        let status = shared.status();
        assert_eq!(statuses(&shared), [WouldEject, Serving, Serving, Ejected]);
        assert_eq!(status.ejected, 1);
    }

    #[tokio::test]
    async fn no_endpoint_goes_out_when_the_others_lack_the_headroom() {
        let config = PoolConfig::builder()
            .max_ejection_percent(50)
            .endpoint_capacity(2)
            .build()
            .unwrap();
        let (shared, endpoints, events) = pool(config, 4);
        // Two calls in flight on each healthy endpoint (full), one on the sick one.
        let held: Vec<Arc<Flight>> = endpoints[1..]
            .iter()
            .flat_map(|(slot, _)| [Arc::clone(&slot.flight), Arc::clone(&slot.flight)])
            .chain([Arc::clone(&endpoints[0].0.flight)])
            .collect();
        trip(&endpoints[0].1);
        let status = shared.status();
        let reason = WouldEject::NoHeadroom {
            headroom: 0,
            share: 2,
        };
        assert_eq!(status.endpoints[0].status, Status::WouldEject);
        assert_eq!(status.endpoints[0].would_eject, Some(reason));
        assert_eq!(status.endpoints[1].in_flight, 2);
        assert!(
            reason
                .to_string()
                .contains("room for 0 calls, its share is 2")
        );
        let told = events.lock().unwrap().last().cloned().unwrap();
        assert_eq!(
            told.kind,
            PoolEventKind::WouldEject { reason },
            "the event has the numbers"
        );
        assert_eq!(told.endpoint.as_deref(), Some("e0"));

        // The calls finish: the others can take its share, and it goes out.
        drop(held);
        assert_eq!(shared.status().endpoints[0].status, Status::Ejected);
        let last = events.lock().unwrap().last().cloned().unwrap();
        assert_eq!(
            last.kind,
            PoolEventKind::Ejected {
                ejected: 1,
                max_ejected: 2
            }
        );
        assert_eq!(last.endpoint.as_deref(), Some("e0"));
    }

    #[tokio::test]
    async fn an_ejected_endpoint_stays_out_when_its_calls_fill_the_others() {
        let config = PoolConfig::builder()
            .max_ejection_percent(50)
            .endpoint_capacity(2)
            .build()
            .unwrap();
        let (shared, endpoints, events) = pool(config, 4);
        // Idle survivors: room for its share, and it goes out.
        trip(&endpoints[0].1);
        assert_eq!(shared.status().endpoints[0].status, Status::Ejected);
        // Its calls now fill the others (two in flight on each: no headroom left).
        let held: Vec<Arc<Flight>> = endpoints[1..]
            .iter()
            .flat_map(|(slot, _)| [Arc::clone(&slot.flight), Arc::clone(&slot.flight)])
            .collect();
        let status = shared.status();
        assert_eq!(status.endpoints[1].in_flight, 2);
        assert_eq!(
            status.endpoints[0].status,
            Status::Ejected,
            "it stays out until its breaker moves"
        );
        assert_eq!(events.lock().unwrap().len(), 1, "one event: the ejection");
        drop(held);
    }
}
