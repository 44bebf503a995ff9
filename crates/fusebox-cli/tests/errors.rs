//! Every error path: exit code 2 and a message naming the file, the line and the reason;
//! never a panic.

mod common;

use common::{fusebox, run_replay, scratch, write};

const POLICY: &str = r#"
[policies.api.breaker]
count_window = 10
minimum_calls = 5
[policies.api.routes."GET /a"]
"#;

#[test]
fn malformed_calls_files() {
    let dir = scratch("errors-calls");
    write(&dir, "policy.toml", POLICY);
    let cases = [
        (
            "bad-time.csv",
            "0,GET /a,200,5\n2024-13-01T00:00:00Z,GET /a,200,5\n",
            "bad-time.csv:2:1: bad timestamp \"2024-13-01T00:00:00Z\": the month is out of range",
        ),
        (
            "unknown-route.csv",
            "0,GET /a,200,5\n1,GET /b,200,5\n",
            "unknown-route.csv:2:3: unknown route \"GET /b\": no policy lists it (policies: api)",
        ),
        (
            "bad-status.csv",
            "0,GET /a,teapot,5\n",
            "bad-status.csv:1:10: bad status \"teapot\"",
        ),
        (
            "short-line.csv",
            "timestamp,route,status,latency_ms\n0,GET /a,200,5\n1,GET /a,200\n",
            "short-line.csv:3:13: too few fields: expected 4, got 3",
        ),
        (
            "backwards.csv",
            "5,GET /a,200,5\n4,GET /a,200,5\n",
            "backwards.csv:2:1: timestamps go backwards",
        ),
        (
            "bad.jsonl",
            "{\"ts\":1,\"route\":\"GET /a\",\"status\":200,\"latency_ms\":5}\n{\"ts\":2,\"route\":\n",
            "bad.jsonl:2:16: invalid JSON: EOF while parsing a value",
        ),
        (
            "never.csv",
            "0,GET /a,200,5\n9999-12-31T23:59:59Z,GET /a,200,5\n",
            "never.csv:2:1: bad timestamp \"9999-12-31T23:59:59Z\": out of range: the latest time a replay can count is 2554-07-21T23:34:33.709551615Z",
        ),
        (
            "endless.csv",
            "1714564800,GET /a,200,18446744073709\n",
            "endless.csv:1:23: bad latency \"18446744073709\": the call would end after 2554-07-21T23:34:33.709551615Z",
        ),
        (
            "endless.jsonl",
            "{\"ts\":\"2024-05-01T12:00:00Z\",\"route\":\"GET /a\",\"status\":200,\"latency_ms\":18446744073709}\n",
            "endless.jsonl:1:73: bad latency \"18446744073709\": the call would end after",
        ),
        (
            "empty.csv",
            "# nothing\n",
            "empty.csv: no calls in the file",
        ),
    ];
    for (name, text, expected) in cases {
        write(&dir, name, text);
        let run = run_replay(&dir, "policy.toml", name, &[]);
        run.assert_input_error(expected);
    }
    let run = run_replay(&dir, "policy.toml", "missing.csv", &[]);
    run.assert_input_error("missing.csv: cannot read the file");
    // --default-policy makes unlisted routes the policy's.
    let run = run_replay(
        &dir,
        "policy.toml",
        "unknown-route.csv",
        &["--default-policy", "api"],
    );
    run.assert_code(0);
}

#[test]
fn malformed_policy_files() {
    let dir = scratch("errors-policy");
    write(&dir, "calls.csv", "0,GET /a,200,5\n");
    let cases = [
        (
            "syntax.toml",
            "[policies.api.breaker\ncount_window = 10\n",
            "syntax.toml:1:",
        ),
        (
            "typo.toml",
            "[policies.api.breaker]\ncount_window = 10\nfailure_rate = 50\n",
            "typo.toml:3:1: policies.api.breaker.failure_rate: unknown key",
        ),
        (
            "range.toml",
            "[policies.api.breaker]\nfailure_rate_threshold = 150\n",
            "range.toml:2:26: policies.api.breaker.failure_rate_threshold: must be within 1..=100, got 150",
        ),
        (
            "route.yaml",
            "policies:\n  api:\n    routes:\n      \"GET /a\":\n        timeout: 0s\n",
            "route.yaml:5:9: policies.api.routes[\"GET /a\"].timeout: must be greater than zero",
        ),
    ];
    for (name, text, expected) in cases {
        write(&dir, name, text);
        let run = run_replay(&dir, name, "calls.csv", &[]);
        run.assert_input_error(expected);
        let run = fusebox(&dir, &["check", name]);
        run.assert_input_error(expected);
    }
}

