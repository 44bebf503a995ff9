//! Reload: new settings for a running [`Policy`], without forgetting its breaker.
//!
//! Rebuilding a policy to change a threshold starts its breaker over: an OPEN breaker comes
//! back CLOSED and lets calls through to a dependency known to be failing, and the window of
//! recent calls is lost. [`Policy::reload`] instead applies a policy built anew (from a
//! changed file, or in code) to the running one, through the state its calls read:
//!
//! | what | in place | how |
//! |---|---|---|
//! | breaker thresholds, minimum calls, consecutive failures, open wait (jitter, growth, cap), probes, half-open wait, `on_close`, `count_overloaded` | yes, when the breaker's name, store and keying are the same | the breaker's state machine takes the new settings and keeps its state, generation, window and trips; an open wait already running keeps its end. A keyed breaker's dependency-wide breaker (`breaker.spread`) takes them too |
//! | the same, for a breaker whose state is on Redis | yes | the store swaps the arguments every call sends the fleet's script, the probe budget and waits the replica reads, the jitter of its next opening and the fallback breaker's settings; the connection, the scope and the fleet's state are kept. Each replica sends its own settings: reload every replica |
//! | the breaker's window (kind or size) | no | its calls cannot move to another window: reported, the rest of the breaker's settings still apply |
//! | the timeout of routes without one | yes | the timeout stage reads it per call ([`Timeouts`]) |
//! | a fixed `max_concurrency` | yes, without a recovery ramp | [`LimitHandle::reconfigure`](fusebox_limit::LimitHandle::reconfigure) |
//! | an adaptive limit's settings (bounds, ratios, Vegas' alpha, beta, probing), or another adaptive algorithm (AIMD ↔ Vegas) | yes | the algorithm takes the new settings under the lock its samples already take, keeping its current limit (within the new bounds), its measurements and the congestion episode; AIMD taken anew starts from the limit in force, Vegas first measures the no-load latency at its minimum, as when built |
//! | the queue's `max_waiters` and `max_wait` | yes | two atomics the limit reads where a call queues; waiters already queued keep their places and deadlines |
//! | a fixed limit made adaptive, or an adaptive one fixed; a queue added or removed | yes, without a recovery ramp | whether the limit is adaptive, and whether it has a queue, are state the call path reads per call ([`LimitHandle::reconfigure`](fusebox_limit::LimitHandle::reconfigure)): a limit made AIMD starts from the limit in force, one made Vegas first measures the no-load latency at its minimum (as when built); an adaptive call's sample is dropped once the limit is fixed; a limit whose setting is unchanged keeps its value (a queue-only change leaves a value set by hand or by a ramp); a removed queue sheds the next calls that find the limit full, and its waiters keep their places and deadlines. Once a limit has had a queue, its releases always look for waiters (one atomic read-modify-write each), so that one added while a release runs loses no wake-up (checked by the limit's loom model) |
//! | the retry budget's ratio, floor (`min_retries_per_second`), cut-off threshold and minimum calls; `max_attempts`, backoff (`base_delay`, `max_delay`), `max_retry_after`, `max_replay_body_bytes`, `hedge_delay` | yes | the layer's settings are one `arc-swap` cell, loaded once where a call reads them; the budget's are atomics; the window's counts are kept. A call in flight reads the new settings at its next retry or hedge |
//! | the retry layer's name, the budget's window (`ttl`), the jitter's seed | no | the name labels every series; the budget's buckets are cut from the window; the jitter source is seeded once |
//! | a route's classifier rules, slow-call threshold, timeout, `retry` and `idempotent` (of the default route too, with what the named routes inherit from it) | yes, for the routes both tables hold | every stage reads one route table, shared: each route the new table holds under the same name takes the new route's settings in one swap ([`RouteTable::replace_route`]); the route keeps its id, so calls already resolved to it stay on it. A policy built without a table of its own reads the process-wide default one ([`RouteTable::default`]), which is never replaced: reported as needing a rebuild |
//! | routes added or removed (a route's matcher is its name: a changed matcher is one route removed and another added) | yes, unless an added route's timeout needs the timeout layer the running policy does not have | one edit of the shared table ([`RouteTable::edit`]): an added route takes the next route id and matches its requests from the next call on; a removed one matches nothing from then on and keeps its id and settings, which calls already on it read; a route added back under a name the table held takes its id back, with its new settings. Ids never go to another route, so what the stages keep per route id (a call's resolution, a keyed breaker's keys by route, each route's series) stays right; each stage gives an added route its per-route values when a call first comes on it (or on a route added after it) |
//! | anything else: layers added or removed, the body timeout, deadline propagation, the limit's name, release, `retry_after` and `log_step`, keying, the keys' spread (`breaker.spread`), store, the routes a fallback names (a fallback on all routes serves the routes a reload adds), recovery ramp | no | reported as needing a rebuild |
//!
//! What applies does so from the next call on; calls in flight finish under the settings
//! they started with, except for their route's settings, which a call reads where it
//! needs them: an answer that comes after the reload is classified by the new rules, while
//! the slow-call instant a call was stamped with at admission stays (its duration, for the
//! histogram, is then counted from the new threshold, off by the change for that call
//! only). Nothing applied can fail a call. The [`Reload`] report says what
//! changed (each setting, from and to), what was applied in place, what could not be and
//! why, and what was kept (the breaker's state). [`Policy::diff`] gives the same report
//! without changing anything: what a reload would do. Each route's classifier is compared
//! by its `Debug` form: the standard classifier's shows every rule a file can write (a
//! change is reported and applied); a classifier made from a closure shows none of what
//! the closure decides, so a change inside one is not seen (it is applied with the rest of
//! the route when another of the route's settings changes).
//!
//! A route table given to two policies is shared by them: a reload of one changes the
//! routes of both. Build each policy's table on its own to reload them apart.
//!
//! A policy file is reloaded with `fusebox::config::PolicyFile::reload`
//! (features `toml` or `yaml`): an invalid file changes nothing and returns every problem,
//! as `fusebox check` reports them.
//!
//! ```
//! use fusebox::{CircuitBreakerConfig, Policy};
//! use fusebox::breaker::State;
//!
//! let running = Policy::builder("payments")
//!     .circuit_breaker(CircuitBreakerConfig::builder().failure_rate_threshold(50))
//!     .build()?;
//! running.breaker_handle().expect("a breaker").force_open();
//!
//! let edited = Policy::builder("payments")
//!     .circuit_breaker(CircuitBreakerConfig::builder().failure_rate_threshold(25))
//!     .build()?;
//! let report = running.reload(&edited);
//! assert!(report.is_complete(), "{report}");
//! assert_eq!(report.changes[0].path, "breaker.failure_rate_threshold");
//! let breaker = running.breaker_handle().expect("a breaker");
//! assert_eq!(breaker.state(), State::ForcedOpen, "the state is kept");
//! assert_eq!(breaker.config().map(|c| c.failure_rate_threshold()), Some(25));
//! # Ok::<(), fusebox::ConfigError>(())
//! ```

