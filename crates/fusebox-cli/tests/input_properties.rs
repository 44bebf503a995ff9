//! Every parser of the command's input, fed arbitrary bytes and near-valid files — valid
//! records or tables with one value changed, huge numbers, dates at the limits — must
//! answer without a panic or an overflow (the tests run in debug builds, where an
//! overflow panics), with an error that names the line and column or the path of what is
//! wrong.

use fusebox_cli::config::{Policies, load_policy_file};
use fusebox_cli::input::{InputError, SourceFile};
use fusebox_cli::replay::calls::{CallReader, Format};
use fusebox_cli::replay::{ReplayOptions, replay};
use fusebox_cli::scenario::{BUILTIN, load_scenario};

use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, TestCaseError};
use std::sync::LazyLock;
use std::time::Duration;

/// Cases per parser: fast enough in a debug build (each test takes seconds).
const CASES: u32 = 10_000;

fn config() -> ProptestConfig {
    ProptestConfig {
        // Run from the crate's directory, as the other crates keep theirs.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/input_properties.txt",
        ))),
        ..ProptestConfig::with_cases(CASES)
    }
}

const BOM: &[u8] = b"\xef\xbb\xbf";

// === what an error must say ===

/// The characters of `bytes` (UTF-8, or not: a byte that starts a character counts).
fn chars(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b & 0xc0 != 0x80).count()
}

/// `e` is about the file `name`, at a line of `text` and a column on it (at most one past
/// its last character).
fn located_in(e: &InputError, name: &str, text: &[u8]) -> Result<(), TestCaseError> {
    prop_assert_eq!(e.file(), Some(name), "{}", e);
    let (Some(line), Some(column)) = (e.line(), e.column()) else {
        return Err(TestCaseError::fail(format!("no line and column: {e}")));
    };
    let text = text.strip_prefix(BOM).unwrap_or(text);
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    prop_assert!(
        line >= 1 && line as usize <= lines.len(),
        "{} is past the end of {:?}",
        e,
        String::from_utf8_lossy(text)
    );
    let on = lines[line as usize - 1];
    prop_assert!(
        column >= 1 && column as usize <= chars(on) + 1,
        "{} is past its line {:?}",
        e,
        String::from_utf8_lossy(on)
    );
    Ok(())
}

/// `e`, about the file `name`, is located in `text`, or says which key or table it is
/// about (a path such as `traffic.rate: ...`, or a missing table: `no [policy]: ...`).
fn located_or_named(e: &InputError, name: &str, text: &str) -> Result<(), TestCaseError> {
    if e.line().is_some() {
        return located_in(e, name, text.as_bytes());
    }
    prop_assert_eq!(e.file(), Some(name), "{}", e);
    // `path: rule`: a key whose path cannot be found in the text (a key with a dot in
    // its name reads as two) is still named.
    let reason = e.reason();
    let names_a_path = reason
        .split_once(": ")
        .is_some_and(|(path, rule)| !path.is_empty() && !rule.is_empty());
    let names_a_table = reason.starts_with("no [")
        || reason.starts_with("no policies")
        || reason.starts_with("policy ");
    prop_assert!(names_a_path || names_a_table, "names no place: {}", e);
    Ok(())
}

// === near-valid input, built from a list of choices ===

/// Choices that build a near-valid file: each picks among a few options, 0 the plainest
/// (which is what a shrunk case tends to). Building from one list of bytes keeps each
/// case cheap in a debug build.
struct Choices<'c>(std::slice::Iter<'c, u8>);

