//! Keyed breakers: one breaker per host, route, shard or tenant, so that one bad key does
//! not open the whole dependency.
//!
//! Keys live in a sharded map bounded by `max_keys`. What removes a key, and what happens
//! when none can go, is documented on [`KeyedCircuitBreakerLayer`]: the rules users rely
//! on (a breaker that is not closed is never evicted to make room; a key in use is never
//! forgotten as idle) belong with the public type.

use crate::breaker::{Breaker, BreakerHandle, Control, EosRecorder, Guard, Partial, Redirect};
use crate::config::CircuitBreakerConfig;
use crate::events::EventSink;
use crate::future::ResponseBody;
use crate::service::BreakerStage;
use crate::spread::{KeySpread, KeySpreadGate, SpreadCounts, answer_key};
use crate::state::{Command, State};
use crate::store::{MakeStore, Reconfigure, Store, StoreSpec};
use fusebox_classify::context::Scope;
use fusebox_classify::error::CircuitOpen;
use fusebox_classify::stage::{Admit, Answer, Http, NoTimer, NoWait, Stage, Staged, StagedFuture};
use fusebox_classify::{BoxError, Classifier, Clock, Nanos, RouteId, RouteTable, SharedVerdict};
use http::{Extensions, HeaderMap, HeaderName, Method, Request, Response, Uri};
use http_body::Body;
use smol_str::{SmolStr, StrExt};
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;
use tower_layer::Layer;
use tower_service::Service;

/// What a key function sees of a request.
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    method: &'a Method,
    uri: &'a Uri,
    headers: &'a HeaderMap,
    extensions: &'a Extensions,
    route: RouteId,
    route_name: &'a str,
}

impl<'a> RequestHead<'a> {
    /// What a key function sees of `request`, which matched `route` (named `route_name`):
    /// for calling a key function outside the breaker (to report which key a call has).
    pub fn new<B>(request: &'a Request<B>, route: RouteId, route_name: &'a str) -> Self {
        RequestHead {
            method: request.method(),
            uri: request.uri(),
            headers: request.headers(),
            extensions: request.extensions(),
            route,
            route_name,
        }
    }

    /// The method.
    pub fn method(&self) -> &'a Method {
        self.method
    }
    /// The URI.
    pub fn uri(&self) -> &'a Uri {
        self.uri
    }
    /// The headers.
    pub fn headers(&self) -> &'a HeaderMap {
        self.headers
    }
    /// The extensions.
    pub fn extensions(&self) -> &'a Extensions {
        self.extensions
    }
    /// The route the request matched.
    pub fn route(&self) -> RouteId {
        self.route
    }
    /// The route's name.
    pub fn route_name(&self) -> &'a str {
        self.route_name
    }
    /// The URI's host, else the `Host` header's without its port ([`host_of`]). An IPv6
    /// literal keeps its brackets: `[2001:db8::1]`.
    pub fn host(&self) -> Option<&'a str> {
        self.uri.host().or_else(|| {
            self.headers
                .get(http::header::HOST)
                .and_then(|h| h.to_str().ok())
                .and_then(host_of)
        })
    }
}

/// The host of a `Host` header value (`uri-host [":" port]`, RFC 9110 §7.2), without its
/// port; `None` when the value is not of that form.
///
/// A bracketed IPv6 literal is one host, colons and all: `[2001:db8::1]:8080` and
/// `[2001:db8::1]` are both `[2001:db8::1]`. A port must be decimal digits (it may be
/// empty, as RFC 3986 allows). A value with more than one colon outside brackets (a bare
/// IPv6 address), an empty host, or brackets anywhere but around the whole host is not a
/// `Host` value: `None`, so that it cannot pass for another host's key.
pub fn host_of(value: &str) -> Option<&str> {
    fn is_port(rest: &str) -> bool {
        rest.bytes().all(|b| b.is_ascii_digit())
    }
    if let Some(inner) = value.strip_prefix('[') {
        let close = inner.find(']')?;
        let address = &inner[..close];
        let valid = !address.is_empty()
            && address.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b':' | b'.' | b'%' | b'-' | b'_' | b'~')
            });
        let rest = &inner[close + 1..];
        let port_ok = match rest.strip_prefix(':') {
            Some(port) => is_port(port),
            None => rest.is_empty(),
        };
        // `[` + address + `]`, the brackets kept: a key for the address, not its prefix.
        return (valid && port_ok).then(|| &value[..close + 2]);
    }
    if value.bytes().any(|b| matches!(b, b'[' | b']')) {
        return None;
    }
    let host = match value.split_once(':') {
        Some((host, port)) if is_port(port) => host,
        Some(_) => return None,
        None => value,
    };
    (!host.is_empty()).then_some(host)
}

/// The key [`ByHost`] (and `fusebox`'s `KeyBy::Host`) gives `host`: the host in lower case,
/// kept inline up to 23 bytes, so that a known host's key costs no allocation.
pub fn host_key(host: &str) -> SmolStr {
    host.to_ascii_lowercase_smolstr()
}

/// Gives each request the key of its breaker.
///
/// Any `Fn(&RequestHead<'_>) -> K` is a key function when `K` is hashable and displayable
/// (its `Display` names the key in errors and events). [`ByHost`] and [`ByRoute`] are
/// ready-made.
pub trait KeyFn: Send + Sync + 'static {
    /// The key.
    type Key: Hash + Eq + Clone + Send + Sync + 'static;

    /// The key of a request.
    fn key(&self, head: &RequestHead<'_>) -> Self::Key;

    /// How the key is named in errors and events; called once, when the key's breaker is
    /// made.
    fn describe(&self, key: &Self::Key, head: &RequestHead<'_>) -> Arc<str>;

    /// Whether answers may name the key they count against ([`answer_key`](Self::answer_key)).
    /// `false` (the default): answers are never read for a key. Asked once per key, when
    /// its breaker is made.
    fn reads_answers(&self) -> bool {
        false
    }

    /// The key an answer's headers (or its gRPC trailers) name; `None` (the default) when
    /// they name none. Read only when [`reads_answers`](Self::reads_answers) is `true`.
    fn answer_key(&self, headers: &HeaderMap) -> Option<Self::Key> {
        let _ = headers;
        None
    }

    /// How a key an answer named is known in errors and events; called once, when the
    /// key's breaker is made. The default, `"(named by an answer)"`, is for key functions
    /// that do not read answers (it is never called for them); [`AnswerKeyed`] gives the
    /// key's own text.
    fn describe_answer_key(&self, key: &Self::Key) -> Arc<str> {
        let _ = key;
        Arc::from("(named by an answer)")
    }
}

/// A key function whose answers may name the key they count against: requests get their
/// key from `inner`, and an answer that carries `header` (a response header, or a gRPC
/// trailer for a verdict given at the end of the stream) counts against the key it names
/// instead of the request's — the shard or partition a server reports as overloaded,
/// say. That key's breaker opens, and calls for other keys pass.
///
/// The header's value is read by [`spread::answer_key`](crate::spread::answer_key): an
/// absent, empty, over-long (more than 23 bytes) or non-ASCII value names no key, and the
/// answer counts against the request's key as usual. An answer whose named key's breaker
/// is open (or has no probe to spare) is counted by neither breaker.
///
/// ```
/// use fusebox_breaker::{AnswerKeyed, CircuitBreakerConfig, CircuitBreakerLayer, RequestHead};
/// use http::HeaderName;
/// use smol_str::SmolStr;
///
/// // Requests are keyed by the shard they ask for; answers may name the shard at fault.
/// let by_shard = |head: &RequestHead<'_>| -> SmolStr {
///     head.headers()
///         .get("x-shard")
///         .and_then(|v| v.to_str().ok())
///         .map(SmolStr::new)
///         .unwrap_or_default()
/// };
/// let layer = CircuitBreakerLayer::builder(CircuitBreakerConfig::builder().build()?)
///     .build_keyed(AnswerKeyed::new(by_shard, HeaderName::from_static("x-shard")))?;
/// # let _ = layer;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct AnswerKeyed<F> {
    inner: F,
    header: HeaderName,
}

