//! One breaker as the service and its futures see it: the route table, the store, the
//! clock, and the per-call bookkeeping (`Guard`) that turns a finished call into exactly one
//! record or release.

use crate::config::CircuitBreakerConfig;
use crate::events::{CallKind, EventSink};
use crate::judge::{Judged, counting_overloaded, error_verdict};
use crate::spread::{KeySpreadGate, NEVER_FAILED, SpreadCounts};
use crate::state::{Command, Permit, PermitKind, Snapshot, State};
use crate::store::{Reconfigure, Store};
use fusebox_classify::error::CircuitOpen;
use fusebox_classify::stage::{Admit, Answer, NoWait};
use fusebox_classify::{
    Call, CallMeta, Classified, Classifier, Clock, OnEndOfStream, Outcome, RouteId, RouteTable,
    SharedVerdict, SlowThresholds, StreamEnd, Verdict,
};
use http::{HeaderMap, StatusCode};
use std::error::Error;
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use tokio::time::Instant;

pub(crate) struct Breaker<C, St> {
    pub(crate) table: RouteTable<C>,
    pub(crate) store: St,
    pub(crate) clock: Clock,
    pub(crate) name: Arc<str>,
    pub(crate) key: Option<Arc<str>>,
    pub(crate) events: EventSink,
    /// Whether a local [`Overloaded`](fusebox_classify::error::Overloaded) counts as a
    /// failure; read only when a call ended in an error, changed by a reload.
    count_overloaded: AtomicBool,
    needs_end_time: bool,
    /// Per route (by [`RouteId`](fusebox_classify::RouteId) index): its slow-call
    /// threshold as the table holds it now, read with one load.
    slow_after: SlowThresholds,
    /// Whether every route is timed for the call-duration histogram (a metrics recorder was
    /// installed when the breaker was built): a route without a slow-call threshold then
    /// gets [`NEVER_SLOW`].
    timed: bool,
    /// Used since the last eviction sweep (keyed breakers).
    pub(crate) touched: AtomicBool,
    /// Whether its stage leaves each answer's verdict in the response's extensions.
    pub(crate) expose: bool,
    /// What it knows of the keys around it: a keyed breaker's key, or a dependency-wide
    /// breaker gated by its keys. One shared pointer, so that a key's breaker stays small.
    partial: Option<Arc<Partial<C, St>>>,
    /// A keyed breaker's key: the period of its last failure counted for the keys' spread.
    failed_in: AtomicU32,
}

impl<C, St> Partial<C, St> {
    /// The dependency-wide breaker that gates the keys in their calls' guards, if any
    /// ([`gate_keys`](crate::compose::gate_keys)).
    #[inline]
    pub(crate) fn gate(&self) -> Option<&Breaker<C, St>> {
        match self {
            Partial::Key { gate, .. } => gate.get().map(|leases| &***leases),
            Partial::Gated(_) => None,
        }
    }

    /// Makes `gate` the keys' dependency-wide breaker; `false` if this is not a keyed
    /// breaker's, or its keys have a gate already.
    pub(crate) fn set_gate(&self, gate: Arc<Leases<C, St>>) -> bool {
        match self {
            Partial::Key { gate: slot, .. } => slot.set(gate).is_ok(),
            Partial::Gated(_) => false,
        }
    }
}

/// What a breaker knows of the keys around it.
pub(crate) enum Partial<C, St> {
    /// One key of a keyed breaker (every key shares this): where the keyed breaker counts
    /// its failing keys, and, when its key function reads answers, its map, to find the
    /// key an answer names.
    Key {
        counts: Arc<SpreadCounts>,
        map: Option<Weak<dyn Redirect<C, St>>>,
        /// The dependency-wide breaker the keys are gated by, when it runs in their calls'
        /// guards ([`gate_keys`](crate::compose::gate_keys)): set once, before any call.
        gate: OnceLock<Arc<Leases<C, St>>>,
    },
    /// A dependency-wide breaker around keyed ones: whether a failure counts, from how
    /// widely the keys fail.
    Gated(KeySpreadGate),
}

/// A keyed breaker's map as its keys' breakers see it: where an answer that names a key
/// finds that key's breaker.
pub(crate) trait Redirect<C, St>: Send + Sync {
    /// The breaker of the key `headers` (an answer's headers or trailers) name, made if
    /// need be; `None` if they name none.
    fn named(&self, headers: &HeaderMap) -> Option<Arc<Breaker<C, St>>>;
}

/// The slow-call threshold of a route that has none, when calls are timed for the
/// call-duration histogram: about 136 years, which no call lasts, so no call on such a
/// route is ever counted slow.
const NEVER_SLOW: Duration = Duration::from_secs(u32::MAX as u64);

impl<C, St: Store> fmt::Debug for Breaker<C, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("name", &self.name)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl<C: Classifier, St: Store> Breaker<C, St> {
    pub(crate) fn new(
        table: RouteTable<C>,
        store: St,
        clock: Clock,
        name: Arc<str>,
        key: Option<Arc<str>>,
        events: EventSink,
        count_overloaded: bool,
    ) -> Self {
        let needs_end_time = store.needs_end_time();
        // With a metrics recorder installed, every route is timed for the call-duration
        // histogram: a route without a slow-call threshold gets one past any call's
        // duration ([`NEVER_SLOW`]), which no call reaches. Without a recorder, such a
        // route reads no clock.
        let timed = fusebox_classify::series::recording();
        let slow_after = table.slow_thresholds();
        // The call-duration histograms, per route: one set per layer, shared by its keys.
        events.durations(&table);
        Breaker {
            table,
            store,
            clock,
            name,
            key,
            events,
            count_overloaded: AtomicBool::new(count_overloaded),
            needs_end_time,
            slow_after,
            timed,
            touched: AtomicBool::new(true),
            expose: false,
            partial: None,
            failed_in: AtomicU32::new(NEVER_FAILED),
        }
    }

