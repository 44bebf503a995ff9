//! Replays of crafted logs with exact expected trip times, through the binary and the
//! library; the sweep's table against a labelled incident.

mod common;

use common::{read_json, run_replay, scratch, write};
use fusebox_cli::config::{Policies, load_policy_file};
use fusebox_cli::input::SourceFile;
use fusebox_cli::replay::calls::format_rfc3339;
use fusebox_cli::replay::sweep::{Grid, IncidentSpec, SweepOptions, sweep};
use fusebox_cli::replay::{ReplayOptions, ReplayReport, replay};
use std::fmt::Write as _;
use std::time::Duration;

const POLICY: &str = r#"
[policies.api.default_route]
slow_call_duration = "1s"

[policies.api.breaker]
count_window = 10
minimum_calls = 5
failure_rate_threshold = 50
open_wait = "10s"
open_wait_jitter = "0s"
permitted_probes = 2

[policies.api.routes."GET /orders/{id}"]
slow_call_duration = "1s"
"#;

/// Timestamps in seconds. The breaker trips at 0.51 s, when the fifth call completes (3
/// of 5 failed); the slow failure started at 0.4 s completes at 2.4 s, after the
/// transition, and is discarded. Open until 10.51 s: the calls at 1 s and 5 s are
/// rejected. At 10.6 s the first probe goes out (done at 10.7 s), at 10.65 s the second
/// (done at 10.67 s), and the call at 10.66 s is rejected: both probes are out. The
/// second success closes the breaker at 10.7 s.
const CALLS: &str = "\
timestamp,route,status,latency_ms
0.0,GET /orders/{id},200,10
0.1,GET /orders/{id},200,10
0.2,GET /orders/{id},503,10
0.3,GET /orders/{id},503,10
0.4,GET /orders/{id},503,2000
0.5,GET /orders/{id},503,10
1.0,GET /orders/{id},200,10
5.0,GET /orders/{id},503,10
10.6,GET /orders/{id},200,100
10.65,GET /orders/7,200,20
10.66,GET /orders/{id},200,10
11.0,GET /orders/{id},200,10
";

fn expected_moves(base_ns: u64) -> Vec<(u64, &'static str, &'static str, &'static str)> {
    vec![
        (base_ns + 510_000_000, "closed", "open", "failure_rate"),
        (
            base_ns + 10_600_000_000,
            "open",
            "half_open",
            "open_wait_elapsed",
        ),
        (
            base_ns + 10_700_000_000,
            "half_open",
            "closed",
            "probes_succeeded",
        ),
    ]
}

/// The policy file `text`, read as `name`.
fn load_policies(name: &str, text: &str) -> Policies {
    load_policy_file(&SourceFile::new(name, text)).expect("the test's policies are valid")
}

/// Replays `calls` (a file called `name`) with the default options.
fn replay_text(policies: &Policies, name: &str, calls: &str) -> ReplayReport {
    replay(policies, name, calls.as_bytes(), &ReplayOptions::default()).expect("the calls replay")
}