impl<F> AnswerKeyed<F> {
    /// Keys from `inner`, or from the answer's `header` when it names one.
    pub fn new(inner: F, header: HeaderName) -> Self {
        AnswerKeyed { inner, header }
    }

    /// The header an answer names its key in.
    pub fn header(&self) -> &HeaderName {
        &self.header
    }
}

impl<F> KeyFn for AnswerKeyed<F>
where
    F: KeyFn,
    F::Key: From<SmolStr> + AsRef<str>,
{
    type Key = F::Key;

    fn reads_answers(&self) -> bool {
        true
    }

    #[inline]
    fn key(&self, head: &RequestHead<'_>) -> F::Key {
        self.inner.key(head)
    }

    fn describe(&self, key: &F::Key, head: &RequestHead<'_>) -> Arc<str> {
        self.inner.describe(key, head)
    }

    #[inline]
    fn answer_key(&self, headers: &HeaderMap) -> Option<F::Key> {
        answer_key(headers, &self.header).map(F::Key::from)
    }

    fn describe_answer_key(&self, key: &F::Key) -> Arc<str> {
        Arc::from(key.as_ref())
    }
}

impl<F, K> KeyFn for F
where
    F: Fn(&RequestHead<'_>) -> K + Send + Sync + 'static,
    K: Hash + Eq + Clone + Send + Sync + fmt::Display + 'static,
{
    type Key = K;

    fn key(&self, head: &RequestHead<'_>) -> K {
        self(head)
    }

    fn describe(&self, key: &K, _head: &RequestHead<'_>) -> Arc<str> {
        Arc::from(key.to_string())
    }
}

/// One breaker per host (the URI's, else the `Host` header's: [`RequestHead::host`]), in
/// lower case. The key ([`host_key`]) keeps hosts of up to 23 bytes inline: looking up a
/// known host allocates nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct ByHost;

impl KeyFn for ByHost {
    type Key = SmolStr;

    #[inline]
    fn key(&self, head: &RequestHead<'_>) -> SmolStr {
        host_key(head.host().unwrap_or(""))
    }

    fn describe(&self, key: &SmolStr, _head: &RequestHead<'_>) -> Arc<str> {
        Arc::from(key.as_str())
    }
}

/// One breaker per route of the route table. The key is the route's id: no allocation.
#[derive(Debug, Clone, Copy, Default)]
pub struct ByRoute;

impl KeyFn for ByRoute {
    type Key = RouteId;

    fn key(&self, head: &RequestHead<'_>) -> RouteId {
        head.route()
    }

    fn describe(&self, _key: &RouteId, head: &RequestHead<'_>) -> Arc<str> {
        Arc::from(head.route_name())
    }
}

type Entry<C, St> = Arc<Breaker<C, St>>;
type Shards<K, C, St> = Box<[Mutex<Shard<K, C, St>>]>;

/// The name of the breaker that serves new keys while their shard has no room (see the
/// module docs).
const OVERFLOW_KEY: &str = "(overflow)";

/// A key's place in its shard.
struct Slot<C, St> {
    breaker: Entry<C, St>,
    /// The shard's `tick` when the key was last looked up: a larger stamp is a more recent
    /// use.
    used: u64,
}

struct Shard<K, C, St> {
    map: HashMap<K, Slot<C, St>>,
    /// How many keys the shard has made: the clock of [`Slot::used`].
    tick: u64,
    /// Where the next search for a key to evict starts, in the map's iteration order.
    hand: usize,
    last_sweep: Nanos,
    lookups: u32,
    /// Serves new keys while none of the keys held can make room for them.
    overflow: Option<Entry<C, St>>,
}

/// Whether a call (or an operator's handle) holds the breaker: only the shard's map holds
/// an idle one.
fn in_use<C, St>(breaker: &Entry<C, St>) -> bool {
    Arc::strong_count(breaker) > 1
}

// === impl Shard ===

impl<K: Hash + Eq + Clone, C, St: Store> Shard<K, C, St> {
    fn new(now: Nanos) -> Self {
        Shard {
            map: HashMap::new(),
            tick: 0,
            hand: 0,
            last_sweep: now,
            lookups: 0,
            overflow: None,
        }
    }

    /// Forgets every key not used since the previous sweep, unless a call is in flight on
    /// it, and marks the others unused.
    fn sweep_idle(&mut self) {
        self.map.retain(|_, slot| {
            slot.breaker.touched.swap(false, Ordering::Relaxed) || in_use(&slot.breaker)
        });
    }

    /// Evicts one key to make room for a new one: the first closed breaker not in use that
    /// is idle (unused since the last sweep, or during the last `old_enough` new keys), else
    /// the least recently used closed one not in use. Returns whether a key went; breakers
    /// in any other state are never evicted here.
    ///
    /// A clock hand: the search starts where the previous one evicted, in the map's
    /// iteration order (stable but for the map's rare rehashes), so that every key is
    /// looked at in turn; searches always starting at the first entry would evict only
    /// the keys that happen to sit early in the table and never reach idle keys later in it.
    fn make_room(&mut self, old_enough: u64) -> bool {
        let start = self.hand % self.map.len().max(1);
        let entries = self.map.iter().enumerate();
        let mut best: Option<(usize, &K, u64)> = None;
        for (i, (key, slot)) in entries.clone().skip(start).chain(entries.take(start)) {
            if in_use(&slot.breaker) {
                continue;
            }
            let age = self.tick.saturating_sub(slot.used);
            let idle = age >= old_enough || !slot.breaker.touched.load(Ordering::Relaxed);
            // The state costs a lock to read: only for a key that would be chosen.
            if (!idle && best.is_some_and(|(_, _, oldest)| oldest >= age))
                || slot.breaker.store.snapshot().state != State::Closed
            {
                continue;
            }
            best = Some((i, key, age));
            if idle {
                break;
            }
        }
        let Some((i, key, _)) = best else {
            return false;
        };
        let key = key.clone();
        // The entries after the evicted one move up by one: the hand points at the next.
        self.hand = i;
        self.map.remove(&key).is_some()
    }
}

pub(crate) struct KeyedShared<F: KeyFn, C, M: MakeStore> {
    key_fn: F,
    table: RouteTable<C>,
    /// What new keys' breakers are made with (a reload changes it; read when a key is made).
    config: Mutex<Arc<CircuitBreakerConfig>>,
    clock: Clock,
    make: M,
    events: EventSink,
    shards: Shards<F::Key, C, M::Store>,
    hasher: RandomState,
    per_shard: usize,
    idle: Duration,
    /// Whether every key's breaker leaves its verdicts in the responses' extensions.
    expose: bool,
    /// The keys held and those failing lately, for a dependency-wide breaker's gate.
    spread: Arc<SpreadCounts>,
    /// What every key's breaker knows of it: the spread counts, and itself (weakly: it
    /// holds the keys' breakers) when answers may name keys.
    partial: Option<Arc<Partial<C, M::Store>>>,
}

/// A keyed breaker's refusal, with the guard that holds the permit of the keys' gate, if
/// the gate admitted the call (it is to be told the refusal).
type Refusal<C, St> = (CircuitOpen, Option<Guard<C, St>>);

/// How many lookups between two checks of the sweep timer.
const SWEEP_CHECK_EVERY: u32 = 1024;

impl<F: KeyFn, C: Classifier, M: MakeStore> KeyedShared<F, C, M> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        key_fn: F,
        table: RouteTable<C>,
        config: Arc<CircuitBreakerConfig>,
        clock: Clock,
        make: M,
        events: EventSink,
        max_keys: usize,
        idle: Duration,
    ) -> Self {
        let shards = (max_keys / 64).clamp(1, 16);
        let per_shard = (max_keys / shards).max(1);
        let now = clock.now();
        KeyedShared {
            key_fn,
            table,
            config: Mutex::new(config),
            clock,
            make,
            events,
            shards: (0..shards).map(|_| Mutex::new(Shard::new(now))).collect(),
            hasher: RandomState::new(),
            per_shard,
            idle,
            expose: false,
            spread: SpreadCounts::new(idle, clock),
            partial: None,
        }
    }

    /// The dependency-wide breaker its keys are gated by in their calls' guards, if any.
    #[inline]
    fn gate(&self) -> Option<&Breaker<C, M::Store>> {
        self.partial.as_deref().and_then(Partial::gate)
    }

    /// Shares it: its keys' breakers reach it through a weak reference (to find the key an
    /// answer names), which would make a cycle if it were strong.
    pub(crate) fn into_shared(self) -> Arc<Self> {
        Arc::new_cyclic(|me: &Weak<Self>| {
            let map = self.key_fn.reads_answers().then(|| {
                let map: Weak<dyn Redirect<C, M::Store>> = me.clone();
                map
            });
            KeyedShared {
                partial: Some(Arc::new(Partial::Key {
                    counts: Arc::clone(&self.spread),
                    map,
                    gate: OnceLock::new(),
                })),
                ..self
            }
        })
    }

    /// The same, its keys' breakers leaving their verdicts in the responses' extensions if
    /// `expose`.
    pub(crate) fn exposing(mut self, expose: bool) -> Self {
        self.expose = expose;
        self
    }

    fn shard(&self, key: &F::Key) -> MutexGuard<'_, Shard<F::Key, C, M::Store>> {
        let i = (self.hasher.hash_one(key) % self.shards.len() as u64) as usize;
        self.shards[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn breaker_for(&self, head: &RequestHead<'_>) -> Entry<C, M::Store> {
        let key = self.key_fn.key(head);
        self.breaker_of(key, |key| self.key_fn.describe(key, head))
    }

    /// The breaker of `key`, made (and named by `describe`) if the key is new.
    #[inline]
    fn breaker_of(
        &self,
        key: F::Key,
        describe: impl FnOnce(&F::Key) -> Arc<str>,
    ) -> Entry<C, M::Store> {
        let mut guard = self.shard(&key);
        let shard = &mut *guard;
        shard.lookups = shard.lookups.wrapping_add(1);
        if let Some(slot) = shard.map.get_mut(&key) {
            if slot.used != shard.tick {
                slot.used = shard.tick;
            }
            slot.breaker.touch();
            let breaker = Arc::clone(&slot.breaker);
            if shard.lookups.is_multiple_of(SWEEP_CHECK_EVERY) {
                self.maybe_sweep(shard);
            }
            return breaker;
        }
        self.maybe_sweep(shard);
        // Half a shard of new keys: a key not used while they came is idle enough to go.
        let old_enough = (self.per_shard / 2).max(1) as u64;
        if shard.map.len() >= self.per_shard {
            if !shard.make_room(old_enough) {
                return self.overflow(shard);
            }
            self.spread.held_changed(0, 1);
        }
        let breaker = self.make_breaker(describe(&key));
        shard.tick += 1;
        shard.map.insert(
            key,
            Slot {
                breaker: Arc::clone(&breaker),
                used: shard.tick,
            },
        );
        self.spread.held_changed(1, 0);
        breaker
    }

    /// The shard's overflow breaker, made on first need.
    #[cold]
    fn overflow(&self, shard: &mut Shard<F::Key, C, M::Store>) -> Entry<C, M::Store> {
        let breaker = shard.overflow.get_or_insert_with(|| {
            tracing::warn!(
                target: "fusebox::breaker",
                breaker = &**self.events.name(),
                keys = shard.map.len(),
                "keyed breaker: a shard is full of breakers that are not closed or are in use; new keys share its overflow breaker"
            );
            self.make_breaker(Arc::from(OVERFLOW_KEY))
        });
        Arc::clone(breaker)
    }

    fn make_breaker(&self, name: Arc<str>) -> Entry<C, M::Store> {
        // The key's own metric series, which go with its breaker.
        let events = self.events.for_key(Arc::clone(&name));
        let config = self.config();
        let store = self.make.make_store(StoreSpec {
            config: Arc::clone(&config),
            key: Some(Arc::clone(&name)),
            clock: self.clock,
            events: events.clone(),
        });
        Arc::new(
            Breaker::new(
                self.table.clone(),
                store,
                self.clock,
                Arc::clone(&config.name),
                Some(name),
                events,
                config.count_overloaded,
            )
            .exposing(self.expose)
            .partial(self.partial.clone()),
        )
    }

    fn config(&self) -> Arc<CircuitBreakerConfig> {
        Arc::clone(&self.config.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Sweeps idle keys when `idle` has passed since the shard's last sweep.
    fn maybe_sweep(&self, shard: &mut Shard<F::Key, C, M::Store>) {
        let now = self.clock.now();
        if now.since(shard.last_sweep) < self.idle {
            return;
        }
        shard.last_sweep = now;
        let held = shard.map.len();
        shard.sweep_idle();
        self.spread.held_changed(0, held - shard.map.len());
    }

    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).map.len())
            .sum()
    }
}

