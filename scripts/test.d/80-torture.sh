# Fault-injection torture, short form (docs/RELIABILITY.md): 4 worker
# processes x 2 threads against a real PostgreSQL authority for 50 s, with
# kill -9, SIGSTOP past the grant (and takeover of the worker), PostgreSQL
# stopped and started, and clock steps inside workers; then 0 duplicates,
# 0 IDs outside the grant log, and the IDs under a BIGINT PRIMARY KEY.
#
# The harness starts its own throwaway PostgreSQL (it must stop and start
# the server mid-run), as the postgres user when run as root; the server
# binaries and that user are provided by scripts/lib/services.sh.
cargo test -p grantid-torture --locked
cargo build -p grantid-torture --bins --locked
"${CARGO_TARGET_DIR:-target}/debug/torture-harness" \
  --processes 4 --threads 2 --rate 25000 --duration-s 50 \
  --fault-interval-ms 3000 --faults kill,stop,postgres,clock \
  --min-ids 5000000
