//! [`RedisStore`]: a breaker's [`Store`] whose state is the fleet's, in Redis, while every
//! decision on the request path is taken from a local view of it.
//!
//! The request path never waits on Redis. Admission reads one atomic word (state and epoch,
//! as last heard from Redis); a half-open probe is admitted only on a lease this replica
//! already claimed in Redis. Outcomes go to Redis in the background: one script call each
//! (strict) or counted into a batch flushed every few milliseconds (batched). Every reply,
//! every pub/sub message and every poll refreshes the view.
//!
//! When Redis does not answer within the configured time, the view is set aside and the
//! configured [`Fallback`] decides — by default a fresh in-memory breaker of this replica's
//! own calls. The worker keeps trying Redis and, when it answers, resynchronises: the
//! fallback's window is added to the fleet's, and the fleet's state takes over again.

use crate::backend::Backend;
use crate::batch::{Added, BATCH_HIGH, Batch};
use crate::config::{Fallback, Mode};
use crate::script::{self, ConfigArgs, Keys, Op, Reply};
use crate::telemetry::Metrics;
use arc_swap::ArcSwap;
use fusebox_breaker::events::EventKind;
use fusebox_breaker::state::{HALF_OPEN_RETRY_HINT, OpenJitter, Permit, PermitKind, Rejected};
use fusebox_breaker::store::StoreSpec;
use fusebox_breaker::{
    CircuitBreakerConfig, Command, MemoryStore, Reason, Reconfigure, Snapshot, State, Store,
    Transition, WindowTotals,
};
use fusebox_classify::Nanos;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::{Notify, oneshot};

/// The word's state codes beyond [`State::code`]'s: the view is set aside.
const FALLBACK: u64 = 6;
/// Not heard from Redis yet.
const UNSYNCED: u64 = 7;
const CODE_BITS: u32 = 8;

/// A permit handed out by the local fallback breaker: this bit, the fallback's instance
/// (23 bits) and its own generation (40 bits).
const LOCAL_BIT: u64 = 1 << 63;
const INSTANCE_SHIFT: u32 = 40;
const INSTANCE_MASK: u64 = (1 << 23) - 1;
const LOCAL_GEN_MASK: u64 = (1 << INSTANCE_SHIFT) - 1;

fn pack(code: u64, epoch: u64) -> u64 {
    (epoch << CODE_BITS) | code
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its data consistent before it can panic; keep serving.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us.max(0)).unwrap_or(0))
}

/// A breaker's state kept in Redis for a fleet of replicas (or, for a keyed breaker's key
/// that is not shared, in this process). Made by [`OnRedis`](crate::OnRedis).
pub struct RedisStore {
    inner: Inner,
}

enum Inner {
    /// Boxed: a memory store is large next to a pointer and a sender.
    Local(Box<MemoryStore>),
    Shared {
        shared: Arc<Shared>,
        /// Dropped with the store: the worker sees its receiver close and stops.
        _stop: oneshot::Sender<()>,
    },
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Local(m) => f.debug_tuple("RedisStore::Local").field(m).finish(),
            Inner::Shared { shared, .. } => f
                .debug_struct("RedisStore")
                .field("scope", &shared.keys.scope)
                .field("mode", &shared.mode)
                .field("healthy", &shared.healthy.load(Ordering::Relaxed))
                .finish(),
        }
    }
}

impl RedisStore {
    pub(crate) fn local(spec: StoreSpec) -> RedisStore {
        RedisStore {
            inner: Inner::Local(Box::new(MemoryStore::new(spec))),
        }
    }

    pub(crate) fn shared(backend: Arc<Backend>, spec: StoreSpec, scope: String) -> RedisStore {
        let (tx, rx) = oneshot::channel();
        let shared = Arc::new(Shared::new(backend, spec, scope, rx));
        if let Ok(handle) = Handle::try_current() {
            shared.start(handle);
        }
        RedisStore {
            inner: Inner::Shared { shared, _stop: tx },
        }
    }

    /// The scope this store shares in Redis (`dep:payments:region:eu`), or `None` when the
    /// state stays in this process (a keyed breaker's key that is not shared).
    pub fn scope(&self) -> Option<&str> {
        match &self.inner {
            Inner::Local(_) => None,
            Inner::Shared { shared, .. } => Some(&shared.keys.scope),
        }
    }

    /// Whether the fleet's state decides now (false while the fallback does, or before
    /// Redis first answered).
    pub fn is_synced(&self) -> bool {
        match &self.inner {
            Inner::Local(_) => false,
            Inner::Shared { shared, .. } => {
                let code = shared.word.load(Ordering::Acquire) & 0xff;
                code != FALLBACK && code != UNSYNCED
            }
        }
    }
}

impl Store for RedisStore {
    #[inline]
    fn acquire(&self) -> Result<Permit, Rejected> {
        match &self.inner {
            Inner::Local(m) => m.acquire(),
            Inner::Shared { shared, .. } => shared.acquire(),
        }
    }