    /// The same breaker, one key of a keyed breaker (`partial` is a [`Partial::Key`]
    /// shared by every key), or a dependency-wide breaker gated by its keys
    /// ([`Partial::Gated`]).
    pub(crate) fn partial(mut self, partial: Option<Arc<Partial<C, St>>>) -> Self {
        self.partial = partial;
        self
    }

    /// The keyed breaker's map, if this is one of its keys and its answers may name keys.
    #[inline(always)]
    fn answer_map(&self) -> Option<&Weak<dyn Redirect<C, St>>> {
        match self.partial.as_deref() {
            Some(Partial::Key { map, .. }) => map.as_ref(),
            _ => None,
        }
    }

    /// The dependency-wide breaker that gates this key's keyed breaker in its calls' guards,
    /// if any ([`gate_keys`](crate::compose::gate_keys)).
    #[inline]
    pub(crate) fn gate(&self) -> Option<&Breaker<C, St>> {
        self.partial.as_deref().and_then(Partial::gate)
    }

    /// The same breaker, leaving each answer's verdict in the response's extensions if
    /// `expose`.
    pub(crate) fn exposing(mut self, expose: bool) -> Self {
        self.expose = expose;
        self
    }

    /// Admits a call or says why not, the call's guard holding the breaker itself (keyed
    /// breakers: their eviction counts the calls in flight on a key's breaker).
    #[inline]
    pub(crate) fn admit(self: &Arc<Self>, meta: CallMeta) -> Result<Guard<C, St>, CircuitOpen> {
        self.admit_with(meta, || Owner::Breaker(Arc::clone(self)))
    }

    /// Admits a call or says why not; `owner` makes what keeps the breaker alive while the
    /// call is in flight. Reads the clock only when the route measures slowness (or the
    /// breaker is not closed).
    #[inline(always)]
    pub(crate) fn admit_with(
        &self,
        meta: CallMeta,
        owner: impl FnOnce() -> Owner<C, St>,
    ) -> Result<Guard<C, St>, CircuitOpen> {
        let (permit, started) = self.start(meta.route())?;
        // Built field by field where it will live: a guard assembled from smaller structs
        // was moved once more, and that move cost an HTTP breaker call about 9 ns.
        Ok(Guard {
            breaker: owner(),
            generation: permit.generation,
            kind: permit.kind,
            meta,
            started,
            owed: Owed::CALL,
            gate_generation: 0,
            gate_kind: PermitKind::Untracked,
        })
    }

    /// Admits a call of one of a keyed breaker's keys (this breaker) that the
    /// dependency-wide breaker gating the keys has admitted with `gate_permit` (at
    /// `gate_started`): one guard holds both permits. Refused here, the call still has the
    /// gate's permit: the guard returned with the refusal holds it alone, for the gate to
    /// be told the refusal as the call's answer (as a dependency-wide breaker stacked
    /// around the keyed one is told it, when the call's future is polled).
    // The refusal's guard is handed on by value to the stage's admission: boxed, every
    // refused call of gated keys would allocate it once more.
    #[allow(clippy::result_large_err)]
    pub(crate) fn admit_gated(
        self: &Arc<Self>,
        meta: CallMeta,
        (gate_permit, gate_started): (Permit, Option<Instant>),
    ) -> Result<Guard<C, St>, (CircuitOpen, Guard<C, St>)> {
        let (permit, started, refused) = match self.start(meta.route()) {
            Ok((permit, started)) => (permit, started, None),
            // Nothing of the key's to give back or record: only the gate's permit is held.
            Err(open) => (
                Permit::new(0, PermitKind::Untracked),
                gate_started,
                Some(open),
            ),
        };
        let guard = Guard {
            breaker: Owner::Breaker(Arc::clone(self)),
            generation: permit.generation,
            kind: permit.kind,
            meta,
            // The gate measures slowness from the same start (if only it reads the clock).
            started: started.or(gate_started),
            owed: if refused.is_some() {
                Owed::GATE
            } else {
                Owed::CALL_AND_GATE
            },
            gate_generation: gate_permit.generation,
            gate_kind: gate_permit.kind,
        };
        match refused {
            None => Ok(guard),
            Some(open) => Err((open, guard)),
        }
    }

    /// Admits a call with no request head to look at (the plain breaker): it is on the
    /// default route, and its errors are judged as a plain call's.
    #[inline(always)]
    pub(crate) fn admit_plain(
        &self,
        owner: impl FnOnce() -> Owner<C, St>,
    ) -> Result<Guard<C, St, PlainCall>, CircuitOpen> {
        let (permit, started) = self.start(RouteId::DEFAULT)?;
        Ok(Guard {
            breaker: owner(),
            generation: permit.generation,
            kind: permit.kind,
            meta: PlainCall,
            started,
            owed: Owed::CALL,
            gate_generation: 0,
            gate_kind: PermitKind::Untracked,
        })
    }

    #[inline(always)]
    pub(crate) fn start(&self, route: RouteId) -> Result<(Permit, Option<Instant>), CircuitOpen> {
        match self.store.acquire() {
            Ok(permit) => {
                let started = self.slow_after(route).map(|_| Instant::now());
                Ok((permit, started))
            }
            Err(rejected) => Err(CircuitOpen::new(
                Arc::clone(&self.name),
                self.key.clone(),
                rejected.retry_after,
                rejected.half_open,
            )),
        }
    }

    /// Whether a call on `route` admitted at `started` was slow, as of now; reads the clock
    /// only if needed. A call whose route measures slowness has its duration recorded. The
    /// threshold is the one its route has now: a call in flight across a reload that
    /// changes it is judged by the new one, and its duration is recorded as it was.
    #[inline(always)]
    fn measure(&self, route: RouteId, started: Option<Instant>) -> (bool, Option<Instant>) {
        if started.is_none() && !self.needs_end_time {
            return (false, None);
        }
        let now = Instant::now();
        let mut slow = false;
        if let Some(started) = started
            && let Some(threshold) = self.slow_after(route)
        {
            let took = now.saturating_duration_since(started);
            slow = took >= threshold;
            self.observe(route, took);
        }
        (slow, Some(now))
    }

