#!/usr/bin/env bash
# Runs the benchmarks and prints their tables (docs/BENCHMARKS.md explains
# them): Rust (criterion, peers in the same run), Python, Node, the
# PostgreSQL authority on a throwaway server, and the gRPC service.
#
#   scripts/bench.sh                      everything (about 12 minutes on 2 cores)
#   scripts/bench.sh rust python          only some parts (rust python node postgres grpc)
#
# Environment: CARGO_TARGET_DIR (default target/bench), GRANTID_BENCH_SECS
# (PostgreSQL seconds per client count, default 5), GRANTID_PYTHON.
# Builds are release builds; nothing here asserts a timing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/lib/env.sh
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/bench}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(rust python node postgres grpc)

machine() {
  echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "load average ($1): $(cut -d' ' -f1-3 /proc/loadavg)"
}

bench_rust() {
  echo "=== Rust (criterion): cargo bench -p grantid-benches --bench ids"
  cargo bench -p grantid-benches --bench ids 2>&1 | grep -E '^[a-z_]+/|time:|saturated, fixed' || true
  echo
  cargo run -q --release -p grantid-benches --bin bench-summary
  echo
  echo "=== Rust (criterion): cargo bench -p grantid-benches --bench public_ids"
  cargo bench -p grantid-benches --bench public_ids 2>&1 | grep -E '^[a-z0-9_]+/|time:' || true
}

bench_python() {
  echo "=== Python: bindings-python/bench/bench.py"
  local venv=$root/target/bench-python-venv python=${GRANTID_PYTHON:-python3}
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check maturin==1.16.0 \
    -r bindings-python/bench/requirements.txt
  PATH="$venv/bin:$PATH" CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_TARGET_DIR=$CARGO_TARGET_DIR/python-wheel \
    "$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps ./bindings-python
  # From the bench folder, so `import grantid` is the installed package.
  (cd bindings-python/bench && "$venv/bin/python" bench.py)
  (cd bindings-python/bench && "$venv/bin/python" public_ids.py)
}

bench_node() {
  echo "=== Node: bindings-node/bench/bench.js"
  (
    cd bindings-node
    [ -x node_modules/.bin/napi ] || npm ci --no-audit --no-fund --loglevel=error
    npx napi build --release --output-dir bench/build >/dev/null
    cd bench
    npm ci --no-audit --no-fund --loglevel=error
    node bench.js
    node public_ids.js
  )
}

bench_postgres() {
  echo "=== PostgreSQL authority: authority/examples/pg_grant_bench.rs, ${GRANTID_BENCH_SECS:-5} s per client count"
  cargo build -q --release -p grantid-authority --example pg_grant_bench
  scripts/with-services.sh sh -c \
    '"$CARGO_TARGET_DIR/release/examples/pg_grant_bench" "$GRANTID_TEST_POSTGRES_URL" 1 8 64'
}

# The gRPC service twice: client and server in one process on every CPU,
# then `grantid serve` alone on the last CPU and the client (one runtime
# thread) on the first, so that neither takes the other's CPU time.
bench_grpc() {
  echo "=== gRPC service: cargo bench -p grantid-server --bench grpc_load (one process)"
  cargo bench -q -p grantid-server --bench grpc_load 2>&1 | grep -E '^\||^load|^machine' || true
  local last port dir pid
  last=$(($(nproc) - 1))
  [ "$last" -gt 0 ] || { echo "one CPU: the pinned run needs two"; return 0; }
  cargo build -q --release -p grantid-cli
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  dir=$(mktemp -d)
  GRANTID_LOG=warn taskset -c "$last" "$CARGO_TARGET_DIR/release/grantid" serve \
    --listen "127.0.0.1:$port" --authority "file:$dir/state.json" --namespace bench &
  pid=$!
  echo
  echo "=== gRPC service: grantid serve on CPU $last, the client on CPU 0"
  GRANTID_BENCH_SERVER=127.0.0.1:$port GRANTID_BENCH_CLIENT_THREADS=1 GRANTID_BENCH_PARTS=unary,batch \
    taskset -c 0 cargo bench -q -p grantid-server --bench grpc_load 2>&1 | grep -E '^\||^load|^server' || true
  kill "$pid"
  wait "$pid" || true
  rm -rf "$dir"
}

machine start
for part in "${parts[@]}"; do
  case "$part" in
    rust | python | node | postgres | grpc) echo; "bench_$part" ;;
    *) echo "unknown part '$part' (rust python node postgres grpc)" >&2; exit 2 ;;
  esac
done
echo
machine end
