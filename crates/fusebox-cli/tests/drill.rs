//! Drills end to end: a short scenario against the real loopback dependency, on paused
//! (virtual) time, asserting the transitions that happened; the binary's report and chart;
//! a scenario whose expectations fail; every built-in scenario passing.

mod common;

use common::{fusebox, read_json, scratch, write};
use fusebox_cli::drill::{self, DrillOptions, Out};
use fusebox_cli::input::SourceFile;
use fusebox_cli::scenario::{BUILTIN, load_scenario};
use std::sync::{Arc, Mutex};

/// 1 s healthy, 1.2 s of 503s that take 30–40 ms, 1.5 s healthy again; 100 calls/s.
/// With a 10-call window, 5 minimum calls and 50 %, the breaker opens on the fifth 503;
/// after 800 ms (no jitter) it probes during the outage — all three probes go out before
/// the first 503 comes back — and re-opens; the next probes, in "back", close it.
const SHORT: &str = r#"
name = "short"
description = "a short outage"
seed = 3

[traffic]
rate = 100
concurrency = 50
path = "/items/1"

[policy.default_route]
slow_call_duration = "500ms"

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
open_reason = "failure_rate"
first_open_in = "outage"
no_open_in = ["healthy", "back"]
half_open_calls = 3
max_half_open_calls = 3
closed_at_end = true
"#;

fn collect() -> (Out, Arc<Mutex<Vec<String>>>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l = Arc::clone(&lines);
    let out: Out = Arc::new(move |s: &str| l.lock().expect("output lock").push(s.to_owned()));
    (out, lines)
}

#[tokio::test(start_paused = true)]
async fn a_short_outage_opens_probes_and_closes() {
    let scenario = load_scenario(&SourceFile::new("short.toml", SHORT), None).unwrap();
    let (out, lines) = collect();
    let options = DrillOptions {
        progress: None,
        ..DrillOptions::default()
    };
    let report = drill::run(&scenario, &options, out).await.unwrap();

    let replica = &report.replica_reports[0];
    let moves: Vec<(&str, &str, &str, &str)> = replica
        .transitions
        .iter()
        .map(|t| (t.from, t.to, t.reason, t.phase.as_str()))
        .collect();
    assert_eq!(
        moves,
        [
            ("closed", "open", "failure_rate", "outage"),
            ("open", "half_open", "open_wait_elapsed", "outage"),
            ("half_open", "open", "probe_failed", "outage"),
            ("open", "half_open", "open_wait_elapsed", "back"),
            ("half_open", "closed", "probes_succeeded", "back"),
        ]
    );
    let opened = &replica.transitions[0];
    assert_eq!((opened.calls, opened.failures), (10, 5));
    assert_eq!(opened.open_ms, Some(800.0));
    // Each half-open period let exactly the probe budget through.
    let probes: Vec<Option<u32>> = replica
        .transitions
        .iter()
        .map(|t| t.half_open_calls)
        .collect();
    assert_eq!(probes, [None, None, Some(3), None, Some(3)]);
    // Probing starts with the first call after the 800 ms wait (calls are 10 ms apart).
    let waited = replica.transitions[1].at_ms - replica.transitions[0].at_ms;
    assert!((800.0..=810.0).contains(&waited), "{waited}");

    let s = &replica.summary;
    assert!(s.rejected_breaker > 50, "{s:?}");
    assert!(s.server_errors >= 5, "{s:?}");
    assert_eq!(
        s.calls,
        s.served
            + s.rejected_breaker
            + s.timeouts
            + s.connection_errors
            + s.rejected_limit
            + s.skipped
    );
    assert!(report.passed, "{:#?}", report.expectations);
    assert_eq!(report.expectations.len(), 8);

    // The live output has one line per transition, with the window, rates and wait.
    let lines = lines.lock().unwrap();
    let opening = lines
        .iter()
        .find(|l| l.contains("CLOSED → OPEN"))
        .expect("a live line for the opening");
    assert!(
        opening.contains("failure_rate")
            && opening.contains("window 10 calls: 5 failed (50.0 % ≥ 50 %)")
            && opening.contains("open 800ms (jitter 0s)"),
        "{opening}"
    );
    assert_eq!(lines.iter().filter(|l| l.contains(" → ")).count(), 5);
    assert!(lines.iter().any(|l| l.contains("── phase \"outage\"")));
}

