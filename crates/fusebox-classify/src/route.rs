//! The per-route table: which classifier, slow-call threshold, timeout and retry settings
//! apply to a request.
//!
//! Route keys are written `"METHOD /path/{param}"` or `"/path/{param}"` (any method); gRPC
//! methods are paths too (`"/pkg.Service/Method"`, or `"/pkg.Service/{*method}"` for a
//! whole service). A request is matched by axum's `MatchedPath` extension when present
//! (feature `axum`), else by its method and URI path. Requests that match nothing use the
//! default route. Matching allocates nothing; a table with only a default route does no
//! matching at all.
//!
//! A call is resolved once, by the outermost fusebox layer it passes through: the layers
//! and stages inside it read the resolution from the call's [`Scope`] ([`resolve_in`],
//! [`meta_in`]; see [`context`](crate::context)). [`resolve`] and [`meta`] match the
//! request every time they are asked.
//!
//! [`Scope`]: crate::context::Scope
//! [`resolve_in`]: RouteTable::resolve_in
//! [`meta_in`]: RouteTable::meta_in
//! [`resolve`]: RouteTable::resolve
//! [`meta`]: RouteTable::meta

use crate::call::{Call, is_idempotent};
use crate::classifier::{Classifier, StandardClassifier};
use crate::config::{ConfigError, Validator};
use crate::context::Scope;
use arc_swap::ArcSwapOption;
use http::{Method, Request};
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod edit;
mod per_route;

pub use edit::RouteEdit;
pub use per_route::PerRoute;

/// Names a route of a [`RouteTable`]; cheap to copy and store in a future.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteId(u16);

impl RouteId {
    /// The default route, used by requests that match no other.
    pub const DEFAULT: RouteId = RouteId(0);

    /// The route's index in its table (0 is the default route).
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// The settings of one route.
///
/// A named route inherits from the table's default route every setting it does not set
/// itself — slow-call threshold, timeout, retries, idempotency, and the classifier's own
/// settings ([`Classifier::inherit`]) — when the table is built. A route can still say
/// "none" for an inherited threshold or timeout: [`no_slow_call_duration`] and
/// [`no_timeout`].
///
/// ```
/// use fusebox_classify::{Route, RouteTable, StandardClassifier};
/// use std::time::Duration;
///
/// let table = RouteTable::builder(Route::default().slow_call_duration(Duration::from_millis(250)))
///     .route("POST /score", Route::new(StandardClassifier::new().count_throttling(true)))
///     .route("GET /export", Route::default().no_slow_call_duration())
///     .build()?;
/// let score = table.route(table.resolve_path(&http::Method::POST, "/score"));
/// assert_eq!(score.slow_call_threshold(), Some(Duration::from_millis(250)), "inherited");
/// let export = table.route(table.resolve_path(&http::Method::GET, "/export"));
/// assert_eq!(export.slow_call_threshold(), None, "said none");
/// # Ok::<(), fusebox_classify::ConfigError>(())
/// ```
///
/// [`no_slow_call_duration`]: Route::no_slow_call_duration
/// [`no_timeout`]: Route::no_timeout
#[derive(Debug, Clone, PartialEq)]
pub struct Route<C = StandardClassifier> {
    classifier: C,
    /// `None`: not set here (inherited); `Some(None)`: set to none.
    slow_call_duration: Option<Option<Duration>>,
    timeout: Option<Option<Duration>>,
    retry: Option<bool>,
    /// `Some(None)`: set to "by the method and headers".
    idempotent: Option<Option<bool>>,
    /// The settings this route took from the default route when its table was built.
    inherited: Inherited,
}

/// Which of a route's settings it took from its table's default route (see
/// [`Route::inherited`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Inherited {
    /// The slow-call threshold.
    pub slow_call_duration: bool,
    /// The timeout.
    pub timeout: bool,
    /// Whether retries are allowed.
    pub retry: bool,
    /// The idempotency override.
    pub idempotent: bool,
}

impl Default for Route<StandardClassifier> {
    fn default() -> Self {
        Route::new(StandardClassifier::default())
    }
}

impl<C> Route<C> {
    /// A route classified by `classifier` that sets nothing else: as a table's default
    /// route it has no slow-call threshold, no timeout and allows retries; as a named
    /// route it takes those from the default route.
    pub fn new(classifier: C) -> Self {
        Route {
            classifier,
            slow_call_duration: None,
            timeout: None,
            retry: None,
            idempotent: None,
            inherited: Inherited::default(),
        }
    }

    /// Calls taking at least `threshold` are slow (feeding the breaker's slow-call rate and
    /// the adaptive limits). Without a threshold no call is slow and the breaker need not
    /// read the clock for it.
    pub fn slow_call_duration(mut self, threshold: Duration) -> Self {
        self.slow_call_duration = Some(Some(threshold));
        self
    }

    /// No call on this route is slow, whatever the default route says.
    pub fn no_slow_call_duration(mut self) -> Self {
        self.slow_call_duration = Some(None);
        self
    }

    /// The route's timeout (read by the timeout layer).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(Some(timeout));
        self
    }

    /// No timeout of its own on this route, whatever the default route says (the timeout
    /// layer's default timeout, if it has one, still applies).
    pub fn no_timeout(mut self) -> Self {
        self.timeout = Some(None);
        self
    }

    /// Whether the retry layer may retry calls on this route (default `true`).
    pub fn retry(mut self, retry: bool) -> Self {
        self.retry = Some(retry);
        self
    }

    /// Overrides whether requests on this route are safe to repeat, whatever their method
    /// and headers (a POST that is idempotent by contract, or a GET that is not).
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = Some(Some(idempotent));
        self
    }

    /// Requests on this route are safe to repeat as their method and headers say, whatever
    /// the default route says.
    pub fn idempotent_by_method(mut self) -> Self {
        self.idempotent = Some(None);
        self
    }

    /// Takes from `default` every setting this route does not set itself, the classifier's
    /// included ([`Classifier::inherit`]). [`RouteTableBuilder::build`] does this for every
    /// named route.
    pub fn inherit(&mut self, default: &Route<C>)
    where
        C: Classifier,
    {
        self.classifier.inherit(&default.classifier);
        if self.slow_call_duration.is_none() {
            self.slow_call_duration = default.slow_call_duration;
            self.inherited.slow_call_duration = default.slow_call_duration.is_some();
        }
        if self.timeout.is_none() {
            self.timeout = default.timeout;
            self.inherited.timeout = default.timeout.is_some();
        }
        if self.retry.is_none() {
            self.retry = default.retry;
            self.inherited.retry = default.retry.is_some();
        }
        if self.idempotent.is_none() {
            self.idempotent = default.idempotent;
            self.inherited.idempotent = default.idempotent.is_some();
        }
    }

    /// The settings this route took from the default route when its table was built.
    pub fn inherited(&self) -> Inherited {
        self.inherited
    }

    /// The classifier.
    pub fn classifier(&self) -> &C {
        &self.classifier
    }

    /// The slow-call threshold, if any.
    pub fn slow_call_threshold(&self) -> Option<Duration> {
        self.slow_call_duration.flatten()
    }

    /// Whether this route sets its slow-call threshold (to a value or to none) rather than
    /// leaving it to the default route.
    pub fn sets_slow_call_duration(&self) -> bool {
        self.slow_call_duration.is_some() && !self.inherited.slow_call_duration
    }

    /// The timeout, if any.
    pub fn timeout_duration(&self) -> Option<Duration> {
        self.timeout.flatten()
    }

    /// Whether this route sets its timeout (to a value or to none).
    pub fn sets_timeout(&self) -> bool {
        self.timeout.is_some() && !self.inherited.timeout
    }

    /// Whether retries are allowed.
    pub fn retry_enabled(&self) -> bool {
        self.retry.unwrap_or(true)
    }

    /// Whether this route sets whether retries are allowed.
    pub fn sets_retry(&self) -> bool {
        self.retry.is_some() && !self.inherited.retry
    }

    /// The idempotency override, if any.
    pub fn idempotent_override(&self) -> Option<bool> {
        self.idempotent.flatten()
    }

    /// Whether this route sets its idempotency (to an override or to "by method").
    pub fn sets_idempotent(&self) -> bool {
        self.idempotent.is_some() && !self.inherited.idempotent
    }

    /// Whether a call of `latency` is slow on this route.
    #[inline]
    pub fn is_slow(&self, latency: Duration) -> bool {
        self.slow_call_duration
            .flatten()
            .is_some_and(|t| latency >= t)
    }

    fn validate(&self, path: &str, v: &mut Validator) {
        if let Some(Some(d)) = self.slow_call_duration {
            v.check(!d.is_zero(), &format!("{path}.slow_call_duration"), || {
                "must be greater than zero".into()
            });
        }
        if let Some(Some(d)) = self.timeout {
            v.check(!d.is_zero(), &format!("{path}.timeout"), || {
                "must be greater than zero".into()
            });
        }
    }
}

