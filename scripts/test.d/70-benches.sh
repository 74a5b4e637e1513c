# Benches, run very briefly on the workspace's dev build (step 10 ran each
# once in test mode); no timing is asserted (scripts/bench.sh runs them
# for real on a release build, docs/BENCHMARKS.md has the figures).
# Checked here: every bench runs and reports, the summary printer reads
# criterion's output, and no grantid ID repeats in the Node duplicate loop.
#
# Python and Node use the packages steps 50 and 60 built (built here the same
# way when those steps did not run); the peer packages come from the pinned
# requirements file and the committed lockfile.
root=$PWD
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

echo "--- Rust: criterion suite, 0.1 s per bench"
ids=$(test_exe ids)
CRITERION_HOME=$scratch/criterion GRANTID_BENCH_SATURATED_SECS=0.2 \
  "$ids" --bench --warm-up-time 0.05 --measurement-time 0.1 --sample-size 10 >"$scratch/criterion.log" 2>&1 \
  || { cat "$scratch/criterion.log"; exit 1; }
"$GRANTID_BUILD/bench-summary" "$scratch/criterion" | tee "$scratch/summary.txt"
for bench in single/grantid_next_id single/atomic_fetch_add single/atomic_cas single/uuid_now_v7 \
  single/ulid_new single/snowflake_real_time_below_cap two_threads/grantid_next_id \
  two_threads/snowflake_mutex batch/grantid_fill_1000_per_id saturated/grantid_default_layout \
  saturated/snowflake_real_time 'saturated default layout, fixed run'; do
  grep -qF "| $bench" "$scratch/summary.txt" || { echo "bench '$bench' missing from the summary" >&2; exit 1; }
done

echo "--- Rust: public IDs beside sqids, harsh and fpe (benches/benches/public_ids.rs)"
CRITERION_HOME=$scratch/criterion-public "$(test_exe public_ids)" --bench \
  --warm-up-time 0.02 --measurement-time 0.05 --sample-size 10 >"$scratch/public.log" 2>&1 \
  || { cat "$scratch/public.log"; exit 1; }
for bench in public/encode public/decode public/encode_str public/decode_str sqids/encode hashids/encode ff1/encode; do
  grep -qE "^$bench( |$)" "$scratch/public.log" || { cat "$scratch/public.log"; echo "bench '$bench' did not report" >&2; exit 1; }
done

echo "--- Python: bindings-python/bench/bench.py, one short round"
venv=$CARGO_TARGET_DIR/python-venv
"$venv/bin/python" -c 'import grantid' 2>/dev/null || { . scripts/test.d/50-python.sh >/dev/null; }
"$venv/bin/pip" install -q --disable-pip-version-check -r bindings-python/bench/requirements.txt
(cd bindings-python/bench && "$venv/bin/python" bench.py --rounds 1 --round-ms 5) | tee "$scratch/python.txt"
grep -q '| grantid next_ids(1000), per ID |' "$scratch/python.txt"
(cd bindings-python/bench && "$venv/bin/python" public_ids.py --rounds 1 --round-ms 5) | tee -a "$scratch/python.txt"
grep -q '| PublicIds.decode_str(text) |' "$scratch/python.txt"
if grep -q 'not installed' "$scratch/python.txt"; then
  echo "a Python peer did not install" >&2
  exit 1
fi

echo "--- Node: bindings-node/bench/bench.js, one short round, 20,000-ID duplicate loops"
addon=bindings-node/grantid.linux-x64-gnu.node
[ -f "$addon" ] || (. scripts/test.d/60-node.sh >/dev/null)
npm_ci bindings-node/bench
(cd bindings-node/bench && GRANTID_NODE_ADDON="$root/$addon" BENCH_ROUNDS=1 BENCH_ROUND_MS=5 \
  BENCH_DUP_IDS=20000 node bench.js) | tee "$scratch/node.txt"
(cd bindings-node/bench && GRANTID_NODE_ADDON="$root/$addon" BENCH_ROUNDS=1 BENCH_ROUND_MS=5 \
  node public_ids.js) | tee -a "$scratch/node.txt"
grep -q '| decodeStr(text) -> string |' "$scratch/node.txt"
if grep -q 'not installed' "$scratch/node.txt"; then
  echo "a Node peer did not install" >&2
  exit 1
fi

echo "--- PostgreSQL, MariaDB and DynamoDB (moto) authorities: pg_grant_bench, 1 s per client count"
if [ -n "${GRANTID_TEST_POSTGRES_URL:-}" ]; then
  ddb=
  if [ -n "${GRANTID_TEST_DYNAMODB_URL:-}" ]; then
    # A table of the bench's own, declared new (no quarantine first).
    ddb=${GRANTID_TEST_DYNAMODB_URL/grantid_test/grantid_bench}
    "$GRANTID_BUILD/grantid" authority init --new-deployment "$ddb" >/dev/null
  fi
  GRANTID_BENCH_SECS=1 "$GRANTID_BUILD/examples/pg_grant_bench" \
    "$GRANTID_TEST_POSTGRES_URL" ${GRANTID_TEST_MYSQL_URL:+"$GRANTID_TEST_MYSQL_URL"} ${ddb:+"$ddb"} 1 8
elif [ "${GRANTID_REQUIRE_SERVICES:-0}" = 1 ]; then
  echo "GRANTID_TEST_POSTGRES_URL is not set (scripts/lib/services.sh starts PostgreSQL)" >&2
  exit 1
else
  echo "skipped: no GRANTID_TEST_POSTGRES_URL"
fi