    /// Records the duration of a call on `route`.
    #[inline]
    fn observe(&self, route: RouteId, took: Duration) {
        // The histograms are per route of the table the breaker was built with; an
        // unknown id is the default route's, as the table reads it.
        self.events.duration(route, took, &self.table);
    }

    /// The slow-call threshold of `route` as its table holds it now (an unknown id is the
    /// default route's), read at admission (whether to read the clock) and at the end (was
    /// the call slow). A route without one is timed past any call's duration when every
    /// route is timed.
    #[inline(always)]
    fn slow_after(&self, route: RouteId) -> Option<Duration> {
        self.slow_after
            .get(route)
            .or(self.timed.then_some(NEVER_SLOW))
    }

    /// Counts a call whose outcome is ignored or that was cancelled.
    #[inline]
    fn count_ignored(&self) {
        self.events.call(CallKind::Ignored);
    }

    /// A failure, as the keys' spread has it: counted for this key's keyed breaker, and
    /// ignored by a dependency-wide breaker while too few keys fail.
    #[cold]
    #[inline(never)]
    fn failure(&self) -> Outcome {
        match self.partial.as_deref() {
            Some(Partial::Key { counts, .. }) => {
                counts.failed(&self.failed_in, self.clock.now());
                Outcome::Failure
            }
            Some(Partial::Gated(gate)) if !gate.counts() => Outcome::Ignored,
            _ => Outcome::Failure,
        }
    }

    /// Records one call's outcome under `permit`.
    #[inline(always)]
    fn record(&self, permit: Permit, outcome: Outcome, slow: bool, end: Option<Instant>) {
        let outcome = if outcome == Outcome::Failure && self.partial.is_some() {
            self.failure()
        } else {
            outcome
        };
        let store = &self.store;
        self.events.call(match outcome {
            Outcome::Failure => CallKind::Failed,
            Outcome::Ignored => CallKind::Ignored,
            _ if slow => CallKind::Slow,
            _ => CallKind::Successful,
        });
        // A fast success that the store can take without the time it ended (a clean count
        // window) skips turning the end into `Nanos`.
        if outcome == Outcome::Success
            && !slow
            && !self.needs_end_time
            && store.record_fast_success(permit)
        {
            return;
        }
        let now = end.map(|end| self.clock.nanos_at(end));
        match Judged::of(outcome, slow) {
            Judged::Ignored => store.release(permit),
            Judged::Counted { failure, slow } => store.record(permit, failure, slow, now),
        }
    }

    /// A response head's verdict for the call `meta` describes, asking `shared` first:
    /// `None` when it waits for the trailers.
    #[inline(always)]
    fn classify_response_shared<M: Facts>(
        &self,
        meta: &M,
        status: StatusCode,
        headers: &HeaderMap,
        shared: &SharedVerdict,
    ) -> Option<Verdict> {
        let classified = shared.classify(&self.table, meta.route(), |c| {
            c.classify_response(&meta.call(&self.table), status, headers)
        });
        match classified {
            Classified::Ready(v) => Some(v),
            Classified::AtEndOfStream => None,
        }
    }

    /// How this breaker judges `answer` to the call `meta` describes: a response head by
    /// its route's classifier (`None` when the verdict waits for the end of the stream), a
    /// plain `Ok` as a success, an error as the breaker judges errors; `shared` is asked
    /// first.
    #[inline(always)]
    fn judge<M: Facts>(
        &self,
        meta: &M,
        answer: Answer<'_>,
        shared: &SharedVerdict,
    ) -> Option<Outcome> {
        match answer {
            Answer::Head { status, headers } => self
                .classify_response_shared(meta, status, headers, shared)
                .map(|verdict| verdict.outcome()),
            Answer::Done => Some(Outcome::Success),
            Answer::Error(error) => Some(self.classify_error_shared(meta, error, shared).outcome()),
        }
    }

    /// How this breaker judges the end of a call's stream (`None` when the body was
    /// dropped: nothing to record): its trailers, if any, by the route's classifier, an
    /// error as the breaker judges errors; `shared` is asked first.
    fn judge_end<M: Facts>(
        &self,
        meta: &M,
        end: StreamEnd<'_>,
        shared: &SharedVerdict,
    ) -> Option<Outcome> {
        let verdict = match end {
            StreamEnd::Trailers(trailers) => self.classify_eos_shared(meta, trailers, shared),
            StreamEnd::Error(error) => self.classify_error_shared(meta, error, shared),
            StreamEnd::Dropped => return None,
        };
        Some(verdict.outcome())
    }

    /// The verdict of a stream's end (its trailers, if any) for the call `meta` describes,
    /// asking `shared` first for the classifier's.
    fn classify_eos_shared<M: Facts>(
        &self,
        meta: &M,
        trailers: Option<&HeaderMap>,
        shared: &SharedVerdict,
    ) -> Verdict {
        shared.verdict(&self.table, meta.route(), |c| {
            c.classify_eos(&meta.call(&self.table), trailers)
        })
    }

    /// An error's verdict for the call `meta` describes, asking `shared` first for the
    /// classifier's (`count_overloaded` is the breaker's own, applied after).
    fn classify_error_shared<M: Facts>(
        &self,
        meta: &M,
        error: &(dyn Error + 'static),
        shared: &SharedVerdict,
    ) -> Verdict {
        let verdict = shared.verdict(&self.table, meta.route(), |c| {
            c.classify_error(&meta.call(&self.table), error)
        });
        counting_overloaded(
            verdict,
            error,
            self.count_overloaded.load(Ordering::Relaxed),
        )
    }

    /// Classifies `error` with `route`'s classifier (an [`Overloaded`](fusebox_classify::error::Overloaded) counts as a failure
    /// if the breaker says so: `count_overloaded`).
    pub(crate) fn classify_error(&self, call: &Call<'_>, error: &(dyn Error + 'static)) -> Verdict {
        error_verdict(
            self.table.route(call.route()).classifier(),
            call,
            error,
            self.count_overloaded.load(Ordering::Relaxed),
        )
    }