#[derive(Debug, Default, Clone)]
struct Candidates {
    any_method: Option<RouteId>,
    by_method: Vec<(Method, RouteId)>,
}

#[derive(Debug)]
struct Table<C> {
    /// Unique among the tables of this process: names the table in a call's [`Scope`]
    /// (an address could be reused by a later table).
    id: u64,
    /// The process-wide default table ([`RouteTable::default`]), which every layer built
    /// without a table of its own shares: its route is never replaced.
    shared_default: bool,
    /// The routes the table was built with: route `i` is `names[i]`, `routes[i]`.
    names: Vec<Arc<str>>,
    routes: Vec<Slot<C>>,
    /// Each route's slow-call threshold and own timeout by id (the added routes' too), as
    /// the layers read them per call.
    slow: SlowThresholds,
    timeouts: RouteTimeouts,
    /// The matcher the table was built with, until an edit adds or removes a route.
    router: Option<Matcher>,
    edited: Edited<C>,
}

/// What [edits](RouteTable::edit) changed in a table's routes since it was built.
///
/// A table never edited reads none of it but the `rerouted` flag: its routes are in
/// [`Table::routes`] and its matcher in [`Table::router`].
#[derive(Debug)]
struct Edited<C> {
    /// Whether `router` is the matcher requests are matched by (set, with release ordering,
    /// once it is): an edit added or removed a route.
    rerouted: AtomicBool,
    router: ArcSwapOption<Matcher>,
    /// The routes added since the table was built, with their names: route
    /// `routes.len() + i` is `added[i]`. Append-only, so that a name or route read from it
    /// stays where it is while the table lives.
    added: boxcar::Vec<(Arc<str>, Slot<C>)>,
    /// Held by an edit, so that edits apply one after another.
    lock: Mutex<()>,
}

impl<C> Edited<C> {
    fn new() -> Self {
        Edited {
            rerouted: AtomicBool::new(false),
            router: ArcSwapOption::const_empty(),
            added: boxcar::Vec::new(),
            lock: Mutex::new(()),
        }
    }
}

impl<C> Table<C> {
    /// Route `id`'s slot, if the table holds it.
    #[inline]
    fn slot(&self, id: RouteId) -> Option<&Slot<C>> {
        match self.routes.get(id.index()) {
            Some(slot) => Some(slot),
            None => self.added(id).map(|(_, slot)| slot),
        }
    }

    /// Route `id`'s name, if the table holds it.
    #[inline]
    fn name(&self, id: RouteId) -> Option<&Arc<str>> {
        match self.names.get(id.index()) {
            Some(name) => Some(name),
            None => self.added(id).map(|(name, _)| name),
        }
    }

    /// A route added since the table was built; out of line, so that reading a route it
    /// was built with stays one bounds check.
    #[cold]
    #[inline(never)]
    fn added(&self, id: RouteId) -> Option<&(Arc<str>, Slot<C>)> {
        self.edited
            .added
            .get(id.index().checked_sub(self.routes.len())?)
    }

    /// Gives route `id` `route`'s durations in the arrays the layers read.
    fn set_durations(&self, id: RouteId, route: &Route<C>) {
        self.slow.0.set(id, route.slow_call_threshold());
        self.timeouts.0.set(id, route.timeout_duration());
    }

    /// Gives route `id`, the next one of the table, `route`'s durations.
    fn add_durations(&self, id: RouteId, route: &Route<C>) {
        let count = id.index() + 1;
        self.slow.0.add(id, count, route.slow_call_threshold());
        self.timeouts.0.add(id, count, route.timeout_duration());
    }

    /// How many route ids the table has given out.
    #[inline]
    fn count(&self) -> usize {
        self.routes.len() + self.edited.added.count()
    }

    /// Whether no request can match a route besides the default one.
    #[inline]
    fn matches_nothing(&self) -> bool {
        self.router.is_none() && !self.edited.rerouted.load(Ordering::Acquire)
    }

    /// The route for `method` and `path`.
    #[inline]
    fn resolve(&self, method: &Method, path: &str) -> RouteId {
        if self.edited.rerouted.load(Ordering::Acquire) {
            return self.resolve_edited(method, path);
        }
        match &self.router {
            Some(matcher) => matcher.resolve(method, path),
            None => RouteId::DEFAULT,
        }
    }

    /// The route for `method` and `path`, by the matcher an edit put in place.
    #[cold]
    #[inline(never)]
    fn resolve_edited(&self, method: &Method, path: &str) -> RouteId {
        match &*self.edited.router.load() {
            Some(matcher) => matcher.resolve(method, path),
            None => RouteId::DEFAULT,
        }
    }
}

/// One route of a table: its settings as built, and those that replaced them
/// ([`RouteTable::replace_route`]).
///
/// A route that was never replaced is read with one atomic load (of `replaced`, which
/// stays `false`); a replaced one through `arc-swap`, so that a reader on another thread
/// never sees the settings half-written and the settings it holds stay alive while it
/// reads them.
struct Slot<C> {
    built: Route<C>,
    /// Whether `current` holds settings: set, with release ordering, once they are stored.
    replaced: AtomicBool,
    current: ArcSwapOption<Route<C>>,
    /// Whether an edit took the route out of the table: it matches no request and is not
    /// listed, and calls already on it read it as before.
    removed: AtomicBool,
}

impl<C> Slot<C> {
    fn new(route: Route<C>) -> Self {
        Slot {
            built: route,
            replaced: AtomicBool::new(false),
            current: ArcSwapOption::const_empty(),
            removed: AtomicBool::new(false),
        }
    }

    fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    #[inline]
    fn read(&self) -> RouteRef<'_, C> {
        RouteRef {
            built: &self.built,
            replaced: if self.replaced.load(Ordering::Acquire) {
                Some(self.load_replaced())
            } else {
                None
            },
        }
    }

    /// Out of line: a route never replaced (nearly every route of every call) reads no
    /// more than the flag, and each reader stays small enough to be inlined.
    #[cold]
    #[inline(never)]
    fn load_replaced(&self) -> arc_swap::Guard<Option<Arc<Route<C>>>> {
        self.current.load()
    }

    fn replace(&self, route: Route<C>) {
        self.current.store(Some(Arc::new(route)));
        self.replaced.store(true, Ordering::Release);
    }
}

