#!/usr/bin/env bash
# Long form of the public-ID tests (docs/PUBLIC_IDS.md): 10^8 round trips
# (numeric and text) under a fresh random key, on every core, release build.
# The test command runs the short forms (core/tests/public_ids.rs: the
# shared vectors, a million IDs one to one, property tests).
#
#   scripts/public-ids-long.sh            10^8 round trips
#   scripts/public-ids-long.sh 1000000    another count
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000000}
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "load average (start): $(cut -d' ' -f1-3 /proc/loadavg)"
GRANTID_PUBLIC_LONG_N=$n cargo test --release --locked -q -p grantid --test public_ids -- \
  --ignored --nocapture --exact long_round_trips
echo "load average (end): $(cut -d' ' -f1-3 /proc/loadavg)"
