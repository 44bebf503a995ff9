//! The command line: `fusebox drill`, `fusebox replay`, `fusebox check`.
//!
//! Exit codes: 0 when the command did what was asked (for a drill: every expectation
//! held); 1 when a drill's expectations failed or it could not run (a port, Redis); 2 for
//! bad input — a flag, a scenario, a policy file or a calls file — reported with its file,
//! line and reason.

use crate::config::{Policies, describe_policy, load_policy_file};
use crate::drill::{self, DrillError, DrillOptions, Out};
use crate::input::{InputError, SourceFile};
use crate::replay::calls::Format;
use crate::replay::sweep::{Grid, IncidentSpec, SweepOptions, parse_window, render_sweep, sweep};
use crate::replay::{ReplayOptions, render_report, replay, thousands};
use crate::scenario::{BUILTIN, Scenario, builtin, load_scenario};
use clap::{Args, Parser, Subcommand, ValueEnum};
use fusebox::config::PolicyFileSection;
use fusebox_classify::section::{format_duration, parse_duration};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// fusebox: try a circuit breaker under failure before trusting it, and tune its
/// thresholds on real traffic.
#[derive(Debug, Parser)]
#[command(
    name = "fusebox",
    version,
    about = "Resilience drills and circuit-breaker tuning for fusebox",
    long_about = "Resilience drills and circuit-breaker tuning for fusebox.\n\n\
        `fusebox drill` runs a live fault drill: a flaky HTTP dependency on 127.0.0.1, a client \
        wrapped in fusebox's layers, traffic, and a report of what the breaker did (summary, JSON, \
        SVG chart), checked against the scenario's expectations.\n\n\
        `fusebox replay` runs recorded calls through the configured breakers on virtual time: \
        when each would have opened, what it would have rejected, how long it stayed open; \
        `--sweep` compares a grid of thresholds against a labelled incident.\n\n\
        `fusebox check` validates a policy file or a scenario and prints the effective settings.\n\n\
        Exit codes: 0 success; 1 a drill's expectations failed or it could not run; 2 bad input \
        (reported as file:line:column: reason).",
    after_help = "Start with `fusebox drill` (the built-in brownout drill, about 20 s)."
)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a live fault drill against a flaky dependency on 127.0.0.1.
    #[command(
        long_about = "Run a live fault drill.\n\n\
        Starts the scenario's flaky dependency (a real HTTP/1 server on 127.0.0.1, a free port) \
        whose latency, status codes and connection resets follow the scenario's phases; drives \
        traffic at the scenario's rate and concurrency through a hyper-util client wrapped in \
        fusebox's layers (retry budget → circuit breaker → concurrency limit → timeout, as the \
        scenario's policy or --config says); prints each phase, a progress line per second and \
        every breaker transition as it happens; then prints a summary and the scenario's \
        expectations, and writes report.json and chart.svg to --out (and, with --json FILE, \
        the report to FILE too; --json - writes it to standard output, and everything else \
        the drill prints then goes to standard error).\n\n\
        SCENARIO is a built-in name (see --list) or a scenario file (TOML; --show NAME prints a \
        built-in to start from). The exit code is 0 when every expectation held, 1 otherwise.\n\n\
        Scenario files (TOML): name, description, seed; [traffic] rate (calls/s), concurrency, \
        method, path, and for partial failure keys = N (calls spread over key-00 …, sent in \
        the header the policy's breaker is keyed by, breaker.key = \"header\") or endpoints = N \
        (the dependency as N servers behind a balancer with a breaker per endpoint, under \
        [pool] max_ejection_percent, panic_threshold, endpoint_capacity); [dependency] \
        capacity (requests at once, per endpoint) and queue (most waiting; past it, 503 at \
        once); [policy] with the keys of a policy file's [policies.NAME] (breaker, limit, \
        timeout, retry, default_route, routes); [[phases]] each with name, duration, optional \
        ramp = true (the share of calls behaving like this phase grows from 0 to 100 %), \
        optional affects = K (only the first K keys or endpoints behave like this phase, the \
        others as in the phase before), and either status = N / reset = true with a latency, \
        or responses = [{ weight, status | reset, latency }]; a latency is \"20ms\", \
        { min, max } or { p50, p99 }; [expect] with opens, open_reason, first_open_in, \
        no_open_in, closed_at_end, max_half_open_calls, half_open_calls, min_calls_to_open, \
        max_calls_to_open, max_dependency_in_flight, and over keys or endpoints \
        affected_open, unaffected_open, max_unaffected_rejected, ok_percent_in with \
        min_ok_percent / max_ok_percent, max_ejected, min_ejected.",
        after_help = "Examples:\n  fusebox drill\n  fusebox drill unavailable --out /tmp/drill\n  \
        fusebox drill my-scenario.toml --config policies.toml --policy payments\n  \
        fusebox drill brownout --replicas 3 --store redis://127.0.0.1:6379/0\n  \
        fusebox drill hot-shard --virtual-time\n  \
        fusebox drill --show gradual-recovery > mine.toml"
    )]
    Drill(DrillArgs),
    /// Replay recorded calls through the configured breakers on virtual time.
    #[command(
        long_about = "Replay recorded calls through the configured breakers on virtual time.\n\n\
        Each call (CSV or JSON lines: timestamp, route, status or error kind, latency) is \
        admitted or rejected by its route's breaker — the exact state machine fusebox runs — at \
        its timestamp, and its outcome is recorded when it completes at timestamp + latency, \
        judged exactly as the live breaker judges a call on that route: the route's \
        classifier, the breaker's count_overloaded for shed calls, the route's slow-call \
        threshold. The report says when each breaker would have \
        opened and why, how many calls it would have rejected (and how many of those would have \
        succeeded), how long it stayed open, and how often it flapped.\n\n\
        With --sweep, the calls are replayed once per combination of the listed thresholds and \
        the trade-offs are printed as a table; with --incident, the settings that would have \
        opened within --within of the incident's start without opening outside it are marked.\n\n\
        CSV columns: timestamp,route,status,latency_ms (header optional; also error, latency_us, \
        latency_s; a leading byte-order mark is skipped). JSON lines: one object per line with \
        the same fields. Timestamps: RFC 3339 or seconds since the epoch, in order, and no later \
        than 2554-07-21T23:34:33.709551615Z (nor may a call's timestamp + latency be). Status: an HTTP \
        status, grpc:CODE, or timeout, reset, refused, connect_timeout, connect_error, tls, eof, \
        error, cancelled, circuit_open, overloaded, deadline_exceeded, rejected. Routes: a key of \
        a policy's routes (the first policy in the file that has it), or METHOD /path matched by \
        them; calls on other routes are an error unless --default-policy names a policy for them.\n\n\
        A mistake in the calls file is reported as file:line:column, at the field in question. \
        Each transition in the report names the calls-file line of the call that made it (for \
        an opening, the call whose outcome tripped the breaker). --json FILE writes the full \
        report as JSON; --json - writes it to standard output, and the text report then goes \
        to standard error.",
        after_help = "Examples:\n  fusebox replay --config policies.toml --calls calls.csv\n  \
        fusebox replay --config policies.toml --calls calls.jsonl --json report.json\n  \
        fusebox replay --config policies.toml --calls calls.csv --json - | jq '.breakers[0].transitions'\n  \
        fusebox replay --config policies.toml --calls calls.csv --sweep \\\n      \
        --failure-rate 30,50,70 --minimum-calls 10,20,50 --window count:50,time:30s \\\n      \
        --incident 2024-05-01T12:10:00Z..2024-05-01T12:25:00Z --within 30s"
    )]
    Replay(ReplayArgs),
    /// Validate a policy file (or a scenario) and print the effective settings.
    #[command(
        long_about = "Validate a policy file (or a drill scenario) and print the effective settings.\n\n\
        Every problem is reported, each with its position and path — unknown keys (with the \
        nearest known key), values of the wrong type or out of range — e.g. \
        `policies.toml:12:26: policies.payments.breaker.failure_rate_threshold: must be within \
        1..=100, got 150`; the exit code is then 2. A file with [[phases]] is read as a \
        scenario, anything else as a policy file.\n\n\
        Policy files are the fusebox facade's (fusebox::config), TOML or YAML by extension \
        (a .json file is read as YAML): [defaults] inherited by every [policies.NAME], each with \
        breaker, limit, timeout, retry, recovery_ramp, default_route and routes.\"METHOD /path\" \
        sections; unknown keys are errors.\n\n\
        The effective settings are those of the policies as built: each layer's, and each \
        route's behaviour followed by every setting the file gives it and where it is written \
        (the route, the defaults' route, the policy's default_route or the defaults' \
        default_route), then the keys no level writes (built in). With --json, the effective policies are \
        printed instead as a policy file in JSON, every setting written out: read back (as \
        a .json or .yaml policy file), it builds the same policies.",
        after_help = "Examples:\n  fusebox check policies.toml\n  \
        fusebox check policies.toml --json > effective.json"
    )]
    Check(CheckArgs),
}

