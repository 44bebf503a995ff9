//! One breaker as the service and its futures see it: the route table, the store, the
//! clock, and the per-call bookkeeping (`Guard`) that turns a finished call into exactly one
//! record or release.

use crate::config::CircuitBreakerConfig;
use crate::events::{CallKind, EventSink};
use crate::judge::{Judged, counting_overloaded, error_verdict};
use crate::spread::{KeySpreadGate, NEVER_FAILED, SpreadCounts};
use crate::state::{Command, Permit, Snapshot, State};
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
use std::sync::{Arc, Weak};
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

/// What a breaker knows of the keys around it.
pub(crate) enum Partial<C, St> {
    /// One key of a keyed breaker (every key shares this): where the keyed breaker counts
    /// its failing keys, and, when its key function reads answers, its map, to find the
    /// key an answer names.
    Key {
        counts: Arc<SpreadCounts>,
        map: Option<Weak<dyn Redirect<C, St>>>,
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
            permit,
            meta,
            started,
            done: false,
        })
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
            permit,
            meta: PlainCall,
            started,
            done: false,
        })
    }

    #[inline(always)]
    fn start(&self, route: RouteId) -> Result<(Permit, Option<Instant>), CircuitOpen> {
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
pub struct Guard<C: Classifier, St: Store, M: Facts = CallMeta> {
    breaker: Owner<C, St>,
    permit: Permit,
    /// The request's route, method and idempotency ([`CallMeta`]), or nothing for a plain
    /// call ([`PlainCall`]).
    meta: M,
    /// When the call was admitted, if its route measured slowness then (or every route is
    /// timed for the call-duration histogram).
    started: Option<Instant>,
    done: bool,
}

impl<C: Classifier, St: Store, M: Facts> fmt::Debug for Guard<C, St, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("breaker", &self.breaker.name)
            .field("permit", &self.permit)
            .field("route", &self.route())
            .finish()
    }
}

impl<C: Classifier, St: Store, M: Facts> Guard<C, St, M> {
    #[inline]
    fn route(&self) -> RouteId {
        self.meta.route()
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
        !self.done && self.permit.kind == crate::state::PermitKind::Probe
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

    fn classify_eos_shared(&self, trailers: Option<&HeaderMap>, shared: &SharedVerdict) -> Verdict {
        shared.verdict(&self.breaker.table, self.route(), |c| {
            c.classify_eos(&self.call(), trailers)
        })
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
        let (breaker, permit, meta, started, done) = self.parts();
        Self::record_now(breaker, *permit, meta, *started, done, outcome);
    }

    /// The guard's parts, its owner looked through once (see `record_now`).
    #[inline(always)]
    fn parts(&mut self) -> (&Breaker<C, St>, &Permit, &M, &Option<Instant>, &mut bool) {
        let Guard {
            breaker,
            permit,
            meta,
            started,
            done,
        } = self;
        (breaker, permit, meta, started, done)
    }

    /// Records `outcome` (slowness measured now) on `breaker`, the guard's owner looked
    /// through once by the caller (each look is a branch and two loads, and the stores of
    /// the recording would make the compiler look again); `done` is the guard's flag.
    #[inline(always)]
    fn record_now(
        breaker: &Breaker<C, St>,
        permit: Permit,
        meta: &M,
        started: Option<Instant>,
        done: &mut bool,
        outcome: Outcome,
    ) {
        let (slow, now) = breaker.measure(meta.route(), started);
        *done = true;
        breaker.record(permit, outcome, slow, now);
    }

    #[inline(always)]
    fn finish_measured(&mut self, outcome: Outcome, slow: bool, end: Option<Instant>) {
        self.done = true;
        self.breaker.record(self.permit, outcome, slow, end);
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
    /// the call is then counted by neither, and the caller drops the guard.
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
                from.store
                    .release(std::mem::replace(&mut self.permit, permit));
                true
            }
            Err(_) => false,
        }
    }

    /// Hands the guard to the response body, measuring slowness now (time to headers).
    pub fn at_end_of_stream(self) -> EosRecorder<C, St, M> {
        let (slow, _) = self.breaker.measure(self.route(), self.started);
        EosRecorder { guard: self, slow }
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
    /// ([`follow_answer`](Self::follow_answer)).
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
            // The key the answer names refused the call: counted by neither breaker.
            *slot = None;
            return None;
        }
        // One look through the guard's owner for the whole answer (see `record_now`).
        let (b, permit, meta, started, done) = guard.parts();
        let mut finish =
            |outcome: Outcome| Self::record_now(b, *permit, meta, *started, done, outcome);
        let at_end = match answer {
            Answer::Head { status, headers } => {
                match b.classify_response_shared(meta, status, headers, shared) {
                    Some(verdict) => {
                        finish(verdict.outcome());
                        false
                    }
                    None => true,
                }
            }
            Answer::Done => {
                finish(Outcome::Success);
                false
            }
            Answer::Error(error) => {
                let verdict = b.classify_error_shared(meta, error, shared);
                finish(verdict.outcome());
                false
            }
        };
        if b.expose {
            shared.expose(&b.table);
        }
        if at_end {
            return slot.take().map(Guard::at_end_of_stream);
        }
        None
    }
}

impl<C: Classifier, St: Store, M: Facts> Drop for Guard<C, St, M> {
    fn drop(&mut self) {
        if !self.done {
            // Cancelled: the outcome is ignored and a probe's permit goes back.
            self.breaker.count_ignored();
            self.breaker.store.release(self.permit);
        }
    }
}

/// Records a streamed call's verdict at the end of its body (gRPC: from the trailers).
/// Slowness is the time to the response headers.
pub struct EosRecorder<C: Classifier, St: Store, M: Facts = CallMeta> {
    guard: Guard<C, St, M>,
    slow: bool,
}

impl<C: Classifier, St: Store, M: Facts> fmt::Debug for EosRecorder<C, St, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EosRecorder")
            .field("guard", &self.guard)
            .field("slow", &self.slow)
            .finish()
    }
}

impl<C: Classifier, St: Store, M: Facts> OnEndOfStream for EosRecorder<C, St, M> {
    fn on_end(self, end: StreamEnd<'_>) {
        self.on_end_shared(end, &SharedVerdict::new());
    }

    fn on_end_shared(mut self, end: StreamEnd<'_>, shared: &SharedVerdict) {
        if let StreamEnd::Trailers(Some(trailers)) = end
            && self.guard.reads_answers()
            && !self.guard.follow_answer(trailers)
        {
            return; // counted by neither breaker: the guard's drop releases the permit
        }
        let verdict = match end {
            StreamEnd::Trailers(trailers) => self.guard.classify_eos_shared(trailers, shared),
            StreamEnd::Error(error) => {
                self.guard
                    .breaker
                    .classify_error_shared(&self.guard.meta, error, shared)
            }
            StreamEnd::Dropped => return, // the guard's drop releases the permit
        };
        let end = self.guard.breaker.needs_end_time.then(Instant::now);
        let slow = self.slow;
        self.guard.finish_measured(verdict.outcome(), slow, end);
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
