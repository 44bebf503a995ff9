//! Helpers for the `fusebox` binary's tests: run it, check what it printed and wrote, and
//! give each test its own scratch directory.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// What a run of the binary did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `fusebox` with `args` in `dir`.
pub fn fusebox(dir: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_fusebox"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the fusebox binary runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `fusebox replay --config CONFIG --calls CALLS` followed by `extra` in `dir`.
pub fn run_replay(dir: &Path, config: &str, calls: &str, extra: &[&str]) -> Run {
    let mut args = vec!["replay", "--config", config, "--calls", calls];
    args.extend_from_slice(extra);
    fusebox(dir, &args)
}

impl Run {
    /// Asserts the exit code, showing both streams if it is another.
    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "stdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }

    /// Asserts that standard output holds each of `parts`, showing it if not.
    #[track_caller]
    pub fn assert_stdout(&self, parts: &[&str]) -> &Self {
        for part in parts {
            assert!(
                self.stdout.contains(part),
                "expected {part:?} in:\n{}",
                self.stdout
            );
        }
        self
    }

    /// Asserts a mistake in what the user gave: exit code 2, `expected` in the message on
    /// standard error, and no panic.
    #[track_caller]
    pub fn assert_input_error(&self, expected: &str) {
        self.assert_code(2);
        assert!(
            self.stderr.contains(expected),
            "expected {expected:?} in:\n{}",
            self.stderr
        );
        assert!(!self.stderr.contains("panicked"), "{}", self.stderr);
    }
}

/// The JSON file `dir/name` (a report the binary wrote).
pub fn read_json(dir: &Path, name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join(name)).expect("the report was written");
    serde_json::from_str(&text).expect("the report is JSON")
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fusebox-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// Writes `text` to `dir/name` and returns the name.
pub fn write(dir: &Path, name: &str, text: &str) -> String {
    std::fs::write(dir.join(name), text).expect("write a test file");
    name.to_owned()
}
