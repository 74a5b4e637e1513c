//! The deployment fuzzer: see `deploy-fuzz --help` and docs/RELIABILITY.md.

use grantid_torture::deploy::{self, FuzzConfig, HELP};

fn main() {
    let config = match FuzzConfig::from_argv(std::env::args().skip(1)) {
        Ok(Some(c)) => c,
        Ok(None) => {
            print!("{HELP}");
            return;
        }
        Err(e) => {
            eprintln!("deploy-fuzz: {e}\n\n{HELP}");
            std::process::exit(2);
        }
    };
    println!(
        "deploy-fuzz: seed {} (replay a case with --seed SEED --cases 1)",
        config.seed
    );
    match deploy::run(&config) {
        Ok(outcome) => {
            print!("{}", deploy::summary(&outcome));
            if !outcome.failures.is_empty() {
                for f in &outcome.failures {
                    eprintln!("{f}");
                }
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("deploy-fuzz: {e}");
            std::process::exit(2);
        }
    }
}