use crate::policy::{BreakerLayer, BreakerStore, Policy, Shared};
use fusebox_breaker::{CircuitBreakerConfig, Reconfigure};
use fusebox_classify::{Classifier, Route, RouteTable};
use fusebox_limit::Limit;
use fusebox_timeout::{TimeoutConfig, Timeouts};
use std::fmt;
use std::sync::Arc;

/// What a reload of one policy changed, or would change ([`Policy::reload`],
/// [`Policy::diff`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Reload {
    /// The policy's name.
    pub policy: String,
    /// Every setting that differs, in the order of the policy's layers.
    pub changes: Vec<Change>,
    /// What the reload kept of the running policy (its breaker's state and window).
    pub kept: Vec<String>,
    /// Whether the changes were applied (a reload) or only found (a diff).
    pub applied: bool,
}

impl Reload {
    /// Whether every change was (or would be) applied in place: nothing needs a rebuild.
    pub fn is_complete(&self) -> bool {
        self.changes.iter().all(|c| c.effect == Effect::InPlace)
    }

    /// Whether anything differs.
    pub fn has_changes(&self) -> bool {
        !self.changes.is_empty()
    }

    /// The changes that cannot be applied in place.
    pub fn needs_rebuild(&self) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter(|c| c.effect != Effect::InPlace)
    }
}

