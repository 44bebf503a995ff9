//! The soak (`src/bin/soak.rs`) run short, as CI can afford: 45 seconds of load through a
//! keyed Policy against a dependency that fails and recovers four times, with key churn
//! past the breaker's `max_keys`. The binary checks everything itself (no panic, flat
//! memory, every breaker cycling, no request lost or stuck) and exits 1 if anything fails;
//! this test runs it, demands success, and reads the summary back. Two short runs show
//! that the checks bite (a deliberate leak fails the memory check) and that a schedule
//! which could not close the breaker is refused up front; a shorter run keeps the
//! breakers' state on a real `redis-server` (started by the soak on 127.0.0.1).
//!
//! Real time, on purpose: a soak is load on real sockets for a while. No assertion is on a
//! duration; the schedule leaves each phase more than twice the time its breaker cycle
//! needs (see the binary's docs).

use std::process::{Command, Output};

fn soak(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_soak"))
        .args(args)
        .output()
        .expect("the soak binary runs")
}

fn text(output: &Output) -> String {
    format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The summary line that starts with `prefix`.
fn line<'a>(stdout: &'a str, prefix: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.trim_start().starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{stdout}"))
}

/// The number just before ` label` in `line` (`count("5 issued, 4 done", "done") == 4`).
fn count(line: &str, label: &str) -> u64 {
    let at = line
        .find(&format!(" {label}"))
        .unwrap_or_else(|| panic!("{label:?} not in {line:?}"));
    line[..at]
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number before {label:?} in {line:?}"))
}

#[test]
fn the_soak_holds_for_45_seconds() {
    let output = soak(&["--duration", "45s", "--quiet"]);
    let all = text(&output);
    assert!(output.status.success(), "the soak failed:\n{all}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("\nsoak passed"), "{all}");

    // Nine phases of 5 s: four failing phases, each opening every hot key's breaker, and
    // four healthy ones after them, each closing it again.
    for h in 0..4 {
        let l = line(&stdout, &format!("hot-{h}:"));
        assert!(
            l.contains("opened in 4/4 failing phases, closed in 4/4 healthy ones"),
            "{l}"
        );
    }
    let requests = line(&stdout, "requests:");
    let issued = count(requests, "issued");
    assert!(issued > 10_000, "the load ran: {requests}");
    assert_eq!(count(requests, "completed"), issued, "{requests}");
    assert_eq!(count(requests, "stuck"), 0, "{requests}");
    let keys = line(&stdout, "keys:");
    assert!(
        count(keys, "distinct") > 256,
        "more distinct keys than max_keys: {keys}"
    );
    let server = line(&stdout, "server:");
    let client = line(&stdout, "client attempts:");
    let (received, sent, answered) = (
        count(server, "received"),
        count(client, "sent"),
        count(client, "answered"),
    );
    assert!(
        answered <= received && received <= sent,
        "every answer was received, nothing received that was not sent:\n{server}\n{client}"
    );
}

#[test]
fn the_soak_holds_with_the_breakers_on_redis() {
    // The same policy with its breakers' state on a real redis-server that the soak starts
    // on 127.0.0.1: five phases of 5 s, two of them failing.
    let output = soak(&["--duration", "25s", "--quiet", "--redis"]);
    let all = text(&output);
    assert!(output.status.success(), "the soak on Redis failed:\n{all}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("breaker state on Redis"), "{all}");
    for h in 0..4 {
        let l = line(&stdout, &format!("hot-{h}:"));
        assert!(
            l.contains("opened in 2/2 failing phases, closed in 2/2 healthy ones"),
            "{l}"
        );
    }
    let requests = line(&stdout, "requests:");
    assert_eq!(
        count(requests, "completed"),
        count(requests, "issued"),
        "{requests}"
    );
    assert_eq!(count(requests, "stuck"), 0, "{requests}");
    let redis = line(&stdout, "redis:");
    assert!(redis.contains("keys at the end"), "Redis was read: {redis}");
}

#[test]
fn a_leak_after_the_warm_up_fails_the_memory_check() {
    // Five phases of 1.5 s (open wait 200 ms + 50 ms jitter): warm-up 3 s, then 8 MiB a
    // second kept for 4.5 s, far over the 16 MiB slack.
    let output = soak(&[
        "--duration",
        "7500ms",
        "--open-wait",
        "200ms",
        "--phase",
        "1500ms",
        "--rate",
        "200",
        "--quiet",
        "--leak-kib-per-sec",
        "8192",
    ]);
    let all = text(&output);
    assert_eq!(output.status.code(), Some(1), "{all}");
    assert!(all.contains("soak FAILED"), "{all}");
    assert!(
        all.contains("resident memory grew after the warm-up"),
        "{all}"
    );
}

#[test]
fn a_schedule_that_cannot_close_the_breaker_is_refused() {
    let output = soak(&["--open-wait", "2s", "--phase", "4s"]);
    let all = text(&output);
    assert_eq!(output.status.code(), Some(2), "{all}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--phase 4s is too short"),
        "{all}"
    );
    assert!(output.stdout.is_empty(), "nothing ran: {all}");
}