#[test]
fn exact_trip_times_through_the_binary() {
    let dir = scratch("replay-exact");
    write(&dir, "policy.toml", POLICY);
    write(&dir, "calls.csv", CALLS);
    let run = run_replay(&dir, "policy.toml", "calls.csv", &["--json", "r.json"]);
    run.assert_code(0);
    run.assert_stdout(&[
        "0.510",
        "closed → open",
        "rejected 3 (25.0 %)   of the rejected, 1 would have failed and 2 would have succeeded",
        "opened 1 time   flapping 0",
    ]);

    let json = read_json(&dir, "r.json");
    let b = &json["breakers"][0];
    assert_eq!(b["name"], "api");
    let moves: Vec<(u64, String, String, String)> = b["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["at"].as_u64().unwrap(),
                t["from"].as_str().unwrap().to_owned(),
                t["to"].as_str().unwrap().to_owned(),
                t["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: Vec<(u64, String, String, String)> = expected_moves(0)
        .into_iter()
        .map(|(a, b, c, d)| (a, b.into(), c.into(), d.into()))
        .collect();
    assert_eq!(moves, expected);
    let t0 = &b["transitions"][0];
    assert_eq!(
        (t0["calls"].as_u64(), t0["failures"].as_u64()),
        (Some(5), Some(3))
    );
    assert_eq!(t0["open_ms"].as_u64(), Some(10_000));
    assert_eq!(b["stats"]["rejected"], 3);
    assert_eq!(b["stats"]["time_open"], 10_090_000_000u64);
    assert_eq!(b["stats"]["time_half_open"], 100_000_000u64);
}

#[test]
fn transitions_name_the_line_of_the_call_that_made_them() {
    let dir = scratch("replay-lines");
    write(&dir, "policy.toml", POLICY);
    // A comment and a blank line move the calls down the file: lines are the file's.
    let calls = CALLS.replacen('\n', "\n# recorded by hand\n\n", 1);
    write(&dir, "calls.csv", &calls);
    let run = run_replay(&dir, "policy.toml", "calls.csv", &["--json", "r.json"]);
    run.assert_code(0);
    // The call at 0.5 s (line 9) completes fifth and trips the breaker; the probe at
    // 10.6 s (line 12) moves it to half-open and, succeeding second, closes it.
    let rows: Vec<Vec<&str>> = run
        .stdout
        .lines()
        .filter(|l| l.contains(" → "))
        .map(|l| l.split_whitespace().take(5).collect())
        .collect();
    assert_eq!(
        rows,
        [
            ["0.510", "9", "closed", "→", "open"],
            ["10.600", "12", "open", "→", "half_open"],
            ["10.700", "12", "half_open", "→", "closed"],
        ],
        "{}",
        run.stdout
    );
    run.assert_stdout(&["when                            line transition"]);
    let json = read_json(&dir, "r.json");
    let lines: Vec<u64> = json["breakers"][0]["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, [9, 12, 12]);
    // The library's report says the same.
    let report = replay_text(&load_policies("policy.toml", POLICY), "calls.csv", &calls);
    let lines: Vec<u32> = report.breakers[0]
        .transitions
        .iter()
        .map(|t| t.line)
        .collect();
    assert_eq!(lines, [9, 12, 12]);
}

#[test]
fn json_dash_writes_the_report_to_standard_output() {
    let dir = scratch("replay-json-stdout");
    write(&dir, "policy.toml", POLICY);
    write(&dir, "calls.csv", CALLS);
    let run = run_replay(&dir, "policy.toml", "calls.csv", &["--json", "-"]);
    run.assert_code(0);
    let json: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", run.stdout));
    assert_eq!(json["calls"], 12);
    assert_eq!(
        json["breakers"][0]["transitions"][0]["reason"],
        "failure_rate"
    );
    // The text report goes to standard error, and no file named - is written.
    assert!(run.stderr.contains("closed → open"), "{}", run.stderr);
    assert!(!dir.join("-").exists(), "no file named -");
    // The sweep likewise.
    write(&dir, "sweep.toml", SWEEP_POLICY);
    write(&dir, "incident.csv", &incident_log());
    let run = run_replay(
        &dir,
        "sweep.toml",
        "incident.csv",
        &["--sweep", "--failure-rate", "20,50", "--json", "-"],
    );
    run.assert_code(0);
    let json: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", run.stdout));
    assert_eq!(json["rows"].as_array().map(Vec::len), Some(2));
    assert!(
        run.stderr.contains("sweep of policy \"api\""),
        "{}",
        run.stderr
    );
    assert!(!dir.join("-").exists(), "no file named -");
}

#[test]
fn calls_files_with_a_byte_order_mark_replay() {
    let dir = scratch("replay-bom");
    write(&dir, "policy.toml", POLICY);
    // As a spreadsheet exports it: a byte-order mark, CRLF line ends.
    let csv = format!("\u{feff}{}", CALLS.replace('\n', "\r\n"));
    write(&dir, "calls.csv", &csv);
    let run = run_replay(&dir, "policy.toml", "calls.csv", &["--json", "r.json"]);
    run.assert_code(0);
    run.assert_stdout(&["12 calls from 0.000", "closed → open"]);
    let transitions = &read_json(&dir, "r.json")["breakers"][0]["transitions"];
    assert_eq!(transitions[0]["at"], 510_000_000);
    // JSON lines too, with no extension to tell the format.
    let jsonl =
        "\u{feff}{\"ts\":0,\"route\":\"GET /orders/{id}\",\"status\":200,\"latency_ms\":5}\n";
    write(&dir, "calls.log", jsonl);
    let run = run_replay(&dir, "policy.toml", "calls.log", &[]);
    run.assert_code(0);
    run.assert_stdout(&["1 calls from 0.000"]);
}

#[test]
fn json_lines_with_rfc3339_replay_the_same() {
    let base: u64 = 1_714_564_800_000_000_000; // 2024-05-01T12:00:00Z
    let mut jsonl = String::new();
    for line in CALLS.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let secs: f64 = f[0].parse().unwrap();
        let at = base + (secs * 1e9).round() as u64;
        let _ = writeln!(
            jsonl,
            "{{\"timestamp\":\"{}\",\"route\":\"{}\",\"status\":{},\"latency_ms\":{}}}",
            format_rfc3339(at),
            f[1],
            f[2],
            f[3]
        );
    }
    let policies = load_policies("policy.toml", POLICY);
    let report = replay_text(&policies, "calls.jsonl", &jsonl);
    let moves: Vec<(u64, &str, &str, &str)> = report.breakers[0]
        .transitions
        .iter()
        .map(|t| (t.at, t.from, t.to, t.reason))
        .collect();
    assert_eq!(moves, expected_moves(base));
    assert_eq!(report.calls, 12);
}

/// Ten minutes at 20 calls/s: every 20th call fails (5 %), a burst of 20 failures at
/// 60 s, and the incident from 300 s to 360 s where 7 of every 10 calls fail.
fn incident_log() -> String {
    let mut s = String::from("timestamp,route,status,latency_ms\n");
    for i in 0..12_000u64 {
        let t = i as f64 * 0.05;
        let in_burst = (1200..1220).contains(&i);
        let in_incident = (6000..7200).contains(&i);
        let fail = if in_incident {
            i % 10 < 7
        } else {
            in_burst || i % 20 == 0
        };
        let _ = writeln!(
            s,
            "{t:.2},GET /orders/{{id}},{},5",
            if fail { 503 } else { 200 }
        );
    }
    s
}

const SWEEP_POLICY: &str = r#"
[policies.api.breaker]
count_window = 100
minimum_calls = 10
failure_rate_threshold = 50
open_wait = "5s"
open_wait_jitter = "0s"
[policies.api.routes."GET /orders/{id}"]
"#;

#[test]
fn the_sweep_marks_settings_that_catch_the_incident_quietly() {
    let dir = scratch("replay-sweep");
    write(&dir, "policy.toml", SWEEP_POLICY);
    write(&dir, "calls.csv", &incident_log());
    let run = run_replay(
        &dir,
        "policy.toml",
        "calls.csv",
        &[
            "--sweep",
            "--failure-rate",
            "20,50",
            "--minimum-calls",
            "10,200",
            "--incident",
            "+300s..+360s",
            "--within",
            "10s",
        ],
    );
    run.assert_code(0);
    let lines: Vec<&str> = run.stdout.lines().collect();
    let row = |fail: &str, min: &str| -> &str {
        lines
            .iter()
            .find(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                let cols = if cols.first() == Some(&"✓") {
                    &cols[1..]
                } else {
                    &cols[..]
                };
                cols.len() > 4 && cols[0] == fail && cols[3] == min
            })
            .unwrap_or_else(|| panic!("no row for {fail} / {min}:\n{}", run.stdout))
    };
    // 50 % with 10 minimum calls: opens ~3.5 s into the incident, never outside it.
    let good = row("50", "10");
    assert!(good.trim_start().starts_with('✓'), "{good}");
    assert!(good.contains("count:100"), "{good}");
    // 20 %: also catches the incident, but the burst at 60 s opens it too.
    let noisy = row("20", "10");
    assert!(!noisy.contains('✓'), "{noisy}");
    let cols: Vec<&str> = noisy.split_whitespace().collect();
    assert_eq!(cols[8], "1", "one opening outside the incident: {noisy}");
    // 200 minimum calls do not fit a 100-call window.
    let invalid = row("20", "200");
    assert!(invalid.contains("invalid: minimum_calls"), "{invalid}");
    run.assert_stdout(&[
        "1 of 4 settings detected the incident in time without opening outside it.",
    ]);
    // Best first.
    let first_row = lines.iter().position(|l| l.contains("count:100")).unwrap();
    assert!(lines[first_row].trim_start().starts_with('✓'));
}

#[test]
fn the_sweep_as_a_library() {
    let policies = load_policies("p.toml", SWEEP_POLICY);
    let log = incident_log();
    let options = SweepOptions {
        grid: Grid {
            failure_rates: vec![20, 50],
            minimum_calls: vec![10],
            ..Grid::default()
        },
        policy: None,
        incident: Some(IncidentSpec::parse("+300s..+360s").unwrap()),
        within: Duration::from_secs(10),
        replay: ReplayOptions::default(),
        threads: 2,
    };
    let report = sweep(&policies, "calls.csv", log.as_bytes(), &options).unwrap();
    assert_eq!(report.rows.len(), 2);
    let best = &report.rows[0];
    assert_eq!((best.failure_rate, best.good), (50, true));
    assert_eq!(best.openings_outside, 0);
    let detected = best.detected_after.unwrap();
    assert!(
        (1_000_000_000..10_000_000_000).contains(&detected),
        "{detected}"
    );
    let noisy = &report.rows[1];
    assert_eq!(
        (noisy.failure_rate, noisy.good, noisy.openings_outside),
        (20, false, 1)
    );
    assert!(
        noisy.detected_after.unwrap() < detected,
        "a lower threshold detects sooner"
    );
    // The same calls replayed alone give the same opening as the sweep's row.
    let plain = replay_text(&policies, "calls.csv", &log);
    assert_eq!(plain.breakers[0].stats.openings, best.openings);
    assert_eq!(plain.breakers[0].stats.rejected, best.rejected);
}

#[test]
fn keyed_by_route_gives_one_breaker_per_route() {
    let policy = r#"
[policies.api.breaker]
count_window = 4
minimum_calls = 2
failure_rate_threshold = 50
open_wait = "10s"
key = "route"
[policies.api.routes."GET /a"]
[policies.api.routes."GET /b"]
"#;
    let calls =
        "0,GET /a,503,1\n0.1,GET /a,503,1\n0.2,GET /b,200,1\n0.3,GET /b,200,1\n0.4,GET /a,200,1\n";
    let policies = load_policies("p.toml", policy);
    let report = replay_text(&policies, "c.csv", calls);
    let names: Vec<&str> = report.breakers.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["api/GET /a", "api/GET /b"]);
    assert_eq!(report.breakers[0].stats.openings, 1);
    assert_eq!(report.breakers[0].stats.rejected, 1);
    assert_eq!(report.breakers[1].stats.openings, 0);
}
