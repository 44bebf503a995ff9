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
