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

use clap::{CommandFactory, Parser, Subcommand};

/// Unique, roughly time-sorted 63-bit IDs inside durable timestamp grants.
#[derive(Debug, Parser)]
#[command(name = "grantid", version, about, after_long_help = exit::HELP)]
struct Cli {
    /// Print the core's events (grants, renewal trouble, lost leases) to
    /// standard error; -vv adds trace records.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Issues IDs from a generator backed by an authority.
    Next(next::NextArgs),
    /// Shows the fields of IDs (decimal or 0x-prefixed hex; `-` reads them
    /// from standard input, one per line).
    Decode(decode::DecodeArgs),
    /// Sets up or inspects an authority.
    #[command(subcommand)]
    Authority(authority::AuthorityCommand),
    /// Public IDs: a keyed, reversible permutation of IDs for URLs and APIs.
    #[command(subcommand)]
    Public(public::PublicCommand),
    /// Prints a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(completions::CompletionsArgs),
    /// Serves IDs and grants over gRPC until SIGTERM/SIGINT (docs/SERVICE.md).
    Serve(serve::ServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    verbose::init(cli.verbose);
    let result = match cli.command {
        Command::Next(a) => next::run(a),
        Command::Decode(a) => decode::run(a),
        Command::Authority(a) => authority::run(a),
        Command::Completions(a) => completions::run(a, Cli::command()),
        Command::Public(c) => public::run(c).map_err(exit::Failure::from),
        Command::Serve(a) => serve::serve(a).map_err(exit::Failure::from),
    };
    exit::report(result)
}
