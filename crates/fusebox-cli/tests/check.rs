//! `fusebox check` through the binary: each route's effective values with where each came
//! from, and the effective policies as a policy file (`--json`) that reads back the same.

mod common;

use common::{fusebox, scratch, write};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/fusebox.toml");

/// The lines `fusebox check` prints for `route` of policy `policy`: its summary line and
/// the settings under it.
fn route_block<'a>(stdout: &'a str, policy: &str, route: &str) -> Vec<&'a str> {
    let mut lines = stdout
        .lines()
        .skip_while(|l| *l != format!("policy {policy:?}"))
        .skip_while(|l| !l.starts_with(&format!("  route     {route} ")))
        .take_while(|l| !l.is_empty());
    let mut block: Vec<&str> = lines.next().into_iter().collect();
    block.extend(lines.take_while(|l| !l.starts_with("  route")));
    assert!(
        !block.is_empty(),
        "no route {route} of {policy} in:\n{stdout}"
    );
    block
}

/// Whether `block` holds a line with every one of `parts`.
#[track_caller]
fn assert_line(block: &[&str], parts: &[&str]) {
    assert!(
        block.iter().any(|l| parts.iter().all(|p| l.contains(p))),
        "no line with {parts:?} in:\n{}",
        block.join("\n")
    );
}

#[test]
fn check_prints_each_routes_effective_values_and_where_each_came_from() {
    let dir = scratch("check-origins");
    let run = fusebox(&dir, &["check", EXAMPLE]);
    run.assert_code(0);
    let out = &run.stdout;

    // fraud-eu's default route (300ms) over the defaults' (1s), inherited by its routes.
    let score = route_block(out, "fraud-eu", "POST /score");
    assert_line(
        &score,
        &["slow at 300ms", "timeout 250ms", "429 counts", "no retries"],
    );
    assert_line(
        &score,
        &[
            "slow_call_duration = \"300ms\"",
            "from policies.fraud-eu.default_route",
        ],
    );
    assert_line(
        &score,
        &[
            "timeout = \"250ms\"",
            "from policies.fraud-eu.routes[\"POST /score\"]",
        ],
    );
    assert_line(
        &score,
        &[
            "count_throttling = true",
            "from policies.fraud-eu.routes[\"POST /score\"]",
        ],
    );
    let rules = route_block(out, "fraud-eu", "GET /rules/{version}");
    assert_line(&rules, &["slow at 300ms", "timeout 1s", "fallback"]);
    assert_line(
        &rules,
        &[
            "slow_call_duration = \"300ms\"",
            "from policies.fraud-eu.default_route",
        ],
    );
    // inventory sets no default route: its route takes the defaults' 1s.
    let stock = route_block(out, "inventory", "GET /stock/{sku}");
    assert_line(&stock, &["slow at 1s", "timeout 100ms", "429 ignored"]);
    assert_line(
        &stock,
        &["slow_call_duration = \"1s\"", "from defaults.default_route"],
    );
    assert_line(
        &stock,
        &[
            "failure_statuses = [409]",
            "from policies.inventory.routes[\"GET /stock/{sku}\"]",
        ],
    );
    // What no level writes is built in.
    assert_line(
        &stock,
        &["built in:", "count_throttling", "retry", "protocol"],
    );
    assert!(
        !stock
            .iter()
            .any(|l| l.contains("built in:") && l.contains("timeout")),
        "{stock:?}"
    );
    let default = route_block(out, "inventory", "(default)");
    assert_line(
        &default,
        &["slow_call_duration = \"1s\"", "from defaults.default_route"],
    );
}

#[test]
fn check_json_prints_the_effective_policies_as_a_file_that_reads_back_the_same() {
    let dir = scratch("check-json");
    let run = fusebox(&dir, &["check", EXAMPLE, "--json"]);
    run.assert_code(0);
    let first = run.stdout.clone();
    let json: serde_json::Value = serde_json::from_str(&first).expect("JSON on stdout");
    let score = &json["policies"]["fraud-eu"]["routes"]["POST /score"];
    assert_eq!(score["timeout"], "250ms");
    assert_eq!(score["count_throttling"], true);
    assert_eq!(
        json["policies"]["fraud-eu"]["default_route"]["slow_call_duration"],
        "300ms"
    );
    assert_eq!(
        json["policies"]["fraud-eu"]["breaker"]["failure_rate_threshold"],
        25
    );
    assert_eq!(json["policies"]["inventory"]["breaker"]["key"], "host");
    assert_eq!(
        json["policies"]["fraud-eu"]["routes"]["GET /rules/{version}"]["fallback"],
        true
    );

    // Fed back as a policy file (read as YAML, which JSON is), it gives the same output.
    for name in ["effective.json", "effective.yaml"] {
        write(&dir, name, &first);
        let again = fusebox(&dir, &["check", name, "--json"]);
        again.assert_code(0);
        assert_eq!(again.stdout, first, "{name}");
    }
    // And the same policies: every layer's settings and every route's behaviour as
    // `fusebox check` prints them (where each setting is written differs: the file
    // written out sets every one on its route).
    let text = fusebox(&dir, &["check", "effective.json"]);
    text.assert_code(0)
        .assert_stdout(&["effective.json: 3 policies, no problems"]);
    let built = |stdout: &str| -> Vec<String> {
        stdout
            .lines()
            .skip(1)
            .filter(|l| !l.starts_with("              "))
            .map(str::to_owned)
            .collect()
    };
    let original = fusebox(&dir, &["check", EXAMPLE]);
    assert_eq!(built(&text.stdout), built(&original.stdout));

    // A scenario's policy, as a file of that one policy.
    let shown = fusebox(&dir, &["drill", "--show", "brownout"]);
    write(&dir, "brownout.toml", &shown.stdout);
    let run = fusebox(&dir, &["check", "brownout.toml", "--json"]);
    run.assert_code(0);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON on stdout");
    assert!(
        json["policies"]["brownout"]["breaker"].is_object(),
        "{}",
        run.stdout
    );
    write(&dir, "brownout-policy.json", &run.stdout);
    fusebox(&dir, &["check", "brownout-policy.json", "--json"])
        .assert_code(0)
        .assert_stdout(&[run.stdout.trim_end()]);
}

