# Fault-injection torture, short forms (docs/RELIABILITY.md):
#
# - 4 worker processes x 2 threads against a real PostgreSQL authority over
#   TLS (a throwaway CA, sslmode=verify-full) for
#   50 s, with kill -9, SIGSTOP past the grant (and takeover of the worker),
#   PostgreSQL stopped and started, and clock steps inside workers; then 0
#   duplicates, 0 IDs outside the grant log, and the IDs under a BIGINT
#   PRIMARY KEY;
# - the state-loss mode, 30 s: the same workers on a Redis without
#   persistence, killed and restarted empty (then `init` again) and from a
#   stale snapshot, with kill, SIGSTOP and clock faults mixed in; then 0
#   duplicates from the IDs alone (record files, PRIMARY KEY) and the
#   measured unavailability after each restart.
#
# The harness starts its own throwaway PostgreSQL (it must stop and start
# the server mid-run), as the postgres user when run as root, and its own
# redis-server; the server binaries and that user are provided by
# scripts/lib/services.sh.
# With the Python package installed by step 50 (target/python-venv), a
# forking Python worker runs beside the Rust ones. The harness is step 10's
# build (its own tests ran there).
[ -x "$GRANTID_BUILD/torture-harness" ] || cargo build -q --workspace --bins $GRANTID_FEATURES --locked
extra=()
py=$CARGO_TARGET_DIR/python-venv/bin/python
if [ -x "$py" ] && "$py" -c 'import grantid' 2>/dev/null; then
  extra=(--python "$py")
else
  echo "torture: no grantid Python package in $py (step 50): the forking Python worker is left out"
fi
harness=$GRANTID_BUILD/torture-harness
"$harness" --tls \
  --processes 4 --threads 2 --rate 25000 --duration-s 50 \
  --fault-interval-ms 3000 --faults kill,stop,postgres,clock \
  --min-ids 5000000 "${extra[@]}"
"$harness" --authority redis \
  --processes 4 --threads 2 --rate 10000 --duration-s 30 \
  --fault-interval-ms 3000 --faults kill,stop,redis-empty,redis-stale,clock \
  --min-ids 1000000
