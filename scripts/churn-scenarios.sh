#!/usr/bin/env bash
# The churn runs of docs/FLEET.md, one command: each scenario against a
# throwaway PostgreSQL (directly, or through `grantid serve` via grpc://),
# results in target/churn/<label>/ (series.csv, summary.json), plots in
# docs/fleet/<label>.svg (scripts/fleet-plots.py; matplotlib in a venv under
# target/). About 10 minutes on 2 cores.
#
#   ./scripts/churn-scenarios.sh             every scenario
#   ./scripts/churn-scenarios.sh pg-rate     the scenarios whose label starts so
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/env.sh
. scripts/lib/services.sh
. scripts/lib/churn.sh
cargo build --release -p grantid-churn -p grantid-cli --locked
bin=${CARGO_TARGET_DIR:-target}/release
trap 'churn_serve_stop; services_stop' EXIT
_services_start_postgres
pg=$GRANTID_TEST_POSTGRES_URL
pgpid=$(churn_pg_pid)
echo "churn: $(grep -m1 'model name' /proc/cpuinfo), $(nproc) cores"
# 10 ms ticks: 1,000 ticker threads at 1 ms would take the whole machine
# (docs/FLEET.md, "What the simulation costs").
common=(--tick-ms 10 --duration-s 60 --warmup-s 20 --starters 64 --stoppers 16)
ran=()

scenario() {
  local label=$1; shift
  if [ ${#only[@]} -gt 0 ]; then
    local keep=no p
    for p in "${only[@]}"; do case "$label" in "$p"*) keep=yes ;; esac; done
    [ "$keep" = yes ] || return 0
  fi
  echo "=== $label (load: $(uptime | sed 's/.*load/load/'))"
  "$bin/grantid-churn" --label "$label" --out "target/churn/$label" "${common[@]}" "$@" \
    || echo "=== $label: FAILED"
  ran+=("target/churn/$label")
}
only=("$@")

# PostgreSQL directly; its max_connections is 200 here, so the processes
# share 150 connections (one grant source each). Grants of 5 s with a 10 s
# horizon need the authority's max_lead_ms raised above horizon + grant
# (default 7 s, docs/FLEET.md "What to size").
long=(--grant-ms 5000 --horizon-ms 10000)
direct=(--shared-sources 150 --watch-pid "$pgpid")
scenario pg-1000-default --authority "$pg" "${direct[@]}" --live 1000 --lifetime-ms 60000
scenario pg-1000-grant5s --authority "$pg?max_lead_ms=16000" "${direct[@]}" --live 1000 \
  --lifetime-ms 30000 "${long[@]}"
scenario pg-rate-400 --authority "$pg" "${direct[@]}" --live 400 --lifetime-ms 5000
scenario pg-rate-1000-2048slots --authority "$pg?max_lead_ms=16000" "${direct[@]}" --live 1000 \
  --worker-bits 11 --lifetime-ms 14000 "${long[@]}"

# Through one grantid server: one grpc:// connection per process, the
# server's authority sessions behind them (4 PostgreSQL connections, the
# default, and one for its own generator); the first fleet rolls out at 40
# starts/s.
churn_serve_start "$bin/grantid" "$pg?max_lead_ms=16000"
viaserver=(--authority "$CHURN_SERVE_URL" --status-url "$pg?max_lead_ms=16000"
  --watch-pid "$pgpid" --watch-pid "$CHURN_SERVE_PID" --ramp-per-s 40)
scenario grpc-400-grant5s "${viaserver[@]}" --live 400 --lifetime-ms 15000 "${long[@]}"
scenario grpc-1000-grant5s "${viaserver[@]}" --live 1000 --lifetime-ms 30000 "${long[@]}" \
  --duration-s 80 --warmup-s 40
# The same fleet on 2,048 slots: what one server carries when slots are
# not the limit.
scenario grpc-1000-2048slots "${viaserver[@]}" --live 1000 --worker-bits 11 --lifetime-ms 30000 \
  "${long[@]}" --duration-s 80 --warmup-s 40

venv=target/plot-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
  "${GRANTID_PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check 'matplotlib==3.9.*'
fi
[ ${#ran[@]} -gt 0 ] && "$venv/bin/python" scripts/fleet-plots.py docs/fleet "${ran[@]}"
