//! One torture worker process. Started by `torture-harness`; see
//! `grantid_torture::worker` for the options.

use grantid_torture::args::Args;
use grantid_torture::worker::{self, WorkerConfig};

fn main() {
    let result = Args::parse(std::env::args().skip(1), &["clock-faults"])
        .and_then(|a| WorkerConfig::from_args(&a))
        .and_then(worker::run);
    if let Err(e) = result {
        eprintln!("torture-worker: {e}");
        std::process::exit(2);
    }
}