    #[inline]
    fn record(&self, permit: Permit, failure: bool, slow: bool, now: Option<Nanos>) {
        match &self.inner {
            Inner::Local(m) => m.record(permit, failure, slow, now),
            Inner::Shared { shared, .. } => Shared::record(shared, permit, failure, slow, now),
        }
    }

    #[inline]
    fn record_fast_success(&self, permit: Permit) -> bool {
        match &self.inner {
            Inner::Local(m) => m.record_fast_success(permit),
            Inner::Shared { shared, .. } => shared.record_fast_success(permit),
        }
    }

    fn release(&self, permit: Permit) {
        match &self.inner {
            Inner::Local(m) => m.release(permit),
            Inner::Shared { shared, .. } => Shared::release(shared, permit),
        }
    }

    fn snapshot(&self) -> Snapshot {
        match &self.inner {
            Inner::Local(m) => m.snapshot(),
            Inner::Shared { shared, .. } => shared.snapshot(),
        }
    }

    fn command(&self, command: Command) {
        match &self.inner {
            Inner::Local(m) => m.command(command),
            Inner::Shared { shared, .. } => shared.command(command),
        }
    }

    fn config(&self) -> Option<Arc<CircuitBreakerConfig>> {
        match &self.inner {
            Inner::Local(m) => m.config(),
            Inner::Shared { shared, .. } => Some(shared.config.load_full()),
        }
    }

    fn reconfigure(&self, config: &Arc<CircuitBreakerConfig>) -> Result<(), Reconfigure> {
        match &self.inner {
            Inner::Local(m) => m.reconfigure(config),
            Inner::Shared { shared, .. } => shared.reconfigure(config),
        }
    }

    fn needs_end_time(&self) -> bool {
        match &self.inner {
            // Batched and strict outcomes are timed by Redis's clock; the fallback breaker
            // reads its own clock when a call ends.
            Inner::Local(m) => m.needs_end_time(),
            Inner::Shared { .. } => false,
        }
    }
}

/// A probe lease this replica holds in Redis.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    pub(crate) token: String,
    pub(crate) epoch: u64,
    pub(crate) claimed: Nanos,
    pub(crate) in_use: bool,
}

/// The lease a probe's record or a release is about.
fn lease_of(op: &Op) -> Option<Lease> {
    match op {
        Op::Record {
            epoch,
            probe: Some(token),
            ..
        }
        | Op::Release { epoch, token } => Some(Lease {
            token: token.clone(),
            epoch: *epoch,
            claimed: Nanos::ZERO,
            in_use: false,
        }),
        _ => None,
    }
}

/// The fleet state as this replica last heard it.
#[derive(Debug)]
pub(crate) struct View {
    pub(crate) synced: bool,
    last_now_us: i64,
    /// Redis's clock at the first answer this replica took in (`i64::MIN` before it).
    first_now_us: i64,
    pub(crate) state: State,
    pub(crate) epoch: u64,
    pub(crate) open_until: Nanos,
    pub(crate) half_open_until: Option<Nanos>,
    window: WindowTotals,
    live_leases: u32,
    probes_succeeded: u32,
    would_open: bool,
    /// The last (state, epoch) reported through the event sink.
    reported: Option<(State, u64)>,
    pub(crate) leases: Vec<Lease>,
    /// Leases Redis may hold for this replica that it can no longer use: tokens of a claim
    /// that got no answer, and leases whose record or release got none. Given back once
    /// Redis answers again, so that they do not hold the fleet's probe budget until they
    /// expire.
    pub(crate) give_back: Vec<Lease>,
}

/// The jitter the next opening takes, and how many were drawn before it.
struct NextJitter {
    source: OpenJitter,
    next: Duration,
    drawn: u64,
}

/// The fallback breaker of one outage.
struct Local {
    instance: u64,
    store: MemoryStore,
}

