//! One circuit breaker for a fleet of replicas, on Redis.
//!
//! A breaker per replica sees only the traffic its load balancer sent it: with 20 replicas
//! each needs its own `minimum_calls` before it reacts, and each probes on its own.
//! fusebox-redis keeps the breaker's window and state in Redis, so the fleet reacts as one —
//! after `minimum_calls` in total — and probes as one: only `permitted_probes` calls run
//! fleet-wide while it is half-open. It plugs into the store boundary of
//! [`fusebox_breaker`]: [`OnRedis`] is a [`MakeStore`](fusebox_breaker::MakeStore), and the
//! layer does not change.
//!
//! # How it stays off the request path
//!
//! The `Store` trait is synchronous, and no call ever waits on Redis. Admission reads a
//! local view of the fleet's state — one atomic word, as in the in-memory store — refreshed
//! by the answer to every script call, by a pub/sub message on every fleet transition (one
//! channel per scope), and by polling when nothing was heard. Outcomes travel in the
//! background, in one of two [`Mode`]s:
//!
//! - **Strict**: each finished call sends one check-and-record script call (spawned,
//!   bounded by the timeout); its answer refreshes the view. The fleet window is exact.
//! - **Batched**: outcomes are counted locally (one compare-and-swap; nothing at all for a
//!   fast success in a clean count window) and flushed every `flush_interval` in one script
//!   call. The cost per call is close to the in-memory store's.
//!
//! ## Staleness bounds
//!
//! With Redis healthy and `d` the time of one Redis round trip:
//!
//! | | strict | batched |
//! |---|---|---|
//! | this replica's outcome reaches the fleet window | `d/2` after the call ends | up to `flush_interval + d/2` |
//! | this replica sees a transition its own outcome caused | `d` | `flush_interval + d` |
//! | this replica sees another replica's transition | pub/sub delivery (≈ `d/2`); `poll_interval` if messages are lost | same |
//! | a replica keeps admitting after the fleet opened | at most the above, then never | same |
//!
//! Every Redis call is bounded by `timeout`: past it the view is set aside (see below), so
//! no decision is ever taken on a view older than the last answer plus `timeout` without
//! the replica knowing it. In batched mode a time window stamps outcomes with Redis's clock
//! at the flush, up to `flush_interval` late, and the consecutive-failures trigger counts
//! runs across a flush approximately. While a replica's view says its count window is clean
//! it does not send fast successes; a window made dirty by another replica's failure is
//! announced on pub/sub, so at most `d/2` worth of this replica's successes go uncounted
//! (`poll_interval` if the message is lost) — which can only keep failures in the window
//! longer, never hide them.
//!
//! # In Redis
//!
//! One key space per scope — `dep:<name>`, optionally `:region:<x>` and `:tenant:<y>`
//! ([`Scope`]) — checked when the configuration is built (no request data; letters, digits,
//! `.`, `_`, `-`). A layer whose breaker name would have to stand for the dependency and
//! cannot (it is not a valid scope part, and the scope names no dependency) fails to build
//! with `store.scope.dep`. Every key of a scope carries it as its Redis Cluster hash tag, so
//! all live in one slot:
//!
//! | key | type | what |
//! |---|---|---|
//! | `fusebox:{dep:payments}:state` | hash | the state machine (fields below) |
//! | `fusebox:{dep:payments}:window` | hash | the window's running totals; a time window's buckets |
//! | `fusebox:{dep:payments}:ring` | string | a count window's calls, one byte each: `0` success, `1` failure, `2` slow success, `3` slow failure |
//! | `fusebox:{dep:payments}:leases` | sorted set | live probe leases: member the lease's token (`<replica>.<n>`), score when it expires (µs since the Unix epoch, Redis's clock) |
//! | `fusebox:{dep:payments}:epoch` | string | the scope's epoch (an integer); never expires |
//! | `fusebox:{dep:payments}:events` | pub/sub channel | the state after each transition |
//!
//! The state hash's fields, all integers (times in µs since the Unix epoch, by Redis's
//! clock):
//!
//! | field | what |
//! |---|---|
//! | `st` | the state: 0 CLOSED, 1 OPEN, 2 HALF_OPEN, 3 FORCED_OPEN, 4 DISABLED, 5 METRICS_ONLY |
//! | `ou` | while OPEN: when the open wait ends |
//! | `hs` | while HALF_OPEN: when it began |
//! | `ok` | while HALF_OPEN: probes that succeeded |
//! | `tr` | trips in a row (the open wait grows with it) |
//! | `cf` | consecutive failures |
//! | `wo`, `wr` | METRICS_ONLY: whether the breaker would be open now, and why |
//! | `rs`, `fr` | the last transition's reason (0 failure_rate, 1 slow_call_rate, 2 consecutive_failures, 3 open_wait_elapsed, 4 probe_failed, 5 half_open_timeout, 6 probes_succeeded, 7 forced_open, 8 disabled, 9 metrics_only, 10 reset) and the state it left |
//! | `en`, `pe` | when the current and the previous state were entered |
//! | `of`, `ji` | the last opening's whole wait and its jitter (µs) |
//!
//! The window hash holds `n`, `f` and `s` (calls, failures and slow calls in the window) and
//! `x` (the ring's next slot, or the newest bucket's number); a time window adds `c<i>`,
//! `f<i>` and `s<i>` for bucket `i`. So `redis-cli HGETALL 'fusebox:{dep:payments}:state'`
//! and `ZRANGE 'fusebox:{dep:payments}:leases' 0 -1 WITHSCORES` show a breaker as the fleet
//! sees it.
//!
//! One Lua script is the state machine: loaded once (`SCRIPT LOAD`), called with `EVALSHA`
//! (reloaded on `NOSCRIPT` after a Redis restart), atomic. It takes time from Redis
//! (`TIME`), never from a replica's clock; compares rates in integers
//! (`failures * 100 >= threshold * calls`); keeps the count window as a ring and the time
//! window as buckets, both with running totals. A state other than CLOSED never expires; a
//! CLOSED scope nobody writes to loses its state, window and ring after `idle_ttl`, and a
//! missing state reads as CLOSED.
//!
//! ## Epochs never repeat
//!
//! An **epoch** replaces the generation: it moves on every transition except
//! OPEN→HALF_OPEN, and a result admitted under any other epoch is discarded — by the script
//! (strict and batched), and before that by the replica. Epochs never repeat over the life
//! of a scope:
//!
//! - the epoch has a key of its own that never expires, so a CLOSED scope that expired when
//!   idle keeps it (and a call admitted before the expiry still counts after it: nothing
//!   transitioned);
//! - a scope with no epoch yet — new, or after `FLUSHALL` or a restart with an empty data
//!   set — starts at Redis's clock in microseconds, and every new epoch is the larger of the
//!   last one plus one and that clock. Epochs thus stay at or below the clock, so one
//!   started after a data loss is above every epoch given out before it — provided Redis's
//!   clock did not step back past the scope's last transition (a restart on a host whose
//!   clock is behind);
//! - an operator's reset is a transition like any other.
//!
//! The cost: one more key per scope (a few dozen bytes) that outlives the scope's other keys
//! — a scope that is never used again leaves it behind — one `GET` in every script call,
//! and one `SET` per transition. Epochs are large numbers (about 2^51 today), which is what
//! the events and snapshots show as the generation.
//!
//! ## Probes
//!
//! **Probes** are leases in Redis: only a replica holding a lease admits a probe, and the
//! script grants at most `permitted_probes` live or succeeded leases per half-open period,
//! fleet-wide. A lease lasts `probe_lease` — longer than a probe may take — so a replica
//! that dies holding one blocks that slot only until it expires; a probe whose call is
//! dropped gives its lease back at once.
//!
//! The budget is claimable the moment the open wait ends. A replica counts the calls it
//! rejected during the wait (up to the budget) and its worker wakes when the wait ends, as
//! its view times it, to claim as many leases as it has calls waiting, in one round trip;
//! the first replica there gets them, the others what is left. Calls that arrive after the
//! wait and find no lease are rejected (the request path never waits on Redis) and make the
//! worker claim at once, without waiting for a poll. A lease no call used is given back
//! after half of `probe_lease`, so a replica whose calls stopped holds the fleet's probes
//! no longer than that. A claim is one script call: a lease is held one round trip after
//! the first call past the wait, and — for calls that waited — one round trip after the
//! first tick of tokio's timer (1 ms resolution) at or after the wait's end, as this
//! replica's view times it (each answer read as late as it was taken in; the earliest
//! reading of one period stands). The `fleet_recovery` bench measures both against a
//! round trip.
//!
//! **Events**: each replica reports every fleet transition it observes, once, through the
//! breaker's usual `tracing` events, metrics and subscribers.
//!
//! **Jitter**: each script call carries the jitter of the next opening it might cause,
//! drawn as the in-memory breaker draws its own (from `CircuitBreakerConfig::seed` when set),
//! and a replica draws the next one only once a call of its own opened the breaker. A
//! seeded breaker's openings therefore get the same jitter on Redis as in memory (to the
//! microsecond the script keeps); in a fleet, each opening takes the jitter of the replica
//! whose call caused it.
//!
//! # When Redis is slow or down
//!
//! Every call has a time bound (`timeout`). A call that fails or times out switches the
//! breaker to its [`Fallback`] — by default a fresh in-memory breaker of this replica's own
//! calls (a fleet OPEN known at that moment keeps rejecting until its wait ends) — logs it
//! (`WARN`, target `fusebox::redis`) and counts it. The connection reconnects by itself; the
//! worker tries Redis every `retry_interval` and, when it answers, resynchronises: the
//! fallback's window joins the fleet's, and the fleet's state decides again. Nothing
//! panics, and no request waits. Probe leases survive a fallback: a probe in flight reports
//! on its lease, and leases this replica may hold without being able to use them — a claim,
//! a probe's record or a release that got no answer — are given back as soon as Redis
//! answers, so a moment's stall of one replica never holds the fleet's probe budget for
//! `probe_lease`. The return is reported as a transition only when what the replica acted
//! on changes: from the fallback breaker's state if it made transitions of its own (they
//! were reported as it made them), otherwise from the state reported before the fallback.
//!
//! | metric | kind | labels | meaning |
//! |---|---|---|---|
//! | `fusebox_redis_fallbacks_total` | counter | `dependency`, `key`¹ | switches to the fallback |
//! | `fusebox_redis_resyncs_total` | counter | `dependency`, `key`¹ | returns to the fleet's state |
//! | `fusebox_redis_connected` | gauge | `dependency`, `key`¹ | 1 while Redis answers, 0 while falling back |
//! | `fusebox_redis_dropped_outcomes_total` | counter | `dependency`, `key`¹ | outcomes lost (a batch Redis did not take, or a full batch) |
//!
//! ¹ a key of a keyed breaker shared on Redis. The families and their HELP text are
//! [`telemetry::FAMILIES`].
//!
//! # Limits
//!
//! - The stores' background tasks need a tokio runtime with time and IO enabled; a store
//!   made outside a runtime starts them on first use inside one.
//! - A store knows the fleet's state once Redis first answered: until then the fallback
//!   decides. [`OnRedis::prefetch`] reads it before a breaker is built; a keyed breaker's
//!   key made on the request path starts on its fallback for one round trip.
//! - The keys are laid out for Redis Cluster (one hash slot per scope), but the connection
//!   is to one Redis (or a proxy in front of a cluster); no cluster client is included.
//!
//! # Example
//!
//! ```
//! use fusebox_breaker::{CircuitBreakerConfig, CircuitBreakerLayer, State};
//! use fusebox_redis::{OnRedis, RedisStoreConfig, Scope};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let redis = OnRedis::new(
//!     RedisStoreConfig::builder("redis://127.0.0.1:6379/0")
//!         .scope(Scope::dep("payments").region("eu"))
//!         .batched(Duration::from_millis(5))
//!         .timeout(Duration::from_millis(50))
//!         .build()?,
//! );
//! let breaker = CircuitBreakerConfig::builder().name("payments").minimum_calls(50).build()?;
//! let layer = CircuitBreakerLayer::builder(breaker).store(redis).build()?;
//!
//! // Built outside a runtime, nothing has connected yet: until Redis answers, the local
//! // fallback decides (here: a closed in-memory breaker).
//! assert_eq!(layer.handle().state(), State::Closed);
//! # Ok(())
//! # }
//! ```
//!
//! In a service, read the fleet's state before taking traffic so that a replica started
//! mid-incident rejects from its first call:
//!
//! ```no_run
//! # use fusebox_breaker::{CircuitBreakerConfig, CircuitBreakerLayer};
//! # use fusebox_redis::{OnRedis, RedisStoreConfig};
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let redis = OnRedis::new("redis://cache:6379/0?mode=strict&timeout=20ms".parse::<RedisStoreConfig>()?);
//! let breaker = CircuitBreakerConfig::builder().name("payments").build()?;
//! redis.prefetch(&breaker, None).await;
//! let layer = CircuitBreakerLayer::builder(breaker).store(redis.clone()).build()?;
//! # let _ = layer;
//! # Ok(())
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod batch;
mod config;
mod script;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
mod section;
mod store;
pub mod telemetry;
mod worker;

pub use crate::backend::{OnRedis, RedisStats};
pub use crate::config::{
    Fallback, MAX_SCOPE_PART, Mode, RedisStoreConfig, RedisStoreConfigBuilder, Scope,
    is_valid_scope_part,
};
#[cfg(feature = "serde")]
pub use crate::section::RedisStoreSection;
pub use crate::store::RedisStore;

// The README is the crate's page on crates.io: its example runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