impl<F: KeyFn, C: Classifier, M: MakeStore> Redirect<C, M::Store> for KeyedShared<F, C, M> {
    fn named(&self, headers: &HeaderMap) -> Option<Entry<C, M::Store>> {
        let key = self.key_fn.answer_key(headers)?;
        Some(self.breaker_of(key, |key| self.key_fn.describe_answer_key(key)))
    }
}

/// Puts one circuit breaker per key in front of a service. Built by
/// [`CircuitBreakerLayerBuilder::build_keyed`](crate::CircuitBreakerLayerBuilder::build_keyed).
///
/// # How keys are kept and evicted
///
/// Keys live in a sharded map bounded by `max_keys`: each key's breaker, with a stamp of
/// when the key was last used. Two things remove a key, and neither touches a breaker in
/// use — one with a call in flight, or held by a [`BreakerHandle`] from
/// [`KeyedBreakerHandle::get`]:
///
/// - **Idle eviction**, driven by time. A shard is swept at most once per `idle_timeout`
///   (checked on every new key and every 1024th lookup in the shard): a breaker used since
///   the previous sweep survives it (and is marked unused), one that was not is forgotten,
///   whatever its state. So a key is forgotten once it has been idle for between one and
///   two `idle_timeout`s (at its shard's next check), and a key used more often than
///   every `idle_timeout` never is.
/// - **Making room**, driven by the cap. A new key in a full shard evicts exactly one key: a
///   CLOSED breaker with no call in flight that has not been used recently — one not used
///   since the last idle sweep, or during the last half-shard of new keys; failing those,
///   the least recently used. Losing a closed breaker loses only its window of recent
///   calls. A breaker that is OPEN, HALF_OPEN, or in an operator's state (forced open,
///   disabled, metrics-only) is never evicted to make room: a new breaker would start
///   closed and let calls through to a dependency known to be failing, or undo an
///   operator's order. A burst of new keys evicts one key each, never the whole shard.
///
/// When a shard is full and none of its keys can go (every one is not closed or has a call
/// in flight), the new key is not kept: its calls go through the shard's **overflow
/// breaker**, one ordinary breaker per shard, made on first need and named
/// [`KeyedBreakerHandle::OVERFLOW_KEY`], which every such key shares until room appears.
/// The keys held by the breakers at risk keep their state, the new keys are still
/// protected (together, as by an unkeyed breaker), and memory stays bounded: at most
/// `max_keys` keys are held, plus one overflow breaker per shard (at most 16). The overflow
/// breakers are reached through
/// [`KeyedBreakerHandle::overflow`] and obeys [`KeyedBreakerHandle::reset_all`] and
/// [`KeyedBreakerHandle::force_open_all`].
///
/// A call on a key already held takes its shard's lock for one map lookup and two stamps
/// (written only when they change); it allocates nothing, and reads the clock only on every
/// 1024th lookup in its shard (to check whether a sweep is due).
pub struct KeyedCircuitBreakerLayer<F: KeyFn, C, M: MakeStore> {
    shared: Arc<KeyedShared<F, C, M>>,
}

