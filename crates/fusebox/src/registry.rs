//! [`Registry`]: every policy and layer a process registered, listed with its state — for an
//! admin page, a dashboard, or a readiness check.
//!
//! A registry is a value the application makes and hands to what it builds:
//! [`PolicyBuilder::registry`](crate::PolicyBuilder::registry) for a [`Policy`], and
//! [`Registry::register`] for a policy or a layer built on its own (a
//! [`CircuitBreakerLayer`], a [`KeyedCircuitBreakerLayer`], a [`ConcurrencyLimitLayer`], a
//! [`RetryBudgetLayer`]). [`list`](Registry::list) then gives, for each entry alive: its
//! name and kind, its breaker's state, failure and slow-call rates and window (for a keyed
//! breaker, each key's, up to a bound), its limit's value and calls in flight, its retry
//! budget, and the settings each layer runs with. [`readiness`](Registry::readiness) says
//! whether any dependency marked mandatory ([`require`](Registry::require)) has a breaker
//! that is not letting calls through.
//!
//! A keyed policy with a dependency-wide breaker around its keys
//! ([`PolicyBuilder::key_spread`](crate::PolicyBuilder::key_spread)) lists that breaker's
//! state as the keyed breaker's `current` one, beside the keys; a
//! [`command`](Registry::command) that names no key is that breaker's; and the policy is
//! not ready while that breaker is open (or while every key's is, as for any keyed
//! breaker).
//!
//! # Why a value, and not a process-wide list
//!
//! A global list would see every policy a process builds, including the ones a library
//! builds for itself, the short-lived ones a test builds by the hundred, and the policy a
//! `fusebox check` builds only to validate a file: names would clash for
//! reasons the application cannot see, and an admin route mounted in one part of a program
//! would command breakers another part owns. A registry the application makes lists what
//! it chose to list; two registries (one per tenant of a process, one per test) do not see
//! each other.
//!
//! # What it costs
//!
//! Nothing per call: a registry is read only when it is listed or commanded, and
//! registering adds nothing to the services. It holds **weak** references: a policy (or a
//! layer) is listed while the policy value or any service made from it is alive, and drops
//! out of the listing once all of them are dropped; the registry never keeps a breaker's
//! state alive, nor a keyed breaker's keys (listing one looks its keys up and lets them go).
//!
//! # Example
//!
//! ```
//! use fusebox::breaker::State;
//! use fusebox::{CircuitBreakerConfig, Policy, Registry};
//!
//! let registry = Registry::new();
//! registry.require("payments");
//! let payments = Policy::builder("payments")
//!     .circuit_breaker(CircuitBreakerConfig::builder())
//!     .concurrency_limit(64)
//!     .registry(&registry)
//!     .build()?;
//!
//! let listing = registry.list();
//! assert_eq!(listing.entries.len(), 1);
//! let entry = &listing.entries[0];
//! assert_eq!((entry.name.as_str(), entry.kind, entry.mandatory), ("payments", fusebox::registry::Kind::Policy, true));
//! assert_eq!(entry.breaker.as_ref().and_then(|b| b.current.as_ref()).map(|s| s.state), Some(State::Closed));
//! assert!(registry.readiness().is_ready());
//!
//! payments.breaker_handle().expect("a breaker").force_open();
//! let readiness = registry.readiness();
//! assert!(!readiness.is_ready());
//! assert_eq!(readiness.not_ready[0].name, "payments");
//!
//! drop(payments);
//! assert!(registry.list().entries.is_empty(), "a dropped policy is not listed");
//! # Ok::<(), fusebox::ConfigError>(())
//! ```

use crate::policy::{BreakerLayer, Policy, Shared};
use fusebox_breaker::{
    BreakerHandle, CircuitBreakerConfig, CircuitBreakerLayer, Command, KeyFn, KeyedBreakerHandle,
    KeyedCircuitBreakerLayer, MakeStore, Snapshot, State, Store, WeakBreakerHandle,
    WeakKeyedBreakerHandle,
};
use fusebox_classify::{Classifier, ConfigError};
use fusebox_limit::{ConcurrencyLimitConfig, ConcurrencyLimitLayer, LimitHandle, WeakLimitHandle};
use fusebox_retry::{BudgetSnapshot, RetryBudgetLayer, RetryConfig, RetryHandle, WeakRetryHandle};
use fusebox_timeout::TimeoutConfig;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