/// `fusebox drill`.
#[derive(Debug, Args)]
pub struct DrillArgs {
    /// A built-in scenario's name or a scenario file [default: brownout].
    pub scenario: Option<String>,
    /// List the built-in scenarios and exit.
    #[arg(long, conflicts_with_all = ["scenario", "show"])]
    pub list: bool,
    /// Print a built-in scenario's TOML and exit.
    #[arg(long, value_name = "NAME")]
    pub show: Option<String>,
    /// Take the client's policy from this policy file instead of the scenario's own policy table.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Which policy of --config (needed when it has several).
    #[arg(long, value_name = "NAME", requires = "config")]
    pub policy: Option<String>,
    /// Client replicas, each with its own breaker, each sending the scenario's traffic.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub replicas: u16,
    /// Share the replicas' breaker state on Redis (redis://HOST:PORT/DB[?mode=strict...]).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Where to write report.json and chart.svg [default: ./fusebox-drill-SCENARIO].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Also write the report as JSON to this file; `-` writes it to standard output, and
    /// everything else the drill prints then goes to standard error.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Run on virtual time: the same sockets and layers, but the clock jumps over idle
    /// waits, so the drill takes a fraction of its length (for CI and quick looks).
    #[arg(long)]
    pub virtual_time: bool,
    /// No progress lines (phases and transitions are still printed).
    #[arg(long, short)]
    pub quiet: bool,
}