impl<F: KeyFn, C, M: MakeStore> Clone for KeyedCircuitBreakerLayer<F, C, M> {
    fn clone(&self) -> Self {
        KeyedCircuitBreakerLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<F: KeyFn, C, M: MakeStore> fmt::Debug for KeyedCircuitBreakerLayer<F, C, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCircuitBreakerLayer")
            .field("breaker", self.shared.events.name())
            .field(
                "max_keys",
                &(self.shared.per_shard * self.shared.shards.len()),
            )
            .finish()
    }
}

impl<F: KeyFn, C: Classifier, M: MakeStore> KeyedCircuitBreakerLayer<F, C, M> {
    pub(crate) fn from_shared(shared: Arc<KeyedShared<F, C, M>>) -> Self {
        KeyedCircuitBreakerLayer { shared }
    }

    /// An operator's handle on every key.
    pub fn handle(&self) -> KeyedBreakerHandle<F::Key> {
        KeyedBreakerHandle {
            keys: self.shared.clone(),
        }
    }
}

impl<S, F: KeyFn, C, M: MakeStore> Layer<S> for KeyedCircuitBreakerLayer<F, C, M> {
    type Service = KeyedCircuitBreaker<S, F, C, M>;

    fn layer(&self, inner: S) -> Self::Service {
        KeyedCircuitBreaker {
            staged: Staged::new(
                inner,
                KeyedStage {
                    shared: Arc::clone(&self.shared),
                },
            ),
        }
    }
}

/// The keyed breaker's per-call logic, as a [`Stage`]: the breaker stage of
/// [`CircuitBreaker`](crate::CircuitBreaker), with the breaker picked by the request's key.
pub struct KeyedStage<F: KeyFn, C, M: MakeStore> {
    shared: Arc<KeyedShared<F, C, M>>,
}

impl<F: KeyFn, C, M: MakeStore> Clone for KeyedStage<F, C, M> {
    fn clone(&self) -> Self {
        KeyedStage {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<F: KeyFn, C, M: MakeStore> fmt::Debug for KeyedStage<F, C, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedStage")
            .field("breaker", self.shared.events.name())
            .finish()
    }
}

impl<F: KeyFn, C: Classifier, M: MakeStore> KeyedStage<F, C, M> {
    /// Admits `request` on its key's breaker or rejects it.
    pub fn admit_request<B>(
        &self,
        request: &Request<B>,
    ) -> Result<Guard<C, M::Store>, CircuitOpen> {
        self.admit_in(request, &mut Scope::new())
    }

    /// Admits `request` on its key's breaker or rejects it, reading its route from the
    /// call's `scope`. With a gate in the keys' guards
    /// ([`gate_keys`](crate::compose::gate_keys)), the gate admits first, and a refusal by
    /// the key's breaker is told to the gate before this returns (the stage tells it when
    /// the call's future is polled, as stacked layers do).
    pub fn admit_in<B>(
        &self,
        request: &Request<B>,
        scope: &mut Scope,
    ) -> Result<Guard<C, M::Store>, CircuitOpen> {
        self.decide(request, scope).map_err(|(open, gate)| {
            if let Some(gate) = gate {
                // Told the refusal now: the caller holds no guard to tell it later.
                Guard::answer_keyed(&mut Some(gate), Answer::Error(&open), &SharedVerdict::new());
            }
            open
        })
    }

    /// Admits `request` on its key's breaker, or refuses it with the guard that holds what
    /// the keys' gate, if any, admitted it with (the gate is to be told the refusal).
    // The refusal's guard is handed on by value (see `Breaker::admit_gated`).
    #[allow(clippy::result_large_err)]
    #[inline(always)]
    fn decide<B>(
        &self,
        request: &Request<B>,
        scope: &mut Scope,
    ) -> Result<Guard<C, M::Store>, Refusal<C, M::Store>> {
        let meta = self.shared.table.meta_in(request, scope);
        // A gate in the keys' guards admits first: an open dependency refuses without
        // asking the keys.
        let gate = match self.shared.gate() {
            Some(gate) => Some(gate.start(meta.route()).map_err(|open| (open, None))?),
            None => None,
        };
        let head = RequestHead {
            method: request.method(),
            uri: request.uri(),
            headers: request.headers(),
            extensions: request.extensions(),
            route: meta.route(),
            route_name: self.shared.table.name(meta.route()),
        };
        let breaker = self.shared.breaker_for(&head);
        match gate {
            None => breaker.admit(meta).map_err(|open| (open, None)),
            Some(admitted) => breaker
                .admit_gated(meta, admitted)
                .map_err(|(open, gate)| (open, Some(gate))),
        }
    }

    /// Makes `dependency` the gate of this stage's keys, run in their calls' guards (see
    /// [`gate_keys`](crate::compose::gate_keys)).
    pub(crate) fn gate_with(&self, dependency: &BreakerStage<C, M::Store>) -> bool {
        if !self.shared.table.same_table(&dependency.leases().table) {
            return false;
        }
        match self.shared.partial.as_deref() {
            Some(partial) => partial.set_gate(Arc::clone(dependency.leases())),
            None => false,
        }
    }

    /// An operator's handle on every key.
    pub fn handle(&self) -> KeyedBreakerHandle<F::Key> {
        KeyedBreakerHandle {
            keys: self.shared.clone(),
        }
    }
}

impl<B, F: KeyFn, C: Classifier, M: MakeStore> Stage<Request<B>> for KeyedStage<F, C, M> {
    type Admitted = Option<Guard<C, M::Store>>;
    type Waiting = NoWait;
    type End = EosRecorder<C, M::Store>;
    type Timer = NoTimer;

    #[inline]
    fn admit(&self, request: &mut Request<B>, scope: &mut Scope) -> Admit<Self::Admitted, NoWait> {
        match self.decide(request, scope) {
            Ok(guard) => Guard::admission(Ok(guard)),
            Err((open, None)) => Guard::admission(Err(open)),
            // The keys' gate is told the refusal when the call's future is polled.
            Err((open, gate)) => Admit::Fail(gate, Box::new(open)),
        }
    }

    fn poll_wait(
        &self,
        waiting: Pin<&mut NoWait>,
        _: &mut Request<B>,
        _: &mut Scope,
        _: &mut Context<'_>,
    ) -> Poll<Admit<Self::Admitted, NoWait>> {
        match *waiting.get_mut() {}
    }

    #[inline(always)]
    fn on_answer(
        admitted: Pin<&mut Self::Admitted>,
        answer: Answer<'_>,
        verdict: &SharedVerdict,
    ) -> Option<Self::End> {
        Guard::answer_keyed(admitted.get_mut(), answer, verdict)
    }
}

/// The future of [`KeyedCircuitBreaker`] around `S` called with `Request<B>`: the stage
/// runner's future over the keyed stage.
pub type KeyedResponseFuture<S, B, F, C, M> =
    StagedFuture<S, Request<B>, KeyedStage<F, C, M>, Http>;

/// A service behind one circuit breaker per key: the stage runner ([`Staged`]) over the
/// [`KeyedStage`].
pub struct KeyedCircuitBreaker<S, F: KeyFn, C, M: MakeStore> {
    staged: Staged<S, KeyedStage<F, C, M>, Http>,
}

impl<S: Clone, F: KeyFn, C, M: MakeStore> Clone for KeyedCircuitBreaker<S, F, C, M> {
    fn clone(&self) -> Self {
        KeyedCircuitBreaker {
            staged: self.staged.clone(),
        }
    }
}

impl<S: fmt::Debug, F: KeyFn, C, M: MakeStore> fmt::Debug for KeyedCircuitBreaker<S, F, C, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCircuitBreaker")
            .field("inner", self.staged.get_ref())
            .field("breaker", self.staged.stage().shared.events.name())
            .finish()
    }
}

