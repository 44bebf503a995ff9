//! A `Policy` whose breaker keeps its state on a real `redis-server`: two replicas of a
//! service — two Policies built from the same policy file, each with its own connection to
//! Redis, as two processes would have — share one breaker. Failures sent through one open
//! the other; half-open probing runs exactly the probe budget fleet-wide; with Redis
//! stopped, or never started, calls go on being served on each replica's local state. And
//! the file's `breaker.store` section: a valid one builds, an invalid one reports every
//! problem at its path.
//!
//! Redis's clock cannot be paused: like the other Redis tests these run on real time with
//! short waits, and poll for what they expect within generous bounds (`eventually`),
//! never asserting how long anything took.

use bytes::Bytes;
use fusebox::breaker::State;
use fusebox::config::PolicyFile;
use fusebox::error::CircuitOpen;
use fusebox::hyper::PolicyClient;
use fusebox::policy::BreakerKey;
use fusebox::redis::{Mode, RedisStoreConfig, Scope};
use fusebox::{BoxError, CircuitBreakerConfig, KeyBy, Policy};
use fusebox_tests::redis_server::{RedisServer, eventually};
use fusebox_tests::{Reply, TestServer, get};
use http_body_util::Full;
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tower::ServiceExt;

/// Bounds for `eventually`: generous, so a loaded CI machine does not fail a correct store.
const WITHIN: Duration = Duration::from_secs(10);

/// The policy file every replica reads: a count window of 20 that trips at 50 % after 10
/// calls, no jitter, two probes; the breaker's state on the Redis at `url`, in `mode`.
fn policy_file(url: &str, mode: &str) -> PolicyFile {
    policy_file_with(url, mode, 50, "300ms")
}

/// [`policy_file`] with another threshold and open wait.
fn policy_file_with(url: &str, mode: &str, threshold: u32, open_wait: &str) -> PolicyFile {
    PolicyFile::from_toml(&format!(
        r#"
        [defaults.breaker]
        count_window = 20
        minimum_calls = 10
        failure_rate_threshold = {threshold}
        open_wait = "{open_wait}"
        open_wait_jitter = "0s"
        permitted_probes = 2
        max_half_open_wait = "30s"

        [defaults.breaker.store]
        kind = "redis"
        url = "{url}"
        mode = "{mode}"
        flush_interval = "5ms"
        timeout = "200ms"
        poll_interval = "100ms"
        retry_interval = "50ms"
        probe_lease = "5s"

        [policies.payments.breaker.store]
        scope = "dep:payments:region:eu"
        "#
    ))
    .expect("a valid policy file")
}

/// One replica of the service: the file's `payments` policy around a hyper client.
struct Replica {
    policy: Policy,
    client: PolicyClient<Full<Bytes>>,
}

impl Replica {
    fn new(file: &PolicyFile) -> Replica {
        Replica::of(file.build("payments").expect("payments builds"))
    }

    fn of(policy: Policy) -> Replica {
        let client = fusebox::hyper::wrap(&policy);
        Replica { policy, client }
    }

    fn state(&self) -> State {
        self.policy
            .breaker_handle()
            .expect("an unkeyed breaker")
            .state()
    }

    fn connected(&self) -> bool {
        self.policy
            .breaker_store()
            .redis()
            .expect("on Redis")
            .is_connected()
    }

    /// One call: the status, or the policy's error.
    async fn call(&self, url: &str) -> Result<u16, BoxError> {
        self.client
            .clone()
            .oneshot(get(url))
            .await
            .map(|r| r.status().as_u16())
    }
}

/// Two replicas built from one file, each connected to Redis.
async fn two_replicas(file: &PolicyFile) -> (Replica, Replica) {
    let (a, b) = (Replica::new(file), Replica::new(file));
    for r in [&a, &b] {
        eventually(WITHIN, "the replica heard from Redis", || async {
            r.connected()
        })
        .await;
    }
    (a, b)
}

