//! The `fusebox` command: live fault drills, replays of recorded traffic, config checks.
//!
//! Breaker thresholds should be chosen from real traffic, not copied from a blog post, and
//! a breaker should be tried under failure before it is trusted. This crate is the tool for
//! both; the binary (`fusebox`) is a thin shell over it ([`cli::run`]).
//!
//! - [`drill`]: `fusebox drill [SCENARIO]` starts a flaky HTTP dependency on 127.0.0.1
//!   that follows a [`scenario`] over time, drives traffic through a hyper-util client
//!   wrapped in fusebox's layers, prints every breaker transition as it happens, and
//!   reports a summary, a JSON document and an SVG [`chart`]; the scenario's expectations
//!   decide the exit code.
//! - [`replay`]: `fusebox replay --config FILE --calls FILE` runs recorded calls through
//!   the configured breakers on virtual time with the breaker's own state machine, and
//!   [`replay::sweep`] compares a grid of thresholds against a labelled incident.
//! - `fusebox check FILE` validates a policy file ([`config`]) or a scenario and prints
//!   each policy's effective settings, each route's with the table that writes each;
//!   `--json` prints them as a policy file that reads back into the same policies.
//!
//! Policies are read and built by the facade's loader ([`fusebox::config`]): drills,
//! replays and checks use the built [`fusebox::Policy`], and a replay judges each recorded
//! call with the breaker's own [`fusebox_breaker::judge`].
//!
//! Every input problem is an [`input::InputError`] with its file, line, column and reason
//! (exit code 2); nothing in here panics on input.
//!
//! ```
//! use fusebox_cli::config::load_policy_file;
//! use fusebox_cli::input::SourceFile;
//! use fusebox_cli::replay::{replay, ReplayOptions};
//!
//! let policies = load_policy_file(&SourceFile::new("policies.toml", r#"
//!     [policies.api.breaker]
//!     count_window = 10
//!     minimum_calls = 4
//!     open_wait = "10s"
//!     open_wait_jitter = "0s"
//!     [policies.api.routes."GET /a"]
//!     timeout = "1s"
//! "#)).map_err(|e| format!("{e:?}"))?;
//! let calls = "0,GET /a,503,5\n1,GET /a,503,5\n2,GET /a,503,5\n3,GET /a,503,5\n4,GET /a,200,5\n";
//! let report = replay(&policies, "calls.csv", calls.as_bytes(), &ReplayOptions::default())?;
//! let opened = &report.breakers[0].transitions[0];
//! assert_eq!((opened.to, opened.reason, opened.at), ("open", "failure_rate", 3_005_000_000));
//! assert_eq!(report.breakers[0].stats.rejected, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod chart;
pub mod cli;
pub mod config;
pub mod drill;
pub mod input;
pub mod replay;
pub mod scenario;