    pub(crate) fn touch(&self) {
        if !self.touched.load(Ordering::Relaxed) {
            self.touched.store(true, Ordering::Relaxed);
        }
    }
}

/// What keeps a breaker alive while one of its calls is in flight: a reference count that
/// the call takes at admission and gives back when its result is in.
pub(crate) enum Owner<C, St> {
    /// One of the breaker's [`Leases`]: the plain service's calls.
    Lease(Arc<Lease<C, St>>),
    /// The breaker itself: a keyed breaker's calls, which its idle eviction counts.
    Breaker(Arc<Breaker<C, St>>),
}

impl<C, St> Deref for Owner<C, St> {
    type Target = Breaker<C, St>;

    #[inline]
    fn deref(&self) -> &Breaker<C, St> {
        match self {
            Owner::Lease(lease) => lease,
            Owner::Breaker(breaker) => breaker,
        }
    }
}

/// A breaker and its per-thread leases: what a
/// [`CircuitBreakerLayer`](crate::CircuitBreakerLayer) and its services share.
///
/// A call's response future must keep the breaker alive until it has recorded the result,
/// so every call takes a reference count and gives it back. Taken on the breaker's own
/// count, that would make every thread calling the dependency write to one cache line
/// twice per call; instead a call takes the lease of the thread it is admitted on
/// ([`fusebox_classify::shard`]), and threads count on different lines.
pub(crate) type Leases<C, St> = fusebox_classify::shard::Leases<Breaker<C, St>>;

/// One of a breaker's [`Leases`].
pub(crate) type Lease<C, St> = fusebox_classify::shard::Lease<Breaker<C, St>>;

/// The owner of a call admitted on this thread: its lease on the breaker.
#[inline]
pub(crate) fn lease<C, St>(leases: &Leases<C, St>) -> Owner<C, St> {
    Owner::Lease(leases.lease())
}

/// What a [`Guard`] knows of its call, for the classifier: a request's route, method and
/// idempotency ([`CallMeta`]), or nothing beyond "a plain call" ([`PlainCall`]).
pub trait Facts: Send + 'static {
    /// The call's route.
    fn route(&self) -> RouteId;
    /// The classifier's view of the call.
    fn call<'a, C: Classifier>(&'a self, table: &'a RouteTable<C>) -> Call<'a>;
}

impl Facts for CallMeta {
    #[inline]
    fn route(&self) -> RouteId {
        CallMeta::route(self)
    }

    #[inline]
    fn call<'a, C: Classifier>(&'a self, table: &'a RouteTable<C>) -> Call<'a> {
        CallMeta::call(self, table)
    }
}

/// The facts of a plain call (one that is not an HTTP request): the default route, no
/// method, not known to be safe to repeat ([`Call::plain`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlainCall;

impl Facts for PlainCall {
    #[inline]
    fn route(&self) -> RouteId {
        RouteId::DEFAULT
    }

    #[inline]
    fn call<'a, C: Classifier>(&'a self, table: &'a RouteTable<C>) -> Call<'a> {
        Call::plain(RouteId::DEFAULT, table.name(RouteId::DEFAULT))
    }
}

/// The right to report one admitted call's result, exactly once. Dropped unreported (the
/// caller cancelled), it gives its permit back (a half-open probe's included) and counts
/// nothing.
///
/// It is what the breaker's stage holds for an admitted call (see
/// [`fusebox_classify::stage`]); [`CircuitBreaker::admit`](crate::CircuitBreaker::admit)
/// and [`KeyedCircuitBreaker::admit`](crate::KeyedCircuitBreaker::admit) hand one out for
/// a caller that drives the breaker by hand: classify the response head
/// ([`classify_response`](Self::classify_response)) and record the verdict
/// ([`finish_in_place`](Self::finish_in_place)), or, for a verdict in the trailers, hand
/// the guard to the response body ([`at_end_of_stream`](Self::at_end_of_stream)); for an
/// error, [`classify_error`](Self::classify_error) then [`finish`](Self::finish).
///
/// The guard of a call of a keyed breaker gated by a dependency-wide one in the same guard
/// ([`gate_keys`](crate::compose::gate_keys)) holds the dependency-wide breaker's permit
/// too, and tells that breaker each answer after the key's, as the two layers stacked by
/// hand would be told.
pub struct Guard<C: Classifier, St: Store, M: Facts = CallMeta> {
    breaker: Owner<C, St>,
    /// The permit, held as its two parts rather than as a [`Permit`]: its kind and the
    /// flags below then share one word, and the guard has room for the gate's permit
    /// without growing.
    generation: u64,
    kind: PermitKind,
    /// The request's route, method and idempotency ([`CallMeta`]), or nothing for a plain
    /// call ([`PlainCall`]).
    meta: M,
    /// When the call was admitted, if its route measured slowness then (or every route is
    /// timed for the call-duration histogram).
    started: Option<Instant>,
    /// What the guard has yet to record or give back: the call's permit, and the gate's.
    owed: Owed,
    /// The permit of the dependency-wide breaker gating a keyed one, for a call of one of
    /// its keys (owed until the gate is told the call).
    gate_generation: u64,
    gate_kind: PermitKind,
}

/// What a [`Guard`] has yet to record or give back: its call's permit, and the permit of
/// the keys' gate, if the call has one. One byte, so that dropping a guard tests one byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owed(u8);

