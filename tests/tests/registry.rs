//! The registry: what it lists (policies and layers built on their own, keyed breakers'
//! keys up to a bound, settings), that it holds them weakly (a policy dropped with its
//! services is no longer listed, a policy whose services live on still is), readiness over
//! mandatory dependencies, and commands by name.

use bytes::Bytes;
use fusebox::breaker::{ByHost, CircuitBreakerLayer, Command, State};
use fusebox::limit::ConcurrencyLimitLayer;
use fusebox::registry::{CommandError, Kind, NotReadyReason};
use fusebox::retry::ReplayBody;
use fusebox::{
    CircuitBreakerConfig, ConcurrencyLimitConfig, KeyBy, Policy, Registry, RetryBudgetLayer,
    RetryConfig,
};
use http::{Request, Response};
use http_body_util::Empty;
use std::convert::Infallible;
use std::time::Duration;
use tower::{Layer, ServiceExt};

fn breaker(name: &str) -> CircuitBreakerConfig {
    CircuitBreakerConfig::builder()
        .name(name)
        .count_window(4)
        .minimum_calls(4)
        .open_wait(Duration::from_secs(60))
        .open_wait_jitter(Duration::ZERO)
        .build()
        .expect("a valid breaker")
}

#[tokio::test(start_paused = true)]
async fn policies_and_standalone_layers_are_listed_with_their_settings() {
    let registry = Registry::new();
    let policy = Policy::builder("payments")
        .circuit_breaker(CircuitBreakerConfig::builder().failure_rate_threshold(40))
        .concurrency_limit(8)
        .timeout(Duration::from_millis(250))
        .retry_budget(RetryConfig::builder())
        .registry(&registry)
        .build()
        .unwrap();
    let layer = CircuitBreakerLayer::new(breaker("cache"));
    registry.register(&layer).unwrap();
    let limit = ConcurrencyLimitLayer::new(
        ConcurrencyLimitConfig::builder()
            .name("pool")
            .max_concurrency(3)
            .build()
            .unwrap(),
    );
    registry.register(&limit).unwrap();
    let retry = RetryBudgetLayer::new(RetryConfig::builder().name("search").build().unwrap());
    registry.register(&retry).unwrap();

    let listing = registry.list();
    let names: Vec<_> = listing
        .entries
        .iter()
        .map(|e| (e.name.as_str(), e.kind))
        .collect();
    assert_eq!(
        names,
        [
            ("payments", Kind::Policy),
            ("cache", Kind::Breaker),
            ("pool", Kind::Limit),
            ("search", Kind::Retry)
        ]
    );
    let payments = &listing.entries[0];
    let b = payments.breaker.as_ref().expect("a breaker");
    assert_eq!(b.name, "payments");
    assert!(!b.keyed);
    assert_eq!(b.current.as_ref().unwrap().state, State::Closed);
    assert_eq!(
        b.config.as_ref().unwrap().failure_rate_threshold(),
        40,
        "the effective settings"
    );
    assert_eq!(payments.limit.as_ref().unwrap().limit, 8);
    assert_eq!(
        payments.timeout.as_ref().unwrap().config.default_timeout(),
        Duration::from_millis(250)
    );
    assert!(payments.retry.is_some());
    assert_eq!(listing.entries[2].limit.as_ref().unwrap().limit, 3);
    assert_eq!(
        listing.entries[1]
            .breaker
            .as_ref()
            .unwrap()
            .config
            .as_ref()
            .unwrap()
            .minimum_calls(),
        4
    );

    // Names are unique among the living.
    let again = Policy::builder("payments")
        .circuit_breaker(CircuitBreakerConfig::builder())
        .registry(&registry)
        .build()
        .unwrap_err();
    assert_eq!(again.problems()[0].path(), "registry.name");

    // The listing follows the breaker.
    let cache = registry.list().entries[1].breaker.clone().unwrap();
    assert_eq!(cache.current.unwrap().state, State::Closed);
    layer.handle().force_open();
    let cache = registry.list().entries[1].breaker.clone().unwrap();
    assert_eq!(cache.current.unwrap().state, State::ForcedOpen);
    drop(policy);
}

