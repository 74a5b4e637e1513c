#!/usr/bin/env bash
# The cost of TLS in `grantid serve`, plaintext and TLS side by side in one
# run (docs/BENCHMARKS.md, "TLS"): h2load (Debian's nghttp2-client) sends
# gRPC calls to two servers started here, one plaintext and one with
# --tls-cert/--tls-key and --token-file, each row in turn, `rounds` times.
#
#   scripts/bench-grpc-tls.sh                 # 10 s per row, 16 clients, 2 rounds
#   GRANTID_BENCH_SECS=5 GRANTID_BENCH_CLIENTS=16 GRANTID_BENCH_ROUNDS=1 scripts/bench-grpc-tls.sh
#
# Each client is one h2load connection with one call in flight (a closed
# loop). The servers run on the last CPU, h2load on the first (taskset), as
# `scripts/bench.sh grpc` pins them. p50 and p99 come from h2load's
# per-request log, calls/s from the calls answered OK over h2load's
# duration (connections included); a call counts only if the server answered it OK
# (grantid_requests_total{code="OK"} of its --metrics), so a refused call is
# never counted as served. The certificates (a throwaway CA, P-256) are
# made with the openssl command; the server itself is rustls only.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/env.sh

secs=${GRANTID_BENCH_SECS:-10}
clients=${GRANTID_BENCH_CLIENTS:-16}
rounds=${GRANTID_BENCH_ROUNDS:-2}
command -v h2load >/dev/null || apt-get install -y -qq nghttp2-client >/dev/null
command -v openssl >/dev/null || apt-get install -y -qq openssl >/dev/null
bin=${GRANTID_BIN:-}
if [ -z "$bin" ]; then
  cargo build -q --release -p grantid-cli
  bin=$CARGO_TARGET_DIR/release/grantid
fi

dir=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

# A throwaway CA and the server's certificate for 127.0.0.1.
ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
openssl req -x509 "${ec[@]}" -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 1 \
  -subj /CN=bench-ca 2>/dev/null
openssl req "${ec[@]}" -keyout "$dir/server.key" -out "$dir/server.csr" -subj /CN=bench 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$dir/san"
openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
  -CAcreateserial -out "$dir/server.pem" -days 1 -extfile "$dir/san" 2>/dev/null
token=$(openssl rand -hex 16)
printf '%s bench\n' "$token" >"$dir/tokens"

# gRPC frames: GenerateIdRequest {} and GenerateIdBatchRequest {count: 1000}.
printf '\0\0\0\0\0' >"$dir/unary.bin"
printf '\0\0\0\0\3\10\350\7' >"$dir/batch.bin"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
last=$(($(nproc) - 1))
pin_server=() pin_client=()
if [ "$last" -gt 0 ]; then
  pin_server=(taskset -c "$last") pin_client=(taskset -c 0)
fi

# serve NAME ARGS...: starts a server; sets port_NAME and metrics_NAME.
serve() {
  local name=$1 port metrics
  shift
  port=$(free_port) metrics=$(free_port)
  GRANTID_LOG=warn "${pin_server[@]}" "$bin" serve --listen "127.0.0.1:$port" \
    --authority "file:$dir/$name.json" --namespace bench --metrics "127.0.0.1:$metrics" "$@" &
  pids+=($!)
  printf -v "port_$name" %s "$port"
  printf -v "metrics_$name" %s "$metrics"
}
serve plain
serve tls --tls-cert "$dir/server.pem" --tls-key "$dir/server.key" --token-file "$dir/tokens"

# answers PORT METHOD [not]: the server's OK answers to METHOD so far (with
# `not`, its other answers but CANCELLED: the calls in flight when h2load
# stops at the end of its duration).
answers() {
  curl -s "http://127.0.0.1:$1/metrics" |
    awk -v m="$2" -v not="${3:-}" '$1 ~ "^grantid_requests_total" && index($1, "method=\"" m "\"") {
      if (index($1, "code=\"CANCELLED\"")) next
      is_ok = index($1, "code=\"OK\"") > 0
      if (is_ok != (not == "not")) n += $2
    } END { print n + 0 }'
}
ok() { answers "$1" "$2"; }

# Waits until both servers hold a grant.
for name in plain tls; do
  port_var=port_$name
  for _ in $(seq 200); do
    if [ "$name" = plain ]; then url=http://127.0.0.1:${!port_var}; else url=https://127.0.0.1:${!port_var}; fi
    h2load -n 1 -c 1 -d "$dir/unary.bin" -H 'content-type: application/grpc' -H 'te: trailers' \
      -H "authorization: Bearer $token" "$url/grantid.v1.IdGeneratorService/GenerateId" >/dev/null 2>&1 || true
    metrics_var=metrics_$name
    [ "$(ok "${!metrics_var}" GenerateId)" -gt 0 ] && break
    sleep 0.1
  done
done

# row LABEL NAME METHOD BODY IDS_PER_CALL [HEADER]
row() {
  local label=$1 name=$2 method=$3 body=$4 per=$5 port_var=port_$2 metrics_var=metrics_$2
  local scheme=http before after bad_before bad_after log
  [ "$name" = tls ] && scheme=https
  shift 5
  local headers=(-H 'content-type: application/grpc' -H 'te: trailers')
  [ $# -gt 0 ] && headers+=(-H "$1")
  log=$dir/log-$RANDOM
  before=$(ok "${!metrics_var}" "$method")
  bad_before=$(answers "${!metrics_var}" "$method" not)
  "${pin_client[@]}" h2load -c "$clients" -m 1 -D "$secs" -d "$dir/$body" \
    "${headers[@]}" --log-file "$log" \
    "$scheme://127.0.0.1:${!port_var}/grantid.v1.IdGeneratorService/$method" >"$dir/out" 2>&1
  after=$(ok "${!metrics_var}" "$method")
  bad_after=$(answers "${!metrics_var}" "$method" not)
  took=$(sed -n 's/^finished in \([0-9.]*\)s.*/\1/p' "$dir/out")
  # The log: start time, status, duration in µs, one request a line.
  sort -n -k3 "$log" | awk -v label="$label" -v ok=$((after - before)) -v secs="$took" -v per="$per" -v bad=$((bad_after - bad_before)) '
    { d[NR] = $3 }
    END {
      n = NR; p50 = d[int(n * 0.50) + 1]; p99 = d[int(n * 0.99) + 1]
      printf "| %s | %d | %d | %.3f | %.3f | %d |\n", label, ok / secs, ok * per / secs, p50 / 1000, p99 / 1000, bad
    }'
}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs; load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$clients clients (one connection and one call in flight each), $secs s per row"
echo
echo "| call | calls/s | IDs/s | p50 ms | p99 ms | not OK |"
echo "|---|---:|---:|---:|---:|---:|"
auth="authorization: Bearer $token"
for _ in $(seq "$rounds"); do
  row "GenerateId, plaintext" plain GenerateId unary.bin 1
  row "GenerateId, TLS + token" tls GenerateId unary.bin 1 "$auth"
  row "GenerateIdBatch(1000), plaintext" plain GenerateIdBatch batch.bin 1000
  row "GenerateIdBatch(1000), TLS + token" tls GenerateIdBatch batch.bin 1000 "$auth"
done
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