impl Owed {
    const CALL: Owed = Owed(1);
    const GATE: Owed = Owed(2);
    const CALL_AND_GATE: Owed = Owed(3);

    /// Whether the call's own permit is still to be recorded or given back.
    #[inline(always)]
    fn call(self) -> bool {
        self.0 & Self::CALL.0 != 0
    }

    /// Whether the gate's permit is still to be told.
    #[inline(always)]
    fn gate(self) -> bool {
        self.0 & Self::GATE.0 != 0
    }

    #[inline(always)]
    fn settle_call(&mut self) {
        self.0 &= !Self::CALL.0;
    }

    #[inline(always)]
    fn settle_gate(&mut self) {
        self.0 &= !Self::GATE.0;
    }
}

impl<C: Classifier, St: Store, M: Facts> fmt::Debug for Guard<C, St, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("breaker", &self.breaker.name)
            .field("permit", &self.permit())
            .field("route", &self.route())
            .field("gate", &self.owed.gate().then(|| self.gate_permit()))
            .finish()
    }
}

impl<C: Classifier, St: Store, M: Facts> Guard<C, St, M> {
    #[inline]
    fn route(&self) -> RouteId {
        self.meta.route()
    }

    /// The call's permit.
    #[inline(always)]
    fn permit(&self) -> Permit {
        Permit {
            generation: self.generation,
            kind: self.kind,
        }
    }

    /// The gate's permit.
    #[inline(always)]
    fn gate_permit(&self) -> Permit {
        Permit {
            generation: self.gate_generation,
            kind: self.gate_kind,
        }
    }

