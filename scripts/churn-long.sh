#!/usr/bin/env bash
# Churn simulation, long form (docs/FLEET.md): at least 100,000 process
# starts against a throwaway PostgreSQL on the default 1,024 worker slots
# (10 ms ticks, see docs/FLEET.md), 360 processes live, 4 s mean lifetime
# (about 85 starts/s), a third of the stops hard kills, the generators'
# default grant (1 s) and horizon (5 s); at most 30 minutes. Every ID is
# kept and checked for duplicates; the run fails on any check of the short
# form (scripts/test.d/85-churn.sh). Writes series.csv and summary.json to
# target/churn/long/ (or the directory given with --out).
#
#   ./scripts/churn-long.sh                  the documented run
#   ./scripts/churn-long.sh --grpc           the same through `grantid serve`
#   ./scripts/churn-long.sh -- --live 500    extra grantid-churn options
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/env.sh
. scripts/lib/services.sh
. scripts/lib/churn.sh
grpc=no
out=target/churn/long
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --grpc) grpc=yes ;;
    --out) out=$2; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 [--grpc] [--out DIR] [-- grantid-churn options]" >&2; exit 2 ;;
  esac
  shift
done
cargo build --release --workspace --bins $GRANTID_FEATURES --locked
bin=$CARGO_TARGET_DIR/release
trap 'churn_serve_stop; services_stop' EXIT
_services_start_postgres
watch=(--watch-pid "$(churn_pg_pid)")
authority=$GRANTID_TEST_POSTGRES_URL
# PostgreSQL's max_connections is 200 here: the processes share 150.
sharing=(--shared-sources 150)
if [ "$grpc" = yes ]; then
  churn_serve_start "$bin/grantid" "$GRANTID_TEST_POSTGRES_URL"
  authority=$CHURN_SERVE_URL
  watch+=(--watch-pid "$CHURN_SERVE_PID")
  sharing=()
fi
echo "churn: $(grep -m1 'model name' /proc/cpuinfo); load: $(uptime)"
"$bin/grantid-churn" --authority "$authority" --status-url "$GRANTID_TEST_POSTGRES_URL" \
  --label "long-$([ "$grpc" = yes ] && echo grpc || echo pg)" \
  --live 360 --lifetime-ms 4000 --tick-ms 10 --max-starts 100000 --duration-s 1800 \
  --warmup-s 20 --ids-per-call 8 --starters 64 --stoppers 16 "${sharing[@]}" "${watch[@]}" \
  --require-starts 100000 --require-live 360 --out "$out" "${extra[@]}"
echo "churn: load at the end: $(uptime)"
