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
//! `.`, `_`, `-`). Every key of a scope carries it as its Redis Cluster hash tag, so all
//! live in one slot:
//!
//! | key | what |
//! |---|---|
//! | `fusebox:{dep:payments}:state` | hash: state, epoch, open-until, half-open start, probes, last transition |
//! | `fusebox:{dep:payments}:window` | hash: window totals; a time window's buckets |
//! | `fusebox:{dep:payments}:ring` | a count window's calls, one byte each |
//! | `fusebox:{dep:payments}:leases` | sorted set: probe leases by expiry |
//! | `fusebox:{dep:payments}:events` | pub/sub channel: the state after each transition |
//!
//! One Lua script is the state machine: loaded once (`SCRIPT LOAD`), called with `EVALSHA`
//! (reloaded on `NOSCRIPT` after a Redis restart), atomic. It takes time from Redis
//! (`TIME`), never from a replica's clock; compares rates in integers
//! (`failures * 100 >= threshold * calls`); keeps the count window as a ring and the time
//! window as buckets, both with running totals. An **epoch** replaces the generation: it
//! moves on every transition except OPEN→HALF_OPEN, and a result admitted under another
//! epoch is discarded. A state other than CLOSED never expires; a CLOSED scope nobody
//! writes to expires after `idle_ttl`, and a missing record reads as CLOSED (epoch 0).
//!
//! **Probes** are leases in Redis: when the fleet goes half-open a replica that has calls
//! waiting claims one (atomically, at most `permitted_probes` live or succeeded), and only
//! a replica holding a lease admits a probe. A lease lasts `probe_lease` — longer than a
//! probe may take — so a replica that dies holding one blocks that slot only until it
//! expires. Leases left unused are given back.
//!
//! **Events**: each replica reports every fleet transition it observes, once, through the
//! breaker's usual `tracing` events, metrics and subscribers.
//!
//! # When Redis is slow or down
//!
//! Every call has a time bound (`timeout`). A call that fails or times out switches the
//! breaker to its [`Fallback`] — by default a fresh in-memory breaker of this replica's own
//! calls (a fleet OPEN known at that moment keeps rejecting until its wait ends) — logs it
//! (`WARN`, target `fusebox::redis`) and counts it. The connection reconnects by itself; the
//! worker tries Redis every `retry_interval` and, when it answers, resynchronises: the
//! fallback's window joins the fleet's, and the fleet's state decides again. Nothing
//! panics, and no request waits.
//!
//! | metric | kind | labels | meaning |
//! |---|---|---|---|
//! | `fusebox_redis_fallbacks_total` | counter | `breaker` | switches to the fallback |
//! | `fusebox_redis_resyncs_total` | counter | `breaker` | returns to the fleet's state |
//! | `fusebox_redis_connected` | gauge | `breaker` | 1 while Redis answers, 0 while falling back |
//! | `fusebox_redis_dropped_outcomes_total` | counter | `breaker` | outcomes lost (a batch Redis did not take, or a full batch) |
//!
//! # Limits
//!
//! - The stores' background tasks need a tokio runtime with time and IO enabled; a store
//!   made outside a runtime starts them on first use inside one.
//! - A store knows the fleet's state once Redis first answered: until then the fallback
//!   decides. [`OnRedis::prefetch`] reads it before a breaker is built; a keyed breaker's
//!   key made on the request path starts on its fallback for one round trip.
//! - Jitter is drawn by the replica whose call opens the breaker, from its own random
//!   numbers: `CircuitBreakerConfig::seed` makes one process reproducible, not a fleet.
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
//! let breaker = CircuitBreakerConfig::builder("payments").minimum_calls(50).build()?;
//! let layer = CircuitBreakerLayer::builder(breaker).store(redis).build();
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
//! let breaker = CircuitBreakerConfig::builder("payments").build()?;
//! redis.prefetch(&breaker, None).await;
//! let layer = CircuitBreakerLayer::builder(breaker).store(redis.clone()).build();
//! # let _ = layer;
//! # Ok(())
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod batch;
mod config;
mod script;
mod store;
mod worker;

pub use crate::backend::{OnRedis, RedisStats};
pub use crate::config::{
    Fallback, MAX_SCOPE_PART, Mode, RedisStoreConfig, RedisStoreConfigBuilder, Scope,
    is_valid_scope_part,
};
pub use crate::store::RedisStore;