    /// The classifier's view of the call.
    #[inline]
    fn call(&self) -> Call<'_> {
        self.meta.call(&self.breaker.table)
    }

    /// Whether this call is a half-open probe not yet recorded: dropped now, it would give
    /// its permit back without an event.
    #[inline]
    pub fn is_pending_probe(&self) -> bool {
        self.owed.call() && self.kind == PermitKind::Probe
    }

    /// Classifies a response head with the call's route's classifier: a verdict now, or
    /// `None` when it waits for the trailers.
    #[inline]
    pub fn classify_response(&self, status: StatusCode, headers: &HeaderMap) -> Option<Verdict> {
        let b = &self.breaker;
        match b.table.route(self.route()).classifier().classify_response(
            &self.call(),
            status,
            headers,
        ) {
            Classified::Ready(v) => Some(v),
            Classified::AtEndOfStream => None,
        }
    }

    /// Classifies an error with the call's route's classifier (an [`Overloaded`](fusebox_classify::error::Overloaded) counts
    /// as a failure if the breaker says so: `count_overloaded`).
    pub fn classify_error(&self, error: &(dyn Error + 'static)) -> Verdict {
        self.breaker.classify_error(&self.call(), error)
    }

    /// Records `verdict` (slowness measured now).
    #[inline]
    pub fn finish(mut self, verdict: Verdict) {
        self.finish_in_place(verdict);
    }

    /// Records `verdict` (slowness measured now) without moving the guard; it must not
    /// record again (dropping it afterwards releases nothing).
    #[inline(always)]
    pub fn finish_in_place(&mut self, verdict: Verdict) {
        self.finish_outcome(verdict.outcome());
    }

    #[inline(always)]
    fn finish_outcome(&mut self, outcome: Outcome) {
        let (breaker, permit, meta, started, owed) = self.parts();
        Self::record_now(breaker, permit, meta, started, owed, outcome);
        if self.owed.gate() {
            self.tell_gate(|_, _| Some(outcome));
        }
    }

    /// The guard's parts, its owner looked through once (see `record_now`).
    #[inline(always)]
    fn parts(&mut self) -> (&Breaker<C, St>, Permit, &M, Option<Instant>, &mut Owed) {
        let permit = self.permit();
        let Guard {
            breaker,
            meta,
            started,
            owed,
            ..
        } = self;
        (breaker, permit, meta, *started, owed)
    }

    /// Records `outcome` (slowness measured now) on `breaker`, the guard's owner looked
    /// through once by the caller (each look is a branch and two loads, and the stores of
    /// the recording would make the compiler look again); `owed` is the guard's.
    #[inline(always)]
    fn record_now(
        breaker: &Breaker<C, St>,
        permit: Permit,
        meta: &M,
        started: Option<Instant>,
        owed: &mut Owed,
        outcome: Outcome,
    ) {
        let (slow, now) = breaker.measure(meta.route(), started);
        owed.settle_call();
        breaker.record(permit, outcome, slow, now);
    }

    #[inline(always)]
    fn finish_measured(&mut self, outcome: Outcome, slow: bool, end: Option<Instant>) {
        self.owed.settle_call();
        self.breaker.record(self.permit(), outcome, slow, end);
    }

    /// Gives the call's permit back uncounted (the call was cancelled, or no key's breaker
    /// counts it): the breaker counts it as ignored.
    #[inline]
    fn release(&mut self) {
        self.owed.settle_call();
        self.breaker.count_ignored();
        self.breaker.store.release(self.permit());
    }

    /// Tells the dependency-wide breaker gating the call's keyed breaker (the guard owes it
    /// the call) the call's outcome, which `judge` gives from the gate (`None`: the verdict
    /// waits for the end of the stream). Slowness is measured now, from the call's
    /// admission; returns whether the call was slow, for a verdict that has to wait.
    #[inline(never)]
    fn tell_gate(&mut self, judge: impl FnOnce(&Breaker<C, St>, &M) -> Option<Outcome>) -> bool {
        let Some(gate) = self.breaker.gate() else {
            self.owed.settle_gate();
            return false;
        };
        let outcome = judge(gate, &self.meta);
        let (slow, now) = gate.measure(self.meta.route(), self.started);
        if let Some(outcome) = outcome {
            self.owed.settle_gate();
            gate.record(self.gate_permit(), outcome, slow, now);
        }
        slow
    }

    /// The gate's judgement of `answer` (see [`tell_gate`](Self::tell_gate)).
    #[inline(always)]
    fn answer_gate(&mut self, answer: Answer<'_>, shared: &SharedVerdict) -> Option<bool> {
        let mut waits = false;
        let slow = self.tell_gate(|gate, meta| {
            let judged = gate.judge(meta, answer, shared);
            waits = judged.is_none();
            judged
        });
        waits.then_some(slow)
    }

    /// Whether the call's breaker is a key of a keyed breaker whose answers may name
    /// another key.
    #[inline(always)]
    pub(crate) fn reads_answers(&self) -> bool {
        self.breaker.answer_map().is_some()
    }

    /// Moves the call to the breaker of the key its answer names in `headers`, if it names
    /// one other than the call's (keyed breakers whose key function takes keys from
    /// answers): the call's own breaker gets its permit back without counting the call,
    /// and the named key's breaker gives one, keeping the call's route and start. Returns
    /// `false` when the named key's breaker refuses (it is open, or its probes are taken):
    /// the call is then counted by neither, and the caller gives its permit back. (The
    /// keys' gate, if any, is theirs in common: its permit stays.)
    #[inline(never)]
    pub(crate) fn follow_answer(&mut self, headers: &HeaderMap) -> bool {
        let Some(map) = self.breaker.answer_map().and_then(Weak::upgrade) else {
            return true;
        };
        let Some(named) = map.named(headers) else {
            return true;
        };
        if std::ptr::eq(&*named, &*self.breaker) {
            return true;
        }
        match named.store.acquire() {
            Ok(permit) => {
                let from = std::mem::replace(&mut self.breaker, Owner::Breaker(named));
                from.store.release(self.permit());
                self.generation = permit.generation;
                self.kind = permit.kind;
                true
            }
            Err(_) => false,
        }
    }

    /// Hands the guard to the response body, measuring slowness now (time to headers).
    pub fn at_end_of_stream(mut self) -> EosRecorder<C, St, M> {
        let slow = self.breaker.measure(self.route(), self.started).0;
        let gate_slow = self.owed.gate() && self.tell_gate(|_, _| None);
        self.recorder(slow, gate_slow)
    }

    /// Hands the guard to the response body, with whether the call was slow by now for
    /// its breaker, and for its keys' gate.
    #[inline(always)]
    fn recorder(self, slow: bool, gate_slow: bool) -> EosRecorder<C, St, M> {
        EosRecorder {
            guard: self,
            slow,
            gate_slow,
        }
    }

    /// A breaker's decision as its stage's admission: the guard, or the rejection as the
    /// call's answer. Every breaker stage (HTTP, keyed, plain) admits through this.
    #[inline(always)]
    pub(crate) fn admission(decided: Result<Self, CircuitOpen>) -> Admit<Option<Self>, NoWait> {
        match decided {
            Ok(guard) => Admit::Ready(Some(guard)),
            Err(open) => Admit::Refuse(Box::new(open)),
        }
    }

    /// The breaker stage's answer: records the call's verdict (a response head judged by
    /// its route's classifier, a plain `Ok` a success, an error judged as the breaker
    /// judges errors), or hands the guard to the response body when the verdict is in the
    /// trailers. Every breaker stage (HTTP, keyed, plain) answers through this; a keyed
    /// breaker's call whose answer names another key moves to that key's breaker first
    /// ([`follow_answer`](Self::follow_answer)). (A keyed breaker's stage answers through
    /// [`answer_keyed`](Self::answer_keyed), which tells the keys' gate too.)
    #[inline(always)]
    pub(crate) fn answer(
        slot: &mut Option<Self>,
        answer: Answer<'_>,
        shared: &SharedVerdict,
    ) -> Option<EosRecorder<C, St, M>> {
        let guard = slot.as_mut()?;
        if let Answer::Head { headers, .. } = answer
            && guard.reads_answers()
            && !guard.follow_answer(headers)
        {
            // The key the answer names refused the call: counted by no key's breaker.
            return Self::unkeyed(slot, answer, shared);
        }
        // One look through the guard's owner for the whole answer (see `record_now`).
        let (b, permit, meta, started, owed) = guard.parts();
        let judged = b.judge(meta, answer, shared);
        if let Some(outcome) = judged {
            Self::record_now(b, permit, meta, started, owed, outcome);
        }
        let at_end = judged.is_none();
        if b.expose {
            shared.expose(&b.table);
        }
        if at_end {
            return slot.take().map(|guard| {
                let slow = guard.breaker.measure(guard.route(), guard.started).0;
                guard.recorder(slow, false)
            });
        }
        None
    }

    /// A keyed breaker's stage's answer: [`answer`](Self::answer), and for a call of keys
    /// gated in their guards ([`gate_keys`](crate::compose::gate_keys)), the gate told
    /// after the key's breaker.
    #[inline(always)]
    pub(crate) fn answer_keyed(
        slot: &mut Option<Self>,
        answer: Answer<'_>,
        shared: &SharedVerdict,
    ) -> Option<EosRecorder<C, St, M>> {
        match slot {
            Some(guard) if guard.owed.gate() => Self::answer_gated(slot, answer, shared),
            _ => Self::answer(slot, answer, shared),
        }
    }

    /// The answer of a call of gated keys: the key's breaker told first, then the gate
    /// (unless the key's breaker refused the call, or the key the answer names did: then
    /// the gate alone).
    #[inline(never)]
    fn answer_gated(
        slot: &mut Option<Self>,
        answer: Answer<'_>,
        shared: &SharedVerdict,
    ) -> Option<EosRecorder<C, St, M>> {
        if slot.as_ref().is_some_and(|guard| !guard.owed.call()) {
            // A key's breaker refused the call: only the gate has yet to be told.
            return Self::unkeyed(slot, answer, shared);
        }
        if let Some(mut recorder) = Self::answer(slot, answer, shared) {
            // The key's verdict waits for the end of the stream: so, with the same
            // classifier, does the gate's. (A recorder of a call no key counts carries
            // the gate alone, told already.)
            if recorder.guard.owed.call()
                && recorder.guard.owed.gate()
                && let Some(slow) = recorder.guard.answer_gate(answer, shared)
            {
                recorder.gate_slow = slow;
            }
            return Some(recorder);
        }
        if let Some(guard) = slot
            && guard.owed.gate()
            && let Some(gate_slow) = guard.answer_gate(answer, shared)
        {
            return slot.take().map(|guard| guard.recorder(false, gate_slow));
        }
        None
    }

    /// A call no key's breaker counts (a key's breaker refused it, or the key its answer
    /// names did): its permit, if it has one, goes back, and the keys' gate, if any, is
    /// told the answer all the same.
    #[cold]
    #[inline(never)]
    fn unkeyed(
        slot: &mut Option<Self>,
        answer: Answer<'_>,
        shared: &SharedVerdict,
    ) -> Option<EosRecorder<C, St, M>> {
        let guard = slot.as_mut()?;
        if guard.owed.call() {
            guard.release();
        }
        if guard.owed.gate()
            && let Some(gate_slow) = guard.answer_gate(answer, shared)
        {
            return slot.take().map(|guard| guard.recorder(false, gate_slow));
        }
        *slot = None;
        None
    }
}

