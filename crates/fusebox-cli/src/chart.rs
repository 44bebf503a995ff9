//! The drill chart: one SVG, four panels over a shared time axis.
//!
//! 1. **Breaker state**, a band per replica: green closed, red open, amber half-open;
//!    in a keyed drill, below it a thin row per key (its own breaker), and in a pool drill
//!    a row per endpoint instead (green serving, red ejected, amber probing, purple
//!    tripped but kept in).
//! 2. **Failure and slow-call rates** of the breaker's window against their thresholds
//!    (dashed): the lines that cross the dashes are why it opened. A pale area shows the
//!    share of requests the dependency actually failed, for contrast: the window freezes
//!    while the breaker is open.
//! 3. **Latency** (log scale): p50 and p99 seen by callers and given by the dependency,
//!    with the slow-call threshold: the gap between callers and dependency is what the
//!    breaker and the timeout saved.
//! 4. **Calls per second** by outcome, stacked: answered, 5xx, timed out, connection
//!    errors, rejected by the breaker, rejected by the limit.
//!
//! The scenario's phases shade all four panels and are named along the top. The SVG is
//! written by hand — a few hundred elements, no plotting library — and is well-formed XML
//! (the tests parse it).

use crate::drill::report::{Bucket, DrillReport};
use std::fmt::Write as _;

const W: f64 = 1200.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 250.0;
const PLOT_W: f64 = W - LEFT - RIGHT;

const C_CLOSED: &str = "#3fae5a";
const C_OPEN: &str = "#d64541";
const C_HALF: &str = "#f0a830";
const C_FAIL: &str = "#d64541";
const C_SLOW: &str = "#8e44ad";
const C_CALLER: &str = "#2c6fbb";
const C_DEP: &str = "#16a085";
const C_TIMEOUT: &str = "#e67e22";
const C_CONN: &str = "#7f4f24";
const C_REJ_B: &str = "#7f8c8d";
const C_REJ_L: &str = "#c9b037";
const C_OK: &str = "#7bc67e";
const C_KEPT: &str = "#8e44ad";

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

struct Svg {
    out: String,
}

impl Svg {
    #[allow(clippy::too_many_arguments)]
    fn text(&mut self, x: f64, y: f64, size: f64, anchor: &str, fill: &str, weight: &str, s: &str) {
        let _ = writeln!(
            self.out,
            r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" text-anchor="{anchor}" fill="{fill}" font-weight="{weight}">{}</text>"#,
            esc(s)
        );
    }

    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, extra: &str) {
        let _ = writeln!(
            self.out,
            r#"<rect x="{x:.2}" y="{y:.2}" width="{:.2}" height="{:.2}" fill="{fill}" {extra}/>"#,
            w.max(0.0),
            h.max(0.0)
        );
    }

    fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, stroke: &str, extra: &str) {
        let _ = writeln!(
            self.out,
            r#"<line x1="{x1:.2}" y1="{y1:.2}" x2="{x2:.2}" y2="{y2:.2}" stroke="{stroke}" {extra}/>"#
        );
    }

    fn path(&mut self, points: &[(f64, f64)], stroke: &str, width: f64, extra: &str) {
        // Break the line where a point is missing (NaN); a point alone is a dot.
        let mut segments: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for &(x, y) in points {
            if y.is_finite() {
                if let Some(last) = segments.last_mut() {
                    last.push((x, y));
                }
            } else if segments.last().is_some_and(|s| !s.is_empty()) {
                segments.push(Vec::new());
            }
        }
        let mut d = String::new();
        for seg in &segments {
            match seg.as_slice() {
                [] => {}
                [(x, y)] => {
                    let _ = writeln!(
                        self.out,
                        r#"<circle cx="{x:.1}" cy="{y:.1}" r="{:.1}" fill="{stroke}" {extra}/>"#,
                        (width * 0.6).max(1.5)
                    );
                }
                many => {
                    for (i, (x, y)) in many.iter().enumerate() {
                        let _ = write!(d, "{}{x:.1},{y:.1} ", if i == 0 { "M" } else { "L" });
                    }
                }
            }
        }
        if !d.is_empty() {
            let _ = writeln!(
                self.out,
                r#"<path d="{}" fill="none" stroke="{stroke}" stroke-width="{width}" stroke-linejoin="round" {extra}/>"#,
                d.trim_end()
            );
        }
    }

    fn legend(&mut self, x: f64, y: f64, items: &[(&str, &str, &str)]) {
        for (i, (color, label, kind)) in items.iter().enumerate() {
            let yy = y + i as f64 * 17.0;
            match *kind {
                "box" => self.rect(x, yy - 9.0, 12.0, 10.0, color, ""),
                "dash" => self.line(
                    x,
                    yy - 4.0,
                    x + 14.0,
                    yy - 4.0,
                    color,
                    r#"stroke-width="2" stroke-dasharray="4 3""#,
                ),
                "band" => self.line(
                    x,
                    yy - 4.0,
                    x + 14.0,
                    yy - 4.0,
                    color,
                    r#"stroke-width="6" stroke-opacity="0.45""#,
                ),
                "area" => self.rect(x, yy - 9.0, 12.0, 10.0, color, r#"fill-opacity="0.13""#),
                "pale" => self.line(
                    x,
                    yy - 4.0,
                    x + 14.0,
                    yy - 4.0,
                    color,
                    r#"stroke-width="6" stroke-opacity="0.25""#,
                ),
                _ => self.line(
                    x,
                    yy - 4.0,
                    x + 14.0,
                    yy - 4.0,
                    color,
                    r#"stroke-width="2.5""#,
                ),
            }
            self.text(x + 20.0, yy, 11.5, "start", "#333", "normal", label);
        }
    }
}

