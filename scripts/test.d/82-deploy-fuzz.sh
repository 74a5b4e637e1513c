# The deployment fuzzer, short form (docs/RELIABILITY.md, "Deployment
# fuzzer"): 90 s of cases, each a deployment drawn from the configurations
# grantid accepts (engine, 2-5 `grantid next` processes with options of their
# own, path spellings, layouts, one or two `grantid serve`), run with faults
# (kill -9, SIGSTOP, server restarts, state files deleted or restored, Redis
# restarted empty or stale); no ID of a namespace may repeat. The seed comes
# from the commit, so a run is repeatable and each commit explores new cases;
# a failing case prints the command that replays it. It starts its own
# PostgreSQL and Redis servers, and uses the tier's MariaDB, etcd and DynamoDB.
[ -x "$GRANTID_BUILD/deploy-fuzz" ] && [ -x "$GRANTID_BUILD/grantid" ] \
  || cargo build -q --workspace --bins $GRANTID_FEATURES --locked
seed=$((16#$(git -C "$GRANTID_ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo 1)))
"$GRANTID_BUILD/deploy-fuzz" --grantid "$GRANTID_BUILD/grantid" --seed "$seed" --duration-s 90