impl<S, F: KeyFn, C: Classifier, M: MakeStore> KeyedCircuitBreaker<S, F, C, M> {
    /// Admits `request` on its key's breaker or rejects it, without calling the inner
    /// service: for a caller that drives the breaker by hand (see [`Guard`]).
    /// [`call`](Service::call) is this, then the inner call.
    pub fn admit<B>(&self, request: &Request<B>) -> Result<Guard<C, M::Store>, CircuitOpen> {
        self.staged.stage().admit_request(request)
    }
}

impl<S, F: KeyFn, C, M: MakeStore> KeyedCircuitBreaker<S, F, C, M> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        self.staged.get_ref()
    }
    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        self.staged.get_mut()
    }
    /// The inner service, consuming this one.
    pub fn into_inner(self) -> S {
        self.staged.into_inner()
    }
    /// The keyed breaker's stage.
    pub fn stage(&self) -> &KeyedStage<F, C, M> {
        self.staged.stage()
    }
}

impl<S, F, C, M, ReqBody, ResBody> Service<Request<ReqBody>> for KeyedCircuitBreaker<S, F, C, M>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Error: Into<BoxError>,
    ResBody: Body,
    F: KeyFn,
    C: Classifier,
    M: MakeStore,
{
    type Response = Response<ResponseBody<ResBody, C, M::Store>>;
    type Error = BoxError;
    type Future = KeyedResponseFuture<S, ReqBody, F, C, M>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.staged.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        self.staged.call(request)
    }
}

/// What an operator's keyed handle needs, whatever the key function, classifier and store.
trait KeyedControl<K>: Send + Sync + 'static {
    fn get(&self, key: &K) -> Option<BreakerHandle>;
    fn keys(&self) -> Vec<K>;
    fn len(&self) -> usize;
    fn command_all(&self, command: Command);
    fn overflow(&self) -> Vec<BreakerHandle>;
    fn events(&self) -> &EventSink;
    fn spread(&self) -> &Arc<SpreadCounts>;
    fn config(&self) -> Arc<CircuitBreakerConfig>;
    fn reconfigure(&self, config: &Arc<CircuitBreakerConfig>) -> Result<(), Reconfigure>;
}

impl<F: KeyFn, C: Classifier, M: MakeStore> KeyedControl<F::Key> for KeyedShared<F, C, M> {
    fn get(&self, key: &F::Key) -> Option<BreakerHandle> {
        let shard = self.shard(key);
        shard
            .map
            .get(key)
            .map(|slot| BreakerHandle::new(Arc::clone(&slot.breaker) as Arc<dyn Control>))
    }

    fn keys(&self) -> Vec<F::Key> {
        self.shards
            .iter()
            .flat_map(|s| {
                let s = s.lock().unwrap_or_else(PoisonError::into_inner);
                s.map.keys().cloned().collect::<Vec<_>>()
            })
            .collect()
    }

    fn len(&self) -> usize {
        KeyedShared::len(self)
    }

    fn command_all(&self, command: Command) {
        for shard in self.shards.iter() {
            // Collected first: a command emits events, and listeners must not run under
            // the shard's lock.
            let breakers: Vec<_> = {
                let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
                shard
                    .map
                    .values()
                    .map(|slot| Arc::clone(&slot.breaker))
                    .chain(shard.overflow.clone())
                    .collect()
            };
            for b in breakers {
                b.store.command(command);
            }
        }
    }

    fn overflow(&self) -> Vec<BreakerHandle> {
        self.shards
            .iter()
            .filter_map(|s| {
                let s = s.lock().unwrap_or_else(PoisonError::into_inner);
                s.overflow
                    .as_ref()
                    .map(|b| BreakerHandle::new(Arc::clone(b) as Arc<dyn Control>))
            })
            .collect()
    }

    fn events(&self) -> &EventSink {
        &self.events
    }

    fn spread(&self) -> &Arc<SpreadCounts> {
        &self.spread
    }

    fn config(&self) -> Arc<CircuitBreakerConfig> {
        KeyedShared::config(self)
    }

    fn reconfigure(&self, config: &Arc<CircuitBreakerConfig>) -> Result<(), Reconfigure> {
        if config.window != self.config().window {
            return Err(Reconfigure::WindowChanged);
        }
        *self.config.lock().unwrap_or_else(PoisonError::into_inner) = Arc::clone(config);
        // Keys made from now on take the new settings; the keys held take them in place.
        // Collected first: no shard's lock is held while a store takes its own.
        let mut result = Ok(());
        for shard in self.shards.iter() {
            let breakers: Vec<_> = {
                let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
                shard
                    .map
                    .values()
                    .map(|slot| Arc::clone(&slot.breaker))
                    .chain(shard.overflow.clone())
                    .collect()
            };
            for b in breakers {
                if let Err(e) = Control::reconfigure(&*b, config) {
                    result = Err(e);
                }
            }
        }
        result
    }
}

/// An operator's handle on a keyed breaker: each key's handle, the keys, and orders for all.
pub struct KeyedBreakerHandle<K: 'static> {
    keys: Arc<dyn KeyedControl<K>>,
}

impl<K: 'static> Clone for KeyedBreakerHandle<K> {
    fn clone(&self) -> Self {
        KeyedBreakerHandle {
            keys: Arc::clone(&self.keys),
        }
    }
}

impl<K: 'static> fmt::Debug for KeyedBreakerHandle<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBreakerHandle")
            .field("breaker", self.keys.events().name())
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl<K: 'static> KeyedBreakerHandle<K> {
    /// The key name of the overflow breakers, in their events and [`CircuitOpen`] errors:
    /// the breaker a shard's new keys share while every key it holds is a breaker that must
    /// not be evicted (see [`KeyedCircuitBreakerLayer`]).
    ///
    /// [`CircuitOpen`]: fusebox_classify::error::CircuitOpen
    pub const OVERFLOW_KEY: &'static str = OVERFLOW_KEY;

    /// The handle of one key's breaker, if the key is known.
    pub fn get(&self, key: &K) -> Option<BreakerHandle> {
        self.keys.get(key)
    }

    /// Every key known now.
    pub fn keys(&self) -> Vec<K> {
        self.keys.keys()
    }

    /// How many keys are known now.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The overflow breakers made so far: at most one per shard, none while no shard has
    /// had to serve a new key without keeping it.
    pub fn overflow(&self) -> Vec<BreakerHandle> {
        self.keys.overflow()
    }

    /// Resets every known key's breaker (and the overflow breakers).
    pub fn reset_all(&self) {
        self.keys.command_all(Command::Reset)
    }

    /// Forces every known key's breaker open, and the overflow breakers (keys first seen
    /// later start closed).
    pub fn force_open_all(&self) {
        self.keys.command_all(Command::ForceOpen)
    }

    /// Every event of every key from now on.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<crate::BreakerEvent> {
        self.keys.events().subscribe()
    }

    /// A gate for the dependency-wide breaker stacked around this keyed one
    /// ([`CircuitBreakerLayerBuilder::key_spread`](crate::CircuitBreakerLayerBuilder::key_spread)):
    /// it counts a failure only while `rule` finds the failures spread over enough of
    /// these keys (see [`crate::spread`]).
    pub fn spread_gate(&self, rule: KeySpread) -> KeySpreadGate {
        KeySpreadGate::new(Arc::clone(self.keys.spread()), rule)
    }

    /// The settings new keys' breakers are made with (the keys held judge by their own:
    /// [`BreakerHandle::config`]; a reload keeps them the same).
    pub fn config(&self) -> Arc<CircuitBreakerConfig> {
        self.keys.config()
    }

    /// Judges every key by `config` from the next call on, and makes new keys with it
    /// (see [`BreakerHandle::reconfigure`]). Refused, changing nothing, when the window's
    /// kind or size differs; a key whose store cannot change its settings in place keeps
    /// its old ones, and the error says so ([`Reconfigure::Unsupported`]).
    pub fn reconfigure(&self, config: &Arc<CircuitBreakerConfig>) -> Result<(), Reconfigure> {
        self.keys.reconfigure(config)
    }

    /// The keyed breaker's name.
    pub fn name(&self) -> &str {
        self.keys.events().name()
    }

    /// A handle that does not keep the keyed breaker alive (see
    /// [`BreakerHandle::downgrade`]).
    pub fn downgrade(&self) -> WeakKeyedBreakerHandle<K> {
        WeakKeyedBreakerHandle {
            keys: Arc::downgrade(&self.keys),
        }
    }
}

