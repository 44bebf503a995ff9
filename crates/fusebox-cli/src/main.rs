//! The `fusebox` binary: see the `fusebox_cli` library for what each command does.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(fusebox_cli::cli::run(fusebox_cli::cli::Cli::parse()))
}