impl Choices<'_> {
    /// One of `n` options.
    fn pick(&mut self, n: usize) -> usize {
        self.0.next().map_or(0, |&c| usize::from(c) % n)
    }

    /// Whether to do something that is done one time in `n`.
    fn one_in(&mut self, n: usize) -> bool {
        self.pick(n) == n - 1
    }

    /// A number of any size: small ones most often, then any up to `u64::MAX`.
    fn number(&mut self) -> u64 {
        match self.pick(4) {
            0 => self.pick(256) as u64,
            1 => (self.pick(256) as u64) << 24 | self.pick(256) as u64,
            2 => u64::MAX - self.pick(3) as u64,
            _ => (0..8).fold(0, |n, _| n << 8 | self.pick(256) as u64),
        }
    }

    /// One of `options`.
    fn one_of<'o>(&mut self, options: &[&'o str]) -> &'o str {
        options[self.pick(options.len())]
    }

    /// Text of up to `max` characters: letters, digits, separators, quotes, escapes,
    /// control characters and characters of several bytes.
    fn text(&mut self, max: usize) -> String {
        const PALETTE: [&str; 24] = [
            "a",
            "Z",
            "0",
            "9",
            " ",
            ",",
            "\"",
            "\\",
            "{",
            "}",
            ":",
            ".",
            "-",
            "+",
            "/",
            "\t",
            "\r",
            "\u{0}",
            "\u{e9}",
            "\u{feff}",
            "\u{10ffff}",
            "\u{2028}",
            "#",
            "\u{b5}",
        ];
        let len = self.pick(max + 1);
        (0..len)
            .map(|_| PALETTE[self.pick(PALETTE.len())])
            .collect()
    }
}

/// The choices a case is built from.
fn choices() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..400)
}

// === calls files ===

/// Timestamps at the limits of what a replay counts, and just past them.
const TIMESTAMP_LIMITS: [&str; 23] = [
    "2554-07-21T23:34:33.709551615Z",
    "2554-07-21T23:34:33.709551616Z",
    "2554-07-21T23:34:59Z",
    "2554-07-22T00:00:00+00:01",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59.999999999-23:59",
    "0000-01-01T00:00:00Z",
    "1969-12-31T23:59:59Z",
    "1970-01-01T00:00:00Z",
    "1970-01-01T00:00:00+23:59",
    "2024-02-29T23:59:60Z",
    "2023-02-29T00:00:00Z",
    "2024-05-01T12:00:00.",
    "2024-05-01T12:00:00",
    "18446744073.709551615",
    "18446744073.709551616",
    "18446744074",
    "99999999999999999999999999",
    "0",
    "0.0000000001",
    "-1",
    "1e9",
    "",
];

/// Latencies at the limits, and wrong ones.
const LATENCY_LIMITS: [&str; 15] = [
    "18446744073709",
    "18446744073709551615",
    "18446744073709551616",
    "18446744073709551615ns",
    "18446744073709552ms",
    "18446744074s",
    "99999999999999999999999999999",
    "0.0000000000001",
    ".5",
    "5.",
    ".",
    "-5",
    "1e3",
    "12 parsecs",
    "",
];

/// Statuses and error kinds, good and bad.
const STATUSES: [&str; 17] = [
    "200",
    "503",
    "429",
    "100",
    "999",
    "099",
    "1000",
    "timeout",
    "reset",
    "cancelled",
    "grpc:14",
    "grpc:UNAVAILABLE",
    "grpc:17",
    "grpc:-1",
    "grpc:99999999999",
    "teapot",
    "",
];

/// A timestamp: well-formed ones, the limits of what a replay counts, and near misses.
fn timestamp(c: &mut Choices<'_>) -> String {
    match c.pick(10) {
        0..=3 => format!("{}.{:03}", c.number() % 20_000_000_000, c.pick(1000)),
        4..=7 => {
            let (y, mo, d) = (1969 + c.pick(631), c.pick(14), c.pick(33));
            let (h, mi, s) = (c.pick(25), c.pick(61), c.pick(62));
            let digits = c.pick(13);
            let frac = if digits == 0 {
                String::new()
            } else {
                let n = c.number().to_string();
                format!(".{}", &n[..digits.min(n.len())])
            };
            let zone = match c.pick(3) {
                0 => "Z".to_owned(),
                1 => "z".to_owned(),
                _ => format!(
                    "{}{:02}:{:02}",
                    if c.pick(2) == 0 { '+' } else { '-' },
                    c.pick(30),
                    c.pick(70)
                ),
            };
            let sep = c.one_of(&["T", "T", " ", "t", "x"]);
            format!("{y:04}-{mo:02}-{d:02}{sep}{h:02}:{mi:02}:{s:02}{frac}{zone}")
        }
        8 => c.one_of(&TIMESTAMP_LIMITS).to_owned(),
        _ => c.text(24),
    }
}

/// A latency: plain, with units, huge, and wrong.
fn latency(c: &mut Choices<'_>) -> String {
    match c.pick(9) {
        0..=3 => format!("{}.{}", c.number() % 100_000, c.pick(1000)),
        4 | 5 => {
            let unit = c.one_of(&["", "ns", "us", "\u{b5}s", "ms", "s"]);
            format!("{}{unit}", c.number())
        }
        6 | 7 => c.one_of(&LATENCY_LIMITS).to_owned(),
        _ => c.text(16),
    }
}

