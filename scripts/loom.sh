#!/usr/bin/env bash
# Runs the loom models of loom-tests/ in release mode, in a target dir of
# their own (the cfg changes every crate's build).
#   LOOM_MAX_PREEMPTIONS=4 scripts/loom.sh     a deeper search (CI uses 3)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/env.sh
export LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-2}
RUSTFLAGS="--cfg grantid_loom ${RUSTFLAGS:-}" CARGO_TARGET_DIR=target/loom \
  cargo test -p grantid-loom-tests --release --locked -- --test-threads=1 "$@"