/// One scope's shared state: the view, the pending batch, the fallback, the worker's
/// signals.
pub(crate) struct Shared {
    pub(crate) backend: Arc<Backend>,
    pub(crate) keys: Keys,
    /// The settings the script is sent with every call: swapped whole by a reload
    /// ([`Store::reconfigure`]).
    pub(crate) args: ArcSwap<ConfigArgs>,
    /// The breaker's settings now (the spec's, until a reload).
    config: ArcSwap<CircuitBreakerConfig>,
    pub(crate) spec: StoreSpec,
    pub(crate) mode: Mode,
    fallback: Fallback,
    /// State code and epoch of the view (or FALLBACK / UNSYNCED).
    word: AtomicU64,
    /// A fast success would change nothing in the fleet's window.
    clean: AtomicBool,
    pub(crate) batch: Batch,
    pub(crate) healthy: AtomicBool,
    in_flight: AtomicUsize,
    pub(crate) notify: Notify,
    /// Calls that found no probe lease past the open wait since the last claim (at most
    /// the probe budget is counted): claim leases for them now.
    pub(crate) want_lease: AtomicU32,
    /// Calls rejected during the open wait since the last claim (at most the probe budget
    /// is counted): claim leases for as many the moment the wait ends.
    pub(crate) demand: AtomicU32,
    /// Flush the batch at once (it is filling up).
    pub(crate) flush_now: AtomicBool,
    /// Re-read the state at once (pub/sub reconnected).
    pub(crate) poll_now: AtomicBool,
    pub(crate) view: Mutex<View>,
    local: RwLock<Option<Local>>,
    instances: AtomicU64,
    /// While falling back: a fleet OPEN (until this time) or FORCED_OPEN (`u64::MAX`)
    /// known when Redis went away keeps rejecting.
    hold_until: AtomicU64,
    pub(crate) handle: OnceLock<Handle>,
    stop: Mutex<Option<oneshot::Receiver<()>>>,
    /// The jitter of the next opening this replica may cause (sent with every call).
    jitter: Mutex<NextJitter>,
    pub(crate) pending: Mutex<Option<Command>>,
    metrics: Metrics,
}

impl Shared {
    fn new(
        backend: Arc<Backend>,
        spec: StoreSpec,
        scope: String,
        stop: oneshot::Receiver<()>,
    ) -> Shared {
        let config = &backend.config;
        let keys = Keys::new(&config.prefix, &scope);
        let args = ConfigArgs::new(&keys.channel, &spec.config, config.idle_ttl);
        let metrics = Metrics::new(spec.config.name(), spec.key.as_deref());
        spec.events.thresholds(&spec.config);
        let mut jitter = OpenJitter::new(
            &spec.config,
            std::hash::BuildHasher::hash_one(
                &std::collections::hash_map::RandomState::new(),
                &scope,
            ),
        );
        let next = jitter.draw();
        let warm = backend.warm(&scope);
        let shared = Shared {
            mode: config.mode,
            fallback: config.fallback,
            keys,
            args: ArcSwap::from_pointee(args),
            config: ArcSwap::new(Arc::clone(&spec.config)),
            word: AtomicU64::new(pack(UNSYNCED, 0)),
            clean: AtomicBool::new(false),
            batch: Batch::new(0),
            healthy: AtomicBool::new(true),
            in_flight: AtomicUsize::new(0),
            notify: Notify::new(),
            want_lease: AtomicU32::new(0),
            demand: AtomicU32::new(0),
            flush_now: AtomicBool::new(false),
            poll_now: AtomicBool::new(true),
            view: Mutex::new(View {
                synced: false,
                last_now_us: i64::MIN,
                first_now_us: i64::MIN,
                state: State::Closed,
                epoch: 0,
                open_until: Nanos::ZERO,
                half_open_until: None,
                window: WindowTotals::default(),
                live_leases: 0,
                probes_succeeded: 0,
                would_open: false,
                reported: None,
                leases: Vec::new(),
                give_back: Vec::new(),
            }),
            local: RwLock::new(None),
            instances: AtomicU64::new(0),
            hold_until: AtomicU64::new(0),
            handle: OnceLock::new(),
            stop: Mutex::new(Some(stop)),
            jitter: Mutex::new(NextJitter {
                source: jitter,
                next,
                drawn: 0,
            }),
            pending: Mutex::new(None),
            metrics,
            spec,
            backend,
        };
        match warm {
            Some((reply, age)) => {
                // Read before this store existed (`OnRedis::prefetch`): decide the first
                // calls by it.
                let at = Nanos(
                    shared
                        .spec
                        .clock
                        .now()
                        .0
                        .saturating_sub(u64::try_from(age.as_nanos()).unwrap_or(u64::MAX)),
                );
                shared.apply(&reply, at);
            }
            None => {
                if shared.fallback == Fallback::Local {
                    shared.new_local();
                }
            }
        }
        shared
    }

    /// Starts the worker on `handle` (once).
    pub(crate) fn start(self: &Arc<Self>, handle: Handle) {
        let Some(stop) = lock(&self.stop).take() else {
            return;
        };
        let _ = self.handle.set(handle.clone());
        self.backend.start_pubsub(&handle);
        handle.spawn(crate::worker::run(Arc::clone(self), stop));
    }

    /// Starts the worker if it is not running and a runtime is at hand (a store made
    /// outside a runtime starts on first use inside one).
    #[inline]
    fn ensure_started(self: &Arc<Self>) {
        if self.handle.get().is_none() {
            self.start_cold();
        }
    }

    #[cold]
    fn start_cold(self: &Arc<Self>) {
        if let Ok(handle) = Handle::try_current() {
            self.start(handle);
        }
    }

    fn wake(&self) {
        self.notify.notify_one();
    }