/// One duration per route of a table (its slow-call threshold, its timeout), as the table
/// holds it now, by route id: shared by the table and the layers that read it on every
/// call, so that a layer reads it with one load, and a [replaced](RouteTable::replace_route)
/// route's value reaches every layer at once. Routes [added](RouteTable::edit) to the table
/// get theirs before any request can match them. Cloning is cheap: clones share the values.
#[derive(Clone)]
struct Durations {
    /// Per route: the duration's seconds in the upper 34 bits and its nanoseconds in the
    /// lower 30 ([`NONE`] for none), so that reading one divides nothing.
    by_route: Arc<PerRoute<AtomicU64>>,
}

/// A route without the duration.
const NONE: u64 = u64::MAX;
/// The bits of a duration's nanoseconds.
const NANOS_BITS: u32 = 30;

impl Durations {
    /// `of` each route: a table's default route, then its other routes in order.
    fn new<'a, C: 'a>(
        of: fn(&Route<C>) -> Option<Duration>,
        default: &Route<C>,
        routes: impl Iterator<Item = &'a Route<C>>,
    ) -> Self {
        let slot = |r: &Route<C>| AtomicU64::new(Self::encode(of(r)));
        Durations {
            by_route: Arc::new(PerRoute::new(slot(default), routes.map(slot))),
        }
    }

    /// A duration as stored: at most about 544 years (longer ones are clamped to it).
    fn encode(duration: Option<Duration>) -> u64 {
        match duration {
            None => NONE,
            Some(t) => {
                let secs = t.as_secs().min((1 << (64 - NANOS_BITS)) - 2);
                (secs << NANOS_BITS) | u64::from(t.subsec_nanos())
            }
        }
    }

    fn set(&self, id: RouteId, duration: Option<Duration>) {
        if let Some(slot) = self.by_route.get(id) {
            slot.store(Self::encode(duration), Ordering::Relaxed);
        }
    }

    /// Gives route `id`, the next one of its table (`count` routes with it), its duration.
    fn add(&self, id: RouteId, count: usize, duration: Option<Duration>) {
        let encoded = Self::encode(duration);
        self.by_route
            .get_or_grow(id, count, |_| AtomicU64::new(encoded));
        self.set(id, duration);
    }

    /// The duration of route `id` (the default route's for an unknown id).
    #[inline]
    fn get(&self, id: RouteId) -> Option<Duration> {
        match self.by_route.get_or_default(id).load(Ordering::Relaxed) {
            NONE => None,
            v => Some(Duration::new(
                v >> NANOS_BITS,
                (v & ((1 << NANOS_BITS) - 1)) as u32,
            )),
        }
    }
}

impl fmt::Debug for Durations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries((0..self.by_route.len()).map(|i| self.get(route_id(i))))
            .finish()
    }
}

/// Each route's slow-call threshold as its table holds it now, by route id
/// ([`RouteTable::slow_thresholds`]): what the breakers read at every admission, with one
/// load. A [replaced](RouteTable::replace_route) route's threshold reaches every breaker at
/// once; routes [added](RouteTable::edit) to the table get theirs before any request can
/// match them. Cloning is cheap: clones share the thresholds.
#[derive(Clone)]
pub struct SlowThresholds(Durations);

impl SlowThresholds {
    /// The slow-call threshold of route `id` (the default route's for an unknown id).
    #[inline]
    pub fn get(&self, id: RouteId) -> Option<Duration> {
        self.0.get(id)
    }
}

impl fmt::Debug for SlowThresholds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Each route's own timeout as its table holds it now, by route id
/// ([`RouteTable::route_timeouts`]): what a timeout layer reads at every call, with one
/// load (a route without one takes the layer's default timeout). A
/// [replaced](RouteTable::replace_route) route's timeout reaches every timeout layer
/// reading the table at once; routes [added](RouteTable::edit) to the table get theirs
/// before any request can match them. Cloning is cheap: clones share the timeouts.
#[derive(Clone)]
pub struct RouteTimeouts(Durations);

impl RouteTimeouts {
    /// The timeout route `id` sets itself, if any (the default route's for an unknown id).
    #[inline]
    pub fn get(&self, id: RouteId) -> Option<Duration> {
        self.0.get(id)
    }
}

impl fmt::Debug for RouteTimeouts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<C: fmt::Debug> fmt::Debug for Slot<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.read(), f)
    }
}

/// A route's settings as a table holds them now ([`RouteTable::route`]): those it was
/// built with, or those that replaced them. Dereferences to the [`Route`].
pub struct RouteRef<'a, C = StandardClassifier> {
    built: &'a Route<C>,
    replaced: Option<arc_swap::Guard<Option<Arc<Route<C>>>>>,
}

impl<C> Deref for RouteRef<'_, C> {
    type Target = Route<C>;

    #[inline]
    fn deref(&self) -> &Route<C> {
        match &self.replaced {
            Some(guard) => guard.as_deref().unwrap_or(self.built),
            None => self.built,
        }
    }
}

impl<C: fmt::Debug> fmt::Debug for RouteRef<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// The path matcher of a table with routes besides the default one.
#[derive(Debug)]
struct Matcher {
    router: matchit::Router<Candidates>,
}

/// The ids of [`Table`]s; 0 is never one.
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

fn next_table_id() -> u64 {
    NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed)
}

impl Matcher {
    /// The route for `method` and `path`.
    #[inline]
    fn resolve(&self, method: &Method, path: &str) -> RouteId {
        self.lookup(method, path)
    }

    fn lookup(&self, method: &Method, path: &str) -> RouteId {
        match self.router.at(path) {
            Ok(found) => found
                .value
                .by_method
                .iter()
                .find(|(m, _)| m == method)
                .map(|(_, id)| *id)
                .or(found.value.any_method)
                .unwrap_or(RouteId::DEFAULT),
            Err(_) => RouteId::DEFAULT,
        }
    }
}

/// Maps requests to [`Route`]s. Cloning is cheap: clones share one table.
#[derive(Debug)]
pub struct RouteTable<C = StandardClassifier> {
    table: Arc<Table<C>>,
}

impl<C> Clone for RouteTable<C> {
    fn clone(&self) -> Self {
        RouteTable {
            table: Arc::clone(&self.table),
        }
    }
}

impl<C> RouteTable<C> {
    /// Names this table in a call's [`Scope`]: unique among the tables of this process.
    #[inline]
    pub(crate) fn id(&self) -> u64 {
        self.table.id
    }

    /// Whether `self` and `other` are one table (one a clone of the other, or both the
    /// [shared default](RouteTable::is_shared_default)): what two layers that must resolve
    /// a call alike check.
    pub fn same_table(&self, other: &RouteTable<C>) -> bool {
        self.table.id == other.table.id
    }
}

impl Default for RouteTable<StandardClassifier> {
    /// One route with the standard classifier and no settings of its own. Made once per
    /// process and shared (cloning a table copies a pointer, and this one's route is never
    /// [replaced](RouteTable::replace_route)): every layer builder starts from it, and most
    /// are given a table of their own at once.
    fn default() -> Self {
        static DEFAULT: std::sync::OnceLock<RouteTable<StandardClassifier>> =
            std::sync::OnceLock::new();
        DEFAULT
            .get_or_init(|| RouteTable::single_table(Route::default(), true))
            .clone()
    }
}

/// The name of the default route.
pub const DEFAULT_ROUTE: &str = "default";