/// A [`KeyedBreakerHandle`] that does not keep its keyed breaker alive
/// ([`KeyedBreakerHandle::downgrade`]).
pub struct WeakKeyedBreakerHandle<K: 'static> {
    keys: std::sync::Weak<dyn KeyedControl<K>>,
}

impl<K: 'static> WeakKeyedBreakerHandle<K> {
    /// The handle, if the keyed breaker is still alive.
    pub fn upgrade(&self) -> Option<KeyedBreakerHandle<K>> {
        self.keys.upgrade().map(|keys| KeyedBreakerHandle { keys })
    }
}

impl<K: 'static> Clone for WeakKeyedBreakerHandle<K> {
    fn clone(&self) -> Self {
        WeakKeyedBreakerHandle {
            keys: self.keys.clone(),
        }
    }
}

impl<K: 'static> fmt::Debug for WeakKeyedBreakerHandle<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WeakKeyedBreakerHandle")
            .field("alive", &(self.keys.strong_count() > 0))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    //! Eviction on paused time: which keys go to make room, which stay, and what serves a
    //! new key when none can go.

    use super::*;
    use crate::store::InMemory;
    use crate::{CircuitBreakerConfig, CircuitBreakerLayer};
    use bytes::Bytes;
    use fusebox_classify::StandardClassifier;
    use fusebox_classify::error::CircuitOpen;
    use http::StatusCode;
    use http_body_util::Empty;
    use std::collections::HashSet;
    use std::convert::Infallible;
    use std::sync::atomic::AtomicUsize;
    use tower::ServiceExt;

    /// Keys by path, and counts the breakers made for each key (`describe` is called once
    /// per breaker made), so a test can tell a breaker kept from one evicted and made anew.
    #[derive(Clone, Default)]
    struct ByPath {
        made: Arc<Mutex<HashMap<String, u32>>>,
    }

    impl ByPath {
        fn made(&self, path: &str) -> u32 {
            self.made.lock().unwrap().get(path).copied().unwrap_or(0)
        }
    }

    impl KeyFn for ByPath {
        type Key = String;

        fn key(&self, head: &RequestHead<'_>) -> String {
            head.uri().path().to_owned()
        }

        fn describe(&self, key: &String, _head: &RequestHead<'_>) -> Arc<str> {
            *self.made.lock().unwrap().entry(key.clone()).or_default() += 1;
            Arc::from(key.as_str())
        }
    }

    /// Opens after 4 calls at 50 % failures, stays open 10 s (no jitter).
    fn config() -> CircuitBreakerConfig {
        CircuitBreakerConfig::builder()
            .name("dep")
            .count_window(10)
            .minimum_calls(4)
            .failure_rate_threshold(50)
            .open_wait(Duration::from_secs(10))
            .open_wait_jitter(Duration::ZERO)
            .permitted_probes(2)
            .seed(1)
            .build()
            .unwrap()
    }

    type Dep = tower::util::ServiceFn<
        Box<
            dyn FnMut(Request<()>) -> std::future::Ready<Result<Response<Empty<Bytes>>, Infallible>>
                + Send,
        >,
    >;

    /// A dependency that fails paths starting with `/bad` (503) and answers 200 to the
    /// rest, counting the calls to `/bad` paths that reached it.
    fn dep() -> (Dep, Arc<AtomicUsize>) {
        let bad = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&bad);
        let f: Box<dyn FnMut(Request<()>) -> _ + Send> = Box::new(move |r: Request<()>| {
            let code = if r.uri().path().starts_with("/bad") {
                seen.fetch_add(1, Ordering::SeqCst);
                503
            } else {
                200
            };
            let mut response = Response::new(Empty::new());
            *response.status_mut() = StatusCode::from_u16(code).unwrap();
            std::future::ready(Ok(response))
        });
        (tower::service_fn(f), bad)
    }

    type Svc = KeyedCircuitBreaker<Dep, ByPath, StandardClassifier, InMemory>;

    fn keyed(max_keys: usize, idle: Duration) -> (Svc, KeyedBreakerHandle<String>, ByPath) {
        let keys = ByPath::default();
        let layer = CircuitBreakerLayer::builder(config())
            .max_keys(max_keys)
            .idle_timeout(idle)
            .build_keyed(keys.clone())
            .unwrap();
        let handle = layer.handle();
        (layer.layer(dep().0), handle, keys)
    }

    fn req(path: &str) -> Request<()> {
        Request::get(path).body(()).unwrap()
    }

    async fn send(svc: &mut Svc, path: &str) -> Result<StatusCode, BoxError> {
        Ok(svc.ready().await?.call(req(path)).await?.status())
    }

    fn state(handle: &KeyedBreakerHandle<String>, path: &str) -> Option<State> {
        handle.get(&path.to_owned()).map(|h| h.state())
    }

    fn held(handle: &KeyedBreakerHandle<String>) -> HashSet<String> {
        handle.keys().into_iter().collect()
    }

    const HOUR: Duration = Duration::from_secs(3600);

    /// The soak's report, reproduced: a full shard whose keys were all used since the last
    /// sweep; the first new key cleared their marks and the second evicted every key not
    /// used in between — the hot key's open breaker with them, replaced by a closed one.
    #[tokio::test(start_paused = true)]
    async fn a_hot_open_breaker_survives_new_keys_in_a_full_shard() {
        let (dep, bad_calls) = dep();
        let keys = ByPath::default();
        let layer = CircuitBreakerLayer::builder(config())
            .max_keys(64)
            .idle_timeout(HOUR)
            .build_keyed(keys.clone())
            .unwrap();
        let handle = layer.handle();
        let mut svc = layer.layer(dep);
        for _ in 0..4 {
            assert_eq!(
                send(&mut svc, "/bad-hot").await.unwrap(),
                StatusCode::SERVICE_UNAVAILABLE
            );
        }
        assert_eq!(state(&handle, "/bad-hot"), Some(State::Open));
        for i in 0..63 {
            assert_eq!(
                send(&mut svc, &format!("/churn/{i}")).await.unwrap(),
                StatusCode::OK
            );
        }
        assert_eq!(handle.len(), 64);
        let rejected = send(&mut svc, "/bad-hot").await.unwrap_err();
        assert!(rejected.is::<CircuitOpen>());

        send(&mut svc, "/new-a").await.unwrap();
        assert_eq!(state(&handle, "/bad-hot"), Some(State::Open));
        assert_eq!(handle.len(), 64);
        send(&mut svc, "/new-b").await.unwrap();
        assert_eq!(state(&handle, "/bad-hot"), Some(State::Open));
        assert_eq!(
            handle.len(),
            64,
            "one key evicted per new key, not the shard"
        );
        assert!(held(&handle).contains("/new-a"));

        // Thousands more new keys, the hot key rejected now and then: still the same
        // breaker, still open, and the dependency saw only the 4 calls that opened it.
        for i in 0..5_000 {
            send(&mut svc, &format!("/more/{i}")).await.unwrap();
            if i % 100 == 0 {
                assert!(send(&mut svc, "/bad-hot").await.is_err());
            }
            assert!(handle.len() <= 64);
        }
        assert_eq!(state(&handle, "/bad-hot"), Some(State::Open));
        assert_eq!(
            keys.made("/bad-hot"),
            1,
            "the hot key's breaker was never made anew"
        );
        assert_eq!(bad_calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_new_keys_evicts_one_key_each() {
        // One shard of 64.
        let (mut svc, handle, _) = keyed(64, HOUR);
        for round in 0..2 {
            for i in 0..64 {
                send(&mut svc, &format!("/old/{i}")).await.unwrap();
            }
            assert_eq!(handle.len(), 64, "round {round}");
        }
        for i in 0..10 {
            send(&mut svc, &format!("/new/{i}")).await.unwrap();
        }
        let keys = held(&handle);
        assert_eq!(keys.len(), 64);
        assert_eq!(keys.iter().filter(|k| k.starts_with("/old/")).count(), 54);
        assert_eq!(keys.iter().filter(|k| k.starts_with("/new/")).count(), 10);

        // Sixteen shards of 64: each full, then a burst across them.
        let (mut svc, handle, _) = keyed(1024, HOUR);
        for i in 0..4096 {
            send(&mut svc, &format!("/fill/{i}")).await.unwrap();
        }
        assert_eq!(handle.len(), 1024);
        for i in 0..100 {
            send(&mut svc, &format!("/burst/{i}")).await.unwrap();
        }
        let keys = held(&handle);
        assert_eq!(keys.len(), 1024);
        assert_eq!(keys.iter().filter(|k| k.starts_with("/fill/")).count(), 924);
    }

    #[tokio::test(start_paused = true)]
    async fn the_least_recently_used_closed_key_goes_first() {
        let (mut svc, handle, keys) = keyed(64, HOUR);
        for i in 0..64 {
            send(&mut svc, &format!("/k/{i}")).await.unwrap();
        }
        // A closed key in constant use outlives churn many times the cap.
        for i in 0..5_000 {
            send(&mut svc, "/warm").await.unwrap();
            send(&mut svc, &format!("/churn/{i}")).await.unwrap();
            assert!(handle.len() <= 64);
        }
        assert_eq!(keys.made("/warm"), 1);
        let window = handle.get(&"/warm".to_owned()).unwrap().snapshot().window;
        assert_eq!(window.calls, 10, "its window kept its calls");
        // The oldest keys went first: none of the first 64 is left.
        assert!(held(&handle).iter().all(|k| !k.starts_with("/k/")));
    }

    #[tokio::test(start_paused = true)]
    async fn open_and_operator_held_breakers_are_never_evicted_to_make_room() {
        let (mut svc, handle, keys) = keyed(64, HOUR);
        for _ in 0..4 {
            send(&mut svc, "/bad-a").await.unwrap();
        }
        send(&mut svc, "/forced").await.unwrap();
        handle.get(&"/forced".to_owned()).unwrap().force_open();
        send(&mut svc, "/disabled").await.unwrap();
        handle.get(&"/disabled".to_owned()).unwrap().disable();
        // Half-open, with a probe out.
        for _ in 0..4 {
            send(&mut svc, "/bad-b").await.unwrap();
        }
        tokio::time::advance(Duration::from_secs(10)).await;
        let probe = svc.ready().await.unwrap().call(req("/bad-b"));
        assert_eq!(state(&handle, "/bad-b"), Some(State::HalfOpen));

        // None of them is used again while 50 x the cap in new keys pass.
        for i in 0..3_200 {
            send(&mut svc, &format!("/churn/{i}")).await.unwrap();
            assert!(handle.len() <= 64);
        }
        assert_eq!(state(&handle, "/bad-a"), Some(State::Open));
        assert_eq!(state(&handle, "/forced"), Some(State::ForcedOpen));
        assert_eq!(state(&handle, "/disabled"), Some(State::Disabled));
        assert_eq!(state(&handle, "/bad-b"), Some(State::HalfOpen));
        for key in ["/bad-a", "/forced", "/disabled", "/bad-b"] {
            assert_eq!(keys.made(key), 1, "{key} was made anew");
        }
        // The probe fails: the same breaker re-opens.
        assert_eq!(
            probe.await.unwrap().status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(state(&handle, "/bad-b"), Some(State::Open));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_keys_are_forgotten_after_one_to_two_idle_timeouts() {
        let idle = Duration::from_secs(60);
        let step = Duration::from_secs(61);
        let (mut svc, handle, _) = keyed(64, idle);
        send(&mut svc, "/a").await.unwrap();
        send(&mut svc, "/b").await.unwrap();
        for _ in 0..4 {
            send(&mut svc, "/bad").await.unwrap();
        }
        assert_eq!(state(&handle, "/bad"), Some(State::Open));

        // One idle timeout on: every key was used since the last sweep; all stay.
        tokio::time::advance(step).await;
        send(&mut svc, "/c").await.unwrap();
        assert_eq!(held(&handle), set_of(&["/a", "/b", "/bad", "/c"]));
        send(&mut svc, "/a").await.unwrap();

        // Two on: the keys unused for a whole idle timeout go, whatever their state.
        tokio::time::advance(step).await;
        send(&mut svc, "/d").await.unwrap();
        assert_eq!(held(&handle), set_of(&["/a", "/c", "/d"]));

        tokio::time::advance(step).await;
        send(&mut svc, "/e").await.unwrap();
        assert_eq!(held(&handle), set_of(&["/d", "/e"]));

        // Without new keys, the shard checks whether a sweep is due every 1024 lookups.
        tokio::time::advance(step).await;
        for _ in 0..SWEEP_CHECK_EVERY {
            send(&mut svc, "/e").await.unwrap();
        }
        assert_eq!(held(&handle), set_of(&["/e"]));

        // Within one idle timeout nothing goes, used or not.
        tokio::time::advance(Duration::from_secs(30)).await;
        send(&mut svc, "/f").await.unwrap();
        tokio::time::advance(Duration::from_secs(29)).await;
        send(&mut svc, "/g").await.unwrap();
        assert_eq!(held(&handle), set_of(&["/e", "/f", "/g"]));
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_shard_of_breakers_that_must_stay_serves_new_keys_through_its_overflow_breaker()
    {
        let (dep, bad_calls) = dep();
        let layer = CircuitBreakerLayer::builder(config())
            .max_keys(4)
            .idle_timeout(HOUR)
            .build_keyed(ByPath::default())
            .unwrap();
        let handle = layer.handle();
        let mut svc = layer.layer(dep);
        for k in 0..4 {
            for _ in 0..4 {
                send(&mut svc, &format!("/bad-{k}")).await.unwrap();
            }
        }
        let open = set_of(&["/bad-0", "/bad-1", "/bad-2", "/bad-3"]);
        assert_eq!(held(&handle), open);
        assert!(handle.overflow().is_empty(), "made on first need");

        // A healthy new key is served, not kept; the open breakers stay.
        assert_eq!(send(&mut svc, "/x").await.unwrap(), StatusCode::OK);
        assert_eq!(held(&handle), open);
        assert!(open.iter().all(|k| state(&handle, k) == Some(State::Open)));
        let overflow = handle.overflow();
        assert_eq!(overflow.len(), 1);
        assert_eq!(
            overflow[0].key(),
            Some(KeyedBreakerHandle::<String>::OVERFLOW_KEY)
        );
        assert_eq!(overflow[0].snapshot().window.calls, 1);
        drop(overflow);

        // New keys that fail open the overflow breaker, which then protects every new key.
        // (1 success and 3 failures: 75 % of 4 calls.)
        for i in 0..3 {
            send(&mut svc, &format!("/bad-new-{i}")).await.unwrap();
        }
        assert_eq!(handle.overflow()[0].state(), State::Open);
        assert_eq!(bad_calls.load(Ordering::SeqCst), 19);
        let err = send(&mut svc, "/y").await.unwrap_err();
        let open_err = err.downcast_ref::<CircuitOpen>().unwrap();
        assert_eq!(open_err.key(), Some("(overflow)"));
        assert_eq!(held(&handle), open);

        // Orders for all reach it; a key that closes makes room again.
        handle.reset_all();
        assert_eq!(handle.overflow()[0].state(), State::Closed);
        handle.force_open_all();
        assert_eq!(handle.overflow()[0].state(), State::ForcedOpen);
        assert!(send(&mut svc, "/y").await.is_err());
        handle.get(&"/bad-0".to_owned()).unwrap().reset();
        assert_eq!(send(&mut svc, "/z").await.unwrap(), StatusCode::OK);
        assert_eq!(held(&handle), set_of(&["/z", "/bad-1", "/bad-2", "/bad-3"]));
    }

    #[tokio::test(start_paused = true)]
    async fn breakers_in_use_are_never_evicted_and_the_cap_holds() {
        let (mut svc, handle, keys) = keyed(2, HOUR);
        let a = svc.ready().await.unwrap().call(req("/a"));
        let b = svc.ready().await.unwrap().call(req("/b"));
        // Both in flight: a new key neither evicts them nor grows the map.
        assert_eq!(send(&mut svc, "/c").await.unwrap(), StatusCode::OK);
        assert_eq!(held(&handle), set_of(&["/a", "/b"]));
        // A handle held by an operator counts as in use too.
        assert_eq!(a.await.unwrap().status(), StatusCode::OK);
        let pinned = handle.get(&"/a".to_owned()).unwrap();
        send(&mut svc, "/d").await.unwrap();
        assert_eq!(held(&handle), set_of(&["/a", "/b"]));
        drop(pinned);
        send(&mut svc, "/e").await.unwrap();
        assert_eq!(held(&handle), set_of(&["/b", "/e"]));
        assert_eq!(b.await.unwrap().status(), StatusCode::OK);
        assert_eq!(keys.made("/b"), 1);
        // Idle sweeps spare them as well.
        let c = svc.ready().await.unwrap().call(req("/e"));
        tokio::time::advance(3 * HOUR).await;
        send(&mut svc, "/f").await.unwrap();
        assert!(held(&handle).contains("/e"));
        drop(c);
    }

    fn set_of(keys: &[&str]) -> HashSet<String> {
        keys.iter().map(|k| (*k).to_owned()).collect()
    }

    #[test]
    fn host_headers_give_their_host() {
        for (value, host) in [
            ("api.example.com", Some("api.example.com")),
            ("api.example.com:8443", Some("api.example.com")),
            ("api.example.com:", Some("api.example.com")),
            ("10.0.0.1:80", Some("10.0.0.1")),
            ("[2001:db8::1]", Some("[2001:db8::1]")),
            ("[2001:db8::1]:8080", Some("[2001:db8::1]")),
            ("[::1]:", Some("[::1]")),
            ("[fe80::1%25eth0]:80", Some("[fe80::1%25eth0]")),
            ("", None),
            (":80", None),
            ("api:http", None),
            ("2001:db8::1", None),
            ("[2001:db8::1", None),
            ("[]:80", None),
            ("[2001:db8::1]x", None),
            ("[2001:db8::1]:80x", None),
            ("a]b", None),
            ("[a]]", None),
        ] {
            assert_eq!(host_of(value), host, "{value:?}");
        }
        assert_eq!(host_key("API.Example.COM"), "api.example.com");
    }

    /// A host as a test writes it, and what [`host_of`] must give for it.
    fn valid_host() -> impl proptest::strategy::Strategy<Value = (String, String)> {
        use proptest::prelude::*;
        let port = prop_oneof![
            Just(String::new()),
            Just(":".to_owned()),
            (0u32..=65_535).prop_map(|p| format!(":{p}")),
            any::<u128>().prop_map(|p| format!(":{p}{p}")),
        ];
        let label = proptest::collection::vec(proptest::sample::select(&b"abcxyz0189-"[..]), 1..12)
            .prop_map(|l| format!("h{}", String::from_utf8(l).expect("ASCII")));
        let host = prop_oneof![
            proptest::collection::vec(label, 1..4).prop_map(|labels| labels.join(".")),
            any::<[u8; 4]>().prop_map(|a| std::net::Ipv4Addr::from(a).to_string()),
            any::<u128>().prop_map(|a| format!("[{}]", std::net::Ipv6Addr::from(a))),
            (any::<u16>(), any::<u16>()).prop_map(|(a, b)| format!("[{a:x}::{b:X}]")),
        ];
        (host, port).prop_map(|(host, port)| (format!("{host}{port}"), host))
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]

        /// Any value: no panic, and an answer is a non-empty prefix of the value that
        /// is either a whole bracketed literal or has no colon or bracket in it.
        #[test]
        fn any_host_value_gives_a_whole_host_or_none(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            hostish in proptest::collection::vec(proptest::sample::select(&b"[]:.0a9f%"[..]), 0..24),
        ) {
            let latin1: String = bytes.iter().map(|&b| char::from(b)).collect();
            let hostish = String::from_utf8(hostish).expect("ASCII");
            for value in [latin1.as_str(), hostish.as_str()] {
                if let Some(host) = host_of(value) {
                    proptest::prop_assert!(!host.is_empty());
                    proptest::prop_assert!(value.starts_with(host));
                    if host.starts_with('[') {
                        proptest::prop_assert!(host.ends_with(']'));
                        proptest::prop_assert_eq!(host.matches(']').count(), 1);
                    } else {
                        proptest::prop_assert!(!host.contains([':', '[', ']']));
                    }
                }
            }
        }

        /// Valid values give their host; one byte changed gives the host, another whole
        /// host, or none, never a piece of a bracketed literal.
        #[test]
        fn near_valid_host_values(
            (value, host) in valid_host(),
            at in 0usize..64,
            byte in proptest::prelude::any::<u8>(),
        ) {
            proptest::prop_assert_eq!(host_of(&value), Some(host.as_str()));
            let mut mutated: Vec<u8> = value.clone().into_bytes();
            let at = at % mutated.len();
            mutated[at] = byte & 0x7f;
            let mutated = String::from_utf8(mutated).expect("ASCII");
            if let Some(got) = host_of(&mutated) {
                proptest::prop_assert!(mutated.starts_with(got));
                if mutated.starts_with('[') {
                    proptest::prop_assert!(got.ends_with(']'), "{:?} -> {:?}", mutated, got);
                }
            }
        }

        /// Two different IPv6 literals never share a key, whatever their ports.
        #[test]
        fn ipv6_literals_keep_apart(a in proptest::prelude::any::<u128>(), b in proptest::prelude::any::<u128>(), pa in 0u16.., pb in 0u16..) {
            let (a, b) = (std::net::Ipv6Addr::from(a), std::net::Ipv6Addr::from(b));
            let ka = host_key(host_of(&format!("[{a}]:{pa}")).unwrap());
            let kb = host_key(host_of(&format!("[{b}]:{pb}")).unwrap());
            proptest::prop_assert_eq!(ka == kb, a == b);
            let bare = format!("[{a}]");
            proptest::prop_assert_eq!(host_of(&bare), Some(bare.as_str()));
        }
    }
}
