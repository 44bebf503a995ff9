//! `fusebox drill --replicas N --store redis://...`: replicas sharing one breaker on a real
//! `redis-server` (started here on a free port of 127.0.0.1, without persistence).
//!
//! Redis keeps its own clock, so this drill runs on real time: a scenario of three and a
//! half seconds. It asserts what only a shared store can do — both replicas open at the
//! fleet's opening and no half-open period lets more than the probe budget through
//! fleet-wide — through the scenario's own expectations and the report. Like the other
//! Redis tests of the workspace it does not skip when `redis-server` is missing: it fails
//! and says how to install it.

mod common;

use common::{fusebox, read_json, scratch, write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Redis {
    child: Child,
    port: u16,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn redis_server(dir: &std::path::Path) -> Redis {
    let port = TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    // Owned at once: dropping it (a failed start included) kills and reaps the process.
    let redis = Redis {
        child: Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "redis-server must be on PATH for this test (Debian: apt-get install redis-server; \
             bash .ci/run installs it)",
            ),
        port,
    };
    // Wait until it accepts connections (at most 10 s).
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return redis;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("redis-server did not start on port {port}");
}

const FLEET: &str = r#"
name = "fleet"
description = "two replicas, one breaker on Redis"
seed = 3

[traffic]
rate = 100
concurrency = 50
path = "/items/1"

[policy.breaker]
count_window = 10
minimum_calls = 5
failure_rate_threshold = 50
open_wait = "800ms"
open_wait_jitter = "0s"
permitted_probes = 3
max_half_open_wait = "1s"

[policy.timeout]
default_timeout = "1s"

[[phases]]
name = "healthy"
duration = "1s"
status = 200
latency = "10ms"

[[phases]]
name = "outage"
duration = "1200ms"
status = 503
latency = { min = "30ms", max = "40ms" }

[[phases]]
name = "back"
duration = "1500ms"
status = 200
latency = "10ms"

[expect]
opens = true
first_open_in = "outage"
max_half_open_calls = 3
closed_at_end = true
"#;

#[tokio::test]
async fn replicas_share_one_breaker_on_redis() {
    let dir = scratch("redis-fleet");
    let redis = redis_server(&dir).await;
    let file = write(&dir, "fleet.toml", FLEET);
    let url = format!("redis://127.0.0.1:{}/0", redis.port);
    let run = fusebox(
        &dir,
        &[
            "drill",
            &file,
            "--replicas",
            "2",
            "--store",
            &url,
            "-q",
            "--out",
            "out",
        ],
    );
    run.assert_code(0);
    run.assert_stdout(&[
        "the replicas shared one breaker on redis://127.0.0.1:",
        "r1 CLOSED → OPEN",
        "r2 CLOSED → OPEN",
    ]);

    let json = read_json(&dir, "out/report.json");
    assert!(
        json["store"]
            .as_str()
            .unwrap()
            .contains("scope dep:fusebox-drill-fleet-")
    );
    let reports = json["replica_reports"].as_array().unwrap();
    assert_eq!(reports.len(), 2);
    // The fleet opened once; each replica heard of it.
    for r in reports {
        assert_eq!(r["summary"]["openings"], 1, "{r}");
        assert_eq!(r["final_state"], "closed");
    }
    // Fleet-wide, no half-open period let more than the 3 probes through, and at least
    // one was decided by them.
    let periods: Vec<u64> = reports
        .iter()
        .flat_map(|r| r["transitions"].as_array().unwrap().iter())
        .filter_map(|t| t["half_open_calls"].as_u64())
        .collect();
    assert!(!periods.is_empty());
    assert!(periods.iter().all(|&n| n <= 3), "{periods:?}");
}

#[test]
fn an_unreachable_store_is_reported() {
    let dir = scratch("redis-down");
    let file = write(&dir, "fleet.toml", FLEET);
    let port = TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let url = format!("redis://127.0.0.1:{port}/0");
    let run = fusebox(&dir, &["drill", &file, "--store", &url, "-q"]);
    run.assert_code(1);
    assert!(
        run.stderr
            .contains(&format!("--store: Redis at {url} does not answer")),
        "{}",
        run.stderr
    );
}

/// Runs the built-in `scenario` ten times in a row with three replicas sharing one breaker
/// on a fresh scope of a real Redis each time: every run must pass all the scenario's
/// expectations, fleet-wide half-open counts included. The drill runs on real time (Redis's
/// clock cannot be paused), so each run takes as long as the scenario.
async fn a_builtin_scenario_passes_ten_times_on_a_fleet(scenario: &str) {
    let dir = scratch(&format!("redis-builtin-{scenario}"));
    let redis = redis_server(&dir).await;
    let url = format!("redis://127.0.0.1:{}/0", redis.port);
    for run in 1..=10 {
        let out = format!("out-{run}");
        let result = fusebox(
            &dir,
            &[
                "drill",
                scenario,
                "--replicas",
                "3",
                "--store",
                &url,
                "-q",
                "--out",
                &out,
            ],
        );
        assert_eq!(
            result.code, 0,
            "run {run} of {scenario:?} failed:\n{}\n{}",
            result.stdout, result.stderr
        );
        let json = read_json(&dir, &format!("{out}/report.json"));
        assert_eq!(json["passed"], true, "run {run}");
        assert_eq!(json["replica_reports"].as_array().map(Vec::len), Some(3));
    }
}

#[tokio::test]
async fn brownout_passes_ten_times_in_a_row_on_a_fleet() {
    a_builtin_scenario_passes_ten_times_on_a_fleet("brownout").await;
}

#[tokio::test]
async fn latency_injection_passes_ten_times_in_a_row_on_a_fleet() {
    a_builtin_scenario_passes_ten_times_on_a_fleet("latency-injection").await;
}

#[tokio::test]
async fn bad_requests_pass_ten_times_in_a_row_on_a_fleet() {
    a_builtin_scenario_passes_ten_times_on_a_fleet("bad-requests").await;
}

#[tokio::test]
async fn unavailable_passes_ten_times_in_a_row_on_a_fleet() {
    a_builtin_scenario_passes_ten_times_on_a_fleet("unavailable").await;
}

#[tokio::test]
async fn gradual_recovery_passes_ten_times_in_a_row_on_a_fleet() {
    a_builtin_scenario_passes_ten_times_on_a_fleet("gradual-recovery").await;
}

#[test]
fn every_builtin_scenario_has_its_fleet_drill() {
    let tested = [
        "brownout",
        "latency-injection",
        "bad-requests",
        "unavailable",
        "gradual-recovery",
    ];
    // The drills over keys or endpoints run one client with its breakers in memory: no
    // fleet (see `a_drill_over_keys_or_endpoints_refuses_a_fleet`).
    let one_client = |text: &str| {
        let source = fusebox_cli::input::SourceFile::new("builtin", text);
        fusebox_cli::scenario::load_scenario(&source, None)
            .expect("a valid built-in")
            .traffic
            .parts()
            > 0
    };
    let mut builtin: Vec<&str> = fusebox_cli::scenario::BUILTIN
        .iter()
        .filter(|(_, text)| !one_client(text))
        .map(|(name, _)| *name)
        .collect();
    builtin.sort_unstable();
    let mut tested = tested.to_vec();
    tested.sort_unstable();
    assert_eq!(
        builtin, tested,
        "a built-in scenario without a fleet drill test"
    );
}

#[test]
fn a_drill_over_keys_or_endpoints_refuses_a_fleet() {
    let dir = scratch("redis-partial");
    for scenario in [
        "hot-shard",
        "ejection-cascade",
        "ejection-cascade-unguarded",
    ] {
        for flags in [
            &["--store", "redis://127.0.0.1:1/0"][..],
            &["--replicas", "2"][..],
        ] {
            let mut args = vec!["drill", scenario, "--virtual-time", "-q"];
            args.extend_from_slice(flags);
            let result = fusebox(&dir, &args);
            assert_eq!(result.code, 2, "{scenario} {flags:?}: {}", result.stderr);
            assert!(
                result.stderr.contains("leave out --replicas and --store"),
                "{scenario} {flags:?}: {}",
                result.stderr
            );
        }
    }
}