/// How a calls file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CallsFormat {
    /// Comma-separated values (with or without a header).
    Csv,
    /// One JSON object per line.
    Jsonl,
}

/// `fusebox replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The policy file, TOML or YAML (see `fusebox check`).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// The policy that serves calls on routes no policy lists (else they are an error).
    #[arg(long, value_name = "NAME")]
    pub default_policy: Option<String>,
    /// The recorded calls.
    #[arg(long, value_name = "FILE")]
    pub calls: PathBuf,
    /// The calls file's format [default: from the extension, else from the content].
    #[arg(long, value_enum)]
    pub format: Option<CallsFormat>,
    /// Also write the full report as JSON to this file; `-` writes it to standard output,
    /// and the text report then goes to standard error.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Transitions listed per breaker.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub max_events: usize,
    /// An opening this soon after the previous closing counts as flapping.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration_arg)]
    pub flap_window: Duration,
    /// Seed of the open-wait jitter (for breakers whose config sets no seed).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Replay over a grid of thresholds and print the trade-offs.
    #[arg(long)]
    pub sweep: bool,
    /// The policy to sweep (needed when several have a breaker).
    #[arg(long, value_name = "NAME", requires = "sweep")]
    pub policy: Option<String>,
    /// Failure-rate thresholds to try, percent [default: the configured one].
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "sweep")]
    pub failure_rate: Vec<u32>,
    /// Slow-call durations to try (every route of the policy) [default: as configured].
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = duration_arg, requires = "sweep")]
    pub slow_call_duration: Vec<Duration>,
    /// Slow-call-rate thresholds to try, percent [default: the configured one].
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "sweep")]
    pub slow_rate: Vec<u32>,
    /// Minimum calls to try [default: the configured one].
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "sweep")]
    pub minimum_calls: Vec<u32>,
    /// Windows to try: count:N or time:DURATION[/BUCKETS] [default: the configured one].
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = window_arg, requires = "sweep")]
    pub window: Vec<fusebox_breaker::WindowConfig>,
    /// The labelled incident, START..END: RFC 3339, seconds, or +OFFSET from the first call.
    #[arg(long, value_name = "START..END", value_parser = incident_arg, requires = "sweep")]
    pub incident: Option<IncidentSpec>,
    /// A setting detects the incident if it opens within this time of its start.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration_arg, requires = "incident")]
    pub within: Duration,
    /// Threads for the sweep [default: one per core].
    #[arg(long, value_name = "N", default_value_t = 0, requires = "sweep")]
    pub threads: usize,
}

