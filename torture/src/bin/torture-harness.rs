//! The torture harness: see `torture-harness --help` and
//! docs/RELIABILITY.md.

use grantid_torture::harness::{self, HELP, HarnessConfig};

fn main() {
    let config = match HarnessConfig::from_argv(std::env::args().skip(1)) {
        Ok(Some(c)) => c,
        Ok(None) => {
            print!("{HELP}");
            return;
        }
        Err(e) => {
            eprintln!("torture-harness: {e}\n\n{HELP}");
            std::process::exit(2);
        }
    };
    match harness::run(&config) {
        Ok(outcome) => {
            print!("{}", harness::summary(&config, &outcome));
            if !outcome.problems.is_empty() {
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("torture-harness: {e}");
            std::process::exit(2);
        }
    }
}
