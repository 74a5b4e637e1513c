# Churn simulation, short form (docs/FLEET.md): a fleet of generators,
# each with its own incarnation, started, issuing and stopped (a third hard
# kills, no release; the rest graceful) against the throwaway PostgreSQL,
# then against `grantid serve` in front of it (grpc://, one connection per
# generator). The slots are made scarce (256 worker slots for 150 live
# processes, 128 for 60) so that starts queue for workers and killed workers must come
# back at the end of their lease. Fails on: a duplicate ID, a start refused
# while a worker was free, a killed worker granted before its lease ended or
# leased past its last grant plus the grace, any worker still leased once
# every process stopped and every lease ended, or too few reuses of killed
# workers, live processes or starts. About 90 s on 2 cores.
. scripts/lib/churn.sh
[ -n "${GRANTID_TEST_POSTGRES_URL:-}" ] || { echo "churn: no GRANTID_TEST_POSTGRES_URL (scripts/with-services.sh)"; exit 1; }
bin=$GRANTID_BUILD
# Over TLS (verify-full, the throwaway CA of scripts/lib/services.sh) when
# the server offers it.
pg=${GRANTID_TEST_POSTGRES_TLS_URL:-$GRANTID_TEST_POSTGRES_URL}
case $pg in *sslmode=verify-full*) over="over TLS" ;; *) over="plain text" ;; esac
[ -x "$bin/grantid-churn" ] || cargo build -q --workspace --bins $GRANTID_FEATURES --locked
common=(--tick-ms 10 --kill-fraction 0.333 --starters 32 --stoppers 8 --sample-ms 1000)

echo "--- PostgreSQL ($over): 150 live on 256 slots, 24 shared connections, 35 s"
"$bin/grantid-churn" --authority "$pg" --label test-pg \
  --live 150 --worker-bits 8 --lifetime-ms 4000 --duration-s 35 --shared-sources 24 \
  "${common[@]}" --require-live 150 --require-starts 400 --require-reuses 20

# The server forwards every grant over its one PostgreSQL connection (about
# 100 grants/s on a busy 2-core machine, docs/FLEET.md): 2 s grants keep the
# 60 processes' renewals near 30/s.
echo "--- grantid serve (grpc://, PostgreSQL $over behind it): 60 live on 128 slots, one connection each, 25 s"
trap churn_serve_stop EXIT
churn_serve_start "$bin/grantid" "$pg"
"$bin/grantid-churn" --authority "$CHURN_SERVE_URL" --status-url "$pg" \
  --label test-grpc --live 60 --worker-bits 7 --lifetime-ms 4000 --duration-s 25 \
  --grant-ms 2000 --horizon-ms 4000 --watch-pid "$CHURN_SERVE_PID" "${common[@]}" \
  --require-live 60 --require-starts 150 --require-reuses 10