impl fmt::Display for Reload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.changes.is_empty() {
            writeln!(f, "policy {:?}: no changes", self.policy)?;
        } else {
            writeln!(
                f,
                "policy {:?}: {} change{}{}",
                self.policy,
                self.changes.len(),
                if self.changes.len() == 1 { "" } else { "s" },
                match (self.is_complete(), self.applied) {
                    (true, true) => ", all applied in place",
                    (true, false) => ", all can be applied in place",
                    (false, true) => ", some need a rebuild",
                    (false, false) => ", some would need a rebuild",
                }
            )?;
        }
        for c in &self.changes {
            writeln!(f, "  {c}")?;
        }
        for k in &self.kept {
            writeln!(
                f,
                "  {}: {k}",
                if self.applied { "kept" } else { "would keep" }
            )?;
        }
        Ok(())
    }
}

/// One setting that differs.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Change {
    /// The setting, as a policy file names it (`breaker.failure_rate_threshold`,
    /// `routes["GET /users/{id}"].timeout`).
    pub path: String,
    /// The running value.
    pub from: String,
    /// The new value.
    pub to: String,
    /// Whether it is applied in place.
    pub effect: Effect,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} → {}", self.path, self.from, self.to)?;
        match &self.effect {
            Effect::InPlace => write!(f, "  (in place)"),
            Effect::NeedsRebuild(why) => write!(f, "  (needs a rebuild: {why})"),
        }
    }
}

/// How a change is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Effect {
    /// In place, from the next call on.
    InPlace,
    /// Not in place: the running policy keeps its value; only a policy built anew (which
    /// starts its breaker over) takes it. Says why.
    NeedsRebuild(&'static str),
}

/// What a running policy's stages read now: the settings a diff starts from.
pub(crate) struct Running<'a, C> {
    shared: &'a Shared<C>,
    timeouts: Option<&'a Timeouts>,
}

impl<C: Classifier + fmt::Debug> Policy<C> {
    /// What [`reload`](Policy::reload) with `new` would change, changing nothing.
    pub fn diff(&self, new: &Policy<C>) -> Reload {
        self.compare(new, false)
    }

    /// Applies `new`'s settings to this running policy where they can be applied in place
    /// (see the [module docs](crate::reload)), keeping its breaker's state, and reports
    /// every difference. `new` is only read: build it as the running policy was built (from
    /// the changed file, or the same code with other values); its own state is not used.
    pub fn reload(&self, new: &Policy<C>) -> Reload {
        self.compare(new, true)
    }

