# State loss on real servers (docs/AUTHORITIES.md, "State loss"): a Redis
# restarted from a stale RDB snapshot, a lagging PostgreSQL standby
# promoted, a PostgreSQL base backup restored (as copied, fenced, and by an
# archive recovery), each with generators issuing before and after the
# fault. The tests start their own throwaway servers on free loopback ports
# (redis-server and PostgreSQL 15 with pg_basebackup, which
# scripts/lib/services.sh installed), one test at a time: each runs several
# servers and generators on 2 cores. The test binary is step 10's.
cargo test -p grantid-authority $GRANTID_FEATURES --locked --test state_loss_servers \
  -- --ignored --nocapture --test-threads 1
