# The grantid command as a user runs it, on the binary step 10 built:
# the file authority, each network authority (init, next, status), the
# static authority across processes, a fence's quarantine and a horizon
# past the bounded lead. (The authorities' and the CLI's own tests ran in
# step 10, against the same servers.)
grantid=$GRANTID_BUILD/grantid
[ -x "$grantid" ] || cargo build -q --workspace --bins $GRANTID_FEATURES --locked
smoke="$CARGO_TARGET_DIR/authority-smoke"
rm -rf "$smoke" && mkdir -p "$smoke"
"$grantid" next -n 3 --authority "file:$smoke/state.json"
"$grantid" next -n 1 --format json --authority "file:$smoke/state.json"
"$grantid" decode 0x5011 --timestamp-bits 12 --worker-bits 3 --sequence-bits 4
for var in GRANTID_TEST_POSTGRES_URL GRANTID_TEST_REDIS_URL GRANTID_TEST_MYSQL_URL GRANTID_TEST_ETCD_URL; do
  [ -n "${!var:-}" ] || { echo "$var is not set (scripts/lib/services.sh starts its server)" >&2; exit 1; }
done
for url in "$GRANTID_TEST_POSTGRES_URL" "$GRANTID_TEST_MYSQL_URL" "$GRANTID_TEST_ETCD_URL"; do
  "$grantid" authority init "$url"
done
for url in "$GRANTID_TEST_POSTGRES_URL" "$GRANTID_TEST_REDIS_URL" "$GRANTID_TEST_MYSQL_URL" "$GRANTID_TEST_ETCD_URL"; do
  "$grantid" next -n 2 --authority "$url" --namespace smoke
  "$grantid" authority status "$url" --namespace smoke
done
# static:N without a state file: three back-to-back processes (the command
# the safety review used) must not repeat an ID.
for _ in 1 2 3; do
  "$grantid" next -n 3000 --authority static:3 --sequence-bits 4 --namespace smoke-static
done > "$smoke/static-ids.txt"
total=$(wc -l < "$smoke/static-ids.txt")
dups=$(sort "$smoke/static-ids.txt" | uniq -d | wc -l)
echo "static:3, 3 back-to-back runs: $total IDs, $dups repeated"
[ "$total" -eq 9000 ] && [ "$dups" -eq 0 ]
# State loss: after `grantid authority fence URL`, no grant before the
# quarantine (max_lead_ms + clock_skew_ms) has passed.
fence_smoke() {
  local fence_url="$1?max_lead_ms=800&clock_skew_ms=0" t0 waited
  "$grantid" authority fence "$fence_url"
  t0=$(date +%s%N)
  "$grantid" next -n 1 --authority "$fence_url" --namespace smoke-fence \
    --grant-duration-ms 200 --horizon-ms 600 >/dev/null
  waited=$(( ($(date +%s%N) - t0) / 1000000 ))
  echo "${1%%:*}: first ID $waited ms after a fence of 800 ms"
  [ "$waited" -ge 700 ]
}
for url in "$GRANTID_TEST_REDIS_URL" "$GRANTID_TEST_MYSQL_URL" "$GRANTID_TEST_ETCD_URL"; do
  fence_smoke "$url"
done
# A horizon past the authority's bounded lead is refused at once
# (exit 17: INVALID_ARGUMENT, docs/CLI.md).
fence_url="${GRANTID_TEST_REDIS_URL}?max_lead_ms=800&clock_skew_ms=0"
rc=0
"$grantid" next -n 1 --authority "$fence_url" --namespace smoke-fence \
  2>"$smoke/lead.err" >/dev/null || rc=$?
echo "redis: default horizon against max_lead_ms=800: exit $rc: $(cat "$smoke/lead.err")"
[ "$rc" -eq 17 ] && grep -q "max_lead_ms (800)" "$smoke/lead.err"
