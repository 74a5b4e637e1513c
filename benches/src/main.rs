//! Prints one table from criterion's output of `cargo bench -p
//! grantid-benches --bench ids`: ns per ID of every bench, grantid's ratio to
//! each peer, and the issue's targets as ratios measured in this run.
//!
//! ```text
//! cargo run -p grantid-benches --bin bench-summary [CRITERION_DIR]
//! ```
//!
//! The directory defaults to `$CRITERION_HOME`, else
//! `$CARGO_TARGET_DIR/criterion`, else `target/criterion`.

mod report;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("CRITERION_HOME").map(PathBuf::from))
        .or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR").map(|t| PathBuf::from(t).join("criterion"))
        })
        .unwrap_or_else(|| PathBuf::from("target/criterion"));
    match report::load(&dir) {
        Ok(results) if results.benches.is_empty() => {
            eprintln!(
                "no criterion results under {}: run `cargo bench -p grantid-benches --bench ids` first",
                dir.display()
            );
            ExitCode::FAILURE
        }
        Ok(results) => {
            print!("{}", report::render(&results));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cannot read criterion results under {}: {e}", dir.display());
            ExitCode::FAILURE
        }
    }
}