    fn running(&self) -> Running<'_, C> {
        Running {
            shared: &self.inner.shared,
            timeouts: self.inner.shared.timeouts.as_ref(),
        }
    }

    fn compare(&self, new: &Policy<C>, apply: bool) -> Reload {
        let running = self.running();
        let old = running.shared;
        let new_shared = &*new.inner.shared;
        let mut d = Diff::default();

        breaker(&mut d, &running, new_shared, apply);
        limit(&mut d, old, new_shared, apply);
        timeout(&mut d, &running, new_shared, apply);
        retry(&mut d, old, new_shared, apply);
        let timeouts_follow = old.timeout.is_some() == new_shared.timeout.is_some();
        routes(
            &mut d,
            &old.routes,
            &new_shared.routes,
            timeouts_follow,
            apply,
        );
        d.rebuild(
            "fallback.routes",
            &old.settings.fallback,
            &new_shared.settings.fallback,
            "the routes a fallback serves are fixed when the policy is built",
        );
        d.rebuild(
            "recovery_ramp",
            &old.settings.ramp,
            &new_shared.settings.ramp,
            "the recovery ramp is fixed when the policy is built",
        );

        if let BreakerLayer::Single(b) = &old.breaker {
            let s = b.handle().snapshot();
            d.kept.push(format!(
                "breaker state {} (generation {}, {} calls in the window, {} failed, {} slow)",
                s.state, s.generation, s.window.calls, s.window.failures, s.window.slow
            ));
        }
        if let BreakerLayer::Keyed(b) = &old.breaker {
            d.kept.push(format!(
                "{} keys' breakers, each with its state and window",
                b.handle().len()
            ));
        }
        let report = Reload {
            policy: old.name.to_string(),
            changes: d.changes,
            kept: d.kept,
            applied: apply,
        };
        if apply && report.has_changes() {
            tracing::info!(
                target: crate::trace::RELOAD,
                policy = %report.policy,
                changes = report.changes.len(),
                needs_rebuild = report.needs_rebuild().count(),
                "fusebox: policy reloaded"
            );
        }
        report
    }
}

#[derive(Default)]
struct Diff {
    changes: Vec<Change>,
    kept: Vec<String>,
}

impl Diff {
    fn push(&mut self, path: impl Into<String>, from: String, to: String, effect: Effect) {
        self.changes.push(Change {
            path: path.into(),
            from,
            to,
            effect,
        });
    }

    /// Records a difference between two values, shown with `Debug`.
    fn field<T: PartialEq + fmt::Debug>(&mut self, path: &str, from: &T, to: &T, effect: Effect) {
        if from != to {
            self.push(path, show(from), show(to), effect);
        }
    }

    fn rebuild<T: PartialEq + fmt::Debug>(
        &mut self,
        path: &str,
        from: &T,
        to: &T,
        why: &'static str,
    ) {
        self.field(path, from, to, Effect::NeedsRebuild(why));
    }
}

/// A value as a change shows it: `Some(x)` as `x`, `None` as `none`, durations as
/// humans write them.
fn show<T: fmt::Debug>(value: &T) -> String {
    let s = format!("{value:?}");
    if s == "None" {
        "none".to_owned()
    } else if let Some(inner) = s.strip_prefix("Some(").and_then(|s| s.strip_suffix(')')) {
        inner.to_owned()
    } else {
        s
    }
}

fn present<T>(x: &Option<T>) -> &'static str {
    if x.is_some() { "on" } else { "off" }
}

const LAYER_CHANGED: &str = "a layer added or removed changes the policy's stages";

fn store_kind(store: &BreakerStore) -> String {
    match store {
        BreakerStore::InMemory => "memory".to_owned(),
        #[allow(unreachable_patterns)]
        _ => "redis".to_owned(),
    }
}

