# State loss on real servers (issue 20; docs/AUTHORITIES.md, "State loss"):
# a Redis restarted from a stale RDB snapshot, a lagging PostgreSQL standby
# promoted, a PostgreSQL base backup restored (as copied, fenced, and by an
# archive recovery), each with generators issuing before and after the
# fault. The tests start their own throwaway servers on free loopback ports;
# redis-server and PostgreSQL 15 (with pg_basebackup) come from the packages
# scripts/lib/services.sh installs, installed here too when missing.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  missing=()
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  ls /usr/lib/postgresql/*/bin/pg_basebackup >/dev/null 2>&1 || missing+=(postgresql)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]} with apt-get"
    apt-get install -y "${missing[@]}" >/dev/null 2>&1 \
      || { apt-get update >/dev/null 2>&1 && apt-get install -y "${missing[@]}" >/dev/null 2>&1; } || true
  fi
fi
# One test at a time: each runs several servers and generators on 2 cores.
GRANTID_REQUIRE_SERVICES=1 cargo test -p grantid-authority --locked --test state_loss_servers \
  -- --ignored --nocapture --test-threads 1