#[test]
fn a_scenarios_policy_says_where_its_settings_are_written() {
    let dir = scratch("check-scenario-origins");
    let shown = fusebox(&dir, &["drill", "--show", "brownout"]);
    write(&dir, "brownout.toml", &shown.stdout);
    let run = fusebox(&dir, &["check", "brownout.toml"]);
    run.assert_code(0);
    run.assert_stdout(&["from policy.default_route"]);
}

#[test]
fn check_diff_shows_what_a_reload_would_change_and_what_needs_a_rebuild() {
    let dir = scratch("check-diff");
    let running = std::fs::read_to_string(EXAMPLE).expect("the example file");

    // Thresholds, a timeout, a route added and another removed: all in place.
    let tuned = running
        .replace(
            "failure_rate_threshold = 25 ",
            "failure_rate_threshold = 30 ",
        )
        .replace("default_timeout = \"2s\"", "default_timeout = \"3s\"")
        .replace(
            "[policies.inventory.routes.\"GET /stock/{sku}\"]",
            "[policies.inventory.routes.\"GET /price/{sku}\"]\ntimeout = \"200ms\"\n\n[policies.inventory.routes.\"GET /stock/{sku}\"]",
        )
        .replace(
            "[policies.ledger.routes.\"/ledger.Ledger/{*method}\"]\nretry = false",
            "",
        );
    assert_ne!(tuned, running, "the edits apply to the example");
    let new = write(&dir, "tuned.toml", &tuned);
    let run = fusebox(&dir, &["check", "--diff", EXAMPLE, &new]);
    run.assert_code(0);
    let out = &run.stdout;
    assert!(
        out.lines().next().unwrap().ends_with("all in place"),
        "{out}"
    );
    let fraud: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("policy \"fraud-eu\""))
        .take_while(|l| !l.is_empty())
        .collect();
    assert_line(
        &fraud,
        &["breaker.failure_rate_threshold: 25 → 30", "(in place)"],
    );
    assert_line(&fraud, &["timeout.default_timeout: 2s → 3s", "(in place)"]);
    assert_line(&fraud, &["would keep: breaker state closed"]);
    let section = |policy: &str| -> Vec<&str> {
        out.lines()
            .skip_while(|l| !l.starts_with(&format!("policy \"{policy}\"")))
            .take_while(|l| !l.is_empty())
            .collect()
    };
    assert_line(
        &section("inventory"),
        &[
            "routes[\"GET /price/{sku}\"].(route): absent → present",
            "(in place)",
        ],
    );
    assert_line(
        &section("ledger"),
        &[
            "routes[\"/ledger.Ledger/{*method}\"].(route): present → absent",
            "(in place)",
        ],
    );

    // Another window size: reported as needing a rebuild, with why, and exit 1.
    let wider = running.replace("count_window = 100", "count_window = 200");
    let new = write(&dir, "wider.toml", &wider);
    let run = fusebox(&dir, &["check", "--diff", EXAMPLE, &new]);
    run.assert_code(1);
    let out = &run.stdout;
    assert!(out.contains("needing a rebuild"), "{out}");
    assert!(
        out.contains("breaker.window: Count { size: 100 } → Count { size: 200 }  (needs a rebuild: the window's kind or size changed"),
        "{out}"
    );

    // The same file: no changes.
    let run = fusebox(&dir, &["check", "--diff", EXAMPLE, EXAMPLE]);
    run.assert_code(0);
    assert!(
        run.stdout.lines().next().unwrap().ends_with("no changes"),
        "{}",
        run.stdout
    );

    // An invalid new file: every problem, nothing compared.
    let broken = running
        .replace(
            "failure_rate_threshold = 25 ",
            "failure_rate_threshold = 250 ",
        )
        .replace("max_concurrency = 64", "max_concurency = 64");
    let new = write(&dir, "broken.toml", &broken);
    let run = fusebox(&dir, &["check", "--diff", EXAMPLE, &new]);
    run.assert_code(2);
    let err = &run.stderr;
    assert!(err.contains("failure_rate_threshold"), "{err}");
    assert!(err.contains("max_concurency"), "{err}");
    assert!(
        !run.stdout.contains("→"),
        "nothing compared: {}",
        run.stdout
    );
}