fn breaker<C: Classifier>(d: &mut Diff, running: &Running<'_, C>, new: &Shared<C>, apply: bool) {
    let old = running.shared;
    let (from, to) = (&old.settings.breaker, &new.settings.breaker);
    let (Some(_), Some(to_cfg)) = (from, to) else {
        if from.is_some() != to.is_some() {
            d.push(
                "breaker",
                present(from).into(),
                present(to).into(),
                Effect::NeedsRebuild(LAYER_CHANGED),
            );
        }
        return;
    };
    // The running breaker's settings: what its state machine judges by now.
    let current = match &old.breaker {
        BreakerLayer::Single(b) => b.handle().config(),
        BreakerLayer::Keyed(b) => Some(b.handle().config()),
        BreakerLayer::Off => None,
    }
    .or_else(|| from.clone().map(Arc::new));
    let Some(cur) = current else { return };

    const IDENTITY: &str =
        "the breaker's identity (name, store, keying) changed: a new breaker starts over";
    let mut identity_kept = true;
    if cur.name() != to_cfg.name() {
        identity_kept = false;
        d.push(
            "breaker.name",
            cur.name().to_owned(),
            to_cfg.name().to_owned(),
            Effect::NeedsRebuild(IDENTITY),
        );
    }
    let (ks, kn) = (
        format!("{:?}", old.settings.key),
        format!("{:?}", new.settings.key),
    );
    if ks != kn {
        identity_kept = false;
        d.push(
            "breaker.key",
            show(&old.settings.key),
            show(&new.settings.key),
            Effect::NeedsRebuild(IDENTITY),
        );
    }
    if format!("{:?}", old.store) != format!("{:?}", new.store) {
        identity_kept = false;
        d.push(
            "breaker.store",
            store_kind(&old.store),
            store_kind(&new.store),
            Effect::NeedsRebuild(IDENTITY),
        );
    }
    d.rebuild(
        "breaker.max_keys",
        &old.settings.max_keys,
        &new.settings.max_keys,
        "a keyed breaker's key limits are fixed when it is built",
    );
    d.rebuild(
        "breaker.idle_timeout",
        &old.settings.idle_timeout,
        &new.settings.idle_timeout,
        "a keyed breaker's key limits are fixed when it is built",
    );
    d.rebuild(
        "breaker.spread",
        &old.settings.spread,
        &new.settings.spread,
        "the dependency-wide breaker gated by the keys' spread is fixed when the policy is built",
    );
    d.rebuild(
        "breaker.window",
        &cur.window(),
        &to_cfg.window(),
        "the window's kind or size changed: its calls cannot move to another window",
    );

    // The new settings on the running window (a window change is reported above and not
    // applied); they must still hold together there (`minimum_calls` within the window).
    let next = to_cfg
        .to_builder()
        .window(cur.window())
        .name(cur.name().to_owned())
        .build()
        .map(Arc::new);
    // Whether the store takes settings in place (the memory store does): giving it its
    // own settings changes nothing and says so.
    let supported =
        identity_kept && !matches!(reconfigure(old, &cur), Err(Reconfigure::Unsupported));
    let effect = if !identity_kept {
        Effect::NeedsRebuild(IDENTITY)
    } else if !supported {
        Effect::NeedsRebuild("the breaker's store cannot change its settings while running")
    } else if next.is_err() {
        Effect::NeedsRebuild(
            "the new settings do not hold on the running window (minimum_calls past its size)",
        )
    } else {
        Effect::InPlace
    };
    let before = d.changes.len();
    macro_rules! fields {
        ($($name:ident),*) => {
            $( d.field(concat!("breaker.", stringify!($name)), &cur.$name(), &to_cfg.$name(), effect.clone()); )*
        };
    }
    fields!(
        minimum_calls,
        failure_rate_threshold,
        slow_call_rate_threshold,
        consecutive_failures,
        open_wait,
        open_wait_jitter,
        open_wait_multiplier,
        max_open_wait,
        permitted_probes,
        probe_successes,
        max_half_open_wait,
        on_close,
        count_overloaded,
        seed
    );
    if let (true, Effect::InPlace, Ok(next)) = (apply, &effect, &next)
        && d.changes.len() > before
        && reconfigure(old, next).is_err()
    {
        // Refusals were found above; a store that refuses now keeps its settings.
        for c in &mut d.changes[before..] {
            c.effect = Effect::NeedsRebuild("the breaker's store refused the new settings");
        }
    }
}

/// Gives `config` to the running breaker (and to the dependency-wide breaker gated by its
/// keys, which has the same settings); with `config` its own settings, a no-op that says
/// whether the store can take settings in place.
fn reconfigure<C: Classifier>(
    old: &Shared<C>,
    config: &Arc<CircuitBreakerConfig>,
) -> Result<(), Reconfigure> {
    match &old.breaker {
        BreakerLayer::Single(b) => b.handle().reconfigure(config),
        BreakerLayer::Keyed(b) => {
            b.handle().reconfigure(config)?;
            match &old.dependency {
                Some(d) => d.handle().reconfigure(config),
                None => Ok(()),
            }
        }
        BreakerLayer::Off => Ok(()),
    }
}