/// A status or error kind.
fn status(c: &mut Choices<'_>) -> String {
    match c.pick(6) {
        0..=3 => c.one_of(&STATUSES).to_owned(),
        4 => c.number().to_string(),
        _ => c.text(12),
    }
}

/// A route: ones the test policy lists, others, and odd text.
fn route(c: &mut Choices<'_>) -> String {
    match c.pick(5) {
        0..=3 => c
            .one_of(&["GET /a", "POST /b", "/a", "GET /c/7", " GET /a ", ""])
            .to_owned(),
        _ => c.text(20),
    }
}

/// One call's fields: timestamp, route, status, latency.
fn record(c: &mut Choices<'_>) -> [String; 4] {
    [timestamp(c), route(c), status(c), latency(c)]
}

const COLUMNS: [&str; 4] = ["timestamp", "route", "status", "latency_ms"];

/// Near-valid CSV: an optional header (its columns in any order), records, fields
/// quoted, padded or broken; a byte-order mark, CRLF, comments, blank lines, short and
/// long lines.
fn near_valid_csv(c: &mut Choices<'_>) -> Vec<u8> {
    let mut out = if c.one_in(3) {
        BOM.to_vec()
    } else {
        Vec::new()
    };
    let crlf = c.one_in(3);
    let mut order = [0, 1, 2, 3];
    if c.pick(2) == 0 {
        for i in (1..4).rev() {
            order.swap(i, c.pick(i + 1));
        }
        let names: Vec<&str> = order.iter().map(|&k| COLUMNS[k]).collect();
        out.extend_from_slice(names.join(",").as_bytes());
        out.push(b'\n');
    }
    for _ in 0..1 + c.pick(6) {
        let fields = record(c);
        let mut cells: Vec<String> = order.iter().map(|&k| fields[k].clone()).collect();
        let k = c.pick(4);
        cells[k] = match c.pick(8) {
            0 => format!("\"{}\"", cells[k]),
            1 => format!(" {} ", cells[k]),
            2 => format!("\"{}", cells[k]),
            3 => format!("\"{}\"x", cells[k]),
            _ => std::mem::take(&mut cells[k]),
        };
        match c.pick(16) {
            0 => drop(cells.pop()),
            1 => cells.push("x".into()),
            2 => cells.clear(),
            3 => out.extend_from_slice(b"# a comment\n\n"),
            _ => {}
        }
        out.extend_from_slice(cells.join(",").as_bytes());
        out.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
    }
    out
}

/// Near-valid JSON lines: objects with the call's fields in any order (and any of their
/// names), one value written otherwise, other keys; a byte-order mark, blank lines,
/// comments, broken objects.
fn near_valid_jsonl(c: &mut Choices<'_>) -> Vec<u8> {
    const KEYS: [[&str; 4]; 4] = [
        ["timestamp", "route", "status", "latency_ms"],
        ["ts", "route", "error", "latency"],
        ["time", "route", "outcome", "latency_us"],
        ["start", "route", "result", "duration_s"],
    ];
    let mut out = if c.one_in(3) {
        BOM.to_vec()
    } else {
        Vec::new()
    };
    for _ in 0..1 + c.pick(6) {
        let fields = record(c);
        let keys = KEYS[c.pick(4)];
        let mut order = [0, 1, 2, 3];
        for i in (1..4).rev() {
            order.swap(i, c.pick(i + 1));
        }
        let odd = c.pick(4);
        let mut parts: Vec<String> = order
            .iter()
            .map(|&k| {
                let text = &fields[k];
                let plain_number =
                    k != 1 && !text.is_empty() && text.parse::<f64>().is_ok() && c.pick(2) == 0;
                let value = if k == odd {
                    match c.pick(8) {
                        0 => "null".into(),
                        1 => "true".into(),
                        2 => "[1,{\"a\":2}]".into(),
                        3 => format!("\"{}\"", text.replace('/', "\\/")),
                        4 => "1e400".into(),
                        5 => "-0.5e-3".into(),
                        _ => text.clone(),
                    }
                } else if plain_number {
                    text.clone()
                } else {
                    serde_json::Value::String(text.clone()).to_string()
                };
                format!("\"{}\":{value}", keys[k])
            })
            .collect();
        match c.pick(16) {
            0 => drop(parts.pop()),
            1 => parts.push("\"note\":\"a \\\"quoted\\\" word\"".into()),
            2 => parts.push("\"ts\":\"yesterday\"".into()),
            _ => {}
        }
        let object = format!("{{{}}}", parts.join(","));
        let line = match c.pick(16) {
            0 => format!("  {object} ").into_bytes(),
            // Cut anywhere, inside a character too.
            1 => object.as_bytes()[..object.len() / 2].to_vec(),
            2 => format!("{object} {{}}").into_bytes(),
            3 => format!("# a comment\n\n{object}").into_bytes(),
            _ => object.into_bytes(),
        };
        out.extend_from_slice(&line);
        out.push(b'\n');
    }
    out
}