impl<C: Classifier, St: Store, M: Facts> Drop for Guard<C, St, M> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.owed != Owed(0) {
            self.cancel();
        }
    }
}

impl<C: Classifier, St: Store, M: Facts> Guard<C, St, M> {
    /// Cancelled: the outcome is ignored and a probe's permit goes back (the keys' gate's
    /// too, if it has not been told).
    #[cold]
    #[inline(never)]
    fn cancel(&mut self) {
        if self.owed.call() {
            self.release();
        }
        if self.owed.gate()
            && let Some(gate) = self.breaker.gate()
        {
            self.owed.settle_gate();
            gate.count_ignored();
            gate.store.release(self.gate_permit());
        }
    }
}

/// Records a streamed call's verdict at the end of its body (gRPC: from the trailers).
/// Slowness is the time to the response headers.
pub struct EosRecorder<C: Classifier, St: Store, M: Facts = CallMeta> {
    guard: Guard<C, St, M>,
    slow: bool,
    /// Whether the call was slow for the keys' gate, if the guard holds its permit.
    gate_slow: bool,
}

impl<C: Classifier, St: Store, M: Facts> fmt::Debug for EosRecorder<C, St, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EosRecorder")
            .field("guard", &self.guard)
            .field("slow", &self.slow)
            .finish()
    }
}

impl<C: Classifier, St: Store, M: Facts> EosRecorder<C, St, M> {
    /// Records the call's own verdict at the end of the stream, unless it is recorded
    /// already; on returning early, the guard's drop releases the permit.
    #[inline(always)]
    fn end_call(&mut self, end: StreamEnd<'_>, shared: &SharedVerdict) {
        let guard = &mut self.guard;
        if !guard.owed.call() {
            return;
        }
        if let StreamEnd::Trailers(Some(trailers)) = end
            && guard.reads_answers()
            && !guard.follow_answer(trailers)
        {
            return; // counted by no key's breaker
        }
        // Dropped: the guard's drop releases the permit.
        let Some(outcome) = guard.breaker.judge_end(&guard.meta, end, shared) else {
            return;
        };
        let end = guard.breaker.needs_end_time.then(Instant::now);
        guard.finish_measured(outcome, self.slow, end);
    }

    /// Tells the keys' gate the end of the stream, after the key's breaker.
    #[inline(never)]
    fn end_gate(&mut self, end: StreamEnd<'_>, shared: &SharedVerdict) {
        let guard = &mut self.guard;
        let Some(gate) = guard.breaker.gate() else {
            return;
        };
        // Dropped: the guard's drop releases the gate's permit.
        let Some(outcome) = gate.judge_end(&guard.meta, end, shared) else {
            return;
        };
        guard.owed.settle_gate();
        let end = gate.needs_end_time.then(Instant::now);
        gate.record(guard.gate_permit(), outcome, self.gate_slow, end);
    }
}

impl<C: Classifier, St: Store, M: Facts> OnEndOfStream for EosRecorder<C, St, M> {
    fn on_end(self, end: StreamEnd<'_>) {
        self.on_end_shared(end, &SharedVerdict::new());
    }

    fn on_end_shared(mut self, end: StreamEnd<'_>, shared: &SharedVerdict) {
        self.end_call(end, shared);
        if self.guard.owed.gate() {
            self.end_gate(end, shared);
        }
    }
}

/// What an operator's handle needs from a breaker, whatever its classifier and store.
pub(crate) trait Control: Send + Sync + 'static {
    fn snapshot(&self) -> Snapshot;
    fn command(&self, command: Command);
    fn name(&self) -> &Arc<str>;
    fn key(&self) -> Option<&Arc<str>>;
    fn events(&self) -> &EventSink;
    fn config(&self) -> Option<Arc<CircuitBreakerConfig>>;
    fn reconfigure(&self, config: &Arc<CircuitBreakerConfig>) -> Result<(), Reconfigure>;
}

impl<C: Classifier, St: Store> Control for Breaker<C, St> {
    fn snapshot(&self) -> Snapshot {
        self.store.snapshot()
    }
    fn command(&self, command: Command) {
        self.store.command(command)
    }
    fn name(&self) -> &Arc<str> {
        &self.name
    }
    fn key(&self) -> Option<&Arc<str>> {
        self.key.as_ref()
    }
    fn events(&self) -> &EventSink {
        &self.events
    }
    fn config(&self) -> Option<Arc<CircuitBreakerConfig>> {
        self.store.config()
    }
    fn reconfigure(&self, config: &Arc<CircuitBreakerConfig>) -> Result<(), Reconfigure> {
        self.store.reconfigure(config)?;
        self.count_overloaded
            .store(config.count_overloaded, Ordering::Relaxed);
        Ok(())
    }
}

