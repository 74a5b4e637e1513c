#!/usr/bin/env bash
# The deployment fuzzer, long form (docs/RELIABILITY.md, "Deployment
# fuzzer"): 30 minutes of cases (or as many minutes as the first argument
# says) on a release build, against throwaway PostgreSQL, Redis, MariaDB and
# etcd servers; extra arguments go to deploy-fuzz (`--seed S`, `--engines`).
#
#   ./scripts/deploy-fuzz-long.sh            30 minutes, a random seed
#   ./scripts/deploy-fuzz-long.sh 5 --seed 42
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/env.sh
minutes=30
if [ -n "${1:-}" ] && [ "${1#-}" = "$1" ]; then
  minutes=$1
  shift
fi
cargo build --release -p grantid-cli -p grantid-torture --bins $GRANTID_FEATURES --locked
bin=$CARGO_TARGET_DIR/release
exec scripts/with-services.sh "$bin/deploy-fuzz" --grantid "$bin/grantid" \
  --duration-s $((minutes * 60)) "$@"