/// Reads every call of `data`; checks what each call says, and where an error is.
fn read_calls(data: &[u8], format: Format) -> Result<(), TestCaseError> {
    let mut reader = CallReader::new("calls", data, format);
    let mut last = 0;
    loop {
        match reader.next_call() {
            Ok(None) => return Ok(()),
            Ok(Some(call)) => {
                prop_assert!(call.at >= last, "out of order");
                prop_assert!(call.at.checked_add(call.latency).is_some(), "ends past u64");
                prop_assert!(!call.route.is_empty());
                // A route the resolver rejects is reported at its column.
                located_in(&reader.error_at(call.route, "x"), "calls", data)?;
                last = call.at;
            }
            Err(e) => return located_in(&e, "calls", data),
        }
    }
}

/// The policies the replays run through: every route goes to a breaker.
static POLICIES: LazyLock<Policies> = LazyLock::new(|| {
    let mut p = load_policy_file(&SourceFile::new(
        "p.toml",
        r#"
[policies.api.breaker]
count_window = 4
minimum_calls = 2
open_wait = "1s"
max_half_open_wait = "2s"
[policies.api.routes."GET /a"]
slow_call_duration = "10ms"
[policies.keyed.breaker]
time_window = "1s"
time_window_buckets = 4
minimum_calls = 2
key = "route"
open_wait = "1h"
open_wait_multiplier = 2.0
max_open_wait = "1000000h"
[policies.keyed.routes."POST /b"]
"#,
    ))
    .unwrap_or_else(|e| panic!("the test's policies are valid: {e:?}"));
    p.set_default_policy("api")
        .unwrap_or_else(|e| panic!("the test's default policy: {e}"));
    p
});

/// Replays `data`: a report, or an error located in the file (or saying it has no calls).
fn replay_calls(name: &str, data: &[u8]) -> Result<(), TestCaseError> {
    match replay(&POLICIES, name, data, &ReplayOptions::default()) {
        Ok(report) => {
            prop_assert!(report.end >= report.start);
            for b in &report.breakers {
                for t in &b.transitions {
                    prop_assert!(t.line >= 1);
                }
            }
            Ok(())
        }
        Err(e) if e.line().is_none() => {
            prop_assert_eq!(e.to_string(), format!("{name}: no calls in the file"));
            Ok(())
        }
        Err(e) => located_in(&e, name, data),
    }
}

// === scenario and policy files ===

/// Values a key of a scenario or a policy file might be given by mistake.
const ODD_VALUES: [&str; 40] = [
    "0",
    "-1",
    "1",
    "7",
    "18446744073709551615",
    "9223372036854775807",
    "-9223372036854775808",
    "1e308",
    "-0.0",
    "nan",
    "inf",
    "0.5",
    "\"\"",
    "\"0s\"",
    "\"1ns\"",
    "\"500000000000y\"",
    "\"18446744073709551615s\"",
    "\"584542046090y\"",
    "\"5 parsecs\"",
    "\"GET\"",
    "\"/\"",
    "\"none\"",
    "\"redis\"",
    "\"route\"",
    "true",
    "false",
    "[]",
    "[1, \"a\"]",
    "[500, 1000]",
    "{}",
    "{ min = \"1ms\" }",
    "{ p50 = \"0s\", p99 = \"1h\" }",
    "{ min = \"2s\", max = \"1s\" }",
    "{ p50 = \"1ms\", p99 = \"500000000000y\" }",
    "[{ weight = 4294967295, status = 200 }, { weight = 1, reset = true }]",
    "1979-05-27T07:32:00Z",
    "\"\\u0000\"",
    "\"\u{e9}\"",
    "\"a.b[\\\"c\"",
    "\"[0]\"",
];