/// The most keys of one keyed breaker that [`Registry::list`] shows (every key is counted
/// in [`BreakerStatus::keys_total`]); [`Registry::list_with`] takes another bound.
pub const DEFAULT_MAX_KEYS_LISTED: usize = 100;

/// A list of the policies and layers a process registered; see the [module docs](self).
///
/// Cloning is cheap and shares the list.
#[derive(Clone, Default)]
pub struct Registry {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    entries: Vec<Entry>,
    /// The names readiness requires, in the order given.
    required: Vec<Arc<str>>,
}

struct Entry {
    name: Arc<str>,
    source: Source,
}

/// What an entry refers to, weakly.
enum Source {
    Policy(Weak<dyn PolicySource>),
    Breaker(WeakBreakerHandle),
    Keyed(Box<dyn WeakKeyed>),
    Limit(WeakLimitHandle),
    Retry(WeakRetryHandle),
}

impl Source {
    fn is_alive(&self) -> bool {
        match self {
            Source::Policy(p) => p.strong_count() > 0,
            Source::Breaker(b) => b.is_alive(),
            Source::Keyed(k) => k.upgrade().is_some(),
            Source::Limit(l) => l.upgrade().is_some(),
            Source::Retry(r) => r.upgrade().is_some(),
        }
    }

    fn upgrade(&self) -> Option<Live> {
        match self {
            Source::Policy(p) => p.upgrade().map(|p| p.live()),
            Source::Breaker(b) => b.upgrade().map(|b| Live {
                kind: Kind::Breaker,
                breaker_config: b.config(),
                breaker: Some(BreakerRef::Single(b)),
                ..Live::default()
            }),
            Source::Keyed(k) => k.upgrade().map(|k| Live {
                kind: Kind::KeyedBreaker,
                breaker: Some(BreakerRef::Keyed(k, None)),
                ..Live::default()
            }),
            Source::Limit(l) => l.upgrade().map(|l| Live {
                kind: Kind::Limit,
                limit: Some((l.clone(), l.config())),
                ..Live::default()
            }),
            Source::Retry(r) => r.upgrade().map(|r| Live {
                kind: Kind::Retry,
                retry: Some(r),
                ..Live::default()
            }),
        }
    }
}

/// An entry's parts, upgraded for the moment of one listing or command.
#[derive(Default)]
pub(crate) struct Live {
    kind: Kind,
    breaker: Option<BreakerRef>,
    /// The breaker's settings as built, where the breaker's store keeps none of its own.
    breaker_config: Option<Arc<CircuitBreakerConfig>>,
    limit: Option<(LimitHandle, ConcurrencyLimitConfig)>,
    retry: Option<RetryHandle>,
    timeout: Option<TimeoutConfig>,
}

/// One breaker or one keyed breaker.
pub(crate) enum BreakerRef {
    Single(BreakerHandle),
    /// The keys' breakers, and the dependency-wide breaker gated by their spread
    /// (`PolicyBuilder::key_spread`), if there is one.
    Keyed(Arc<dyn KeyedList>, Option<BreakerHandle>),
}

/// A keyed breaker's keys, whatever its key type.
pub(crate) trait KeyedList: Send + Sync {
    fn name(&self) -> &str;
    /// Up to `max` keys' handles (the overflow breakers after the keys), and how many keys
    /// there are in all.
    fn handles(&self, max: usize) -> (Vec<BreakerHandle>, usize);
    /// The handle of the key named `key` (as in its events; the overflow breakers by
    /// their key name too).
    fn find(&self, key: &str) -> Option<BreakerHandle>;
}

impl<K: Clone + Send + Sync + 'static> KeyedList for KeyedBreakerHandle<K> {
    fn name(&self) -> &str {
        KeyedBreakerHandle::name(self)
    }

    fn handles(&self, max: usize) -> (Vec<BreakerHandle>, usize) {
        let keys = self.keys();
        let overflow = self.overflow();
        let total = keys.len() + overflow.len();
        let handles = keys
            .iter()
            .filter_map(|k| self.get(k))
            .chain(overflow)
            .take(max)
            .collect();
        (handles, total)
    }

    fn find(&self, key: &str) -> Option<BreakerHandle> {
        self.keys()
            .iter()
            .filter_map(|k| self.get(k))
            .chain(self.overflow())
            .find(|h| h.key() == Some(key))
    }
}

/// A keyed breaker held weakly, whatever its key type.
trait WeakKeyed: Send + Sync {
    fn upgrade(&self) -> Option<Arc<dyn KeyedList>>;
}