impl<C> RouteTable<C> {
    /// The settings of a route (the default route for an id of another table), as they
    /// are now: those the table was built with, or those that
    /// [`replace_route`](RouteTable::replace_route) put in their place. A route an
    /// [edit](RouteTable::edit) removed is still read here, by the calls already on it.
    #[inline]
    pub fn route(&self, id: RouteId) -> RouteRef<'_, C> {
        self.table.slot(id).unwrap_or(&self.table.routes[0]).read()
    }

    /// Puts `route`'s settings in place of those of route `id`, for every layer that reads
    /// them from this table (its clones share it), from the next read on; the route keeps
    /// its id, its name and the requests it matches. Every layer reads these from the table
    /// per call: the classifier, the slow-call threshold, the timeout, `retry` and
    /// `idempotent`. A reader that holds the former settings (a call classifying its answer
    /// at that moment) finishes with them. Waits for an [edit](RouteTable::edit) under way
    /// (so never call it while holding a [`RouteEdit`] of this table). `route` is taken as it
    /// is: what it leaves unset is not taken from the default route (a route of a table
    /// built by [`RouteTableBuilder::build`] already holds what it inherits). Zero
    /// durations are treated as absent, as [`single`](RouteTable::single) treats them.
    /// Returns `false`, changing nothing, for an id this table does not hold, and for the
    /// process-wide default table ([`RouteTable::default`], see
    /// [`is_shared_default`](RouteTable::is_shared_default)): a change to it would reach
    /// every layer built without a table of its own.
    ///
    /// This is how fusebox's `Policy::reload` changes a route's classifier, slow-call
    /// threshold, timeout, `retry` and `idempotent` in place. A replaced route is read
    /// through an `arc-swap` load instead of one atomic load.
    pub fn replace_route(&self, id: RouteId, mut route: Route<C>) -> bool {
        if self.table.shared_default || self.table.slot(id).is_none() {
            return false;
        }
        route.slow_call_duration = nonzero(route.slow_call_duration);
        route.timeout = nonzero(route.timeout);
        let mut edit = self.edit();
        edit.replace(id, route);
        edit.commit().is_ok()
    }

    /// The name of a route, as written in the table (`"default"` for the default route).
    #[inline]
    pub fn name(&self, id: RouteId) -> &str {
        self.table.name(id).unwrap_or(&self.table.names[0])
    }

    /// The id of the route named `name` (as [`name`](RouteTable::name) gives it): a route
    /// the table holds, or one an [edit](RouteTable::edit) removed, which an edit adding a
    /// route of that name gives back.
    pub fn id_of(&self, name: &str) -> Option<RouteId> {
        (0..self.route_count())
            .map(route_id)
            .find(|id| self.table.name(*id).is_some_and(|n| **n == *name))
    }

    /// The name of a route, shared (for errors that outlive the call).
    pub fn shared_name(&self, id: RouteId) -> Arc<str> {
        Arc::clone(self.table.name(id).unwrap_or(&self.table.names[0]))
    }

    /// The table's address, which names it among the tables alive
    /// ([`Judgement`](crate::Judgement)).
    #[inline]
    pub(crate) fn address(&self) -> usize {
        Arc::as_ptr(&self.table) as *const () as usize
    }

    /// Each route's slow-call threshold as it is now (`route(id).slow_call_threshold()`),
    /// shared, for a reader that needs it at every call (the breaker's admission).
    pub fn slow_thresholds(&self) -> SlowThresholds {
        self.table.slow.clone()
    }

    /// Each route's own timeout as it is now (`route(id).timeout_duration()`), shared, for
    /// a reader that needs it at every call (the timeout layer's admission).
    pub fn route_timeouts(&self) -> RouteTimeouts {
        self.table.timeouts.clone()
    }

    /// Whether this is the process-wide default table ([`RouteTable::default`]), shared by
    /// every layer built without a table of its own; its route cannot be
    /// [replaced](RouteTable::replace_route).
    pub fn is_shared_default(&self) -> bool {
        self.table.shared_default
    }

    /// How many route ids the table has given out: the routes it was built with, the
    /// default one included (so at least 1), and those [added](RouteTable::edit) since,
    /// removed ones included. Every id below it names a route [`route`](RouteTable::route)
    /// reads; a layer that keeps a value per route keeps one for each
    /// ([`per_route`](RouteTable::per_route)).
    #[inline]
    pub fn route_count(&self) -> usize {
        self.table.count()
    }

    /// A value for each route id of this table (see [`route_count`](RouteTable::route_count)),
    /// made by `make`, in a [`PerRoute`] that [`grow`](RouteTable::grow) extends when
    /// routes are added.
    pub fn per_route<T>(&self, mut make: impl FnMut(RouteId) -> T) -> PerRoute<T> {
        let default = make(RouteId::DEFAULT);
        PerRoute::new(default, (1..self.route_count()).map(route_id).map(make))
    }

    /// The value `values` keeps for route `id` ([`per_route`](RouteTable::per_route)),
    /// made by `make` (for it and any route before it without one) when the route was
    /// added to this table after `values` was made; `None` for an id this table never
    /// gave out.
    #[inline]
    pub fn grow<'a, T>(
        &self,
        values: &'a PerRoute<T>,
        id: RouteId,
        make: impl FnMut(RouteId) -> T,
    ) -> Option<&'a T> {
        values.get_or_grow(id, self.route_count(), make)
    }

    /// Gives `values` ([`per_route`](RouteTable::per_route)) a value, made by `make`, for
    /// every route added to this table since it was made.
    pub fn grow_all<T>(&self, values: &PerRoute<T>, make: impl FnMut(RouteId) -> T) {
        let count = self.route_count();
        values.get_or_grow(route_id(count - 1), count, make);
    }

    /// Every route: id, name, settings (as [`route`](RouteTable::route) reads them); the
    /// default first, then the routes the table was built with and those
    /// [added](RouteTable::edit) since, by id. Routes an edit removed are not listed.
    pub fn iter(&self) -> impl Iterator<Item = (RouteId, &str, RouteRef<'_, C>)> {
        let table = &*self.table;
        let built = table.names.iter().zip(&table.routes).enumerate();
        let after = table.routes.len();
        let added =
            (table.edited.added.iter()).map(move |(i, (name, slot))| (after + i, (name, slot)));
        built
            .chain(added)
            .filter(|(_, (_, slot))| !slot.is_removed())
            .map(|(i, (name, slot))| (route_id(i), &**name, slot.read()))
    }
}

impl<C: Classifier> RouteTable<C> {
    /// A table with only a default route. Zero durations in `route` are treated as absent
    /// (use [`builder`](RouteTable::builder) to have them reported as errors).
    pub fn single(route: Route<C>) -> Self {
        Self::single_table(route, false)
    }

    fn single_table(mut route: Route<C>, shared_default: bool) -> Self {
        route.slow_call_duration = nonzero(route.slow_call_duration);
        route.timeout = nonzero(route.timeout);
        RouteTable {
            table: Arc::new(Table {
                id: next_table_id(),
                shared_default,
                names: vec![Arc::from(DEFAULT_ROUTE)],
                slow: SlowThresholds(Durations::new(
                    Route::slow_call_threshold,
                    &route,
                    std::iter::empty(),
                )),
                timeouts: RouteTimeouts(Durations::new(
                    Route::timeout_duration,
                    &route,
                    std::iter::empty(),
                )),
                routes: vec![Slot::new(route)],
                router: None,
                edited: Edited::new(),
            }),
        }
    }

    /// A builder whose default route is `default`.
    pub fn builder(default: Route<C>) -> RouteTableBuilder<C> {
        RouteTableBuilder {
            default,
            routes: Vec::new(),
        }
    }

    /// The route a request belongs to.
    #[inline]
    pub fn resolve<B>(&self, request: &Request<B>) -> RouteId {
        if self.table.matches_nothing() {
            return RouteId::DEFAULT;
        }
        #[cfg(feature = "axum")]
        if let Some(matched) = request.extensions().get::<axum::extract::MatchedPath>() {
            return self.table.resolve(request.method(), matched.as_str());
        }
        self.table.resolve(request.method(), request.uri().path())
    }

    /// The route for a method and path.
    pub fn resolve_path(&self, method: &Method, path: &str) -> RouteId {
        self.table.resolve(method, path)
    }