async fn failures_through_one_open_the_other(mode: &str) {
    let redis = RedisServer::start().await;
    let dep = TestServer::start(Reply::status(503)).await;
    let (a, b) = two_replicas(&policy_file(&redis.url(), mode)).await;

    // Ten failures, all through replica A: the fleet's window trips.
    for _ in 0..10 {
        assert_eq!(a.call(&dep.url("/pay")).await.expect("admitted"), 503);
    }
    for (name, r) in [("A", &a), ("B", &b)] {
        eventually(WITHIN, &format!("replica {name} shows OPEN"), || async {
            r.state() == State::Open
        })
        .await;
    }
    // B never called the dependency, and rejects at once.
    let err = b.call(&dep.url("/pay")).await.expect_err("rejected");
    let open = err
        .downcast_ref::<CircuitOpen>()
        .expect("the breaker's error");
    assert_eq!(open.breaker(), "payments");
    assert_eq!(
        dep.received(),
        10,
        "only A's ten calls reached the dependency"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_through_one_replica_open_the_other_batched() {
    failures_through_one_open_the_other("batched").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_through_one_replica_open_the_other_strict() {
    failures_through_one_open_the_other("strict").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_probing_is_fleet_wide() {
    let redis = RedisServer::start().await;
    let dep = TestServer::start(Reply::status(503)).await;
    let (a, b) = two_replicas(&policy_file(&redis.url(), "batched")).await;
    for r in [&a, &b] {
        for _ in 0..5 {
            assert_eq!(r.call(&dep.url("/pay")).await.expect("admitted"), 503);
        }
    }
    for r in [&a, &b] {
        eventually(WITHIN, "the fleet opened", || async {
            r.state() == State::Open
        })
        .await;
    }

    // The dependency recovers, slowly: a probe takes two seconds. Both replicas keep asking,
    // from three tasks each, once the open wait (300 ms) is over.
    dep.set(Reply::slow(200, Duration::from_secs(2)));
    let before = dep.received();
    let replicas = Arc::new([a, b]);
    let stop = Arc::new(AtomicBool::new(false));
    let rejected = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..2 {
        for _ in 0..3 {
            let (replicas, stop, rejected, url) = (
                Arc::clone(&replicas),
                Arc::clone(&stop),
                Arc::clone(&rejected),
                dep.url("/pay"),
            );
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    match replicas[i].call(&url).await {
                        Ok(status) => assert_eq!(status, 200),
                        Err(e) => {
                            assert!(e.is::<CircuitOpen>(), "{e}");
                            rejected.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }));
        }
    }
    eventually(WITHIN, "two probes admitted fleet-wide", || async {
        dep.received() - before == 2
    })
    .await;
    // However much both replicas ask while the probes run, no third call starts.
    let seen = rejected.load(Ordering::SeqCst);
    eventually(WITHIN, "more rejections while the probes run", || async {
        rejected.load(Ordering::SeqCst) >= seen + 50
    })
    .await;
    let in_half_open = dep.received() - before;
    // The two probes succeed: the whole fleet closes, and calls flow again.
    for r in replicas.iter() {
        eventually(WITHIN, "the fleet closed", || async {
            r.state() == State::Closed
        })
        .await;
    }
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.expect("no task panicked");
    }
    assert_eq!(in_half_open, 2, "exactly the probe budget ran, fleet-wide");
    assert!(dep.max_in_flight() >= 2, "both probes ran together");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_stopped_calls_are_served_on_local_state() {
    let mut redis = RedisServer::start().await;
    let dep = TestServer::start(Reply::status(200)).await;
    let (a, b) = two_replicas(&policy_file(&redis.url(), "batched")).await;
    for r in [&a, &b] {
        assert_eq!(r.call(&dep.url("/pay")).await.expect("served"), 200);
    }

    redis.kill();
    // Every call is still served while the replicas find out.
    for (name, r) in [("A", &a), ("B", &b)] {
        eventually(WITHIN, &format!("replica {name} fell back"), || async {
            assert_eq!(r.call(&dep.url("/pay")).await.expect("served"), 200);
            !r.connected()
        })
        .await;
    }

    // Each replica now judges its own calls: A's failures open A alone.
    dep.set(Reply::status(503));
    let mut failures = 0;
    loop {
        match a.call(&dep.url("/pay")).await {
            Ok(status) => {
                assert_eq!(status, 503);
                failures += 1;
                assert!(failures <= 40, "A's local breaker never opened");
            }
            Err(e) => {
                assert!(e.is::<CircuitOpen>(), "only the breaker rejects: {e}");
                break;
            }
        }
    }
    assert_eq!(a.state(), State::Open);
    assert_eq!(b.state(), State::Closed, "B saw none of A's failures");
    assert_eq!(b.call(&dep.url("/pay")).await.expect("B admits"), 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn building_from_a_file_does_not_need_redis() {
    // Nothing listens where the file says Redis is.
    let nowhere = fusebox_tests::closed_port().await;
    let file = policy_file(&format!("redis://{nowhere}/0"), "strict");
    let replica = Replica::new(&file);
    assert_eq!(replica.state(), State::Closed);

    let dep = TestServer::start(Reply::status(200)).await;
    for _ in 0..5 {
        assert_eq!(replica.call(&dep.url("/pay")).await.expect("served"), 200);
    }
    eventually(WITHIN, "Redis was tried, and did not answer", || async {
        let stats = replica
            .policy
            .breaker_store()
            .redis()
            .expect("on Redis")
            .stats();
        stats.errors + stats.timeouts > 0
    })
    .await;
    assert!(!replica.connected());
    assert_eq!(replica.call(&dep.url("/pay")).await.expect("served"), 200);
    assert_eq!(dep.received(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_policy_in_code_shares_the_keys_it_lists() {
    let redis = RedisServer::start().await;
    let dep = TestServer::start(Reply::status(503)).await;
    let replica = || {
        Replica::of(
            Policy::builder("partners")
                .circuit_breaker(
                    CircuitBreakerConfig::builder()
                        .name("partners")
                        .count_window(20)
                        .minimum_calls(10)
                        .failure_rate_threshold(50)
                        .open_wait(Duration::from_secs(30))
                        .open_wait_jitter(Duration::ZERO),
                )
                .breaker_key(KeyBy::Host)
                .breaker_store(
                    RedisStoreConfig::builder(redis.url())
                        .strict()
                        .timeout(Duration::from_millis(200))
                        .poll_interval(Duration::from_millis(100))
                        .retry_interval(Duration::from_millis(50))
                        .share_key("127.0.0.1"),
                )
                .build()
                .expect("a valid keyed policy on Redis"),
        )
    };
    let (a, b) = (replica(), replica());
    let shared = dep.url("/quote"); // host 127.0.0.1: listed, shared on Redis
    let local = shared.replacen("127.0.0.1", "localhost", 1); // host localhost: local

    for _ in 0..10 {
        assert_eq!(a.call(&shared).await.expect("admitted"), 503);
        assert_eq!(a.call(&local).await.expect("admitted"), 503);
    }
    // B's key 127.0.0.1 opens from A's failures: B starts rejecting it within a few calls.
    let admitted = Cell::new(0);
    eventually(WITHIN, "B rejects the shared key", || async {
        match b.call(&shared).await {
            Ok(_) => {
                admitted.set(admitted.get() + 1);
                false
            }
            Err(e) => e.is::<CircuitOpen>(),
        }
    })
    .await;
    assert!(
        admitted.get() < 10,
        "B's own calls did not open it ({})",
        admitted.get()
    );
    let keys = b.policy.keyed_breaker_handle().expect("a keyed breaker");
    let key = BreakerKey::host("127.0.0.1");
    assert_eq!(keys.get(&key).map(|h| h.state()), Some(State::Open));
    // A's local key opened on A's own window; B's is its own.
    assert_eq!(
        a.policy
            .keyed_breaker_handle()
            .and_then(|k| k.get(&BreakerKey::host("localhost")))
            .map(|h| h.state()),
        Some(State::Open)
    );
    assert_eq!(b.call(&local).await.expect("B's local key is closed"), 503);
}

#[test]
fn a_policy_file_with_a_redis_store_parses_and_builds() {
    let yaml = r#"
defaults:
  breaker:
    store:
      kind: redis
      url: "redis://127.0.0.1:6379/0"
      mode: strict
      timeout: 20ms
policies:
  payments:
    breaker:
      store:
        scope: "dep:payments:tenant:acme"
        fallback: fail_open
  ledger:
    breaker:
      store:
        kind: memory
"#;
    let file = PolicyFile::from_yaml(yaml).expect("a valid file");
    // Built outside any runtime, with no Redis at that address: nothing connects.
    let payments = file.build("payments").expect("payments builds");
    let config = payments.breaker_store().redis().expect("on Redis").config();
    assert_eq!(config.mode(), Mode::Strict);
    assert_eq!(config.timeout(), Duration::from_millis(20));
    assert_eq!(config.scope(), &Scope::dep("payments").tenant("acme"));
    assert_eq!(
        config.fallback(),
        fusebox::redis::Fallback::FailOpen,
        "the file's fallback"
    );
    // Until Redis answers, the fallback decides: fail_open admits every call, and the
    // breaker shows as DISABLED.
    assert_eq!(
        payments.breaker_handle().map(|h| h.state()),
        Some(State::Disabled)
    );
    let ledger = file.build("ledger").expect("ledger builds");
    assert!(ledger.breaker_store().is_in_memory());
}

#[test]
fn invalid_store_sections_report_every_problem_at_its_path() {
    let err = PolicyFile::from_toml(
        r#"
        [defaults.breaker.store]
        kind = "redis"
        url = "redis://127.0.0.1:6379/0"
        idle_ttl = "10ms"

        [policies.payments.breaker.store]
        scope = "dep:payments:region:eu west"
        mode = "sometimes"
        probe_lease = "1ms"
        flush_intervl = "5ms"

        [policies.orders.breaker]
        key = "host"
        "#,
    )
    .expect_err("invalid");
    let problems: Vec<String> = err.problems().iter().map(|p| p.to_string()).collect();
    assert_eq!(
        problems,
        [
            "policies.payments.breaker.store.flush_intervl: unknown key; did you mean `flush_interval`?",
            "policies.payments.breaker.store.mode: must be one of \"strict\", \"batched\", got \"sometimes\"",
            "defaults.breaker.store.idle_ttl: must be at least 1s, got 10ms",
            "policies.payments.breaker.store.scope: must be 1 to 64 ASCII letters, digits, '.', '_' or '-', got \"eu west\"",
            "policies.payments.breaker.store.probe_lease: must be longer than timeout (50ms), got 1ms",
        ]
    );
}

/// The example files' commented-out `store` section, uncommented: the lines from the one
/// that opens it while they stay comments (`# ...` in TOML, the indented `#` lines in YAML).
fn uncomment_store(text: &str, opens: &str) -> String {
    let mut inside = false;
    let mut found = false;
    let out: Vec<String> = text
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            if trimmed == opens {
                inside = true;
                found = true;
            } else if inside && !(trimmed.starts_with("# ") && trimmed.len() > 2) {
                inside = false;
            }
            if inside {
                line.replacen("# ", "", 1)
            } else {
                line.to_owned()
            }
        })
        .collect();
    assert!(found, "the example has a commented {opens:?}");
    out.join("\n")
}

#[test]
fn the_example_files_redis_store_section_builds_when_uncommented() {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/");
    let toml = std::fs::read_to_string(format!("{examples}fusebox.toml")).expect("the TOML");
    let yaml = std::fs::read_to_string(format!("{examples}fusebox.yaml")).expect("the YAML");
    let files = [
        PolicyFile::from_toml(&uncomment_store(
            &toml,
            "# [policies.fraud-eu.breaker.store]",
        )),
        PolicyFile::from_yaml(&uncomment_store(&yaml, "# store:")),
    ];
    for file in files {
        let file = file.expect("the uncommented example is valid");
        let fraud = file
            .policy("fraud-eu")
            .expect("fraud-eu")
            .fallback(fusebox::Fallback::new(|_| {
                http::Response::new(Bytes::from_static(b"rules v0"))
            }))
            .build()
            .expect("fraud-eu builds with its store on Redis");
        let config = fraud.breaker_store().redis().expect("on Redis").config();
        assert_eq!(config.scope(), &Scope::dep("fraud").region("eu"));
        assert_eq!(config.mode(), Mode::Batched);
        assert_eq!(config.timeout(), Duration::from_millis(50));
        let inventory = file.build("inventory").expect("inventory builds");
        assert!(inventory.breaker_store().is_in_memory());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_the_fleets_thresholds_and_waits_and_keeps_the_connection_and_state() {
    let redis = RedisServer::start().await;
    let dep = TestServer::start(Reply::status(200)).await;
    let file = policy_file(&redis.url(), "strict");
    let (a, b) = two_replicas(&file).await;

    // Every replica reloads the edited file: a 20 % threshold and a 30 s open wait.
    let edited = policy_file_with(&redis.url(), "strict", 20, "30s");
    for r in [&a, &b] {
        let reports = edited.reload(&[&r.policy]).expect("a valid reload");
        assert!(reports[0].is_complete(), "{}", reports[0]);
        let paths: Vec<_> = reports[0].changes.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "breaker.failure_rate_threshold",
                "breaker.open_wait",
                "breaker.max_open_wait"
            ],
            "{}",
            reports[0]
        );
        assert!(r.connected(), "the connection is kept");
    }

    // Eight successes and two failures, through A: 20 % of ten calls, which opens the
    // fleet at the new threshold (and would not have at 50 %).
    for _ in 0..8 {
        assert_eq!(a.call(&dep.url("/pay")).await.expect("admitted"), 200);
    }
    dep.set(Reply::status(503));
    for _ in 0..2 {
        assert_eq!(a.call(&dep.url("/pay")).await.expect("admitted"), 503);
    }
    for (name, r) in [("A", &a), ("B", &b)] {
        eventually(WITHIN, &format!("replica {name} shows OPEN"), || async {
            r.state() == State::Open
        })
        .await;
    }
    let open = a.policy.breaker_handle().expect("a breaker").snapshot();
    let left = open.until_half_open.expect("an open wait");
    assert!(
        left > Duration::from_secs(20),
        "the new open wait: {left:?}"
    );

    // Reloaded while open: the fleet's breaker stays open, in the same generation.
    let reports = file.reload(&[&a.policy]).expect("a valid reload");
    assert!(reports[0].is_complete(), "{}", reports[0]);
    let still = a.policy.breaker_handle().expect("a breaker").snapshot();
    assert_eq!(still.state, State::Open);
    assert_eq!(still.generation, open.generation);
    assert!(
        a.call(&dep.url("/pay"))
            .await
            .expect_err("rejected")
            .is::<CircuitOpen>()
    );
    assert!(a.connected());
}