impl<K: Clone + Send + Sync + 'static> WeakKeyed for WeakKeyedBreakerHandle<K> {
    fn upgrade(&self) -> Option<Arc<dyn KeyedList>> {
        WeakKeyedBreakerHandle::upgrade(self).map(|h| Arc::new(h) as Arc<dyn KeyedList>)
    }
}

/// A policy's parts, whatever its classifier.
pub(crate) trait PolicySource: Send + Sync {
    fn live(&self) -> Live;
}

impl<C: Classifier> PolicySource for Shared<C> {
    fn live(&self) -> Live {
        let breaker = match &self.breaker {
            BreakerLayer::Off => None,
            BreakerLayer::Single(b) => Some(BreakerRef::Single(b.handle())),
            BreakerLayer::Keyed(b) => Some(BreakerRef::Keyed(
                Arc::new(b.handle()),
                self.dependency.as_ref().map(|d| d.handle()),
            )),
        };
        Live {
            kind: Kind::Policy,
            breaker,
            breaker_config: self.settings.breaker.clone().map(Arc::new),
            limit: self
                .limit
                .as_ref()
                .map(|l| (l.handle(), l.handle().config())),
            retry: self.retry.as_ref().map(|r| r.handle()),
            timeout: self
                .timeout
                .as_ref()
                .map(|t| self.current_timeout_config(t.config())),
        }
    }
}

