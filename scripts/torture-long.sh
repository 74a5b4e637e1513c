#!/usr/bin/env bash
# Fault-injection torture, long forms (docs/RELIABILITY.md).
#
#   ./scripts/torture-long.sh                 the documented run: 6 worker
#       processes x 3 threads for 16 minutes against PostgreSQL, at least
#       200 M IDs, every fault kind many times, then the full proof (record
#       files, grant log, a BIGINT PRIMARY KEY table in PostgreSQL). Needs
#       about 3 GB of disk for the record files under $TMPDIR (or
#       --work-dir) and as much again for PostgreSQL's table.
#   ./scripts/torture-long.sh --state-loss    the state-loss run: 4 x 2
#       for 10 minutes against a Redis without persistence, restarted empty
#       (then `init` again) and from stale snapshots many times, with kill,
#       SIGSTOP and clock faults mixed in; the proof from the IDs alone
#       (record files, PostgreSQL primary key). About 1 GB of disk.
#   ./scripts/torture-long.sh [--state-loss] --seed 42 ...   extra options
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/env.sh
state_loss=no
if [ "${1:-}" = --state-loss ]; then
  state_loss=yes
  shift
fi
# The harness runs its own throwaway PostgreSQL (so that it can stop and
# start it; in the state-loss run for the proof's table) and Redis: it needs
# the server binaries and, as root, the postgres user.
. scripts/lib/services.sh
if ! _services_pg_bin >/dev/null 2>&1; then
  echo "installing postgresql with apt-get"
  apt-get install -y postgresql >/dev/null 2>&1 \
    || { apt-get update >/dev/null 2>&1 && apt-get install -y postgresql >/dev/null 2>&1; }
fi
if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  useradd --system --no-create-home postgres
fi
if [ "$state_loss" = yes ]; then
  _services_apt redis-server redis-server
fi
cargo build --release --workspace --bins $GRANTID_FEATURES --locked
harness=$CARGO_TARGET_DIR/release/torture-harness
if [ "$state_loss" = yes ]; then
  exec "$harness" --authority redis \
    --processes 4 --threads 2 --rate 10000 --duration-s 600 \
    --fault-interval-ms 4000 --faults kill,stop,redis-empty,redis-stale,clock \
    --min-ids 20000000 "$@"
fi
# The forking Python worker joins when the package is installed
# (./scripts/test.sh 50 makes target/python-venv).
extra=()
py=$CARGO_TARGET_DIR/python-venv/bin/python
if [ -x "$py" ] && "$py" -c 'import grantid' 2>/dev/null; then
  extra=(--python "$py")
else
  echo "torture: no grantid Python package in $py: the forking Python worker is left out"
fi
exec "$harness" \
  --processes 6 --threads 3 --rate 15000 --duration-s 960 \
  --fault-interval-ms 5000 --faults kill,stop,postgres,clock \
  --min-ids 200000000 "${extra[@]}" "$@"