/// `fusebox check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The file to check.
    pub file: PathBuf,
    /// Print the effective policies as a policy file in JSON (every setting written out;
    /// for a scenario, its policy) instead of the text.
    #[arg(long, conflicts_with = "diff")]
    pub json: bool,
    /// Show what reloading FILE into services running the policies of RUNNING would
    /// change: each setting that differs, whether it applies in place (the breaker keeps
    /// its state) or needs a rebuild, and why. Both files are checked first; any problem
    /// in either is reported and nothing is compared. Exits 0 when every change applies
    /// in place, 1 when one needs a rebuild.
    #[arg(long, value_name = "RUNNING")]
    pub diff: Option<PathBuf>,
}

fn duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s)
}

fn window_arg(s: &str) -> Result<fusebox_breaker::WindowConfig, String> {
    parse_window(s)
}

fn incident_arg(s: &str) -> Result<IncidentSpec, String> {
    IncidentSpec::parse(s)
}

/// Why a command failed, and its exit code.
#[derive(Debug)]
pub enum Failure {
    /// Bad input: every problem (exit 2).
    Input(Vec<InputError>),
    /// The command ran and its check failed, or it could not run (exit 1).
    Failed(String),
}

impl Failure {
    /// The exit code.
    pub fn code(&self) -> u8 {
        match self {
            Failure::Input(_) => 2,
            Failure::Failed(_) => 1,
        }
    }
}

impl From<InputError> for Failure {
    fn from(e: InputError) -> Self {
        Failure::Input(vec![e])
    }
}

impl From<Vec<InputError>> for Failure {
    fn from(e: Vec<InputError>) -> Self {
        Failure::Input(e)
    }
}

fn stdout_line(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
}

fn stderr_line(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// Where `--json` writes: a file, or standard output (`-`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum JsonTo {
    File(PathBuf),
    Stdout,
}

impl JsonTo {
    fn of(path: Option<&Path>) -> Option<JsonTo> {
        path.map(|p| {
            if p == Path::new("-") {
                JsonTo::Stdout
            } else {
                JsonTo::File(p.to_owned())
            }
        })
    }

    /// Where the text output goes: standard error when the JSON has standard output.
    fn say(to: Option<&JsonTo>) -> fn(&str) {
        match to {
            Some(JsonTo::Stdout) => stderr_line,
            _ => stdout_line,
        }
    }
}

/// Runs a parsed command line: output to stdout, problems to stderr; returns the exit code.
pub fn run(cli: Cli) -> u8 {
    let result = match cli.command {
        Command::Drill(a) => run_drill(a),
        Command::Replay(a) => run_replay(a),
        Command::Check(a) => run_check(a),
    };
    match result {
        Ok(()) => 0,
        Err(failure) => {
            let mut err = std::io::stderr().lock();
            match &failure {
                Failure::Input(problems) => {
                    for p in problems {
                        let _ = writeln!(err, "error: {p}");
                    }
                }
                Failure::Failed(why) => {
                    let _ = writeln!(err, "{why}");
                }
            }
            failure.code()
        }
    }
}

fn load_policies(path: &Path) -> Result<Policies, Failure> {
    let src = SourceFile::read(path)?;
    Ok(load_policy_file(&src)?)
}

/// Finds a scenario by built-in name or path.
pub fn find_scenario(name: &str) -> Result<SourceFile, InputError> {
    let path = Path::new(name);
    if path.is_file() {
        return SourceFile::read(path);
    }
    match builtin(name) {
        Some(text) => Ok(SourceFile::new(format!("<built-in {name}>"), text)),
        None => Err(InputError::new(format!(
            "no scenario {name:?}: not a file, and not a built-in ({})",
            BUILTIN.iter().map(|b| b.0).collect::<Vec<_>>().join(", ")
        ))),
    }
}