    /// The route a request belongs to, as the call's `scope` has it: resolved by an outer
    /// layer or an earlier stage of the call, or resolved now and kept in `scope` for the
    /// stages after this one (see [`context`](crate::context)).
    #[inline]
    pub fn resolve_in<B>(&self, request: &Request<B>, scope: &mut Scope) -> RouteId {
        if self.table.matches_nothing() {
            return RouteId::DEFAULT;
        }
        self.scoped_route(request, scope)
    }

    /// [`meta`](RouteTable::meta), as the call's `scope` has it (see
    /// [`resolve_in`](RouteTable::resolve_in)).
    #[inline]
    pub fn meta_in<B>(&self, request: &Request<B>, scope: &mut Scope) -> CallMeta {
        let (route, idempotent) = self.scoped_meta(request, scope, |route| {
            self.route(route)
                .idempotent_override()
                .unwrap_or_else(|| is_idempotent(request.method(), request.headers()))
        });
        CallMeta {
            route,
            method: request.method().clone(),
            idempotent,
        }
    }

    /// Reads what the layers need to know about a request, once, before it is sent.
    #[inline]
    pub fn meta<B>(&self, request: &Request<B>) -> CallMeta {
        let route = self.resolve(request);
        let idempotent = self
            .route(route)
            .idempotent_override()
            .unwrap_or_else(|| is_idempotent(request.method(), request.headers()));
        CallMeta {
            route,
            method: request.method().clone(),
            idempotent,
        }
    }
}

/// What the layers keep about a request while it is in flight: its route, method and
/// whether it is safe to repeat. Cloning a standard method does not allocate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallMeta {
    route: RouteId,
    method: Method,
    idempotent: bool,
}

impl CallMeta {
    /// Facts for a call on `route` (for tests and custom layers).
    pub fn new(route: RouteId, method: Method, idempotent: bool) -> Self {
        CallMeta {
            route,
            method,
            idempotent,
        }
    }

    /// The route.
    pub fn route(&self) -> RouteId {
        self.route
    }

    /// The method.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// Whether the request is safe to repeat.
    pub fn idempotent(&self) -> bool {
        self.idempotent
    }

    /// The classifier's view of this call.
    #[inline]
    pub fn call<'a, C: Classifier>(&'a self, table: &'a RouteTable<C>) -> Call<'a> {
        Call::new(
            self.route,
            table.name(self.route),
            &self.method,
            self.idempotent,
        )
    }
}

/// Builds a [`RouteTable`], checking every route.
#[derive(Debug)]
pub struct RouteTableBuilder<C> {
    default: Route<C>,
    routes: Vec<(String, Route<C>)>,
}

impl<C: Classifier> RouteTableBuilder<C> {
    /// Adds a route: `"GET /users/{id}"`, `"/users/{id}"` (any method), or a gRPC path
    /// `"/pkg.Service/Method"`.
    pub fn route(mut self, key: impl Into<String>, route: Route<C>) -> Self {
        self.routes.push((key.into(), route));
        self
    }

    /// Checks every route and builds the table. Problems are reported together, each under
    /// `routes["<key>"]` (or `default_route`).
    pub fn build(self) -> Result<RouteTable<C>, ConfigError> {
        let mut v = Validator::new();
        self.default.validate("default_route", &mut v);
        if self.routes.len() >= usize::from(u16::MAX) {
            v.fail(
                "routes",
                format!("at most {} routes, got {}", u16::MAX - 1, self.routes.len()),
            );
            return v.finish(RouteTable::single(self.default));
        }

        let mut names: Vec<Arc<str>> = vec![Arc::from(DEFAULT_ROUTE)];
        let mut routes = vec![self.default];
        let mut paths = Paths::default();
        for (key, mut route) in self.routes {
            let path_name = format!("routes[{key:?}]");
            route.validate(&path_name, &mut v);
            route.inherit(&routes[0]);
            if let Err(rule) = paths.add(route_id(routes.len()), &key) {
                v.fail(path_name, rule);
                continue;
            }
            names.push(Arc::from(key.as_str()));
            routes.push(route);
        }

        let table = Table {
            id: next_table_id(),
            shared_default: false,
            names,
            router: paths.build(&mut v),
            slow: SlowThresholds(Durations::new(
                Route::slow_call_threshold,
                &routes[0],
                routes[1..].iter(),
            )),
            timeouts: RouteTimeouts(Durations::new(
                Route::timeout_duration,
                &routes[0],
                routes[1..].iter(),
            )),
            routes: routes.into_iter().map(Slot::new).collect(),
            edited: Edited::new(),
        };
        v.finish(RouteTable {
            table: Arc::new(table),
        })
    }
}

/// The id of the route at `index` (a table holds fewer than `u16::MAX` routes).
fn route_id(index: usize) -> RouteId {
    RouteId(u16::try_from(index).unwrap_or(u16::MAX))
}

/// A table's route keys by path, with the routes each path's methods go to: what its
/// [`Matcher`] is built from.
#[derive(Default)]
struct Paths {
    /// Paths in the order their first route was added, with their candidates.
    paths: Vec<(String, Candidates)>,
    /// Where each path is in `paths`.
    index: std::collections::HashMap<String, usize>,
}

impl Paths {
    /// Adds route `id`, written `key`; the rule the key breaks, if any.
    fn add(&mut self, id: RouteId, key: &str) -> Result<(), String> {
        let (method, path) = parse_key(key)?;
        let i = match self.index.get(&path) {
            Some(i) => *i,
            None => {
                self.index.insert(path.clone(), self.paths.len());
                self.paths.push((path, Candidates::default()));
                self.paths.len() - 1
            }
        };
        let slot = &mut self.paths[i].1;
        let duplicate = match method {
            None => slot.any_method.replace(id).is_some(),
            Some(m) => {
                let dup = slot.by_method.iter().any(|(x, _)| *x == m);
                slot.by_method.push((m, id));
                dup
            }
        };
        if duplicate {
            return Err("route is listed twice".into());
        }
        Ok(())
    }

    /// The matcher of these routes (`None` when there are none), the paths it cannot
    /// match reported to `v`.
    fn build(self, v: &mut Validator) -> Option<Matcher> {
        if self.paths.is_empty() {
            return None;
        }
        let mut router = matchit::Router::new();
        for (path, candidates) in self.paths {
            if let Err(e) = router.insert(path.as_str(), candidates) {
                v.fail(
                    format!("routes[{path:?}]"),
                    format!("cannot be matched: {e}"),
                );
            }
        }
        Some(Matcher { router })
    }
}

/// Zero durations as absent.
fn nonzero(d: Option<Option<Duration>>) -> Option<Option<Duration>> {
    d.map(|d| d.filter(|d| !d.is_zero()))
}

