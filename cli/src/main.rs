//! The `grantid` command: issue and decode IDs, set up and inspect
//! authorities. See `grantid --help` and docs/CLI.md.
//!
//! Each subcommand lives in its own module with its arguments and a
//! `run(args) -> Result<(), Failure>`; `main` only parses, sets up logging,
//! dispatches and turns the outcome into an exit status (`exit.rs`).

mod args;
mod authority;
mod completions;
mod decode;
mod exit;
mod next;
mod output;
mod public;
mod serve;
mod time;
mod verbose;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    verbose::init(cli.verbose);
    let result = match cli.command {
        Command::Next(a) => next::run(a),
        Command::Decode(a) => decode::run(a),
        Command::Authority(a) => authority::run(a),
        Command::Completions(a) => completions::run(a),
        Command::Public(c) => public::run(c).map_err(exit::Failure::from),
        Command::Serve(a) => serve::serve(a).map_err(exit::Failure::from),
    };
    exit::report(result)
}