fn limit<C: Classifier>(d: &mut Diff, old: &Shared<C>, new: &Shared<C>, apply: bool) {
    let (Some(from), Some(to)) = (&old.limit, &new.limit) else {
        if old.limit.is_some() != new.limit.is_some() {
            d.push(
                "limit",
                present(&old.limit).into(),
                present(&new.limit).into(),
                Effect::NeedsRebuild(LAYER_CHANGED),
            );
        }
        return;
    };
    let handle = from.handle();
    // The limit's settings now (as built, with what reloads changed), and the new ones: the
    // running limit takes the new limit and queue; its name and answers are its own.
    let cur = handle.config();
    let to = to.config();
    let effect = if old.ramp.is_some() && cur.limit() != to.limit() {
        Effect::NeedsRebuild("a recovery ramp owns the limit's value")
    } else {
        Effect::InPlace
    };
    let before = d.changes.len();
    match (cur.limit(), to.limit()) {
        (Limit::Fixed(a), Limit::Fixed(b)) => {
            if a != b {
                d.push(
                    "limit.max_concurrency",
                    a.to_string(),
                    b.to_string(),
                    effect.clone(),
                );
            }
        }
        (a, b) => d.field("limit.algorithm", a, b, effect.clone()),
    }
    d.field("limit.queue", &cur.queue(), &to.queue(), effect.clone());
    if apply && effect == Effect::InPlace && d.changes.len() > before {
        // With a recovery ramp only the queue gets here: the ramp keeps the limit's value.
        handle.reconfigure(to);
    }
    const FIXED: &str = "the limit's name and answers are fixed when it is built";
    d.rebuild("limit.name", &cur.name(), &to.name(), FIXED);
    d.rebuild("limit.release", &cur.release(), &to.release(), FIXED);
    d.rebuild(
        "limit.retry_after",
        &cur.retry_after(),
        &to.retry_after(),
        FIXED,
    );
    d.rebuild("limit.log_step", &cur.log_step(), &to.log_step(), FIXED);
}

fn timeout<C: Classifier>(d: &mut Diff, running: &Running<'_, C>, new: &Shared<C>, apply: bool) {
    let old = running.shared;
    let (Some(from), Some(to), Some(table)) = (&old.timeout, &new.timeout, running.timeouts) else {
        if old.timeout.is_some() != new.timeout.is_some() {
            d.push(
                "timeout",
                present(&old.timeout).into(),
                present(&new.timeout).into(),
                Effect::NeedsRebuild(LAYER_CHANGED),
            );
        }
        return;
    };
    let (cur, to) = (from.config(), to.config());
    let default = table.default_timeout();
    if default != to.default_timeout() {
        if apply {
            table.set_default(to.default_timeout());
        }
        d.push(
            "timeout.default_timeout",
            show(&default),
            show(&to.default_timeout()),
            Effect::InPlace,
        );
    }
    const FIXED: &str =
        "the timeout's body bound and deadline propagation are fixed when it is built";
    d.rebuild(
        "timeout.body_timeout",
        &cur.body_timeout(),
        &to.body_timeout(),
        FIXED,
    );
    d.rebuild(
        "timeout.propagate_grpc_timeout",
        &cur.propagate_grpc_timeout(),
        &to.propagate_grpc_timeout(),
        FIXED,
    );
    d.rebuild(
        "timeout.deadline_header",
        &cur.deadline_header(),
        &to.deadline_header(),
        FIXED,
    );
}

fn route_path(name: &str, key: &str) -> String {
    if name.is_empty() || name == "default" {
        format!("default_route.{key}")
    } else {
        format!("routes[{name:?}].{key}")
    }
}