#[tokio::test(start_paused = true)]
async fn replicas_each_have_their_own_breaker() {
    let scenario = load_scenario(&SourceFile::new("short.toml", SHORT), None).unwrap();
    let (out, lines) = collect();
    let options = DrillOptions {
        replicas: 2,
        progress: None,
        store: None,
    };
    let report = drill::run(&scenario, &options, out).await.unwrap();
    assert_eq!(report.replica_reports.len(), 2);
    for r in &report.replica_reports {
        assert_eq!(r.transitions[0].to, "open");
        assert_eq!(r.final_state, "closed");
    }
    let lines = lines.lock().unwrap();
    assert!(lines.iter().any(|l| l.contains("r1 CLOSED → OPEN")));
    assert!(lines.iter().any(|l| l.contains("r2 CLOSED → OPEN")));
    assert!(report.passed, "{:#?}", report.expectations);
}

fn svg_is_well_formed(path: &std::path::Path, title: &str) {
    let text = std::fs::read_to_string(path).expect("chart.svg written");
    let doc = roxmltree::Document::parse(&text).expect("chart.svg is well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect();
    assert!(texts.iter().any(|t| t.contains(title)), "{texts:?}");
    // A pool drill's state rows are its endpoints', with their own legend.
    let pool = texts.contains(&"endpoints");
    let states: &[&str] = if pool {
        &["serving", "ejected", "probing", "tripped, kept in"]
    } else {
        &["closed", "open", "half-open"]
    };
    for label in states
        .iter()
        .copied()
        .chain(["rejected by breaker", "callers p99"])
    {
        assert!(
            texts.contains(&label),
            "legend {label:?} missing: {texts:?}"
        );
    }
    let rects = doc.descendants().filter(|n| n.has_tag_name("rect")).count();
    let paths = doc.descendants().filter(|n| n.has_tag_name("path")).count();
    assert!(rects > 50 && paths >= 4, "{rects} rects, {paths} paths");
}

#[test]
fn the_binary_writes_a_report_and_a_chart() {
    let dir = scratch("drill-binary");
    let file = write(&dir, "short.toml", SHORT);
    let run = fusebox(&dir, &["drill", &file, "--virtual-time", "--out", "out"]);
    run.assert_code(0);
    run.assert_stdout(&[
        "CLOSED → OPEN",
        "rejected by the breaker",
        "PASS: the breaker behaved as \"short\" expects",
    ]);

    let json = read_json(&dir, "out/report.json");
    assert_eq!(json["scenario"], "short");
    assert_eq!(json["passed"], true);
    let transitions = json["replica_reports"][0]["transitions"]
        .as_array()
        .unwrap();
    assert_eq!(transitions.len(), 5);
    assert_eq!(transitions[0]["reason"], "failure_rate");
    assert!(json["timeline"].as_array().unwrap().len() > 30);
    svg_is_well_formed(&dir.join("out/chart.svg"), "fusebox drill: short");
}

#[test]
fn json_dash_writes_the_report_to_standard_output() {
    let dir = scratch("drill-json-stdout");
    let file = write(&dir, "short.toml", SHORT);
    let run = fusebox(
        &dir,
        &[
            "drill",
            &file,
            "--virtual-time",
            "--out",
            "out",
            "--json",
            "-",
        ],
    );
    run.assert_code(0);
    // Standard output is the JSON document alone; the drill's lines go to standard error.
    let json: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", run.stdout));
    assert_eq!(json["scenario"], "short");
    assert_eq!(json["passed"], true);
    assert_eq!(json, read_json(&dir, "out/report.json"));
    for part in [
        "CLOSED → OPEN",
        "PASS: the breaker behaved",
        "report: out/report.json",
    ] {
        assert!(
            run.stderr.contains(part),
            "{part:?} not in:\n{}",
            run.stderr
        );
    }
    assert!(!dir.join("-").exists(), "no file named -");
    // A file name still writes the file.
    let run = fusebox(
        &dir,
        &[
            "drill",
            &file,
            "--virtual-time",
            "-q",
            "--out",
            "out",
            "--json",
            "drill.json",
        ],
    );
    run.assert_code(0);
    run.assert_stdout(&["report: drill.json"]);
    assert_eq!(read_json(&dir, "drill.json")["scenario"], "short");
}

#[test]
fn failed_expectations_exit_1() {
    let dir = scratch("drill-fails");
    let text = SHORT
        .replace("opens = true", "opens = false")
        .replace("closed_at_end = true", "closed_at_end = false");
    let file = write(&dir, "wrong.toml", &text);
    let run = fusebox(
        &dir,
        &["drill", &file, "--virtual-time", "-q", "--out", "out"],
    );
    run.assert_code(1);
    run.assert_stdout(&[
        "✗ opens = false",
        "✗ closed_at_end = false",
        "FAIL: 2 of 8 expectations did not hold",
    ]);
    assert!(
        run.stderr.contains("failed its expectations"),
        "{}",
        run.stderr
    );
    // The report is still written.
    assert!(dir.join("out/chart.svg").is_file());
}

#[test]
fn every_builtin_scenario_passes_on_virtual_time() {
    let dir = scratch("drill-builtins");
    for (name, _) in BUILTIN {
        let run = fusebox(
            &dir,
            &["drill", name, "--virtual-time", "-q", "--out", name],
        );
        assert_eq!(run.code, 0, "{name}:\n{}\n{}", run.stdout, run.stderr);
        assert!(run.stdout.contains("PASS"), "{name}: {}", run.stdout);
        svg_is_well_formed(&dir.join(name).join("chart.svg"), name);
        // A row per key or endpoint, named.
        let report = read_json(&dir.join(name), "report.json");
        if let Some(rows) = report["parts"]["rows"].as_array() {
            let svg = std::fs::read_to_string(dir.join(name).join("chart.svg")).unwrap();
            for row in rows {
                let label = format!(">{}</text>", row["name"].as_str().unwrap());
                assert!(svg.contains(&label), "{name}: no row {label}");
            }
            assert!(rows.len() >= 5, "{name}: {} rows", rows.len());
        }
    }
}

#[test]
fn list_and_show_builtins() {
    let dir = scratch("drill-list");
    let run = fusebox(&dir, &["drill", "--list"]);
    run.assert_code(0);
    let names: Vec<&str> = BUILTIN.iter().map(|(name, _)| *name).collect();
    run.assert_stdout(&names);
    let run = fusebox(&dir, &["drill", "--show", "unavailable"]);
    run.assert_code(0);
    assert!(
        run.stdout.starts_with("# 503s with half-open probing"),
        "{}",
        run.stdout
    );
    // What --show prints is a scenario the checker accepts.
    write(&dir, "mine.toml", &run.stdout);
    let run = fusebox(&dir, &["check", "mine.toml"]);
    run.assert_code(0);
    run.assert_stdout(&["scenario \"unavailable\", no problems"]);
}

/// A built-in scenario, loaded (with `edit` applied to its text first).
fn builtin_scenario(name: &str, edit: impl Fn(&str) -> String) -> fusebox_cli::scenario::Scenario {
    let text = edit(fusebox_cli::scenario::builtin(name).expect("a built-in"));
    load_scenario(&SourceFile::new(name, &text), None).unwrap_or_else(|e| panic!("{e:?}"))
}

fn quiet() -> DrillOptions {
    DrillOptions {
        progress: None,
        ..DrillOptions::default()
    }
}

/// The names of the rows whose breaker opened (or endpoint tripped).
fn opened(report: &drill::report::DrillReport) -> Vec<&str> {
    let parts = report.parts.as_ref().expect("rows per key or endpoint");
    parts
        .rows
        .iter()
        .filter(|r| r.openings > 0)
        .map(|r| r.name.as_str())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_hot_shard_opens_its_own_breakers_and_not_the_dependency() {
    let scenario = builtin_scenario("hot-shard", str::to_owned);
    let (out, lines) = collect();
    let report = drill::run(&scenario, &quiet(), out).await.unwrap();
    assert!(report.passed, "{:#?}", report.expectations);

    // Only the two hot shards' breakers opened; each probed while it was hot (and
    // re-opened), and each is closed again at the end.
    assert_eq!(opened(&report), ["key-00", "key-01"]);
    let parts = report.parts.as_ref().unwrap();
    assert_eq!(parts.kind, "key");
    assert_eq!(parts.rows.len(), 20);
    for row in &parts.rows[..2] {
        assert!(row.affected && row.openings >= 1, "{row:?}");
        let probed = row.changes.iter().filter(|c| c.1 == "half_open").count();
        assert!(probed >= 3, "{row:?}");
        assert_eq!(row.changes.last().map(|c| c.1), Some("closed"), "{row:?}");
        assert!(row.rejected.unwrap() > 0, "{row:?}");
    }
    // The healthy shards' calls all went through: not one refused.
    for row in &parts.rows[2..] {
        assert!(!row.affected, "{row:?}");
        assert_eq!(row.rejected, Some(0), "{row:?}");
        assert!(row.calls.unwrap() >= 120, "{row:?}");
    }
    // The dependency-wide breaker never moved.
    assert!(report.replica_reports[0].transitions.is_empty());
    let lines = lines.lock().unwrap();
    assert!(lines.iter().any(|l| l.contains("key-00 CLOSED → OPEN")));
    assert!(!lines.iter().any(|l| l.contains("key-05 CLOSED → OPEN")));
}

#[tokio::test(start_paused = true)]
async fn without_the_spread_rule_the_hot_shards_open_the_dependency_for_everyone() {
    let scenario = builtin_scenario("hot-shard", |text| {
        text.replace("[policy.breaker.spread]\nmin_failing_key_share = 0.5\n", "")
    });
    assert!(scenario.policy.policy().key_spread().is_none());
    let report = drill::run(&scenario, &quiet(), collect().0).await.unwrap();
    assert!(!report.passed);
    let failed: Vec<&str> = report
        .expectations
        .iter()
        .filter(|c| !c.ok)
        .map(|c| c.expectation.as_str())
        .collect();
    assert_eq!(failed, ["opens = false", "max_unaffected_rejected = 0"]);
    // The dependency-wide breaker opened in the hot phase, on 10 % of the calls failing.
    let first = &report.replica_reports[0].transitions[0];
    assert_eq!((first.to, first.phase.as_str()), ("open", "hot-shards"));
}

#[tokio::test(start_paused = true)]
async fn the_ejection_cap_and_the_headroom_check_avert_the_cascade_that_their_absence_causes() {
    let guarded = drill::run(
        &builtin_scenario("ejection-cascade", str::to_owned),
        &quiet(),
        collect().0,
    )
    .await
    .unwrap();
    assert!(guarded.passed, "{:#?}", guarded.expectations);
    let parts = guarded.parts.as_ref().unwrap();
    assert_eq!((parts.kind, parts.rows.len()), ("endpoint", 5));
    assert!(parts.max_ejected.unwrap() <= 1, "{parts:?}");
    assert!(opened(&guarded).contains(&"e0"));
    let kept_in = parts
        .rows
        .iter()
        .any(|r| r.changes.iter().any(|c| c.1 == "would_eject"));
    assert!(kept_in, "tripped endpoints were kept in: {parts:?}");

    let unguarded = drill::run(
        &builtin_scenario("ejection-cascade-unguarded", str::to_owned),
        &quiet(),
        collect().0,
    )
    .await
    .unwrap();
    assert!(unguarded.passed, "{:#?}", unguarded.expectations);
    let parts = unguarded.parts.as_ref().unwrap();
    assert!(parts.max_ejected.unwrap() >= 4, "{parts:?}");
    assert_eq!(opened(&unguarded).len(), 5, "every endpoint went out");

    // What callers got in the degraded phase, guarded and not.
    let ok = |r: &drill::report::DrillReport| {
        r.expectations
            .iter()
            .find(|c| c.expectation.starts_with("m") && c.expectation.contains("ok_percent"))
            .map(|c| c.detail.clone())
            .unwrap()
    };
    let percent = |detail: String| -> f64 {
        let open = detail.rfind('(').unwrap();
        detail[open + 1..].trim_end_matches(" %)").parse().unwrap()
    };
    let (g, u) = (percent(ok(&guarded)), percent(ok(&unguarded)));
    assert!(g >= 80.0 && u <= 50.0, "guarded {g} %, unguarded {u} %");
}

#[tokio::test(start_paused = true)]
async fn a_pool_drill_refuses_replicas_and_a_store() {
    let scenario = builtin_scenario("ejection-cascade", str::to_owned);
    let options = DrillOptions {
        replicas: 2,
        progress: None,
        store: None,
    };
    let error = drill::run(&scenario, &options, collect().0)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("leave out --replicas"),
        "{error}"
    );
}