fn run_drill(a: DrillArgs) -> Result<(), Failure> {
    if a.list {
        for (name, text) in BUILTIN {
            let desc = load_scenario(&SourceFile::new(name, text), None)
                .map(|s| (s.description.clone(), s.duration()))
                .map_err(Failure::Input)?;
            stdout_line(&format!(
                "{name:<18} {:>4}  {}",
                format_duration(desc.1),
                desc.0
            ));
        }
        return Ok(());
    }
    if let Some(name) = &a.show {
        let text = builtin(name).ok_or_else(|| {
            InputError::new(format!(
                "--show: no built-in scenario {name:?} ({})",
                BUILTIN.iter().map(|b| b.0).collect::<Vec<_>>().join(", ")
            ))
        })?;
        let _ = std::io::stdout().lock().write_all(text.as_bytes());
        return Ok(());
    }
    if let Some(url) = &a.store
        && !(url.starts_with("redis://") || url.starts_with("rediss://"))
    {
        return Err(InputError::new(format!(
            "--store {url:?}: only Redis stores are supported (redis://HOST:PORT/DB)"
        ))
        .into());
    }
    let name = a.scenario.as_deref().unwrap_or(BUILTIN[0].0);
    let src = find_scenario(name)?;
    let policy = match &a.config {
        Some(path) => Some(load_policies(path)?.pick(a.policy.as_deref())?.clone()),
        None => None,
    };
    let scenario = load_scenario(&src, policy)?;
    let store = match &a.store {
        Some(url) => Some(drill::store_config(url, &scenario)?),
        None => None,
    };
    let out_dir = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("fusebox-drill-{}", scenario.name)));
    let options = DrillOptions {
        replicas: usize::from(a.replicas),
        progress: (!a.quiet).then_some(Duration::from_secs(1)),
        store,
    };
    let runtime = if a.virtual_time {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    }
    .map_err(|e| Failure::Failed(format!("cannot start the runtime: {e}")))?;
    let json = JsonTo::of(a.json.as_deref());
    let say = JsonTo::say(json.as_ref());
    let out: Out = Arc::new(say);
    let report = runtime.block_on(async {
        tokio::select! {
            r = drill::run(&scenario, &options, out) => Some(r),
            _ = tokio::signal::ctrl_c() => None,
        }
    });
    drop(runtime);
    let report = match report {
        None => return Err(Failure::Failed("interrupted".into())),
        Some(Err(DrillError::Input(e))) => return Err(e.into()),
        Some(Err(e)) => return Err(Failure::Failed(e.to_string())),
        Some(Ok(r)) => r,
    };
    say(&drill::report::render_summary(&report));
    write_reports_to(&report, &out_dir, say)?;
    if let Some(to) = &json {
        write_json(to, &report, say)?;
    }
    if report.passed {
        Ok(())
    } else {
        Err(Failure::Failed(format!(
            "drill {:?} failed its expectations",
            scenario.name
        )))
    }
}

/// Writes `report.json` and `chart.svg` into `dir`.
pub fn write_reports(report: &drill::report::DrillReport, dir: &Path) -> Result<(), Failure> {
    write_reports_to(report, dir, stdout_line)
}

/// [`write_reports`], saying where they are with `say`.
fn write_reports_to(
    report: &drill::report::DrillReport,
    dir: &Path,
    say: fn(&str),
) -> Result<(), Failure> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Failure::Failed(format!("cannot create {}: {e}", dir.display())))?;
    let json = serde_json::to_string_pretty(report)
        .map_err(|e| Failure::Failed(format!("cannot write the report: {e}")))?;
    let (json_path, svg_path) = (dir.join("report.json"), dir.join("chart.svg"));
    std::fs::write(&json_path, json)
        .map_err(|e| Failure::Failed(format!("cannot write {}: {e}", json_path.display())))?;
    std::fs::write(&svg_path, crate::chart::render(report))
        .map_err(|e| Failure::Failed(format!("cannot write {}: {e}", svg_path.display())))?;
    say(&format!(
        "report: {}\nchart:  {}",
        json_path.display(),
        svg_path.display()
    ));
    Ok(())
}

