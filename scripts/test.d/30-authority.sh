# Reference authorities on the real engines (PostgreSQL and Redis started by
# scripts/lib/services.sh) and the grantid command, then a smoke run of the
# command on the file authority.
cargo test -p grantid-authority -p grantid-cli --locked
smoke="$PWD/target/authority-smoke"
rm -rf "$smoke" && mkdir -p "$smoke"
cargo run -q -p grantid-cli --locked -- next -n 3 --authority "file:$smoke/state.json"
cargo run -q -p grantid-cli --locked -- next -n 1 --format json --authority "file:$smoke/state.json"
cargo run -q -p grantid-cli --locked -- decode 0x5011 --timestamp-bits 12 --worker-bits 3 --sequence-bits 4
if [ -n "${GRANTID_TEST_POSTGRES_URL:-}" ]; then
  cargo run -q -p grantid-cli --locked -- authority init "$GRANTID_TEST_POSTGRES_URL"
  cargo run -q -p grantid-cli --locked -- next -n 2 --authority "$GRANTID_TEST_POSTGRES_URL" --namespace smoke
  cargo run -q -p grantid-cli --locked -- authority status "$GRANTID_TEST_POSTGRES_URL" --namespace smoke
fi
if [ -n "${GRANTID_TEST_REDIS_URL:-}" ]; then
  cargo run -q -p grantid-cli --locked -- next -n 2 --authority "$GRANTID_TEST_REDIS_URL" --namespace smoke
  cargo run -q -p grantid-cli --locked -- authority status "$GRANTID_TEST_REDIS_URL" --namespace smoke
fi
# static:N without a state file: three back-to-back processes (the command
# the safety review used) must not repeat an ID.
for _ in 1 2 3; do
  cargo run -q -p grantid-cli --locked -- next -n 3000 --authority static:3 --sequence-bits 4 --namespace smoke-static
done > "$smoke/static-ids.txt"
total=$(wc -l < "$smoke/static-ids.txt")
dups=$(sort "$smoke/static-ids.txt" | uniq -d | wc -l)
echo "static:3, 3 back-to-back runs: $total IDs, $dups repeated"
[ "$total" -eq 9000 ] && [ "$dups" -eq 0 ]
# State loss: after `grantid authority fence URL`, no grant before the
# quarantine (max_lead_ms + clock_skew_ms) has passed.
fence_smoke() {
  local fence_url="$1?max_lead_ms=800&clock_skew_ms=0" t0 waited
  target/debug/grantid authority fence "$fence_url"
  t0=$(date +%s%N)
  target/debug/grantid next -n 1 --authority "$fence_url" --namespace smoke-fence \
    --grant-duration-ms 200 --horizon-ms 600 >/dev/null
  waited=$(( ($(date +%s%N) - t0) / 1000000 ))
  echo "${1%%:*}: first ID $waited ms after a fence of 800 ms"
  [ "$waited" -ge 700 ]
}
if [ -n "${GRANTID_TEST_REDIS_URL:-}" ]; then
  cargo build -q -p grantid-cli --locked
  fence_smoke "$GRANTID_TEST_REDIS_URL"
  fence_url="${GRANTID_TEST_REDIS_URL}?max_lead_ms=800&clock_skew_ms=0"
  # A horizon past the authority's bounded lead is refused at once
  # (exit 17: INVALID_ARGUMENT, docs/CLI.md).
  rc=0
  target/debug/grantid next -n 1 --authority "$fence_url" --namespace smoke-fence \
    2>"$smoke/lead.err" >/dev/null || rc=$?
  echo "redis: default horizon against max_lead_ms=800: exit $rc: $(cat "$smoke/lead.err")"
  [ "$rc" -eq 17 ] && grep -q "max_lead_ms (800)" "$smoke/lead.err"
fi
# MySQL / MariaDB and etcd (docs/AUTHORITIES.md). The MariaDB cases ran
# above (the `mysql` feature is on by default); the etcd cases need the
# `etcd` feature, and so protoc.
. scripts/lib/protoc.sh
if ensure_protoc; then
  cargo test -p grantid-authority --features etcd --locked --lib --test conformance --test concurrent \
    --test surface --test engines_loss_restart -- etcd
  cargo build -q -p grantid-cli --features etcd --locked
  for url in "${GRANTID_TEST_MYSQL_URL:-}" "${GRANTID_TEST_ETCD_URL:-}"; do
    [ -n "$url" ] || continue
    target/debug/grantid authority init "$url"
    target/debug/grantid next -n 2 --authority "$url" --namespace smoke
    target/debug/grantid authority status "$url" --namespace smoke
    fence_smoke "$url"
  done
elif [ "${GRANTID_REQUIRE_SERVICES:-0}" = 1 ]; then
  echo "the etcd authority's tests need protoc (apt-get install protobuf-compiler)" >&2
  exit 1
fi
