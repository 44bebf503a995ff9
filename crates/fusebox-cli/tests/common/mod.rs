//! Helpers for the `fusebox` binary's tests: run it, and give each test its own scratch
//! directory.

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