fn retry<C>(d: &mut Diff, old: &Shared<C>, new: &Shared<C>, apply: bool) {
    let (Some(layer), Some(to)) = (&old.retry, new.retry.as_ref().map(|r| r.config())) else {
        if old.retry.is_some() != new.retry.is_some() {
            d.push(
                "retry",
                present(&old.retry).into(),
                present(&new.retry).into(),
                Effect::NeedsRebuild(LAYER_CHANGED),
            );
        }
        return;
    };
    let cur = layer.config();
    d.rebuild(
        "retry.name",
        &cur.name(),
        &to.name(),
        "the retry layer's name labels its series: fixed when it is built",
    );
    d.rebuild(
        "retry.ttl",
        &cur.ttl(),
        &to.ttl(),
        "the budget's window (ttl) is fixed when the layer is built: its buckets are cut from it",
    );
    d.rebuild(
        "retry.seed",
        &cur.seed(),
        &to.seed(),
        "the jitter source is seeded when the layer is built",
    );
    // The new settings on the running layer's name, window and seed.
    let next = to
        .to_builder()
        .name(cur.name().to_owned())
        .ttl(cur.ttl())
        .seed(cur.seed())
        .build();
    let effect = match &next {
        Ok(_) => Effect::InPlace,
        Err(_) => Effect::NeedsRebuild("the new settings do not hold on the running window (ttl)"),
    };
    let before = d.changes.len();
    macro_rules! fields {
        ($($name:ident),*) => {
            $( d.field(concat!("retry.", stringify!($name)), &cur.$name(), &to.$name(), effect.clone()); )*
        };
    }
    fields!(
        retry_ratio,
        min_retries_per_second,
        failure_rate_threshold,
        cutoff_minimum_calls,
        max_attempts,
        base_delay,
        max_delay,
        max_retry_after,
        max_replay_body_bytes,
        hedge_delay
    );
    if let (true, Ok(next)) = (apply, next)
        && d.changes.len() > before
        && let Err(why) = layer.reconfigure(next)
    {
        let why = match why {
            fusebox_retry::Reconfigure::Ttl => "the retry layer refused: another window (ttl)",
            _ => "the retry layer refused: another name",
        };
        for c in &mut d.changes[before..] {
            c.effect = Effect::NeedsRebuild(why);
        }
    }
}