// === impl Registry ===

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every method leaves the list consistent before it could panic: keep serving.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lists `item` (a [`Policy`], or a layer: see [`Register`]) under its name — a
    /// policy's name, a layer's configured name — for as long as it or a service made
    /// from it is alive. Fails (under `name`) when an entry alive has the same name: admin
    /// commands address entries by name.
    pub fn register<T: Register + ?Sized>(&self, item: &T) -> Result<(), ConfigError> {
        let (name, RegistrySource(source)) = item.entry();
        let mut inner = self.lock();
        inner.entries.retain(|e| e.source.is_alive());
        if inner.entries.iter().any(|e| e.name == name) {
            return Err(ConfigError::new(
                "name",
                format!("{name:?} is already registered (names in a registry must be unique)"),
            ));
        }
        inner.entries.push(Entry { name, source });
        Ok(())
    }

    /// Marks the entry named `name` as a mandatory dependency: [`readiness`](Registry::readiness)
    /// fails while its breaker is not letting calls through, or while nothing alive is
    /// registered under that name (a dependency the process needs but has not built yet).
    /// The name may be given before the entry is registered.
    pub fn require(&self, name: impl Into<Arc<str>>) -> &Self {
        let name = name.into();
        let mut inner = self.lock();
        if !inner.required.contains(&name) {
            inner.required.push(name);
        }
        self
    }

    /// Every entry alive, with at most [`DEFAULT_MAX_KEYS_LISTED`] keys per keyed breaker.
    pub fn list(&self) -> Listing {
        self.list_with(DEFAULT_MAX_KEYS_LISTED)
    }

    /// Every entry alive, with at most `max_keys` keys per keyed breaker (every key is
    /// counted in [`BreakerStatus::keys_total`]).
    pub fn list_with(&self, max_keys: usize) -> Listing {
        let entries = self
            .live()
            .into_iter()
            .map(|(name, mandatory, live)| status(&name, mandatory, live, max_keys))
            .collect();
        Listing { entries }
    }

    /// The entries alive, upgraded, with whether each is required; taken under the lock
    /// and used after it (reading a breaker takes its own lock, and a command runs its
    /// listeners, which may list the registry).
    fn live(&self) -> Vec<(Arc<str>, bool, Live)> {
        let mut inner = self.lock();
        inner.entries.retain(|e| e.source.is_alive());
        let required = &inner.required;
        inner
            .entries
            .iter()
            .filter_map(|e| {
                let mandatory = required.contains(&e.name);
                e.source
                    .upgrade()
                    .map(|live| (Arc::clone(&e.name), mandatory, live))
            })
            .collect()
    }

    /// One entry alive, upgraded.
    pub(crate) fn find(&self, name: &str) -> Option<Live> {
        let mut inner = self.lock();
        inner.entries.retain(|e| e.source.is_alive());
        inner
            .entries
            .iter()
            .find(|e| &*e.name == name)
            .and_then(|e| e.source.upgrade())
    }

    /// Whether every mandatory dependency ([`require`](Registry::require)) is registered and
    /// has a breaker letting calls through; if not, which ones and why.
    ///
    /// A breaker counts as not letting calls through while it is OPEN, HALF_OPEN (only its
    /// probes pass, and they have not yet proven the dependency healthy) or FORCED_OPEN. A
    /// keyed breaker counts so when it has keys and every one of them is in such a state:
    /// one host of a partner failing leaves the others reachable. A mandatory entry with
    /// no breaker is always ready.
    ///
    /// Use it for a readiness probe when an instance cannot serve anything useful without
    /// the dependency *and* other instances might still reach it; where every instance
    /// shares the dependency, failing readiness on all of them at once takes the whole
    /// service out of rotation, which is rarely better than answering with errors.
    pub fn readiness(&self) -> Readiness {
        let required: Vec<Arc<str>> = self.lock().required.clone();
        let mut not_ready = Vec::new();
        for name in required {
            let Some(live) = self.find(&name) else {
                not_ready.push(NotReady {
                    name: name.to_string(),
                    key: None,
                    state: None,
                    reason: NotReadyReason::NotRegistered,
                });
                continue;
            };
            match live.breaker {
                None => {}
                Some(BreakerRef::Single(b)) => {
                    let state = b.state();
                    if blocks(state) {
                        not_ready.push(NotReady {
                            name: name.to_string(),
                            key: None,
                            state: Some(state),
                            reason: NotReadyReason::BreakerOpen,
                        });
                    }
                }
                Some(BreakerRef::Keyed(_, Some(dependency))) if blocks(dependency.state()) => {
                    // The dependency-wide breaker refuses every key's calls.
                    not_ready.push(NotReady {
                        name: name.to_string(),
                        key: None,
                        state: Some(dependency.state()),
                        reason: NotReadyReason::BreakerOpen,
                    });
                }
                Some(BreakerRef::Keyed(k, _)) => {
                    let (handles, _) = k.handles(usize::MAX);
                    let states: Vec<State> = handles.iter().map(BreakerHandle::state).collect();
                    if !states.is_empty() && states.iter().all(|s| blocks(*s)) {
                        for (h, state) in handles.iter().zip(states) {
                            not_ready.push(NotReady {
                                name: name.to_string(),
                                key: h.key().map(str::to_owned),
                                state: Some(state),
                                reason: NotReadyReason::BreakerOpen,
                            });
                        }
                    }
                }
            }
        }
        Readiness {
            ready: not_ready.is_empty(),
            not_ready,
        }
    }

    /// Carries out `command` on the breaker of the entry named `name` (for a keyed
    /// breaker, on its key named `key`, as the listing names it), and says what it changed.
    pub fn command(
        &self,
        name: &str,
        key: Option<&str>,
        command: Command,
    ) -> Result<Commanded, CommandError> {
        let live = self.find(name).ok_or(CommandError::UnknownEntry)?;
        let handle = match (live.breaker, key) {
            (None, _) => return Err(CommandError::NoBreaker),
            (Some(BreakerRef::Single(b)), None) => b,
            (Some(BreakerRef::Single(_)), Some(_)) => return Err(CommandError::NotKeyed),
            // No key: the dependency-wide breaker, where the keys have one around them.
            (Some(BreakerRef::Keyed(_, Some(dependency))), None) => dependency,
            (Some(BreakerRef::Keyed(_, None)), None) => return Err(CommandError::KeyRequired),
            (Some(BreakerRef::Keyed(k, _)), Some(key)) => {
                k.find(key).ok_or(CommandError::UnknownKey)?
            }
        };
        let from = handle.state();
        match command {
            Command::ForceOpen => handle.force_open(),
            Command::Disable => handle.disable(),
            Command::MetricsOnly => handle.metrics_only(),
            Command::Reset => handle.reset(),
            // An order of a later release that this registry does not know to carry out.
            _ => return Err(CommandError::Unsupported),
        }
        Ok(Commanded {
            from,
            to: handle.state(),
        })
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.lock();
        f.debug_struct("Registry")
            .field(
                "entries",
                &inner.entries.iter().map(|e| &*e.name).collect::<Vec<_>>(),
            )
            .field("required", &inner.required)
            .finish()
    }
}

fn blocks(state: State) -> bool {
    matches!(state, State::Open | State::HalfOpen | State::ForcedOpen)
}