/// Names a policy, a key or a phase might be given: ones paths must quote or escape.
const ODD_NAMES: [&str; 10] = [
    "a[b",
    "a.b",
    "\u{e9}",
    "x\\\"y",
    "a]",
    "[0]",
    "",
    " ",
    "a\u{feff}",
    "\u{10ffff}",
];

/// `base` (a TOML or YAML file, `sep` between a key and its value) with one or two
/// lines changed: a value replaced, a key misspelt, a line dropped or doubled, a name
/// made odd; then maybe a byte-order mark, or cut short.
fn near_valid_text(c: &mut Choices<'_>, base: &str, sep: &str) -> String {
    let mut lines: Vec<String> = base.lines().map(str::to_owned).collect();
    for _ in 0..1 + c.pick(2) {
        let i = c.pick(lines.len());
        let line = lines[i].clone();
        match c.pick(10) {
            0..=4 => {
                if let Some((key, _)) = line.split_once(sep) {
                    lines[i] = format!("{key}{sep}{}", c.one_of(&ODD_VALUES));
                }
            }
            5 => {
                if let Some((key, value)) = line.split_once(sep)
                    && !key.trim().is_empty()
                {
                    let mut key: Vec<char> = key.chars().collect();
                    let at = c.pick(key.len());
                    if c.pick(2) == 0 {
                        key.remove(at);
                    } else {
                        key.insert(at, 'x');
                    }
                    lines[i] = format!("{}{sep}{value}", String::from_iter(key));
                }
            }
            6 => drop(lines.remove(i)),
            7 => lines.insert(i, line),
            8 => {
                let name = c.one_of(&ODD_NAMES);
                let quoted = serde_json::Value::String(name.to_owned()).to_string();
                for l in &mut lines {
                    for word in ["payments", "healthy", "outage", "brownout"] {
                        *l = l.replace(word, &quoted);
                    }
                }
            }
            _ => lines.insert(i, c.text(30)),
        }
    }
    let mut text = lines.join("\n");
    if c.one_in(5) {
        text.insert(0, '\u{feff}');
    }
    if c.one_in(8) {
        let mut cut = c.pick(text.len() + 1);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

/// At least one error, and each located in `text` or naming its place.
fn all_located_or_named(
    errors: &[InputError],
    name: &str,
    text: &str,
) -> Result<(), TestCaseError> {
    prop_assert!(!errors.is_empty());
    errors
        .iter()
        .try_for_each(|e| located_or_named(e, name, text))
}

/// Loads scenario `text`: a scenario that can run, or errors that each name their place.
fn check_scenario(name: &str, text: &str) -> Result<(), TestCaseError> {
    match load_scenario(&SourceFile::new(name, text), None) {
        Ok(s) => {
            // What the drill does with a valid scenario must not overflow either.
            let _ = s.duration();
            let _ = s.phase_at(Duration::MAX);
            for (i, phase) in s.phases.iter().enumerate() {
                prop_assert!(!phase.responses.is_empty());
                // Which phase a key or endpoint follows is always a phase.
                for part in (0..s.traffic.parts().min(64)).map(Some).chain([None]) {
                    prop_assert!(s.phase_for(i, part) <= i);
                }
                for u in [0.0, 0.5, 0.999_999_999] {
                    let r = phase.pick(u);
                    let _ = r.latency.sample(u, u);
                    let _ = r.latency.sample(1.0 - f64::EPSILON, 0.0);
                }
                let _ = phase.describe(s.traffic.unit());
            }
            Ok(())
        }
        Err(errors) => all_located_or_named(&errors, name, text),
    }
}

const POLICY_TOML: &str = r#"[defaults.breaker]
failure_rate_threshold = 50
open_wait = "30s"
[defaults.timeout]
default_timeout = "2s"
[policies.payments.breaker]
count_window = 20
minimum_calls = 10
slow_call_rate_threshold = 80
permitted_probes = 3
max_half_open_wait = "5s"
on_close = "keep"
[policies.payments.breaker.store]
kind = "memory"
[policies.payments.limit]
max_concurrency = 64
queue = { max_waiters = 10, max_wait = "50ms" }
[policies.payments.retry]
retry_ratio = 0.2
max_attempts = 3
base_delay = "10ms"
[policies.payments.recovery_ramp]
initial_limit = 2
duration = "10s"
[policies.payments.default_route]
slow_call_duration = "500ms"
[policies.payments.routes."POST /charges"]
timeout = "150ms"
failure_statuses = [500, 503]
[policies.ledger.breaker]
time_window = "30s"
time_window_buckets = 10
key = "route"
[policies.ledger.limit.adaptive]
algorithm = "vegas"
min_limit = 2
max_limit = 100
[policies.ledger.routes."GET /accounts/{id}"]
idempotent = true
"#;

const POLICY_YAML: &str = r#"defaults:
  breaker:
    failure_rate_threshold: 50
    open_wait: 30s
policies:
  payments:
    breaker:
      count_window: 20
      minimum_calls: 10
      max_half_open_wait: 5s
    limit:
      max_concurrency: 64
    retry:
      max_attempts: 3
    routes:
      "POST /charges":
        timeout: 150ms
        failure_statuses: [500, 503]
  ledger:
    breaker:
      time_window: 30s
      key: route
    routes:
      "GET /accounts/{id}":
        idempotent: true
"#;

/// Loads policy file `text`: policies, or errors that each name their place.
fn check_policies(name: &str, text: &str) -> Result<(), TestCaseError> {
    match load_policy_file(&SourceFile::new(name, text)) {
        Ok(p) => {
            prop_assert!(!p.policies.is_empty());
            Ok(())
        }
        Err(errors) => all_located_or_named(&errors, name, text),
    }
}

/// `bytes` as a file: text, or an error at the first byte that is not UTF-8.
fn as_text(name: &str, bytes: &[u8]) -> Result<Option<String>, TestCaseError> {
    match SourceFile::from_bytes(name, bytes.to_vec()) {
        Ok(f) => Ok(Some(f.text().to_owned())),
        Err(e) => located_in(&e, name, bytes).map(|()| None),
    }
}

/// Arbitrary bytes, often around a file's shape: a valid file's start, then anything.
fn bytes_after(base: &'static str) -> impl Strategy<Value = Vec<u8>> {
    (0..=base.len(), prop::collection::vec(any::<u8>(), 0..120)).prop_map(move |(cut, tail)| {
        let mut bytes = base.as_bytes()[..cut].to_vec();
        bytes.extend(tail);
        bytes
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn calls_files_of_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..160)) {
        read_calls(&data, Format::Csv)?;
        read_calls(&data, Format::JsonLines)?;
    }

    #[test]
    fn near_valid_csv_files(choices in choices()) {
        let data = near_valid_csv(&mut Choices(choices.iter()));
        read_calls(&data, Format::Csv)?;
        replay_calls("calls.csv", &data)?;
    }

    #[test]
    fn near_valid_json_lines(choices in choices()) {
        let data = near_valid_jsonl(&mut Choices(choices.iter()));
        read_calls(&data, Format::JsonLines)?;
        replay_calls("calls.jsonl", &data)?;
    }

    #[test]
    fn scenario_files_of_arbitrary_bytes(bytes in bytes_after(BUILTIN[3].1)) {
        if let Some(text) = as_text("s.toml", &bytes)? {
            check_scenario("s.toml", &text)?;
        }
    }

    #[test]
    fn near_valid_scenario_files(choices in choices()) {
        let mut c = Choices(choices.iter());
        let base = BUILTIN[c.pick(BUILTIN.len())].1;
        check_scenario("s.toml", &near_valid_text(&mut c, base, " = "))?;
    }

    #[test]
    fn policy_files_of_arbitrary_bytes(bytes in bytes_after(POLICY_TOML), yaml in any::<bool>()) {
        let name = if yaml { "p.yaml" } else { "p.toml" };
        if let Some(text) = as_text(name, &bytes)? {
            check_policies(name, &text)?;
        }
    }

    #[test]
    fn near_valid_policy_files(choices in choices()) {
        let mut c = Choices(choices.iter());
        if c.pick(2) == 0 {
            check_policies("p.toml", &near_valid_text(&mut c, POLICY_TOML, " = "))?;
        } else {
            check_policies("p.yaml", &near_valid_text(&mut c, POLICY_YAML, ": "))?;
        }
    }
}