#[test]
fn files_with_a_byte_order_mark_are_read_and_located_past_it() {
    let dir = scratch("errors-bom");
    write(&dir, "calls.csv", "0,GET /a,200,5\n");
    write(&dir, "ok.toml", &format!("\u{feff}{POLICY}"));
    run_replay(&dir, "ok.toml", "calls.csv", &[]).assert_code(0);
    // Columns on the first line count from its first character, not from the mark.
    write(
        &dir,
        "key.toml",
        "\u{feff}colour = 1\n[policies.api.breaker]\ncount_window = 10\n",
    );
    fusebox(&dir, &["check", "key.toml"]).assert_input_error("key.toml:1:1: colour: unknown key");
    write(
        &dir,
        "key.yaml",
        "\u{feff}policies: {api: {breaker: {count_window: 0}}}\n",
    );
    fusebox(&dir, &["check", "key.yaml"])
        .assert_input_error("key.yaml:1:28: policies.api.breaker.count_window: must be within");
    let run = fusebox(&dir, &["drill", "--show", "unavailable"]);
    write(&dir, "s.toml", &format!("\u{feff}{}", run.stdout));
    fusebox(&dir, &["check", "s.toml"])
        .assert_code(0)
        .assert_stdout(&["s.toml: scenario \"unavailable\", no problems"]);
    write(
        &dir,
        "bad.toml",
        "\u{feff}phases = []\n[traffic]\nrate = 10\n[policy.breaker]\ncount_window = 10\n",
    );
    fusebox(&dir, &["check", "bad.toml"])
        .assert_input_error("bad.toml:1:10: phases: at least one phase is needed");
}

#[test]
fn malformed_scenarios() {
    let dir = scratch("errors-scenario");
    let cases = [
        (
            "no-phases.toml",
            "phases = []\n[traffic]\nrate = 10\n[policy.breaker]\ncount_window = 10\n",
            "no-phases.toml:1:10: phases: at least one phase is needed",
        ),
        (
            "bad-latency.toml",
            "phases = [{ name = \"a\", duration = \"1s\", status = 200, latency = \"fast\" }]\n[traffic]\nrate = 10\n[policy.breaker]\ncount_window = 10\n",
            "bad-latency.toml:1:",
        ),
        (
            "bad-policy.toml",
            "phases = [{ name = \"a\", duration = \"1s\", status = 200 }]\n[traffic]\nrate = 10\n[policy.breaker]\ncount_window = 10\nminimum_calls = 11\n",
            "bad-policy.toml:6:17: policy.breaker.minimum_calls: must not exceed the count window's size (10), got 11",
        ),
        (
            "no-breaker.toml",
            "phases = [{ name = \"a\", duration = \"1s\", status = 200 }]\n[traffic]\nrate = 10\n[policy.timeout]\ndefault_timeout = \"1s\"\n",
            "no-breaker.toml: policy \"no-breaker\" has no breaker",
        ),
        (
            "unknown-key.toml",
            "phases = [{ name = \"a\", duration = \"1s\", status = 200, colour = \"red\" }]\n[traffic]\nrate = 10\n[policy.breaker]\ncount_window = 10\n",
            "unknown-key.toml:1:",
        ),
    ];
    for (name, text, expected) in cases {
        write(&dir, name, text);
        let run = fusebox(&dir, &["drill", name, "--virtual-time"]);
        run.assert_input_error(expected);
        let run = fusebox(&dir, &["check", name]);
        run.assert_input_error(expected);
    }
    // Every problem at once, each at its path, with the nearest known key for a typo.
    write(
        &dir,
        "many.toml",
        "[traffic]\nrate = \"fast\"\nconcurrancy = 10\n[policy.breaker]\ncount_window = 10\nminimum_calls = 5\n[[phases]]\nname = \"a\"\nduration = \"1s\"\nstatus = 200\nlatency = { p50 = \"1ms\" }\n[expect]\nopen_reason = [\"failure_rate\", 3]\n",
    );
    for args in [["check", "many.toml"], ["drill", "many.toml"]] {
        let run = fusebox(&dir, &args);
        for expected in [
            "many.toml:2:8: traffic.rate: must be a number, got \"fast\"",
            "many.toml:3:1: traffic.concurrancy: unknown key; did you mean `concurrency`?",
            "many.toml:11:1: phases[0].latency.p99: is required with p50",
            "many.toml:13:15: expect.open_reason: must be a reason or a list of reasons",
        ] {
            run.assert_input_error(expected);
        }
        assert_eq!(run.stderr.lines().count(), 4, "{}", run.stderr);
    }
    let run = fusebox(&dir, &["drill", "no-such-scenario"]);
    run.assert_input_error(
        "no scenario \"no-such-scenario\": not a file, and not a built-in (brownout, ",
    );
    let run = fusebox(&dir, &["drill", "--show", "nope"]);
    run.assert_input_error("--show: no built-in scenario \"nope\"");
}

