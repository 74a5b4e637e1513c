# Helpers of the churn scripts (docs/FLEET.md): sourced, never run.
#
# churn_serve_start BIN PG_URL: starts `grantid serve` (BIN) on a free
# loopback port with PG_URL as its authority; sets CHURN_SERVE_PID and
# CHURN_SERVE_URL (grpc://127.0.0.1:PORT) once it listens. Needs
# scripts/lib/services.sh sourced (for the free port).
# churn_serve_stop: stops every server churn_serve_start started.

CHURN_SERVE_PIDS=()

churn_serve_start() {
  local bin=$1 url=$2 port log i
  port=$(_services_free_port)
  log=$(mktemp /tmp/grantid-churn-serve.XXXXXX)
  GRANTID_LOG=warn "$bin" serve --listen "127.0.0.1:$port" --authority "$url" \
    --namespace "churn-server" >"$log" 2>&1 &
  CHURN_SERVE_PID=$!
  CHURN_SERVE_PIDS+=("$CHURN_SERVE_PID")
  for i in $(seq 100); do
    if python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null; then
      CHURN_SERVE_URL="grpc://127.0.0.1:$port"
      echo "churn: grantid serve (pid $CHURN_SERVE_PID) at $CHURN_SERVE_URL, log $log"
      return 0
    fi
    kill -0 "$CHURN_SERVE_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "churn: grantid serve did not listen:"; tail -5 "$log"
  return 1
}

# The server's exit status on SIGTERM is reported, not asserted: the churn
# checks are about the fleet (cli/tests/serve.rs asserts the clean stop).
churn_serve_stop() {
  local pid rc
  for pid in "${CHURN_SERVE_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || continue
    rc=0
    wait "$pid" 2>/dev/null || rc=$?
    [ "$rc" = 0 ] || echo "churn: warning: grantid serve (pid $pid) exited with status $rc on SIGTERM"
  done
  CHURN_SERVE_PIDS=()
  return 0
}

# The postmaster's pid of the throwaway PostgreSQL (for --watch-pid).
churn_pg_pid() {
  [ -n "${_GRANTID_PG_DIR:-}" ] && head -1 "$_GRANTID_PG_DIR/data/postmaster.pid" 2>/dev/null
}