fn nice_step(span: f64, target: usize) -> f64 {
    let raw = span / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * mag >= raw {
            return m * mag;
        }
    }
    10.0 * mag
}

fn fmt_ms_axis(v: f64) -> String {
    if v >= 1000.0 {
        let s = format!("{:.1}", v / 1000.0);
        format!("{}s", s.trim_end_matches('0').trim_end_matches('.'))
    } else if v >= 1.0 {
        format!("{v:.0}ms")
    } else {
        format!("{v}ms")
    }
}

/// The chart of a drill, as an SVG document.
pub fn render(r: &DrillReport) -> String {
    let end_ms = r.ended_ms.max(r.duration_ms).max(1.0);
    let x = |t_ms: f64| LEFT + (t_ms / end_ms).clamp(0.0, 1.0) * PLOT_W;

    let band_h = 22.0;
    let band_gap = 6.0;
    let top = 96.0;
    let state_top = top + 18.0;
    // A pool drill has no breaker of the dependency's: its rows are the endpoints'.
    let pool = r.parts.as_ref().is_some_and(|p| p.kind == "endpoint");
    let bands = if pool { 0 } else { r.replica_reports.len() };
    let (row_h, row_gap) = (11.0, 2.0);
    let rows_top = state_top + bands as f64 * (band_h + band_gap);
    let rows = r.parts.as_ref().map_or(0, |p| p.rows.len());
    let state_h = bands as f64 * (band_h + band_gap) + rows as f64 * (row_h + row_gap);
    let panel_h = 165.0;
    let gap = 46.0;
    let rates_top = state_top + state_h + gap;
    let lat_top = rates_top + panel_h + gap;
    let calls_top = lat_top + panel_h + gap;
    let bottom = calls_top + panel_h;
    let h = bottom + 58.0;

    let mut s = Svg { out: String::new() };
    let _ = writeln!(
        s.out,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h:.0}" viewBox="0 0 {W} {h:.0}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">"#
    );
    let _ = writeln!(s.out, "<title>fusebox drill {}</title>", esc(&r.scenario));
    s.rect(0.0, 0.0, W, h, "#ffffff", "");

    // Title.
    let verdict = if r.expectations.is_empty() {
        ""
    } else if r.passed {
        "  ·  PASS"
    } else {
        "  ·  FAIL"
    };
    s.text(
        LEFT,
        30.0,
        20.0,
        "start",
        "#222",
        "bold",
        &format!("fusebox drill: {}{verdict}", r.scenario),
    );
    let lines = wrap(&r.description, 150, 2);
    for (i, line) in lines.iter().enumerate() {
        s.text(
            LEFT,
            48.0 + i as f64 * 15.0,
            12.0,
            "start",
            "#555",
            "normal",
            line,
        );
    }
    s.text(
        LEFT,
        48.0 + lines.len() as f64 * 15.0 + 1.0,
        11.5,
        "start",
        "#555",
        "normal",
        &format!(
            "{} calls/s{}, breaker trips at failure ≥ {} % or slow ≥ {} % after {} calls; {} probes",
            r.rate,
            if r.replicas > 1 {
                format!(" × {} replicas", r.replicas)
            } else {
                String::new()
            },
            r.thresholds.failure_rate,
            r.thresholds.slow_rate,
            r.thresholds.minimum_calls,
            r.thresholds.permitted_probes
        ),
    );

    // Phases: shading across all panels, names on top.
    for (i, p) in r.phases.iter().enumerate() {
        let (x0, x1) = (x(p.start_ms), x(p.end_ms.min(end_ms)));
        let fill = if i % 2 == 0 { "#f4f6f8" } else { "#ffffff" };
        s.rect(
            x0,
            state_top - 4.0,
            x1 - x0,
            bottom - state_top + 4.0,
            fill,
            "",
        );
        s.line(
            x0,
            state_top - 14.0,
            x0,
            bottom,
            "#b8c0c8",
            r#"stroke-width="1" stroke-dasharray="2 3""#,
        );
        s.text(
            x0 + 4.0,
            state_top - 6.0,
            11.5,
            "start",
            "#444",
            "bold",
            &p.name,
        );
    }

    // Time axis grid (shared).
    let step_s = nice_step(end_ms / 1000.0, 12);
    let mut ticks = Vec::new();
    let mut t = 0.0;
    while t <= end_ms / 1000.0 + 1e-9 {
        ticks.push(t);
        t += step_s;
    }
    for panel_top in [rates_top, lat_top, calls_top] {
        for &t in &ticks {
            let xx = x(t * 1000.0);
            s.line(
                xx,
                panel_top,
                xx,
                panel_top + panel_h,
                "#e3e6ea",
                r#"stroke-width="1""#,
            );
        }
    }
    for &t in &ticks {
        let xx = x(t * 1000.0);
        s.line(xx, bottom, xx, bottom + 5.0, "#555", "");
        let label = if step_s < 1.0 {
            format!("{t:.1}s")
        } else {
            format!("{t:.0}s")
        };
        s.text(xx, bottom + 18.0, 11.0, "middle", "#444", "normal", &label);
    }
    s.text(
        LEFT + PLOT_W / 2.0,
        bottom + 38.0,
        12.0,
        "middle",
        "#333",
        "normal",
        "time since the drill started",
    );

    // 1. State bands.
    s.text(
        LEFT - 8.0,
        state_top - 6.0,
        11.5,
        "end",
        "#333",
        "bold",
        if pool { "endpoints" } else { "breaker" },
    );
    for (ri, rep) in r.replica_reports.iter().enumerate().take(bands) {
        let y0 = state_top + ri as f64 * (band_h + band_gap);
        let mut at = 0.0;
        let mut state = "closed";
        let mut segments = Vec::new();
        for t in &rep.transitions {
            segments.push((at, t.at_ms, state));
            at = t.at_ms;
            state = t.to;
        }
        segments.push((at, end_ms, state));
        for (a, b, st) in segments {
            let color = match st {
                "open" | "forced_open" => C_OPEN,
                "half_open" => C_HALF,
                _ => C_CLOSED,
            };
            // A half-open period lasts milliseconds: keep it visible.
            let min_w = if st == "half_open" { 3.0 } else { 0.8 };
            s.rect(x(a), y0, (x(b) - x(a)).max(min_w), band_h, color, "");
        }
        s.rect(
            LEFT,
            y0,
            PLOT_W,
            band_h,
            "none",
            r##"stroke="#555" stroke-width="0.8""##,
        );
        let label = if r.replicas > 1 {
            format!("replica {}", rep.replica)
        } else {
            "state".into()
        };
        s.text(LEFT - 8.0, y0 + 15.0, 11.0, "end", "#333", "normal", &label);
    }
    if let Some(parts) = &r.parts {
        for (i, row) in parts.rows.iter().enumerate() {
            let y0 = rows_top + i as f64 * (row_h + row_gap);
            let first = if pool { "serving" } else { "closed" };
            let mut at = 0.0;
            let mut state = first;
            let mut segments = Vec::new();
            for &(t, to) in &row.changes {
                segments.push((at, t, state));
                at = t;
                state = to;
            }
            segments.push((at, end_ms, state));
            for (a, b, st) in segments {
                let color = match st {
                    "open" | "forced_open" | "ejected" => C_OPEN,
                    "half_open" | "probing" => C_HALF,
                    "would_eject" => C_KEPT,
                    _ => C_CLOSED,
                };
                let min_w = if matches!(st, "half_open" | "probing") {
                    2.0
                } else {
                    0.6
                };
                s.rect(x(a), y0, (x(b) - x(a)).max(min_w), row_h, color, "");
            }
            s.rect(
                LEFT,
                y0,
                PLOT_W,
                row_h,
                "none",
                r##"stroke="#888" stroke-width="0.5""##,
            );
            let weight = if row.affected { "bold" } else { "normal" };
            s.text(LEFT - 8.0, y0 + 9.0, 9.0, "end", "#333", weight, &row.name);
        }
    }
    let legend: &[(&str, &str, &str)] = if pool {
        &[
            (C_CLOSED, "serving", "box"),
            (C_OPEN, "ejected", "box"),
            (C_HALF, "probing", "box"),
            (C_KEPT, "tripped, kept in", "box"),
        ]
    } else {
        &[
            (C_CLOSED, "closed", "box"),
            (C_OPEN, "open", "box"),
            (C_HALF, "half-open", "box"),
        ]
    };
    s.legend(W - RIGHT + 16.0, state_top + 10.0, legend);
    if let Some(parts) = &r.parts {
        s.text(
            W - RIGHT + 16.0,
            state_top + 10.0 + legend.len() as f64 * 18.0 + 8.0,
            10.5,
            "start",
            "#555",
            "normal",
            &format!("a row per {}; bold: affected", parts.kind),
        );
    }

    // 2. Rates.
    panel_frame(
        &mut s,
        rates_top,
        panel_h,
        if pool {
            "the share of requests the dependency failed (%): each endpoint has its own breaker, the pool no window of its own"
        } else {
            "the breaker's window: failure and slow-call rates (%), as it judges them (frozen while open)"
        },
    );
    let yr = |v: f64| rates_top + panel_h - (v.clamp(0.0, 100.0) / 100.0) * panel_h;
    for v in [0.0, 25.0, 50.0, 75.0, 100.0] {
        s.line(LEFT, yr(v), LEFT + PLOT_W, yr(v), "#e3e6ea", "");
        s.text(
            LEFT - 6.0,
            yr(v) + 4.0,
            10.5,
            "end",
            "#555",
            "normal",
            &format!("{v:.0} %"),
        );
    }
    // What the dependency was doing, for contrast with what the window shows: the share of
    // requests it failed (5xx or reset), per slice, as a pale area.
    let mut area = String::new();
    for b in &r.timeline {
        if b.dependency_received == 0 {
            continue;
        }
        let share = b.dependency_failed as f64 * 100.0 / b.dependency_received as f64;
        let (x0, x1) = (x(b.start_ms), x(b.start_ms + r.bucket_ms));
        let _ = write!(
            area,
            "M{x0:.1},{:.1} L{x0:.1},{:.1} L{x1:.1},{:.1} L{x1:.1},{:.1} Z ",
            yr(0.0),
            yr(share),
            yr(share),
            yr(0.0)
        );
    }
    if !area.is_empty() {
        let _ = writeln!(
            s.out,
            r#"<path d="{}" fill="{C_FAIL}" fill-opacity="0.13" stroke="none"/>"#,
            area.trim_end()
        );
    }
    for (ri, rep) in r.replica_reports.iter().enumerate() {
        let opacity = if ri == 0 { "1" } else { "0.55" };
        let extra = format!(r#"stroke-opacity="{opacity}""#);
        let fail: Vec<(f64, f64)> = rep
            .samples
            .iter()
            .map(|p| (x(p.at_ms), yr(p.failure_rate)))
            .collect();
        let slow: Vec<(f64, f64)> = rep
            .samples
            .iter()
            .map(|p| (x(p.at_ms), yr(p.slow_rate)))
            .collect();
        s.path(&slow, C_SLOW, 2.0, &extra);
        s.path(&fail, C_FAIL, 2.0, &extra);
    }
    let (ft, st) = (
        f64::from(r.thresholds.failure_rate),
        f64::from(r.thresholds.slow_rate),
    );
    s.line(
        LEFT,
        yr(ft),
        LEFT + PLOT_W,
        yr(ft),
        C_FAIL,
        r#"stroke-width="1.5" stroke-dasharray="6 4""#,
    );
    s.line(
        LEFT,
        yr(st),
        LEFT + PLOT_W,
        yr(st),
        C_SLOW,
        r#"stroke-width="1.5" stroke-dasharray="6 4""#,
    );
    let fail_label = format!("failure rate (trip ≥ {} %)", r.thresholds.failure_rate);
    let slow_label = match r.thresholds.slow_call_ms {
        Some(ms) => format!(
            "slow rate (≥ {}; trip ≥ {} %)",
            fmt_ms_axis(ms),
            r.thresholds.slow_rate
        ),
        None => format!("slow rate (trip ≥ {} %)", r.thresholds.slow_rate),
    };
    s.legend(
        W - RIGHT + 16.0,
        rates_top + 14.0,
        &[
            (C_FAIL, &fail_label, "line"),
            (C_SLOW, &slow_label, "line"),
            ("#666", "thresholds", "dash"),
            (C_FAIL, "dependency failing (5xx, resets)", "area"),
        ],
    );

    // 3. Latency, log scale.
    panel_frame(
        &mut s,
        lat_top,
        panel_h,
        "latency (log scale): what callers waited vs what the dependency took",
    );
    let max_lat = r
        .timeline
        .iter()
        .flat_map(|b| [b.caller_p99_ms, b.dependency_p99_ms])
        .flatten()
        .fold(
            r.thresholds
                .slow_call_ms
                .unwrap_or(1.0)
                .max(r.thresholds.timeout_ms.unwrap_or(1.0)),
            f64::max,
        )
        .max(10.0);
    let lo = 0.1f64.log10();
    let hi = (max_lat * 1.5).log10().ceil();
    let yl = |v: f64| {
        let l = v.max(0.1).log10();
        lat_top + panel_h - ((l - lo) / (hi - lo)).clamp(0.0, 1.0) * panel_h
    };
    let mut decade = lo;
    while decade <= hi + 1e-9 {
        let v = 10f64.powf(decade);
        s.line(LEFT, yl(v), LEFT + PLOT_W, yl(v), "#e3e6ea", "");
        s.text(
            LEFT - 6.0,
            yl(v) + 4.0,
            10.5,
            "end",
            "#555",
            "normal",
            &fmt_ms_axis(v),
        );
        decade += 1.0;
    }
    let mid = |b: &Bucket| x(b.start_ms + r.bucket_ms / 2.0);
    let series = |f: &dyn Fn(&Bucket) -> Option<f64>| -> Vec<(f64, f64)> {
        r.timeline
            .iter()
            .map(|b| (mid(b), f(b).map_or(f64::NAN, yl)))
            .collect()
    };
    // The dependency's latency as wide, pale bands under the callers' lines: where they
    // coincide the calls went through untouched; where they part, the breaker or the
    // timeout answered the callers instead.
    s.path(
        &series(&|b| b.dependency_p99_ms),
        C_DEP,
        6.0,
        r#"stroke-opacity="0.25""#,
    );
    s.path(
        &series(&|b| b.dependency_p50_ms),
        C_DEP,
        6.0,
        r#"stroke-opacity="0.45""#,
    );
    s.path(
        &series(&|b| b.caller_p99_ms),
        C_CALLER,
        1.6,
        r#"stroke-dasharray="5 3""#,
    );
    s.path(&series(&|b| b.caller_p50_ms), C_CALLER, 2.2, "");
    let mut items: Vec<(&str, String, &str)> = vec![
        (C_CALLER, "callers p50".into(), "line"),
        (C_CALLER, "callers p99".into(), "dash"),
        (C_DEP, "dependency p50 (band)".into(), "band"),
        (C_DEP, "dependency p99 (pale band)".into(), "pale"),
    ];
    if let Some(ms) = r.thresholds.timeout_ms {
        s.line(
            LEFT,
            yl(ms),
            LEFT + PLOT_W,
            yl(ms),
            C_TIMEOUT,
            r#"stroke-width="1.2" stroke-dasharray="2 3""#,
        );
        items.push((C_TIMEOUT, format!("timeout {}", fmt_ms_axis(ms)), "dash"));
    }
    if let Some(ms) = r.thresholds.slow_call_ms {
        s.line(
            LEFT,
            yl(ms),
            LEFT + PLOT_W,
            yl(ms),
            C_SLOW,
            r#"stroke-width="1.2" stroke-dasharray="2 3""#,
        );
        items.push((C_SLOW, format!("slow at {}", fmt_ms_axis(ms)), "dash"));
    }
    let items: Vec<(&str, &str, &str)> =
        items.iter().map(|(c, l, k)| (*c, l.as_str(), *k)).collect();
    s.legend(W - RIGHT + 16.0, lat_top + 14.0, &items);

    // 4. Calls per second by outcome, stacked.
    panel_frame(
        &mut s,
        calls_top,
        panel_h,
        "calls per second, by what the caller got",
    );
    let per_s = 1000.0 / r.bucket_ms.max(1.0);
    let stacks: Vec<[f64; 6]> = r
        .timeline
        .iter()
        .map(|b| {
            [
                b.ok as f64,
                b.server_errors as f64,
                b.timeouts as f64,
                b.connection_errors as f64,
                b.rejected_breaker as f64,
                b.rejected_limit as f64,
            ]
            .map(|v| v * per_s)
        })
        .collect();
    let max_rate = stacks
        .iter()
        .map(|v| v.iter().sum::<f64>())
        .fold(1.0, f64::max);
    let step = nice_step(max_rate, 4);
    let top_rate = (max_rate / step).ceil() * step;
    let yc = |v: f64| calls_top + panel_h - (v / top_rate).clamp(0.0, 1.0) * panel_h;
    let mut v = 0.0;
    while v <= top_rate + 1e-9 {
        s.line(LEFT, yc(v), LEFT + PLOT_W, yc(v), "#e3e6ea", "");
        s.text(
            LEFT - 6.0,
            yc(v) + 4.0,
            10.5,
            "end",
            "#555",
            "normal",
            &format!("{v:.0}"),
        );
        v += step;
    }
    let colors = [C_OK, C_FAIL, C_TIMEOUT, C_CONN, C_REJ_B, C_REJ_L];
    let bw = (PLOT_W * r.bucket_ms / end_ms).max(0.5);
    for (b, stack) in r.timeline.iter().zip(&stacks) {
        let mut base = 0.0;
        for (value, color) in stack.iter().zip(colors) {
            if *value > 0.0 {
                let (y1, y0) = (yc(base + value), yc(base));
                s.rect(x(b.start_ms), y1, (bw - 0.6).max(0.4), y0 - y1, color, "");
            }
            base += value;
        }
    }
    s.legend(
        W - RIGHT + 16.0,
        calls_top + 14.0,
        &[
            (C_OK, "answered (1xx–4xx)", "box"),
            (C_FAIL, "5xx", "box"),
            (C_TIMEOUT, "timed out", "box"),
            (C_CONN, "connection errors", "box"),
            (C_REJ_B, "rejected by breaker", "box"),
            (C_REJ_L, "rejected by limit", "box"),
        ],
    );

    let _ = writeln!(s.out, "</svg>");
    s.out
}