fn status(name: &str, mandatory: bool, live: Live, max_keys: usize) -> EntryStatus {
    let breaker = live.breaker.map(|b| match b {
        BreakerRef::Single(h) => BreakerStatus {
            name: h.name().to_owned(),
            keyed: false,
            current: Some(BreakerState::of(&h.snapshot())),
            keys: Vec::new(),
            keys_total: 0,
            config: h.config().or_else(|| live.breaker_config.clone()),
        },
        BreakerRef::Keyed(k, dependency) => {
            let (handles, total) = k.handles(max_keys);
            let config = handles
                .first()
                .and_then(BreakerHandle::config)
                .or_else(|| live.breaker_config.clone());
            BreakerStatus {
                name: k.name().to_owned(),
                keyed: true,
                current: dependency.map(|d| BreakerState::of(&d.snapshot())),
                keys: handles
                    .iter()
                    .map(|h| KeyStatus {
                        key: h.key().unwrap_or_default().to_owned(),
                        state: BreakerState::of(&h.snapshot()),
                    })
                    .collect(),
                keys_total: total,
                config,
            }
        }
    });
    EntryStatus {
        name: name.to_owned(),
        kind: live.kind,
        mandatory,
        breaker,
        limit: live.limit.map(|(h, config)| LimitStatus {
            name: h.name().to_owned(),
            limit: h.limit(),
            in_flight: h.in_flight(),
            waiting: h.waiting(),
            config,
        }),
        retry: live.retry.map(|r| RetryStatus {
            name: r.name().to_owned(),
            budget: r.budget().snapshot(),
            config: RetryConfig::clone(&r.config()),
        }),
        timeout: live.timeout.map(|config| TimeoutStatus { config }),
    }
}

/// What [`Registry::register`] lists: a [`Policy`], or a layer built on its own.
pub trait Register {
    /// The entry's name and a weak reference to what it lists.
    #[doc(hidden)]
    fn entry(&self) -> (Arc<str>, RegistrySource);
}

/// What a registry entry refers to (opaque).
#[doc(hidden)]
pub struct RegistrySource(Source);

impl fmt::Debug for RegistrySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RegistrySource")
    }
}

impl<C: Classifier> Register for Policy<C> {
    fn entry(&self) -> (Arc<str>, RegistrySource) {
        let shared = &self.inner.shared;
        let weak: Weak<dyn PolicySource> = Arc::downgrade(shared) as Weak<dyn PolicySource>;
        (
            Arc::clone(&shared.name),
            RegistrySource(Source::Policy(weak)),
        )
    }
}

impl<C: Classifier, St: Store> Register for CircuitBreakerLayer<C, St> {
    fn entry(&self) -> (Arc<str>, RegistrySource) {
        let handle = self.handle();
        (
            Arc::from(handle.name()),
            RegistrySource(Source::Breaker(handle.downgrade())),
        )
    }
}

impl<F: KeyFn, C: Classifier, M: MakeStore> Register for KeyedCircuitBreakerLayer<F, C, M> {
    fn entry(&self) -> (Arc<str>, RegistrySource) {
        let handle = self.handle();
        (
            Arc::from(handle.name()),
            RegistrySource(Source::Keyed(Box::new(handle.downgrade()))),
        )
    }
}

impl<C: Classifier, P> Register for ConcurrencyLimitLayer<C, P> {
    fn entry(&self) -> (Arc<str>, RegistrySource) {
        let handle = self.handle();
        (
            Arc::from(handle.name()),
            RegistrySource(Source::Limit(handle.downgrade())),
        )
    }
}

impl<C: Classifier> Register for RetryBudgetLayer<C> {
    fn entry(&self) -> (Arc<str>, RegistrySource) {
        let handle = self.handle();
        (
            Arc::from(handle.name()),
            RegistrySource(Source::Retry(handle.downgrade())),
        )
    }
}

// === listing ===

/// What kind of thing an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Kind {
    /// A [`Policy`]: any of a breaker, a limit, a retry budget and a timeout.
    #[default]
    Policy,
    /// A [`CircuitBreakerLayer`].
    Breaker,
    /// A [`KeyedCircuitBreakerLayer`].
    KeyedBreaker,
    /// A [`ConcurrencyLimitLayer`].
    Limit,
    /// A [`RetryBudgetLayer`].
    Retry,
}

/// Every entry of a registry alive at one moment ([`Registry::list`]).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Listing {
    /// The entries, in the order they were registered.
    pub entries: Vec<EntryStatus>,
}