    /// Counts one call wanting a probe in `counter` (up to the probe budget) and wakes the
    /// worker for the first one.
    fn count_want(&self, counter: &AtomicU32) {
        let seen = counter.load(Ordering::Relaxed);
        if seen < self.config.load().permitted_probes() {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        if seen == 0 {
            self.wake();
        }
    }

    // === admission ===

    #[inline]
    fn acquire(self: &Arc<Self>) -> Result<Permit, Rejected> {
        let word = self.word.load(Ordering::Acquire);
        match word & 0xff {
            0 | 5 => Ok(Permit::new(word >> CODE_BITS, PermitKind::Counted)),
            4 => Ok(Permit::new(word >> CODE_BITS, PermitKind::Untracked)),
            _ => self.acquire_slow(),
        }
    }

    #[cold]
    fn acquire_slow(self: &Arc<Self>) -> Result<Permit, Rejected> {
        self.ensure_started();
        let code = self.word.load(Ordering::Acquire) & 0xff;
        let result = if code == FALLBACK || code == UNSYNCED {
            self.acquire_fallback()
        } else {
            self.acquire_from_view()
        };
        if result.is_err() {
            self.spec.events.rejected();
        }
        result
    }

    fn acquire_from_view(&self) -> Result<Permit, Rejected> {
        let now = self.spec.clock.now();
        let mut v = lock(&self.view);
        match v.state {
            State::Closed | State::MetricsOnly => Ok(Permit::new(v.epoch, PermitKind::Counted)),
            State::Disabled => Ok(Permit::new(v.epoch, PermitKind::Untracked)),
            State::ForcedOpen => Err(Rejected::new(self.config.load().open_wait(), false)),
            State::Open if now < v.open_until => {
                // The worker claims leases for these calls' successors the moment the
                // wait ends.
                self.count_want(&self.demand);
                Err(Rejected::new(v.open_until.since(now), false))
            }
            State::Open | State::HalfOpen => {
                let epoch = v.epoch;
                if v.state == State::HalfOpen
                    && let Some(lease) = v.leases.iter_mut().find(|l| !l.in_use && l.epoch == epoch)
                {
                    lease.in_use = true;
                    return Ok(Permit::new(epoch, PermitKind::Probe));
                }
                // Probes are (about to be) in flight and may close the breaker at any
                // moment: a short hint, as the in-memory breaker gives.
                let retry_after = match v.half_open_until {
                    Some(until) if v.state == State::HalfOpen => {
                        until.since(now).min(HALF_OPEN_RETRY_HINT)
                    }
                    _ => HALF_OPEN_RETRY_HINT,
                };
                drop(v);
                self.count_want(&self.want_lease);
                Err(Rejected::new(retry_after, true))
            }
            // The view holds only the states the script names (`state_from_code`); were it
            // ever another, rejecting is the safe answer.
            _ => Err(Rejected::new(self.config.load().open_wait(), false)),
        }
    }

    fn acquire_fallback(&self) -> Result<Permit, Rejected> {
        match self.fallback {
            Fallback::FailOpen => Ok(Permit::new(0, PermitKind::Untracked)),
            Fallback::FailClosed => Err(Rejected::new(self.backend.config.retry_interval, false)),
            Fallback::Local => {
                let hold = self.hold_until.load(Ordering::Acquire);
                if hold != 0 {
                    let now = self.spec.clock.now();
                    if now.0 < hold {
                        return Err(Rejected::new(
                            if hold == u64::MAX {
                                self.config.load().open_wait()
                            } else {
                                Nanos(hold).since(now)
                            },
                            false,
                        ));
                    }
                }
                let local = self.local.read().unwrap_or_else(PoisonError::into_inner);
                match &*local {
                    Some(l) => l.store.acquire().map(|p| {
                        Permit::new(
                            LOCAL_BIT
                                | ((l.instance & INSTANCE_MASK) << INSTANCE_SHIFT)
                                | (p.generation() & LOCAL_GEN_MASK),
                            p.kind(),
                        )
                    }),
                    None => Ok(Permit::new(0, PermitKind::Untracked)),
                }
            }
        }
    }

    /// The fallback breaker of the permit's outage, and the permit as it issued it.
    fn with_local<R>(
        &self,
        permit: Permit,
        f: impl FnOnce(&MemoryStore, Permit) -> R,
    ) -> Option<R> {
        let g = permit.generation();
        let local = self.local.read().unwrap_or_else(PoisonError::into_inner);
        let l = local.as_ref()?;
        ((g >> INSTANCE_SHIFT) & INSTANCE_MASK == l.instance & INSTANCE_MASK)
            .then(|| f(&l.store, Permit::new(g & LOCAL_GEN_MASK, permit.kind())))
    }

    // === recording ===

    #[inline]
    fn record(this: &Arc<Self>, permit: Permit, failure: bool, slow: bool, now: Option<Nanos>) {
        if permit.generation() & LOCAL_BIT != 0 {
            this.with_local(permit, |store, p| store.record(p, failure, slow, now));
            return;
        }
        match permit.kind() {
            PermitKind::Counted => {
                let word = this.word.load(Ordering::Acquire);
                if word >> CODE_BITS != permit.generation() || !matches!(word & 0xff, 0 | 5) {
                    return; // admitted before the last transition, or Redis is away
                }
                if this.mode == Mode::Batched {
                    if !failure && !slow && this.clean.load(Ordering::Acquire) {
                        return; // a fast success in a clean window changes nothing
                    }
                    this.add_to_batch(permit.generation(), failure, slow);
                } else {
                    Self::send_strict(this, permit.generation(), failure, slow);
                }
            }
            PermitKind::Probe => Self::record_probe(this, permit, failure, slow),
            // Untracked, and any kind this store does not grant: nothing to record.
            _ => {}
        }
    }

    /// Batched mode: a fast success of the current epoch while the fleet's count window
    /// is clean changes nothing and is taken here, for free.
    #[inline]
    fn record_fast_success(&self, permit: Permit) -> bool {
        if self.mode != Mode::Batched || permit.kind() != PermitKind::Counted {
            return false;
        }
        let word = self.word.load(Ordering::Acquire);
        word >> CODE_BITS == permit.generation()
            && matches!(word & 0xff, 0 | 5)
            && self.clean.load(Ordering::Acquire)
    }

    #[inline]
    fn add_to_batch(self: &Arc<Self>, epoch: u64, failure: bool, slow: bool) {
        match self.batch.add(epoch, failure, slow) {
            Added::Counted(1) => {
                self.ensure_started();
                self.wake();
            }
            Added::Counted(n) if n == BATCH_HIGH => {
                self.flush_now.store(true, Ordering::Relaxed);
                self.wake();
            }
            Added::Counted(_) | Added::Stale => {}
            Added::Full => {
                self.metrics.dropped.increment(1);
                self.flush_now.store(true, Ordering::Relaxed);
                self.wake();
            }
        }
    }

    fn send_strict(this: &Arc<Self>, epoch: u64, failure: bool, slow: bool) {
        this.ensure_started();
        let Some(handle) = this.handle.get() else {
            this.add_to_batch(epoch, failure, slow);
            return;
        };
        if this.in_flight.fetch_add(1, Ordering::AcqRel) >= this.backend.config.max_in_flight {
            // Redis is not keeping up: batch rather than pile up calls.
            this.in_flight.fetch_sub(1, Ordering::AcqRel);
            this.add_to_batch(epoch, failure, slow);
            return;
        }
        let me = Arc::clone(this);
        handle.spawn(async move {
            let op = Op::Record {
                epoch,
                probe: None,
                failure,
                slow,
            };
            let reply = me.call(&op).await;
            me.in_flight.fetch_sub(1, Ordering::AcqRel);
            if let Some(reply) = reply {
                me.apply_now(&reply);
            }
        });
    }

    /// Takes the lease a probe permit stands for.
    fn take_lease(&self, permit: Permit) -> Option<Lease> {
        let mut v = lock(&self.view);
        let i = v
            .leases
            .iter()
            .position(|l| l.in_use && l.epoch == permit.generation())?;
        Some(v.leases.swap_remove(i))
    }

    fn record_probe(this: &Arc<Self>, permit: Permit, failure: bool, slow: bool) {
        let Some(lease) = this.take_lease(permit) else {
            return; // the fleet moved on: the probe is stale
        };
        let Some(handle) = this.handle.get() else {
            return;
        };
        let me = Arc::clone(this);
        handle.spawn(async move {
            let op = Op::Record {
                epoch: lease.epoch,
                probe: Some(lease.token),
                failure,
                slow,
            };
            match me.call(&op).await {
                Some(reply) => {
                    if reply.applied {
                        me.spec.events.probe(Some(!(failure || slow)));
                    }
                    me.apply_now(&reply);
                }
                // Unknown whether Redis took it: give the lease back once it answers (a
                // no-op if it did).
                None => me.give_back(lease_of(&op)),
            }
        });
    }

    fn release(this: &Arc<Self>, permit: Permit) {
        if permit.kind() != PermitKind::Probe {
            return;
        }
        if permit.generation() & LOCAL_BIT != 0 {
            this.with_local(permit, |store, p| store.release(p));
            return;
        }
        let Some(lease) = this.take_lease(permit) else {
            return;
        };
        this.spawn_release(lease);
    }

    pub(crate) fn spawn_release(self: &Arc<Self>, lease: Lease) {
        let Some(handle) = self.handle.get() else {
            return;
        };
        let me = Arc::clone(self);
        handle.spawn(async move {
            let op = Op::Release {
                epoch: lease.epoch,
                token: lease.token,
            };
            match me.call(&op).await {
                Some(reply) => {
                    if reply.applied {
                        me.spec.events.probe(None);
                    }
                    me.apply_now(&reply);
                }
                None => me.give_back(lease_of(&op)),
            }
        });
    }

    /// Keeps `lease` to be given back once Redis answers again (`None`: nothing to keep).
    pub(crate) fn give_back(&self, lease: Option<Lease>) {
        if let Some(lease) = lease {
            lock(&self.view).give_back.push(lease);
        }
    }

    /// Gives back, in the background, the leases kept while Redis did not answer.
    pub(crate) fn give_back_all(self: &Arc<Self>) {
        let leases = std::mem::take(&mut lock(&self.view).give_back);
        for lease in leases {
            self.spawn_release(lease);
        }
    }

    // === operators and snapshots ===

    fn command(&self, command: Command) {
        if script::command_code(command).is_none() {
            tracing::warn!(
                target: "fusebox::redis",
                ?command,
                "an order the Redis store does not know; ignored"
            );
            return;
        }
        *lock(&self.pending) = Some(command);
        if !self.healthy.load(Ordering::Acquire) {
            // Obeyed locally now, and in Redis when it answers again.
            if matches!(
                command,
                Command::Reset | Command::Disable | Command::MetricsOnly
            ) {
                self.hold_until.store(0, Ordering::Release);
            }
            let local = self.local.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(l) = &*local {
                l.store.command(command);
            }
        }
        self.wake();
    }

    fn snapshot(&self) -> Snapshot {
        let word = self.word.load(Ordering::Acquire);
        let code = word & 0xff;
        let now = self.spec.clock.now();
        if code == FALLBACK || code == UNSYNCED {
            let state = match self.fallback {
                Fallback::FailOpen => Some(State::Disabled),
                Fallback::FailClosed => Some(State::ForcedOpen),
                Fallback::Local => {
                    let hold = self.hold_until.load(Ordering::Acquire);
                    if hold == u64::MAX {
                        Some(State::ForcedOpen)
                    } else if hold > now.0 {
                        Some(State::Open)
                    } else {
                        let local = self.local.read().unwrap_or_else(PoisonError::into_inner);
                        if let Some(l) = &*local {
                            return l.store.snapshot();
                        }
                        None
                    }
                }
            };
            let v = lock(&self.view);
            let state = state.unwrap_or(v.state);
            return Snapshot::new(state, v.epoch, WindowTotals::default()).with_until_half_open(
                (state == State::Open)
                    .then(|| Nanos(self.hold_until.load(Ordering::Acquire)).since(now)),
            );
        }
        let v = lock(&self.view);
        let (probes_admitted, probes_succeeded) = if v.state == State::HalfOpen {
            (v.live_leases + v.probes_succeeded, v.probes_succeeded)
        } else {
            (0, 0)
        };
        Snapshot::new(v.state, v.epoch, v.window)
            .with_until_half_open((v.state == State::Open).then(|| v.open_until.since(now)))
            .with_probes(probes_admitted, probes_succeeded)
            .with_would_open(v.would_open)
    }

    // === talking to Redis ===

    /// Runs `op` within the time bound. `None` (and the fallback) when Redis does not
    /// answer in time or answers with an error.
    ///
    /// Every call carries the jitter of the next opening this replica may cause, drawn as
    /// the in-memory breaker draws its own; a new one is drawn once a call opened the
    /// breaker, so a seeded breaker's openings get the same jitter here as in memory.
    pub(crate) async fn call(&self, op: &Op) -> Option<Reply> {
        let (jitter, drawn) = {
            let j = lock(&self.jitter);
            (j.next, j.drawn)
        };
        let invocation = crate::script::invocation(&self.keys, &self.args.load(), op, jitter);
        match self.backend.invoke(&invocation).await {
            Ok(v) => match Reply::decode(&v) {
                Some(reply) => {
                    if reply.opened {
                        let mut j = lock(&self.jitter);
                        if j.drawn == drawn {
                            j.next = j.source.draw();
                            j.drawn += 1;
                        }
                    }
                    Some(reply)
                }
                None => {
                    self.unhealthy("malformed reply", op.name());
                    None
                }
            },
            Err(e) => {
                self.unhealthy(&e, op.name());
                None
            }
        }
    }

    /// Switches to the fallback (once per outage).
    fn unhealthy(&self, error: &str, op: &str) {
        if !self.healthy.swap(false, Ordering::AcqRel) {
            return;
        }
        if self.fallback == Fallback::Local {
            self.new_local();
        }
        let now = self.spec.clock.now();
        {
            // Under the view's lock, as `apply` writes the word: once the flag is down no
            // reply can put the view back in charge.
            let v = lock(&self.view);
            let hold = match v.state {
                State::Open if v.open_until > now => v.open_until.0,
                State::ForcedOpen => u64::MAX,
                _ => 0,
            };
            self.hold_until.store(hold, Ordering::Release);
            // The leases stay: they are still this replica's in Redis. A probe admitted on
            // one reports on it while the fallback decides; the others are used or given
            // back once Redis answers, if the fleet is still in that half-open period
            // (otherwise the script has dropped them, and so does the next reply).
            self.word.store(pack(FALLBACK, v.epoch), Ordering::Release);
            self.clean.store(false, Ordering::Release);
        }
        self.metrics.fallbacks.increment(1);
        self.metrics.connected.set(0.0);
        tracing::warn!(
            target: "fusebox::redis",
            breaker = %self.spec.config.name(),
            scope = %self.keys.scope,
            op,
            error,
            fallback = ?self.fallback,
            "Redis did not answer: the breaker falls back until it does",
        );
        self.wake();
    }

    /// Takes `config` from the next call on: the script's arguments (thresholds, waits,
    /// probes), the probe budget and waits this replica reads, the jitter of its next
    /// opening, and the fallback breaker's settings, if one is deciding. The connection,
    /// the scope and the view of the fleet's state are kept.
    fn reconfigure(&self, config: &Arc<CircuitBreakerConfig>) -> Result<(), Reconfigure> {
        if config.window() != self.config.load().window() {
            return Err(Reconfigure::WindowChanged);
        }
        if let Some(l) = &*self.local.read().unwrap_or_else(PoisonError::into_inner) {
            l.store.reconfigure(config)?;
        }
        self.args.store(Arc::new(ConfigArgs::new(
            &self.keys.channel,
            config,
            self.backend.config.idle_ttl,
        )));
        self.config.store(Arc::clone(config));
        {
            let mut j = lock(&self.jitter);
            let mut source = OpenJitter::new(
                config,
                std::hash::BuildHasher::hash_one(
                    &std::collections::hash_map::RandomState::new(),
                    &self.keys.scope,
                ),
            );
            j.next = source.draw();
            j.source = source;
            j.drawn += 1;
        }
        self.spec.events.thresholds(config);
        Ok(())
    }

    fn new_local(&self) {
        let instance = self.instances.fetch_add(1, Ordering::Relaxed) + 1;
        let mut spec = self.spec.clone();
        spec.config = self.config.load_full();
        let store = MemoryStore::new(spec);
        *self.local.write().unwrap_or_else(PoisonError::into_inner) =
            Some(Local { instance, store });
    }

    /// Back on the fleet's state after an outage (or for the first time): adds the
    /// fallback's window to the fleet's, then lets `reply` decide.
    pub(crate) async fn resync(self: &Arc<Self>, mut reply: Reply) {
        let first = !lock(&self.view).synced;
        let (instance, local_snapshot) = self
            .local
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map_or((0, None), |l| (l.instance, Some(l.store.snapshot())));
        if let Some(s) = &local_snapshot
            && s.window.calls > 0
            && matches!(reply.state, State::Closed | State::MetricsOnly)
        {
            // This replica's calls while it fell back join the fleet's window.
            let op = Op::Batch {
                epoch: reply.epoch,
                calls: s.window.calls,
                failures: s.window.failures,
                slow: s.window.slow,
                trailing_failures: 0,
            };
            match self.call(&op).await {
                Some(r) => reply = r,
                None => return, // Redis went away again: keep falling back
            }
        }
        // What this replica did while it fell back: when the fleet decides otherwise, the
        // switch is reported as a transition.
        let acting = match self.fallback {
            // The fallback breaker's own transitions were reported as it made them; one
            // that made none left the listeners with the state reported before the outage,
            // which stays the one a change is reported from.
            Fallback::Local => local_snapshot.filter(|s| s.generation > 0).map(|s| s.state),
            Fallback::FailOpen if !first => Some(State::Disabled),
            Fallback::FailClosed if !first => Some(State::ForcedOpen),
            _ => None,
        };
        if let Some(state) = acting {
            let mut v = lock(&self.view);
            v.reported = Some(if state == reply.state {
                (reply.state, reply.epoch)
            } else {
                (state, u64::MAX) // an epoch no reply carries: the change is reported
            });
        }
        self.hold_until.store(0, Ordering::Release);
        self.batch.take(reply.epoch);
        self.healthy.store(true, Ordering::Release);
        self.apply_now(&reply);
        {
            // Unless Redis went away again meanwhile and a new outage has its own.
            let mut local = self.local.write().unwrap_or_else(PoisonError::into_inner);
            if local.as_ref().is_some_and(|l| l.instance == instance) {
                *local = None;
            }
        }
        self.metrics.connected.set(1.0);
        if !first {
            self.metrics.resyncs.increment(1);
            self.backend.stats.resyncs.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                target: "fusebox::redis",
                breaker = %self.spec.config.name(),
                scope = %self.keys.scope,
                state = reply.state.as_str(),
                epoch = reply.epoch,
                "Redis answers again: the breaker follows the fleet's state",
            );
        }
    }