fn routes<C: Classifier + fmt::Debug>(
    d: &mut Diff,
    old: &RouteTable<C>,
    new: &RouteTable<C>,
    timeouts_follow: bool,
    apply: bool,
) {
    // Built without a route table of its own, the policy reads the one every such layer
    // of the process shares, and a change to it would reach them all.
    const SHARED: &str = "the policy was built without a route table of its own, and reads the one every such layer of the process shares: build it with one (`routes`) to reload its routes";
    const NEEDS_TIMEOUT_LAYER: &str = "the route's timeout changes with the timeout layer added or removed, which needs a rebuild: the route is kept as it was";
    let shared = old.is_shared_default();
    let mut edit = Vec::new();
    let mut removed = Vec::new();
    let before = d.changes.len();
    let new_names: std::collections::HashSet<&str> = new.iter().map(|(_, n, _)| n).collect();
    let mut old_routes: std::collections::HashMap<&str, _> =
        old.iter().map(|(id, n, r)| (n, (id, r))).collect();
    for (id, name, _) in old.iter() {
        if !new_names.contains(name) {
            // Its id stays, for the calls on it and what the layers keep per route; it
            // matches no request from the next call on.
            let effect = if shared {
                Effect::NeedsRebuild(SHARED)
            } else {
                Effect::InPlace
            };
            if effect == Effect::InPlace {
                removed.push(id);
            }
            d.push(
                route_path(name, "(route)"),
                "present".into(),
                "absent".into(),
                effect,
            );
        }
    }
    let mut added = Vec::new();
    for (_, name, route) in new.iter() {
        let Some((id, was)) = old_routes.remove(name) else {
            let effect = if shared {
                Effect::NeedsRebuild(SHARED)
            } else if !timeouts_follow && route.timeout_duration().is_some() {
                // Its timeout would need the timeout layer added.
                Effect::NeedsRebuild(NEEDS_TIMEOUT_LAYER)
            } else {
                Effect::InPlace
            };
            if effect == Effect::InPlace {
                added.push((name.to_owned(), route.clone()));
            }
            d.push(
                route_path(name, "(route)"),
                "absent".into(),
                "present".into(),
                effect,
            );
            continue;
        };
        // A route is replaced whole or not at all, so that what the table shows of it is
        // what every stage runs with.
        let effect = if shared {
            Effect::NeedsRebuild(SHARED)
        } else if !timeouts_follow && was.timeout_duration() != route.timeout_duration() {
            Effect::NeedsRebuild(NEEDS_TIMEOUT_LAYER)
        } else {
            Effect::InPlace
        };
        d.field(
            &route_path(name, "timeout"),
            &was.timeout_duration(),
            &route.timeout_duration(),
            effect.clone(),
        );
        d.field(
            &route_path(name, "slow_call_duration"),
            &was.slow_call_threshold(),
            &route.slow_call_threshold(),
            effect.clone(),
        );
        d.field(
            &route_path(name, "retry"),
            &was.retry_enabled(),
            &route.retry_enabled(),
            effect.clone(),
        );
        d.field(
            &route_path(name, "idempotent"),
            &was.idempotent_override(),
            &route.idempotent_override(),
            effect.clone(),
        );
        // A classifier is compared by what it shows of itself (`Debug`): the standard
        // classifier shows every rule; one made from a closure shows no rule it holds.
        if format!("{:?}", was.classifier()) != format!("{:?}", route.classifier()) {
            d.push(
                route_path(name, "classifier"),
                "the running rules".into(),
                "other rules".into(),
                effect.clone(),
            );
        }
        // The whole route, as every stage reads it (its timeout and what it inherits from
        // the default route included): one swap, so that no reader sees half of it.
        let changed = format!("{:?}", *was) != format!("{:?}", *route);
        drop(was);
        if changed && effect == Effect::InPlace {
            edit.push((id, route.clone()));
        }
    }
    let rerouted = !added.is_empty() || !removed.is_empty();
    if !apply || (edit.is_empty() && !rerouted) {
        return;
    }
    let commit = |added: &[(String, Route<C>)]| {
        let mut changes = old.edit();
        for (id, route) in &edit {
            changes.replace(*id, route.clone());
        }
        for (name, route) in added {
            changes.add(name.as_str(), route.clone());
        }
        for id in &removed {
            changes.remove(*id);
        }
        changes.commit()
    };
    let Err(refused) = commit(&added) else {
        return;
    };
    // The new table's routes were checked when it was built: the table refuses an added
    // route when it has given out every id it can, or when another reload added a route
    // of that name meanwhile. The rest still applies.
    tracing::warn!(
        target: crate::trace::RELOAD,
        error = %refused,
        "fusebox: the route table refused the routes the reload adds; the other route changes apply"
    );
    let applied = commit(&[]).is_ok();
    for c in &mut d.changes[before..] {
        let is_added = c.path.ends_with(".(route)") && c.to == "present";
        if c.effect == Effect::InPlace && (is_added || !applied) {
            c.effect = Effect::NeedsRebuild(
                "the route table refused the route (it holds at most 65,534 route ids, removed routes included, or another reload changed its routes meanwhile; the log says which): rebuild the policy",
            );
        }
    }
}

// === what a reload changed, for later readers ===

impl<C> Shared<C> {
    /// The timeout's settings now: as built, with the default a reload set.
    pub(crate) fn current_timeout_config(&self, built: &TimeoutConfig) -> TimeoutConfig {
        match &self.timeouts {
            Some(t) => built.clone().with_default_timeout(t.default_timeout()),
            None => built.clone(),
        }
    }
}
