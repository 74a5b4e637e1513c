#!/usr/bin/env bash
# Fault-injection torture, long form (docs/RELIABILITY.md): 6 worker
# processes x 3 threads for 16 minutes, at least 200 M IDs, every fault kind
# many times, then the full proof (record files and a BIGINT PRIMARY KEY
# table in PostgreSQL). Needs about 3 GB of disk for the record files under
# $TMPDIR (or --work-dir) and as much again for PostgreSQL's table.
#
#   ./scripts/torture-long.sh                 the documented run
#   ./scripts/torture-long.sh --seed 42 ...   extra harness options
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/env.sh
# The harness runs its own throwaway PostgreSQL (so that it can stop and
# start it): it needs the server binaries and, as root, the postgres user.
. scripts/lib/services.sh
if ! _services_pg_bin >/dev/null 2>&1; then
  echo "installing postgresql with apt-get"
  apt-get install -y postgresql >/dev/null 2>&1 \
    || { apt-get update >/dev/null 2>&1 && apt-get install -y postgresql >/dev/null 2>&1; }
fi
if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  useradd --system --no-create-home postgres
fi
cargo build --release -p grantid-torture --bins --locked
# The forking Python worker joins when the package is installed
# (./scripts/test.sh 50 makes target/python-venv).
extra=()
py=target/python-venv/bin/python
if [ -x "$py" ] && "$py" -c 'import grantid' 2>/dev/null; then
  extra=(--python "$py")
else
  echo "torture: no grantid Python package in $py: the forking Python worker is left out"
fi
exec "${CARGO_TARGET_DIR:-target}/release/torture-harness" \
  --processes 6 --threads 3 --rate 15000 --duration-s 960 \
  --fault-interval-ms 5000 --faults kill,stop,postgres,clock \
  --min-ids 200000000 "${extra[@]}" "$@"