fn parse_key(key: &str) -> Result<(Option<Method>, String), String> {
    let key = key.trim();
    let (method, path) = match key.split_once(char::is_whitespace) {
        Some((m, p)) => {
            let m = Method::from_bytes(m.as_bytes())
                .map_err(|_| format!("`{m}` is not an HTTP method"))?;
            (Some(m), p.trim())
        }
        None => (None, key),
    };
    if !path.starts_with('/') {
        return Err(format!("path must start with `/`, got `{path}`"));
    }
    Ok((method, path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::HttpClassifier;
    use crate::outcome::Outcome;
    use http::StatusCode;

    fn at<'a>(table: &'a RouteTable, method: Method, path: &str) -> RouteRef<'a> {
        table.route(table.resolve_path(&method, path))
    }

    #[test]
    fn a_replaced_route_is_read_by_every_clone_and_a_held_one_stays_as_it_was() {
        let ms = Duration::from_millis;
        let table = RouteTable::builder(Route::default())
            .route("GET /a", Route::default().retry(false).timeout(ms(100)))
            .build()
            .unwrap();
        let stage = table.clone();
        let a = table.resolve_path(&Method::GET, "/a");
        let held = stage.route(a);
        assert!(
            table.replace_route(
                a,
                Route::new(StandardClassifier::new().count_throttling(true))
                    .slow_call_duration(ms(20))
                    .timeout(Duration::ZERO)
            )
        );
        // A reader that held the route finishes with what it read.
        assert!(!held.retry_enabled());
        assert_eq!(held.timeout_duration(), Some(ms(100)));
        drop(held);
        for t in [&table, &stage] {
            let now = t.route(a);
            assert!(now.retry_enabled());
            assert_eq!(now.slow_call_threshold(), Some(ms(20)));
            assert_eq!(t.slow_thresholds().get(a), Some(ms(20)));
            assert_eq!(now.timeout_duration(), None, "a zero timeout is none");
            assert_eq!(
                now.classifier()
                    .http_rules()
                    .outcome(StatusCode::TOO_MANY_REQUESTS),
                Outcome::Failure
            );
        }
        let listed: Vec<_> = stage
            .iter()
            .map(|(_, n, r)| (n.to_owned(), r.retry_enabled()))
            .collect();
        assert_eq!(
            listed,
            [("default".to_owned(), true), ("GET /a".to_owned(), true)]
        );
        // A reader holding replaced settings finishes with them across the next swap.
        let held = stage.route(a);
        assert!(table.replace_route(a, Route::default().retry(false)));
        assert!(held.retry_enabled());
        assert_eq!(held.slow_call_threshold(), Some(ms(20)));
        drop(held);
        assert!(!stage.route(a).retry_enabled());
        assert_eq!(stage.slow_thresholds().get(a), None, "the second swap's");
        // The route keeps its id and what it matches; the default route is untouched.
        assert_eq!(stage.resolve_path(&Method::GET, "/a"), a);
        assert_eq!(stage.route(RouteId::DEFAULT).slow_call_threshold(), None);
        // An id the table does not hold changes nothing.
        assert!(!table.replace_route(RouteId(7), Route::default().retry(false)));
        assert_eq!(
            stage.slow_thresholds().get(RouteId(7)),
            None,
            "the default route's"
        );
        assert!(
            stage.route(RouteId(7)).retry_enabled(),
            "read as the default route"
        );
        // Nor does a change to the table every layer without one of its own shares.
        let shared = RouteTable::default();
        assert!(shared.is_shared_default() && !table.is_shared_default());
        assert!(!shared.replace_route(RouteId::DEFAULT, Route::default().retry(false)));
        assert!(
            RouteTable::default()
                .route(RouteId::DEFAULT)
                .retry_enabled()
        );
        assert!(!RouteTable::single(Route::default()).is_shared_default());
    }

    #[test]
    fn named_routes_inherit_every_setting_they_do_not_set() {
        let ms = Duration::from_millis;
        let table = RouteTable::builder(
            Route::new(
                StandardClassifier::new()
                    .http(HttpClassifier::new().failure(404).retryable(404, true))
                    .count_throttling(true)
                    .protocol(crate::Protocol::Http),
            )
            .slow_call_duration(ms(250))
            .timeout(ms(800))
            .retry(false)
            .idempotent(true),
        )
        // Sets nothing: takes everything.
        .route("GET /a", Route::default())
        // Sets each thing itself, some to none.
        .route(
            "GET /b",
            Route::new(
                StandardClassifier::new()
                    .http(HttpClassifier::new().success(404))
                    .count_throttling(false)
                    .protocol(crate::Protocol::Grpc),
            )
            .no_slow_call_duration()
            .no_timeout()
            .retry(true)
            .idempotent_by_method(),
        )
        .build()
        .unwrap();

        let a = at(&table, Method::GET, "/a");
        assert_eq!(a.slow_call_threshold(), Some(ms(250)));
        assert_eq!(a.timeout_duration(), Some(ms(800)));
        assert!(!a.retry_enabled());
        assert_eq!(a.idempotent_override(), Some(true));
        assert_eq!(
            a.inherited(),
            Inherited {
                slow_call_duration: true,
                timeout: true,
                retry: true,
                idempotent: true
            }
        );
        assert!(!a.sets_timeout() && !a.sets_retry());
        let http = a.classifier().http_rules();
        assert_eq!(http.outcome(StatusCode::NOT_FOUND), Outcome::Failure);
        assert_eq!(
            http.outcome(StatusCode::TOO_MANY_REQUESTS),
            Outcome::Failure
        );
        assert_eq!(
            a.classifier()
                .grpc_rules()
                .outcome(crate::Code::ResourceExhausted),
            Outcome::Failure
        );
        assert_eq!(
            a.classifier().protocol_setting(),
            Some(crate::Protocol::Http)
        );

        let b = at(&table, Method::GET, "/b");
        assert_eq!(b.slow_call_threshold(), None);
        assert_eq!(b.timeout_duration(), None);
        assert!(b.retry_enabled());
        assert_eq!(b.idempotent_override(), None);
        assert_eq!(b.inherited(), Inherited::default());
        assert!(b.sets_slow_call_duration() && b.sets_timeout() && b.sets_idempotent());
        let http = b.classifier().http_rules();
        assert_eq!(http.outcome(StatusCode::NOT_FOUND), Outcome::Success);
        assert_eq!(
            http.outcome(StatusCode::TOO_MANY_REQUESTS),
            Outcome::Ignored
        );
        assert_eq!(
            b.classifier().protocol_setting(),
            Some(crate::Protocol::Grpc)
        );

        // Requests matching no route get the default route itself.
        let other = at(&table, Method::GET, "/elsewhere");
        assert_eq!(other.slow_call_threshold(), Some(ms(250)));
        assert!(!other.retry_enabled());
    }

    #[test]
    fn a_default_route_that_sets_nothing_leaves_named_routes_at_the_built_in_defaults() {
        let table = RouteTable::builder(Route::default())
            .route("GET /a", Route::default())
            .build()
            .unwrap();
        let a = at(&table, Method::GET, "/a");
        assert_eq!(a.slow_call_threshold(), None);
        assert_eq!(a.timeout_duration(), None);
        assert!(a.retry_enabled());
        assert_eq!(a.idempotent_override(), None);
        assert_eq!(a.inherited(), Inherited::default());
    }

    fn req(method: Method, path: &str) -> Request<()> {
        Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap()
    }

    /// Two tables that map the same paths to different routes.
    fn two_tables() -> [RouteTable; 2] {
        let a = RouteTable::builder(Route::default())
            .route("GET /users/{id}", Route::default())
            .route("/orders/{id}", Route::default())
            .route("POST /users", Route::default())
            .build()
            .unwrap();
        let b = RouteTable::builder(Route::default())
            .route("/orders/{id}", Route::default())
            .route("/users/{id}", Route::default())
            .build()
            .unwrap();
        [a, b]
    }

    fn matched(table: &RouteTable, method: &Method, path: &str) -> RouteId {
        table
            .table
            .router
            .as_ref()
            .map_or(RouteId::DEFAULT, |m| m.lookup(method, path))
    }

    proptest::proptest! {
        /// Whatever the order of requests and tables, a resolution read from a scope —
        /// the call's own, or the one current while an outer layer hands the call on — is
        /// the one matching gives.
        #[test]
        fn scoped_resolutions_are_the_matched_ones(
            calls in proptest::collection::vec((0usize..2, 0usize..4, 0usize..7, 0usize..2), 1..300)
        ) {
            let tables = two_tables();
            let methods = [
                Method::GET,
                Method::POST,
                Method::DELETE,
                Method::from_bytes(b"PURGE").unwrap(),
            ];
            let long = format!("/users/{}", "x".repeat(200));
            let paths = ["/users/1", "/users/2", "/orders/9", "/users", "/other", "/users/1/", long.as_str()];
            for (t, m, p, o) in calls {
                let (table, method, path) = (&tables[t], &methods[m], paths[p]);
                let expected = matched(table, method, path);
                let request = req(method.clone(), path);
                let mut outer = Scope::new();
                tables[o].resolve_in(&request, &mut outer);
                let _entered = outer.enter();
                let mut scope = Scope::new();
                // The first stage of the inner layer, then a second one reading its scope.
                proptest::prop_assert_eq!(table.resolve_in(&request, &mut scope), expected);
                proptest::prop_assert_eq!(table.meta_in(&request, &mut scope).route(), expected);
                proptest::prop_assert_eq!(table.resolve_path(method, path), expected);
                proptest::prop_assert_eq!(table.resolve(&request), expected);
            }
        }
    }

    #[test]
    fn a_new_table_is_never_answered_for_by_an_old_one() {
        let old = RouteTable::builder(Route::default())
            .route("GET /users/{id}", Route::default())
            .build()
            .unwrap();
        assert_eq!(old.resolve_path(&Method::GET, "/users/7").index(), 1);
        drop(old);
        // Built after the old one is gone (possibly at its address): "/users/{id}" is its
        // second route now.
        let new = RouteTable::builder(Route::default())
            .route("/health", Route::default())
            .route("GET /users/{id}", Route::default())
            .build()
            .unwrap();
        assert_eq!(new.resolve_path(&Method::GET, "/users/7").index(), 2);
        assert_eq!(
            new.resolve_path(&Method::POST, "/users/7"),
            RouteId::DEFAULT
        );
        assert_eq!(new.resolve_path(&Method::GET, "/users/7").index(), 2);
    }

    #[test]
    fn matches_method_path_and_grpc() {
        let table = RouteTable::builder(Route::default())
            .route(
                "GET /users/{id}",
                Route::default().timeout(Duration::from_millis(100)),
            )
            .route(
                "/users/{id}",
                Route::default().timeout(Duration::from_millis(200)),
            )
            .route(
                "/pkg.Fraud/Check",
                Route::default().slow_call_duration(Duration::from_millis(50)),
            )
            .route("/pkg.Ledger/{*method}", Route::default().retry(false))
            .build()
            .unwrap();
        let get = table.resolve(&req(Method::GET, "/users/42"));
        let put = table.resolve(&req(Method::PUT, "/users/42"));
        assert_eq!(table.name(get), "GET /users/{id}");
        assert_eq!(table.name(put), "/users/{id}");
        assert_eq!(
            table.route(get).timeout_duration(),
            Some(Duration::from_millis(100))
        );
        let grpc = table.resolve(&req(Method::POST, "/pkg.Fraud/Check"));
        assert_eq!(
            table.route(grpc).slow_call_threshold(),
            Some(Duration::from_millis(50))
        );
        let ledger = table.resolve(&req(Method::POST, "/pkg.Ledger/Post"));
        assert!(!table.route(ledger).retry_enabled());
        assert_eq!(table.resolve(&req(Method::GET, "/nope")), RouteId::DEFAULT);
        assert_eq!(table.name(RouteId::DEFAULT), "default");
        // A template string (what axum's MatchedPath carries) matches its own route.
        assert_eq!(table.resolve_path(&Method::GET, "/users/{id}"), get);
        assert_eq!(table.iter().count(), 5);
    }

    #[test]
    fn idempotency_override_in_meta() {
        let table = RouteTable::builder(Route::default())
            .route("POST /charge", Route::default().idempotent(true))
            .route("GET /side-effect", Route::default().idempotent(false))
            .build()
            .unwrap();
        assert!(table.meta(&req(Method::POST, "/charge")).idempotent());
        assert!(!table.meta(&req(Method::GET, "/side-effect")).idempotent());
        assert!(!table.meta(&req(Method::POST, "/other")).idempotent());
        assert!(table.meta(&req(Method::GET, "/other")).idempotent());
    }

    #[test]
    fn invalid_tables_report_every_problem() {
        let err = RouteTable::builder(Route::new(HttpClassifier::new()).timeout(Duration::ZERO))
            .route("users", Route::new(HttpClassifier::new()))
            .route("FROB LY /x", Route::new(HttpClassifier::new()))
            .route(
                "GET /a",
                Route::new(HttpClassifier::new()).slow_call_duration(Duration::ZERO),
            )
            .route("GET /a", Route::new(HttpClassifier::new()))
            .build()
            .unwrap_err();
        let paths: Vec<_> = err.problems().iter().map(|p| p.path().to_owned()).collect();
        assert_eq!(
            paths,
            vec![
                "default_route.timeout",
                "routes[\"users\"]",
                "routes[\"FROB LY /x\"]",
                "routes[\"GET /a\"].slow_call_duration",
                "routes[\"GET /a\"]",
            ]
        );
        assert!(err.problems()[1].rule().contains("must start with `/`"));
        assert!(err.problems()[4].rule().contains("twice"));
    }

    #[test]
    fn conflicting_templates_are_errors() {
        let err = RouteTable::builder(Route::default())
            .route("/a/{x}", Route::default())
            .route("/a/{y}", Route::default())
            .build()
            .unwrap_err();
        assert!(
            err.problems()[0].rule().starts_with("cannot be matched"),
            "{err}"
        );
    }

    fn listed(table: &RouteTable) -> Vec<(usize, String)> {
        table
            .iter()
            .map(|(id, name, _)| (id.index(), name.to_owned()))
            .collect()
    }

    #[test]
    fn an_edit_adds_removes_and_revives_routes_under_ids_it_never_reuses() {
        let ms = Duration::from_millis;
        let table = RouteTable::builder(Route::default())
            .route("GET /users/{id}", Route::default().timeout(ms(100)))
            .route("/orders/{id}", Route::default())
            .build()
            .unwrap();
        let layer = table.clone();
        let users = table.resolve_path(&Method::GET, "/users/1");
        let orders = table.resolve_path(&Method::PUT, "/orders/1");
        let thresholds = table.slow_thresholds();
        let timeouts = table.per_route(|id| table.route(id).timeout_duration());
        assert_eq!(table.route_count(), 3);

        // Add two, remove one: ids go on from the last one; the removed one keeps its own.
        let mut edit = table.edit();
        edit.add("POST /orders", Route::default().slow_call_duration(ms(40)))
            .add("/health", Route::default().timeout(ms(5)))
            .remove(users);
        let added = edit.commit().unwrap();
        assert_eq!(
            added.iter().map(|id| id.index()).collect::<Vec<_>>(),
            [3, 4]
        );
        let (post, health) = (added[0], added[1]);
        for t in [&table, &layer] {
            assert_eq!(t.resolve_path(&Method::POST, "/orders"), post);
            assert_eq!(t.resolve(&req(Method::GET, "/health")), health);
            assert_eq!(
                t.resolve_path(&Method::GET, "/users/1"),
                RouteId::DEFAULT,
                "a removed route matches nothing"
            );
            assert_eq!(t.resolve_path(&Method::PUT, "/orders/1"), orders);
            let mut scope = Scope::new();
            assert_eq!(
                t.resolve_in(&req(Method::POST, "/orders"), &mut scope),
                post
            );
        }
        assert_eq!(table.name(post), "POST /orders");
        assert_eq!(&*table.shared_name(health), "/health");
        assert_eq!(table.route(health).timeout_duration(), Some(ms(5)));
        assert_eq!(thresholds.get(post), Some(ms(40)), "the breakers' copy too");
        // The removed route is read by id (calls already on it), and no longer listed.
        assert_eq!(table.name(users), "GET /users/{id}");
        assert_eq!(table.route(users).timeout_duration(), Some(ms(100)));
        assert_eq!(table.route_count(), 5);
        assert_eq!(
            listed(&table),
            [
                (0, "default".to_owned()),
                (2, "/orders/{id}".to_owned()),
                (3, "POST /orders".to_owned()),
                (4, "/health".to_owned())
            ]
        );
        // A layer's per-route values grow to the new routes, made once.
        assert_eq!(timeouts.get(health), None);
        assert_eq!(
            table.grow(&timeouts, health, |id| table.route(id).timeout_duration()),
            Some(&Some(ms(5)))
        );
        assert_eq!(timeouts.len(), 5);
        assert_eq!(
            table.grow(&timeouts, route_id(5), |_| None),
            None,
            "never given out"
        );

        // Added back under its name: its old id, its new settings.
        let mut edit = table.edit();
        edit.add("GET /users/{id}", Route::default().retry(false))
            .remove(health);
        assert_eq!(edit.commit().unwrap(), [users]);
        assert_eq!(layer.resolve_path(&Method::GET, "/users/9"), users);
        assert!(!layer.route(users).retry_enabled());
        assert_eq!(layer.route(users).timeout_duration(), None);
        assert_eq!(
            layer.resolve_path(&Method::GET, "/health"),
            RouteId::DEFAULT
        );
        assert_eq!(table.route_count(), 5, "no id was given out");
        assert_eq!(
            listed(&layer),
            [
                (0, "default".to_owned()),
                (1, "GET /users/{id}".to_owned()),
                (2, "/orders/{id}".to_owned()),
                (3, "POST /orders".to_owned())
            ]
        );
        // A replaced added route reads its new settings everywhere.
        assert!(table.replace_route(post, Route::default().slow_call_duration(ms(80))));
        assert_eq!(thresholds.get(post), Some(ms(80)));
        assert_eq!(layer.route(post).slow_call_threshold(), Some(ms(80)));

        // Every named route removed: requests go to the default route again.
        let mut edit = table.edit();
        edit.remove(users).remove(orders).remove(post);
        assert_eq!(edit.commit().unwrap(), []);
        for (m, p) in [(Method::GET, "/users/1"), (Method::POST, "/orders")] {
            assert_eq!(layer.resolve(&req(m, p)), RouteId::DEFAULT);
        }
        assert_eq!(listed(&layer), [(0, "default".to_owned())]);
    }

    #[test]
    fn a_table_built_with_one_route_gains_a_matcher() {
        let table = RouteTable::single(Route::default());
        assert_eq!(table.resolve_path(&Method::GET, "/a"), RouteId::DEFAULT);
        let mut edit = table.edit();
        edit.add("GET /a", Route::default());
        let a = edit.commit().unwrap()[0];
        assert_eq!(a.index(), 1);
        assert_eq!(table.resolve(&req(Method::GET, "/a")), a);
        let mut scope = Scope::new();
        assert_eq!(table.resolve_in(&req(Method::GET, "/a"), &mut scope), a);
        assert_eq!(table.meta(&req(Method::GET, "/a")).route(), a);
        assert_eq!(table.resolve_path(&Method::POST, "/a"), RouteId::DEFAULT);
    }

    #[test]
    fn an_edit_with_any_problem_changes_nothing_and_reports_every_one() {
        let table = RouteTable::builder(Route::default())
            .route("GET /a/{x}", Route::default())
            .route("/b", Route::default())
            .build()
            .unwrap();
        let a = table.resolve_path(&Method::GET, "/a/1");
        let before = listed(&table);
        let mut edit = table.edit();
        edit.add("GET /a/{x}", Route::default())
            .add("nope", Route::default())
            .add("/c/{y}", Route::default())
            .add("/c/{z}", Route::default())
            .add("/d", Route::default().timeout(Duration::ZERO))
            .add("/e", Route::default())
            .replace(route_id(9), Route::default())
            .replace(a, Route::default().retry(false))
            .remove(RouteId::DEFAULT)
            .remove(route_id(12));
        let err = edit.commit().unwrap_err();
        let paths: Vec<_> = err.problems().iter().map(|p| p.path().to_owned()).collect();
        assert_eq!(
            paths,
            [
                "routes[9]",
                "routes[\"default\"]",
                "routes[12]",
                "routes[\"GET /a/{x}\"]",
                "routes[\"/d\"].timeout",
                "routes[\"nope\"]",
                "routes[\"/c/{z}\"]",
            ],
            "{err}"
        );
        assert!(err.problems()[3].rule().contains("twice"), "{err}");
        assert!(
            err.problems()[6].rule().starts_with("cannot be matched"),
            "{err}"
        );
        // Nothing was applied: not the valid additions, nor the replacement.
        assert_eq!(listed(&table), before);
        assert_eq!(table.route_count(), 3);
        assert!(table.route(a).retry_enabled());
        assert_eq!(table.resolve_path(&Method::GET, "/e"), RouteId::DEFAULT);

        // Nor is the table every layer without one of its own shares ever edited.
        let shared = RouteTable::default();
        let mut edit = shared.edit();
        edit.add("/x", Route::default());
        assert_eq!(edit.commit().unwrap_err().problems()[0].path(), "routes");
        assert_eq!(RouteTable::default().route_count(), 1);
        // An edit dropped without a commit applies nothing.
        let mut edit = table.edit();
        edit.add("/f", Route::default());
        drop(edit);
        assert_eq!(table.resolve_path(&Method::GET, "/f"), RouteId::DEFAULT);
    }

    #[test]
    fn readers_during_edits_see_a_route_of_the_request_or_the_default() {
        // Calls resolve and read routes on other threads while edits add, remove and add
        // back routes: every id read is the default route's or one whose key matches the
        // request, and its settings are those of a route of that name.
        let table = RouteTable::builder(Route::default())
            .route("GET /keep", Route::default())
            .build()
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (table, stop) = (table.clone(), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut seen = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        for n in 0..8 {
                            let path = format!("/r{n}");
                            let id = table.resolve(&req(Method::GET, &path));
                            if id != RouteId::DEFAULT {
                                assert_eq!(table.name(id), format!("GET {path}"));
                                assert_eq!(
                                    table.route(id).timeout_duration(),
                                    Some(Duration::from_millis(n + 1))
                                );
                                seen += 1;
                            }
                        }
                        let keep = table.resolve_path(&Method::GET, "/keep");
                        assert_eq!(table.name(keep), "GET /keep");
                    }
                    seen
                })
            })
            .collect();
        for round in 0..200u64 {
            let mut edit = table.edit();
            for n in 0..8u64 {
                let id = table.resolve_path(&Method::GET, &format!("/r{n}"));
                if (round + n) % 3 == 0 && id != RouteId::DEFAULT {
                    edit.remove(id);
                } else if id == RouteId::DEFAULT {
                    edit.add(
                        format!("GET /r{n}"),
                        Route::default().timeout(Duration::from_millis(n + 1)),
                    );
                }
            }
            edit.commit().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        let seen: usize = readers.into_iter().map(|r| r.join().unwrap()).sum();
        assert!(seen > 0, "the readers saw added routes");
        assert_eq!(table.route_count(), 10, "each name took one id, once");
    }

    #[test]
    fn single_tables_skip_matching() {
        let t = RouteTable::default();
        assert_eq!(t.resolve(&req(Method::GET, "/anything")), RouteId::DEFAULT);
        let meta = t.meta(&req(Method::DELETE, "/x"));
        let call = meta.call(&t);
        assert_eq!(call.route_name(), "default");
        assert_eq!(call.method(), Some(&Method::DELETE));
        assert!(call.idempotent());
    }
}