    // === the view ===

    pub(crate) fn apply_now(&self, reply: &Reply) {
        self.apply(reply, self.spec.clock.now());
    }

    /// Takes in the fleet state `reply` received at `at`: refreshes the view and, while
    /// Redis is healthy, the admission word; reports a transition this replica has not
    /// reported yet.
    pub(crate) fn apply(&self, r: &Reply, at: Nanos) {
        let healthy = self.healthy.load(Ordering::Acquire);
        let cfg = self.config.load_full();
        let mut events: Vec<EventKind> = Vec::new();
        {
            let mut v = lock(&self.view);
            if r.now_us < v.last_now_us {
                return; // older news than what the view holds
            }
            v.last_now_us = r.now_us;
            if v.first_now_us == i64::MIN {
                v.first_now_us = r.now_us;
            }
            let remaining = |until_us: i64| micros(until_us.saturating_sub(r.now_us));
            // Redis's times on this replica's clock: `at` is when the answer was taken in,
            // at or after Redis answered, so each reading can only be late. Within one
            // period (same state and epoch) keep the earliest: a reply taken in late (a
            // busy task, a slow wake-up) must not push the end of the wait later.
            let same_period = v.synced && v.epoch == r.epoch && v.state == r.state;
            let earliest = |old: Nanos, new: Nanos| if same_period { old.min(new) } else { new };
            v.open_until = earliest(v.open_until, at.plus(remaining(r.open_until_us)));
            let half_open_until = cfg.max_half_open_wait().map(|max| {
                at.plus(remaining(r.half_open_since_us.saturating_add(
                    i64::try_from(max.as_micros()).unwrap_or(i64::MAX),
                )))
            });
            v.half_open_until = match (v.half_open_until, half_open_until) {
                (Some(old), Some(new)) => Some(earliest(old, new)),
                (_, new) => new,
            };
            if healthy {
                let key = (r.state, r.epoch);
                let from = match v.reported {
                    None if r.state != State::Closed => Some(State::Closed),
                    Some(prev) if prev != key => Some(prev.0),
                    _ => None,
                };
                if let Some(from) = from {
                    // A state Redis holds no entry time for (a new scope, or a CLOSED one
                    // that expired while idle) counts from when this replica first heard
                    // the fleet, as an in-memory breaker counts from when it was made.
                    let since = if r.prev_entered_us > 0 {
                        r.prev_entered_us
                    } else {
                        v.first_now_us
                    };
                    let mut t = Transition::new(from, r.state, r.reason, r.epoch)
                        .with_window(r.window)
                        .with_time_in_previous(micros(r.entered_us.saturating_sub(since)))
                        .with_at(at);
                    if r.state == State::Open {
                        t = t.with_open_wait(micros(r.open_for_us), micros(r.jitter_us));
                    }
                    events.push(EventKind::Transition(t));
                }
                v.reported = Some(key);
                if r.state == State::MetricsOnly
                    && v.state == State::MetricsOnly
                    && r.would_open != v.would_open
                {
                    events.push(EventKind::ShadowTrip {
                        would_open: r.would_open,
                        reason: if r.would_open {
                            r.would_reason
                        } else {
                            Reason::FailureRate
                        },
                        window: r.window,
                    });
                }
            }
            if r.epoch != v.epoch || r.state != State::HalfOpen {
                // Leases belong to one half-open period; a probe whose lease is gone is
                // stale when it reports.
                v.leases.clear();
            }
            if r.epoch != v.epoch {
                // Outcomes waiting in the batch were admitted under the old epoch.
                self.batch.take(r.epoch);
            }
            v.state = r.state;
            v.epoch = r.epoch;
            v.window = r.window;
            v.live_leases = r.leases;
            v.probes_succeeded = r.probes_succeeded;
            v.would_open = r.would_open;
            v.synced = true;
            if self.healthy.load(Ordering::Acquire) {
                self.clean.store(r.clean, Ordering::Release);
                self.word
                    .store(pack(u64::from(r.state.code()), r.epoch), Ordering::Release);
            }
        }
        let key = self.spec.key.as_ref();
        for event in events {
            match event {
                EventKind::Transition(t) => self.spec.events.transition(key, t),
                EventKind::ShadowTrip {
                    would_open,
                    reason,
                    window,
                } => self
                    .spec
                    .events
                    .shadow_trip(key, would_open, reason, window),
                // This function makes no other kind.
                _ => {}
            }
        }
        if r.window.failures > 0 || r.window.slow > 0 {
            self.spec.events.rates(r.window);
        }
    }

    // === used by the worker ===

    pub(crate) fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    pub(crate) fn is_synced(&self) -> bool {
        lock(&self.view).synced
    }

    pub(crate) fn view(&self) -> MutexGuard<'_, View> {
        lock(&self.view)
    }

    pub(crate) fn count_dropped(&self, n: u64) {
        self.metrics.dropped.increment(n);
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("scope", &self.keys.scope)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