/// One entry of a [`Listing`].
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct EntryStatus {
    /// The name it is registered under.
    pub name: String,
    /// What it is.
    pub kind: Kind,
    /// Whether readiness requires it ([`Registry::require`]).
    pub mandatory: bool,
    /// Its breaker.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub breaker: Option<BreakerStatus>,
    /// Its concurrency limit.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub limit: Option<LimitStatus>,
    /// Its retry budget.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub retry: Option<RetryStatus>,
    /// Its timeout (a policy's).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub timeout: Option<TimeoutStatus>,
}

/// A breaker (or keyed breaker) in a [`Listing`].
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct BreakerStatus {
    /// The breaker's name (in its errors, events and metrics).
    pub name: String,
    /// Whether it keeps one breaker per key.
    pub keyed: bool,
    /// An unkeyed breaker's state and window; for a keyed breaker, those of the
    /// dependency-wide breaker around its keys, gated by their spread
    /// ([`PolicyBuilder::key_spread`](crate::PolicyBuilder::key_spread)), if it has one.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub current: Option<BreakerState>,
    /// A keyed breaker's keys (at most the listing's bound), then its overflow breakers.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Vec::is_empty"))]
    pub keys: Vec<KeyStatus>,
    /// How many keys a keyed breaker holds (overflow breakers included), listed or not.
    pub keys_total: usize,
    /// The settings it judges by now.
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "ser::breaker_config",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub config: Option<Arc<CircuitBreakerConfig>>,
}

/// One key of a keyed breaker in a [`Listing`].
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct KeyStatus {
    /// The key, as the breaker's events and errors name it.
    pub key: String,
    /// Its breaker's state and window.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub state: BreakerState,
}

/// One breaker's state and window at one moment.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct BreakerState {
    /// The state.
    #[cfg_attr(feature = "serde", serde(serialize_with = "ser::state"))]
    pub state: State,
    /// The generation (moves on every transition).
    pub generation: u64,
    /// Calls in the window.
    pub calls: u32,
    /// Failed calls in the window.
    pub failures: u32,
    /// Slow calls in the window.
    pub slow: u32,
    /// Failure rate, percent.
    pub failure_rate: f64,
    /// Slow-call rate, percent.
    pub slow_call_rate: f64,
    /// While OPEN: time until it starts probing.
    #[cfg_attr(
        feature = "serde",
        serde(
            rename = "until_half_open_ms",
            serialize_with = "ser::millis",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub until_half_open: Option<Duration>,
}

impl BreakerState {
    fn of(s: &Snapshot) -> Self {
        BreakerState {
            state: s.state,
            generation: s.generation,
            calls: s.window.calls,
            failures: s.window.failures,
            slow: s.window.slow,
            failure_rate: s.failure_rate,
            slow_call_rate: s.slow_call_rate,
            until_half_open: s.until_half_open,
        }
    }
}

/// A concurrency limit in a [`Listing`].
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct LimitStatus {
    /// The limit's name.
    pub name: String,
    /// The limit enforced now.
    pub limit: usize,
    /// Calls holding a permit.
    pub in_flight: usize,
    /// Calls waiting in the queue.
    pub waiting: usize,
    /// The settings.
    #[cfg_attr(feature = "serde", serde(serialize_with = "ser::section"))]
    pub config: ConcurrencyLimitConfig,
}

/// A retry budget in a [`Listing`].
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct RetryStatus {
    /// The layer's name.
    pub name: String,
    /// The budget's counts now.
    #[cfg_attr(feature = "serde", serde(serialize_with = "ser::budget"))]
    pub budget: BudgetSnapshot,
    /// The settings.
    #[cfg_attr(feature = "serde", serde(serialize_with = "ser::section"))]
    pub config: RetryConfig,
}

/// A policy's timeout in a [`Listing`].
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct TimeoutStatus {
    /// The settings (each route's own timeout is in the route table).
    #[cfg_attr(feature = "serde", serde(serialize_with = "ser::section"))]
    pub config: TimeoutConfig,
}

/// What [`Registry::readiness`] found.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Readiness {
    /// Whether every mandatory dependency is registered and let through.
    pub ready: bool,
    /// What is not, one line per breaker (per key, for a keyed breaker).
    pub not_ready: Vec<NotReady>,
}