/// An operator's handle on one breaker: read its state, force it open, disable it, put it
/// in metrics-only mode, reset it, subscribe to its events. Cheap to clone.
#[derive(Clone)]
pub struct BreakerHandle {
    control: Arc<dyn Control>,
}

impl fmt::Debug for BreakerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerHandle")
            .field("name", self.control.name())
            .field("key", &self.control.key())
            .finish()
    }
}

impl BreakerHandle {
    pub(crate) fn new(control: Arc<dyn Control>) -> Self {
        BreakerHandle { control }
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        self.control.name()
    }

    /// The key, for one key of a keyed breaker.
    pub fn key(&self) -> Option<&str> {
        self.control.key().map(|k| &**k)
    }

    /// The state now.
    pub fn state(&self) -> State {
        self.control.snapshot().state
    }

    /// State, generation, window totals, rates, time until half-open.
    pub fn snapshot(&self) -> Snapshot {
        self.control.snapshot()
    }

    /// Holds the breaker open (every call rejected) until reset.
    pub fn force_open(&self) {
        self.control.command(Command::ForceOpen)
    }

    /// Lets every call through and records nothing, until reset.
    pub fn disable(&self) {
        self.control.command(Command::Disable)
    }

    /// Records and reports, never opens (shadow mode, for tuning), until reset.
    pub fn metrics_only(&self) {
        self.control.command(Command::MetricsOnly)
    }

    /// Back to CLOSED with an empty window.
    pub fn reset(&self) {
        self.control.command(Command::Reset)
    }

    /// Every event from now on (for a keyed breaker: every key's).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<crate::BreakerEvent> {
        self.control.events().subscribe()
    }

    /// The configuration the breaker judges by now (its thresholds, waits and probe
    /// budget), where its store keeps one (the memory store does; `fusebox-redis`'s does not).
    pub fn config(&self) -> Option<Arc<CircuitBreakerConfig>> {
        self.control.config()
    }

    /// Judges by `config` from the next call on, keeping the state, the generation and the
    /// window (see [`Store::reconfigure`]): thresholds, minimum calls, consecutive
    /// failures, open wait (an open wait already running keeps its end), probe budget,
    /// half-open wait, what closing does, `count_overloaded`. The name is not changed.
    /// Refused, changing nothing, when the window's kind or size differs
    /// ([`Reconfigure::WindowChanged`]) or the store cannot change its settings in place.
    pub fn reconfigure(&self, config: &Arc<CircuitBreakerConfig>) -> Result<(), Reconfigure> {
        self.control.reconfigure(config)
    }

    /// A handle that does not keep the breaker alive: for a list of the breakers a process
    /// has built (such as the `fusebox` facade's registry), which must not outlive them.
    pub fn downgrade(&self) -> WeakBreakerHandle {
        WeakBreakerHandle {
            control: Arc::downgrade(&self.control),
        }
    }
}

/// A [`BreakerHandle`] that does not keep its breaker alive ([`BreakerHandle::downgrade`]):
/// [`upgrade`](WeakBreakerHandle::upgrade) gives the handle back while the breaker's layer
/// or any of its services is still alive, and `None` once they have all been dropped.
#[derive(Clone)]
pub struct WeakBreakerHandle {
    control: Weak<dyn Control>,
}

impl WeakBreakerHandle {
    /// The handle, if the breaker is still alive.
    pub fn upgrade(&self) -> Option<BreakerHandle> {
        self.control.upgrade().map(BreakerHandle::new)
    }

    /// Whether the breaker is still alive.
    pub fn is_alive(&self) -> bool {
        self.control.strong_count() > 0
    }
}

impl fmt::Debug for WeakBreakerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.upgrade() {
            Some(handle) => f
                .debug_struct("WeakBreakerHandle")
                .field("name", &handle.name())
                .field("key", &handle.key())
                .finish(),
            None => f.write_str("WeakBreakerHandle(dropped)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CircuitBreakerConfig;
    use crate::store::{MemoryStore, StoreSpec};
    use fusebox_classify::StandardClassifier;

    fn breaker() -> Arc<Breaker<StandardClassifier, MemoryStore>> {
        let config = Arc::new(
            CircuitBreakerConfig::builder()
                .name("leases")
                .build()
                .expect("a valid config"),
        );
        let clock = Clock::new();
        let events = EventSink::new(Arc::clone(&config.name), Vec::new());
        let store = MemoryStore::new(StoreSpec {
            config: Arc::clone(&config),
            key: None,
            clock,
            events: events.clone(),
        });
        Arc::new(Breaker::new(
            RouteTable::default(),
            store,
            clock,
            Arc::clone(&config.name),
            None,
            events,
            false,
        ))
    }

    #[test]
    fn a_lease_owns_the_breaker_past_the_leases() {
        let breaker = breaker();
        let leases = Leases::new(Arc::clone(&breaker));
        let n = leases.len();
        assert_eq!(Arc::strong_count(&breaker), 2 + n);

        // A call's owner keeps the breaker alive past the leases, then lets it go.
        let owner = lease(&leases);
        assert!(std::ptr::eq(&*owner, &*breaker));
        drop(leases);
        assert_eq!(
            Arc::strong_count(&breaker),
            2,
            "only the owner's lease is left"
        );
        drop(owner);
        assert_eq!(Arc::strong_count(&breaker), 1, "nothing holds the breaker");

        let direct = Owner::Breaker(Arc::clone(&breaker));
        assert!(std::ptr::eq(&*direct, &*breaker));
    }
}
