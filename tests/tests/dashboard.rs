//! The Grafana dashboard shipped in `dashboards/fusebox.json` asks only for metrics fusebox
//! exports (the names of `fusebox::metrics::families()`), filters every panel by its
//! `dependency` template variable, has the panels it is documented to have, and lays them
//! out in its grid without overlap.

use fusebox::metrics::Kind;
use serde_json::Value;
use std::collections::BTreeSet;

fn dashboard() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../dashboards/fusebox.json");
    let text = std::fs::read_to_string(path).expect("dashboards/fusebox.json");
    serde_json::from_str(&text).expect("valid JSON")
}

/// Every query of every panel (and of nested rows' panels).
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    fn walk(panels: &Value, out: &mut Vec<(String, String)>) {
        for panel in panels.as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("").to_owned();
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    out.push((title.clone(), expr.to_owned()));
                }
            }
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// The metric names in a PromQL expression: each `fusebox_` identifier. A bare prefix in a
/// regular-expression matcher (`__name__=~"fusebox_.+"`) names no metric.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("fusebox_") {
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..len];
        if name.len() > "fusebox_".len() {
            names.push(name.to_owned());
        } else {
            assert!(tail.starts_with("fusebox_.+"), "{expr}");
        }
        rest = &tail[len..];
    }
    names
}

/// What a scrape can contain: each family's name, and a histogram's series.
fn exported() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for f in fusebox::metrics::families() {
        names.insert(f.name.to_owned());
        if f.kind == Kind::Histogram {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{}{suffix}", f.name));
            }
        }
    }
    names
}

#[test]
fn every_metric_the_dashboard_queries_is_one_fusebox_exports() {
    let dashboard = dashboard();
    let exported = exported();
    let queries = queries(&dashboard);
    assert!(queries.len() >= 14, "{} queries", queries.len());
    let mut used = BTreeSet::new();
    for (title, expr) in &queries {
        let names = metric_names(expr);
        assert!(
            !names.is_empty(),
            "{title}: {expr} queries no fusebox metric"
        );
        for name in names {
            assert!(
                exported.contains(&name),
                "{title}: {expr} asks for {name}, which fusebox does not export"
            );
            used.insert(name);
        }
        assert!(
            expr.contains("dependency=~\"$dependency\""),
            "{title}: {expr} is not filtered by the dependency variable"
        );
    }
    // The variable lists the dependencies of every fusebox metric.
    let variable = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "dependency")
        .expect("a dependency template variable");
    let definition = variable["definition"].as_str().unwrap();
    assert!(definition.contains("dependency"), "{definition}");
    for name in metric_names(definition) {
        assert!(exported.contains(&name), "{definition}");
    }
    // What the dashboard is documented to show, by the metric behind it.
    for needed in [
        "fusebox_breaker_state",
        "fusebox_breaker_failure_ratio",
        "fusebox_breaker_failure_ratio_threshold",
        "fusebox_breaker_slow_call_ratio",
        "fusebox_breaker_slow_call_ratio_threshold",
        "fusebox_breaker_calls_total",
        "fusebox_breaker_probes_total",
        "fusebox_breaker_call_duration_seconds_bucket",
        "fusebox_timeout_calls_total",
        "fusebox_retry_retries_total",
        "fusebox_policy_fallbacks_total",
        "fusebox_pool_endpoints",
        "fusebox_pool_ejected",
        "fusebox_pool_max_ejected",
        "fusebox_pool_would_eject",
        "fusebox_pool_panic",
    ] {
        assert!(used.contains(needed), "no panel shows {needed}");
    }
}

#[test]
fn the_name_reader_finds_every_metric_and_only_metrics() {
    assert_eq!(
        metric_names(
            "histogram_quantile(0.99, sum by (le) (rate(fusebox_breaker_call_duration_seconds_bucket{dependency=~\"$dependency\"}[5m]))) / fusebox_limit_limit"
        ),
        [
            "fusebox_breaker_call_duration_seconds_bucket",
            "fusebox_limit_limit"
        ]
    );
    assert!(metric_names("label_values({__name__=~\"fusebox_.+\"}, dependency)").is_empty());
    assert!(!exported().contains("fusebox_breaker_rejected_total"));
}

/// The unit a target's series are shown in: an override of its `refId`, else the panel's.
fn unit_of(panel: &Value, ref_id: &str) -> Option<String> {
    let field = &panel["fieldConfig"];
    let overridden = field["overrides"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| o["matcher"]["id"] == "byFrameRefID" && o["matcher"]["options"] == ref_id)
        .flat_map(|o| o["properties"].as_array().into_iter().flatten())
        .find(|p| p["id"] == "unit")
        .and_then(|p| p["value"].as_str());
    overridden
        .or(field["defaults"]["unit"].as_str())
        .map(str::to_owned)
}

#[test]
fn a_share_of_calls_is_drawn_as_a_percentage_not_in_the_panels_rate_unit() {
    let dashboard = dashboard();
    let mut shares = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            // A rate divided by a rate: a ratio, 0–1.
            if expr.contains(")) / sum") {
                shares += 1;
                let ref_id = target["refId"].as_str().expect("a refId");
                assert_eq!(
                    unit_of(panel, ref_id).as_deref(),
                    Some("percentunit"),
                    "{}: {expr} is a share, shown in another unit",
                    panel["title"]
                );
            }
        }
    }
    assert!(
        shares >= 1,
        "no share of calls found: the check checks nothing"
    );
}

#[test]
fn no_two_panels_overlap_in_the_grid() {
    let dashboard = dashboard();
    let cells: Vec<(String, [u64; 4])> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|panel| {
            let g = &panel["gridPos"];
            let at = |k: &str| g[k].as_u64().expect("a gridPos of x, y, w and h");
            (
                panel["title"].as_str().unwrap_or("").to_owned(),
                [at("x"), at("y"), at("w"), at("h")],
            )
        })
        .collect();
    assert!(cells.len() >= 16, "{} panels", cells.len());
    for (i, (a, [ax, ay, aw, ah])) in cells.iter().enumerate() {
        assert!(ax + aw <= 24, "{a} is wider than the grid's 24 columns");
        for (b, [bx, by, bw, bh]) in &cells[i + 1..] {
            let apart = ax + aw <= *bx || bx + bw <= *ax || ay + ah <= *by || by + bh <= *ay;
            assert!(apart, "{a} and {b} overlap");
        }
    }
}