fn run_replay(a: ReplayArgs) -> Result<(), Failure> {
    let mut policies = load_policies(&a.config)?;
    if let Some(name) = &a.default_policy {
        policies.set_default_policy(name)?;
    }
    let file = a.calls.display().to_string();
    let data = std::fs::read(&a.calls)
        .map_err(|e| InputError::in_file(&file, format!("cannot read the file: {e}")))?;
    let options = ReplayOptions {
        flap_window: a.flap_window,
        seed: a.seed,
        format: a.format.map(|f| match f {
            CallsFormat::Csv => Format::Csv,
            CallsFormat::Jsonl => Format::JsonLines,
        }),
    };
    let json = JsonTo::of(a.json.as_deref());
    let say = JsonTo::say(json.as_ref());
    let started = tokio::time::Instant::now();
    if a.sweep {
        let options = SweepOptions {
            grid: Grid {
                failure_rates: a.failure_rate,
                slow_call_durations: a.slow_call_duration,
                slow_rates: a.slow_rate,
                minimum_calls: a.minimum_calls,
                windows: a.window,
            },
            policy: a.policy,
            incident: a.incident,
            within: a.within,
            replay: options,
            threads: a.threads,
        };
        let report = sweep(&policies, &file, &data, &options)?;
        say(&render_sweep(&report));
        let elapsed = started.elapsed().as_secs_f64();
        say(&format!(
            "replayed {} calls × {} settings in {elapsed:.2} s",
            thousands(report.policy_calls),
            report.rows.len()
        ));
        if let Some(to) = &json {
            write_json(to, &report, say)?;
        }
        return Ok(());
    }
    let report = replay(&policies, &file, &data, &options)?;
    let elapsed = started.elapsed().as_secs_f64();
    say(&format!(
        "replay of {file} through {} ({:.2} s, {:.1} M calls/s)",
        a.config.display(),
        elapsed,
        report.calls as f64 / elapsed.max(1e-9) / 1e6
    ));
    say(&render_report(&report, a.max_events));
    if let Some(to) = &json {
        write_json(to, &report, say)?;
    }
    Ok(())
}

/// Writes `value` as JSON where `--json` said; `say` tells where a file went.
fn write_json(to: &JsonTo, value: &impl serde::Serialize, say: fn(&str)) -> Result<(), Failure> {
    let json = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::Failed(format!("cannot write the report: {e}")))?;
    match to {
        JsonTo::Stdout => {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{json}")
                .and_then(|()| out.flush())
                .map_err(|e| Failure::Failed(format!("cannot write to standard output: {e}")))
        }
        JsonTo::File(path) => {
            std::fs::write(path, json)
                .map_err(|e| Failure::Failed(format!("cannot write {}: {e}", path.display())))?;
            say(&format!("report: {}", path.display()));
            Ok(())
        }
    }
}

fn run_check(a: CheckArgs) -> Result<(), Failure> {
    if let Some(running) = &a.diff {
        return run_diff(running, &a.file);
    }
    let src = SourceFile::read(&a.file)?;
    let is_scenario = toml::from_str::<toml::Table>(src.text())
        .map(|t| t.contains_key("phases"))
        .unwrap_or(false);
    if is_scenario {
        let s = load_scenario(&src, None)?;
        if a.json {
            let file = PolicyFileSection::of(&[s.policy.policy()]);
            return write_json(&JsonTo::Stdout, &file, stdout_line);
        }
        stdout_line(&describe_scenario(&s, src.name()));
        return Ok(());
    }
    let file = load_policy_file(&src)?;
    if a.json {
        return write_json(&JsonTo::Stdout, &file.file_section(), stdout_line);
    }
    stdout_line(&format!(
        "{}: {} polic{}, no problems",
        src.name(),
        file.policies.len(),
        if file.policies.len() == 1 { "y" } else { "ies" }
    ));
    for p in &file.policies {
        stdout_line("");
        stdout_line(describe_policy(p).trim_end());
    }
    Ok(())
}