/// Splits `text` into at most `max_lines` lines of at most `width` characters.
fn wrap(text: &str, width: usize, max_lines: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut current = String::new();
    for word in text.split_whitespace() {
        if !current.is_empty() && current.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(word);
    }
    if !current.is_empty() {
        lines.push(current);
    }
    if lines.len() > max_lines {
        lines.truncate(max_lines);
        if let Some(last) = lines.last_mut() {
            last.push_str(" ...");
        }
    }
    lines
}

fn panel_frame(s: &mut Svg, top: f64, h: f64, title: &str) {
    s.rect(
        LEFT,
        top,
        PLOT_W,
        h,
        "none",
        r##"stroke="#555" stroke-width="0.8""##,
    );
    s.text(LEFT, top - 8.0, 12.5, "start", "#222", "bold", title);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_labels() {
        assert_eq!(nice_step(21.0, 12), 2.0);
        assert_eq!(nice_step(100.0, 4), 25.0);
        assert_eq!(fmt_ms_axis(1000.0), "1s");
        assert_eq!(fmt_ms_axis(10.0), "10ms");
        assert_eq!(esc("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(wrap("aa bb cc dd", 5, 2), ["aa bb", "cc dd"]);
        assert_eq!(wrap("aa bb cc dd ee", 5, 2), ["aa bb", "cc dd ..."]);
    }
}