#[tokio::test(start_paused = true)]
async fn an_entry_lives_as_long_as_its_services_and_goes_with_them() {
    let registry = Registry::new();
    let policy = Policy::builder("svc")
        .circuit_breaker(CircuitBreakerConfig::builder())
        .registry(&registry)
        .build()
        .unwrap();
    // As `ServiceBuilder::new().layer(policy).service(..)` does: the policy value is gone,
    // its service remains.
    let svc = policy.layer(tower::service_fn(
        |_: Request<ReplayBody<Empty<Bytes>>>| async {
            Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
        },
    ));
    drop(policy);
    assert_eq!(
        registry.list().entries.len(),
        1,
        "the service keeps it listed"
    );
    drop(svc);
    assert!(
        registry.list().entries.is_empty(),
        "gone with its last service"
    );

    // And the name is free again.
    let _again = Policy::builder("svc")
        .circuit_breaker(CircuitBreakerConfig::builder())
        .registry(&registry)
        .build()
        .unwrap();
    assert_eq!(registry.list().entries.len(), 1);

    let layer = CircuitBreakerLayer::new(breaker("alone"));
    registry.register(&layer).unwrap();
    assert_eq!(registry.list().entries.len(), 2);
    drop(layer);
    assert_eq!(registry.list().entries.len(), 1);
}

fn host_request(host: &str) -> Request<Empty<Bytes>> {
    Request::get(format!("http://{host}/"))
        .body(Empty::new())
        .expect("a request")
}

#[tokio::test(start_paused = true)]
async fn keyed_breakers_list_their_keys_up_to_the_bound() {
    let registry = Registry::new();
    let policy = Policy::builder("partners")
        .circuit_breaker(breaker("partners"))
        .breaker_key(KeyBy::Host)
        .registry(&registry)
        .build()
        .unwrap();
    let svc = policy.layer(tower::service_fn(|_: Request<_>| async {
        Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
    }));
    for host in ["a.example", "b.example", "c.example"] {
        svc.clone().oneshot(host_request(host)).await.unwrap();
    }
    let listing = registry.list_with(2);
    let b = listing.entries[0].breaker.as_ref().unwrap();
    assert!(b.keyed);
    assert_eq!(b.keys_total, 3);
    assert_eq!(b.keys.len(), 2, "bounded");
    let all = registry.list();
    let mut keys: Vec<_> = all.entries[0]
        .breaker
        .as_ref()
        .unwrap()
        .keys
        .iter()
        .map(|k| k.key.clone())
        .collect();
    keys.sort();
    assert_eq!(keys, ["a.example", "b.example", "c.example"]);

    // A command reaches one key by its name, and only that key.
    assert_eq!(
        registry.command("partners", None, Command::ForceOpen),
        Err(CommandError::KeyRequired)
    );
    assert_eq!(
        registry.command("partners", Some("z.example"), Command::ForceOpen),
        Err(CommandError::UnknownKey)
    );
    let done = registry
        .command("partners", Some("b.example"), Command::ForceOpen)
        .unwrap();
    assert_eq!((done.from, done.to), (State::Closed, State::ForcedOpen));
    let handle = policy.keyed_breaker_handle().unwrap();
    let states: Vec<_> = handle
        .keys()
        .iter()
        .map(|k| {
            let h = handle.get(k).unwrap();
            (h.key().unwrap().to_owned(), h.state())
        })
        .collect();
    for (key, state) in states {
        let want = if key == "b.example" {
            State::ForcedOpen
        } else {
            State::Closed
        };
        assert_eq!(state, want, "{key}");
    }

    // A standalone keyed layer registers too.
    let keyed = CircuitBreakerLayer::builder(breaker("hosts"))
        .build_keyed(ByHost)
        .unwrap();
    registry.register(&keyed).unwrap();
    assert_eq!(registry.list().entries[1].kind, Kind::KeyedBreaker);
}