/// `fusebox check --diff RUNNING FILE`: what reloading `file` into the policies of
/// `running` would change.
fn run_diff(running: &Path, file: &Path) -> Result<(), Failure> {
    let (old_src, new_src) = (SourceFile::read(running), SourceFile::read(file));
    let mut problems = Vec::new();
    let mut load = |src: Result<SourceFile, InputError>| match src {
        Ok(src) => match load_policy_file(&src) {
            Ok(p) => Some((src, p)),
            Err(e) => {
                problems.extend(e);
                None
            }
        },
        Err(e) => {
            problems.push(e);
            None
        }
    };
    let (old, new) = (load(old_src), load(new_src));
    let (Some((old_src, old)), Some((new_src, new))) = (old, new) else {
        return Err(Failure::Input(problems));
    };
    let text = diff_text(&old, &new);
    stdout_line(&format!(
        "{} → {}: {}",
        old_src.name(),
        new_src.name(),
        text.summary
    ));
    for block in &text.blocks {
        stdout_line("");
        stdout_line(block.trim_end());
    }
    if text.complete {
        Ok(())
    } else {
        Err(Failure::Failed(
            "some changes cannot be applied in place: a rebuild would start those breakers over"
                .into(),
        ))
    }
}

/// What `fusebox check --diff` prints.
struct DiffText {
    summary: String,
    blocks: Vec<String>,
    complete: bool,
}

fn diff_text(old: &Policies, new: &Policies) -> DiffText {
    let mut blocks = Vec::new();
    let (mut changes, mut rebuild) = (0, 0);
    for p in &old.policies {
        match new.policies.iter().find(|n| n.name == p.name) {
            Some(n) => {
                let report = p.policy().diff(n.policy());
                changes += report.changes.len();
                rebuild += report.needs_rebuild().count();
                blocks.push(report.to_string());
            }
            None => {
                rebuild += 1;
                blocks.push(format!(
                    "policy {:?}: removed (needs a rebuild: the services built with it keep running it)",
                    p.name
                ));
            }
        }
    }
    for n in &new.policies {
        if !old.policies.iter().any(|p| p.name == n.name) {
            rebuild += 1;
            blocks.push(format!(
                "policy {:?}: added (needs a rebuild: no running service has it)",
                n.name
            ));
        }
    }
    let summary = match (changes, rebuild) {
        (0, 0) => "no changes".to_owned(),
        (c, 0) => format!("{c} change{}, all in place", if c == 1 { "" } else { "s" }),
        (c, r) => format!(
            "{c} change{}, {r} needing a rebuild",
            if c == 1 { "" } else { "s" }
        ),
    };
    DiffText {
        summary,
        blocks,
        complete: rebuild == 0,
    }
}

fn describe_scenario(s: &Scenario, file: &str) -> String {
    let mut out = format!(
        "{file}: scenario {:?}, no problems\n  {}\n  traffic: {} {} at {} calls/s, at most {} in flight\n",
        s.name,
        s.description,
        s.traffic.method,
        s.traffic.path,
        s.traffic.rate,
        s.traffic.concurrency
    );
    if let Some(keys) = s.traffic.keys {
        out.push_str(&format!(
            "  keys: {keys} (key-00 …), one per call in turn\n"
        ));
    }
    if let (Some(n), Some(pool)) = (s.traffic.endpoints, &s.pool) {
        out.push_str(&format!(
            "  pool: {n} endpoints, at most {} % ejected at once ({} of {n}), panic below {} % healthy, {}\n",
            pool.max_ejection_percent(),
            pool.max_ejected(n as usize),
            pool.panic_threshold(),
            match pool.endpoint_capacity() {
                Some(c) => format!("ejects only into headroom (capacity {c} per endpoint)"),
                None => "no headroom check".to_owned(),
            }
        ));
    }
    if let Some(c) = s.capacity.capacity {
        out.push_str(&format!(
            "  dependency: {c} requests at once{}, {}\n",
            if s.traffic.endpoints.is_some() {
                " per endpoint"
            } else {
                ""
            },
            match s.capacity.queue {
                Some(q) => format!("at most {q} waiting, the rest answered 503 at once"),
                None => "the rest wait".to_owned(),
            }
        ));
    }
    for p in &s.phases {
        out.push_str(&format!(
            "  phase {:<16} {:>6}  {}\n",
            p.name,
            format_duration(p.duration),
            p.describe(s.traffic.unit())
        ));
    }
    out.push('\n');
    out.push_str(&describe_policy(&s.policy));
    out
}