impl Readiness {
    /// Whether every mandatory dependency is registered and let through.
    pub fn is_ready(&self) -> bool {
        self.ready
    }
}

/// One mandatory dependency that is not ready.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct NotReady {
    /// The entry's name.
    pub name: String,
    /// The key, for one key of a keyed breaker.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub key: Option<String>,
    /// The breaker's state.
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "ser::opt_state",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub state: Option<State>,
    /// Why.
    pub reason: NotReadyReason,
}

/// Why a mandatory dependency is not ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum NotReadyReason {
    /// Its breaker is open, half-open or forced open.
    BreakerOpen,
    /// Nothing alive is registered under its name.
    NotRegistered,
}

/// What a [`Registry::command`] changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Commanded {
    /// The state before.
    pub from: State,
    /// The state after.
    pub to: State,
}

/// Why a [`Registry::command`] was not carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CommandError {
    /// No entry alive has that name.
    UnknownEntry,
    /// The entry has no breaker.
    NoBreaker,
    /// The entry's breaker is keyed, with no dependency-wide breaker around its keys:
    /// name a key.
    KeyRequired,
    /// The entry's breaker is not keyed: name no key.
    NotKeyed,
    /// The keyed breaker holds no such key.
    UnknownKey,
    /// The registry does not carry out this command.
    Unsupported,
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CommandError::UnknownEntry => "no entry of the registry has that name",
            CommandError::NoBreaker => "the entry has no circuit breaker",
            CommandError::KeyRequired => "the entry's breaker is keyed: name a key",
            CommandError::NotKeyed => "the entry's breaker is not keyed: name no key",
            CommandError::UnknownKey => "the keyed breaker holds no such key",
            CommandError::Unsupported => "the registry does not carry out this command",
        })
    }
}

impl std::error::Error for CommandError {}

#[cfg(feature = "serde")]
mod ser {
    //! How the listing writes what has no `Serialize` of its own: states by name,
    //! durations in milliseconds, settings as the layer's file section writes them.

    use fusebox_breaker::{CircuitBreakerConfig, CircuitBreakerSection, State};
    use fusebox_classify::section::Section;
    use fusebox_retry::BudgetSnapshot;
    use serde::ser::SerializeStruct;
    use serde::{Serialize, Serializer};
    use std::sync::Arc;
    use std::time::Duration;

    pub(super) fn state<S: Serializer>(state: &State, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(state.as_str())
    }

    pub(super) fn opt_state<S: Serializer>(state: &Option<State>, s: S) -> Result<S::Ok, S::Error> {
        match state {
            Some(state) => s.serialize_str(state.as_str()),
            None => s.serialize_none(),
        }
    }

    pub(super) fn millis<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn breaker_config<S: Serializer>(
        config: &Option<Arc<CircuitBreakerConfig>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match config {
            Some(c) => CircuitBreakerSection::of(c).serialize(s),
            None => s.serialize_none(),
        }
    }

    pub(super) fn section<T, S>(config: &T, s: S) -> Result<S::Ok, S::Error>
    where
        T: Clone,
        S: Serializer,
        T: SectionOf,
    {
        config.section().serialize(s)
    }

    /// A configuration's file section.
    pub(super) trait SectionOf {
        type Section: Serialize;
        fn section(&self) -> Self::Section;
    }

    impl SectionOf for fusebox_limit::ConcurrencyLimitConfig {
        type Section = fusebox_limit::LimitSection;
        fn section(&self) -> Self::Section {
            fusebox_limit::LimitSection::of(self)
        }
    }

    impl SectionOf for fusebox_retry::RetryConfig {
        type Section = fusebox_retry::RetrySection;
        fn section(&self) -> Self::Section {
            fusebox_retry::RetrySection::of(self)
        }
    }

    impl SectionOf for fusebox_timeout::TimeoutConfig {
        type Section = fusebox_timeout::TimeoutSection;
        fn section(&self) -> Self::Section {
            fusebox_timeout::TimeoutSection::of(self)
        }
    }

    pub(super) fn budget<S: Serializer>(b: &BudgetSnapshot, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("BudgetSnapshot", 6)?;
        st.serialize_field("requests", &b.requests)?;
        st.serialize_field("retries", &b.retries)?;
        st.serialize_field("failures", &b.failures)?;
        st.serialize_field("ignored", &b.ignored)?;
        st.serialize_field("available", &b.available)?;
        st.serialize_field("cut_off", &b.cut_off)?;
        st.end()
    }
}