#[test]
fn bad_flags() {
    let dir = scratch("errors-flags");
    write(&dir, "policy.toml", POLICY);
    write(&dir, "calls.csv", "0,GET /a,200,5\n");
    let run = fusebox(&dir, &["drill", "--store", "memcached://x"]);
    run.assert_input_error("--store \"memcached://x\": only Redis stores are supported");
    let run = fusebox(
        &dir,
        &["drill", "--store", "redis://127.0.0.1:6379/0?colour=red"],
    );
    run.assert_input_error("--store: ");
    let run = fusebox(&dir, &["drill", "--policy", "x"]);
    run.assert_input_error("--config");
    let run = run_replay(&dir, "policy.toml", "calls.csv", &["--failure-rate", "50"]);
    run.assert_input_error("--sweep");
    let run = run_replay(
        &dir,
        "policy.toml",
        "calls.csv",
        &["--sweep", "--window", "ring:5"],
    );
    run.assert_input_error("bad window \"ring:5\"");
    let run = run_replay(
        &dir,
        "policy.toml",
        "calls.csv",
        &["--sweep", "--incident", "+10s..+5s"],
    );
    run.assert_input_error("--incident: bad incident +10s..+5s: it ends before it starts");
    let run = run_replay(&dir, "policy.toml", "calls.csv", &["--default-policy", "x"]);
    run.assert_input_error("--default-policy");
    let run = fusebox(&dir, &["frobnicate"]);
    run.assert_code(2);
}

#[test]
fn help_is_complete() {
    let dir = scratch("help");
    let run = fusebox(&dir, &["--help"]);
    run.assert_code(0);
    run.assert_stdout(&["drill", "replay", "check", "Exit codes"]);
    for (cmd, words) in [
        (
            "drill",
            &[
                "--replicas",
                "--store",
                "--virtual-time",
                "--config",
                "--out",
                "--list",
                "--show",
                "--json",
                "--json - writes it to standard output",
                "Examples",
            ][..],
        ),
        (
            "replay",
            &[
                "--sweep",
                "--incident",
                "--within",
                "--failure-rate",
                "--slow-call-duration",
                "--minimum-calls",
                "--window",
                "--json",
                "--default-policy",
                "CSV columns",
                "byte-order mark",
                "file:line:column",
                "the calls-file line of the call that made it",
                "--json - writes it to standard output",
            ][..],
        ),
        (
            "check",
            &["TOML or YAML", "Every problem is reported", "--json"][..],
        ),
    ] {
        fusebox(&dir, &[cmd, "--help"])
            .assert_code(0)
            .assert_stdout(words);
    }
}

#[test]
fn check_prints_the_effective_policies() {
    let dir = scratch("check-ok");
    write(&dir, "policy.toml", POLICY);
    let run = fusebox(&dir, &["check", "policy.toml"]);
    run.assert_code(0);
    run.assert_stdout(&[
        "policy.toml: 1 policy, no problems",
        "window last 10 calls, minimum_calls 5, failure_rate_threshold 50 %",
        "route     GET /a",
    ]);
}