#[tokio::test(start_paused = true)]
async fn readiness_names_the_mandatory_dependencies_that_are_open() {
    let registry = Registry::new();
    registry.require("payments").require("ledger");
    let payments = Policy::builder("payments")
        .circuit_breaker(breaker("payments"))
        .registry(&registry)
        .build()
        .unwrap();
    let optional = Policy::builder("recommendations")
        .circuit_breaker(breaker("recommendations"))
        .registry(&registry)
        .build()
        .unwrap();

    // The ledger is mandatory and not built yet.
    let r = registry.readiness();
    assert!(!r.is_ready());
    assert_eq!(r.not_ready.len(), 1);
    assert_eq!(
        (r.not_ready[0].name.as_str(), r.not_ready[0].reason),
        ("ledger", NotReadyReason::NotRegistered)
    );
    let ledger = Policy::builder("ledger")
        .concurrency_limit(4)
        .registry(&registry)
        .build()
        .unwrap();
    assert!(
        registry.readiness().is_ready(),
        "a mandatory entry without a breaker is ready"
    );

    // An optional dependency's open breaker does not matter.
    optional.breaker_handle().unwrap().force_open();
    assert!(registry.readiness().is_ready());

    // A mandatory one's does, until it closes.
    let svc = payments.layer(tower::service_fn(
        |_: Request<ReplayBody<Empty<Bytes>>>| async {
            Ok::<_, Infallible>(
                Response::builder()
                    .status(503)
                    .body(Empty::<Bytes>::new())
                    .unwrap(),
            )
        },
    ));
    for _ in 0..4 {
        svc.clone()
            .oneshot(Request::new(Empty::<Bytes>::new()))
            .await
            .unwrap();
    }
    let r = registry.readiness();
    assert!(!r.is_ready());
    assert_eq!(r.not_ready.len(), 1);
    assert_eq!(r.not_ready[0].name, "payments");
    assert_eq!(r.not_ready[0].state, Some(State::Open));
    assert_eq!(r.not_ready[0].reason, NotReadyReason::BreakerOpen);

    payments.breaker_handle().unwrap().reset();
    assert!(registry.readiness().is_ready());
    drop((ledger, optional));
}

#[tokio::test(start_paused = true)]
async fn a_keyed_mandatory_breaker_is_not_ready_only_when_every_key_is_open() {
    let registry = Registry::new();
    registry.require("partners");
    let policy = Policy::builder("partners")
        .circuit_breaker(breaker("partners"))
        .breaker_key(KeyBy::Host)
        .registry(&registry)
        .build()
        .unwrap();
    let svc = policy.layer(tower::service_fn(|_: Request<_>| async {
        Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
    }));
    for host in ["a.example", "b.example"] {
        svc.clone().oneshot(host_request(host)).await.unwrap();
    }
    registry
        .command("partners", Some("a.example"), Command::ForceOpen)
        .unwrap();
    assert!(
        registry.readiness().is_ready(),
        "b.example is still reachable"
    );
    registry
        .command("partners", Some("b.example"), Command::ForceOpen)
        .unwrap();
    let r = registry.readiness();
    assert!(!r.is_ready());
    assert_eq!(r.not_ready.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_spread_gated_dependency_breaker_is_listed_commanded_and_judged_for_readiness() {
    let registry = Registry::new();
    registry.require("partners");
    let policy = Policy::builder("partners")
        .circuit_breaker(breaker("partners"))
        .breaker_key(KeyBy::Host)
        .key_spread(fusebox::KeySpread::default())
        .registry(&registry)
        .build()
        .unwrap();
    let svc = policy.layer(tower::service_fn(|_: Request<_>| async {
        Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
    }));
    for host in ["a.example", "b.example"] {
        svc.clone().oneshot(host_request(host)).await.unwrap();
    }
    // Listed: the keys, and the dependency-wide breaker's own state as the current one.
    let listing = registry.list();
    let entry = listing
        .entries
        .iter()
        .find(|e| e.name == "partners")
        .unwrap();
    let b = entry.breaker.as_ref().unwrap();
    assert!(b.keyed);
    assert_eq!(b.keys_total, 2);
    let current = b.current.as_ref().expect("the dependency-wide breaker");
    assert_eq!(current.state, State::Closed);

    // Without a key, a command is the dependency-wide breaker's; readiness follows it.
    let done = registry
        .command("partners", None, Command::ForceOpen)
        .unwrap();
    assert_eq!((done.from, done.to), (State::Closed, State::ForcedOpen));
    assert_eq!(
        policy.breaker_handle().map(|h| h.state()),
        Some(State::ForcedOpen)
    );
    let r = registry.readiness();
    assert!(!r.is_ready());
    assert_eq!(r.not_ready.len(), 1);
    assert_eq!(r.not_ready[0].key, None);
    assert_eq!(r.not_ready[0].reason, NotReadyReason::BreakerOpen);
    // The keys were not touched.
    let keys = policy.keyed_breaker_handle().unwrap();
    for key in keys.keys() {
        assert_eq!(keys.get(&key).unwrap().state(), State::Closed);
    }
    registry.command("partners", None, Command::Reset).unwrap();
    assert!(registry.readiness().is_ready());

    // A keyed policy without a spread still needs a key.
    let plain = Registry::new();
    let _keyed = Policy::builder("hosts")
        .circuit_breaker(breaker("hosts"))
        .breaker_key(KeyBy::Host)
        .registry(&plain)
        .build()
        .unwrap();
    assert_eq!(
        plain
            .command("hosts", None, Command::ForceOpen)
            .unwrap_err(),
        CommandError::KeyRequired
    );
}
