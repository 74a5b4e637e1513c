# Throwaway PostgreSQL and Redis servers for the tests: sourced, never run.
#
# services_start starts a PostgreSQL 15 (initdb + pg_ctl in a temporary
# directory, trust auth, 127.0.0.1, a free port) and a redis-server (no
# persistence, a free port), installing redis-server with apt when missing,
# and exports GRANTID_TEST_POSTGRES_URL and GRANTID_TEST_REDIS_URL.
# services_stop stops what services_start started. Both are idempotent.
# Set GRANTID_SERVICES=none to start nothing (tests needing a server then
# skip, or fail under GRANTID_REQUIRE_SERVICES=1).

_services_log() { echo "services: $*"; }

_services_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' 2>/dev/null \
    || echo $(( 20000 + RANDOM % 20000 ))
}

_services_pg_bin() {
  local d
  for d in /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin; do
    [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  done
  command -v pg_ctl >/dev/null 2>&1 && { dirname "$(command -v pg_ctl)"; return 0; }
  return 1
}

# Runs a command as the postgres user when we are root (PostgreSQL refuses
# to run as root), as ourselves otherwise.
_services_as_pg() {
  if [ "$(id -u)" = 0 ]; then
    su postgres -s /bin/sh -c "$*"
  else
    sh -c "$*"
  fi
}

_services_start_postgres() {
  if [ -n "${_GRANTID_PG_DIR:-}" ] && [ -f "$_GRANTID_PG_DIR/data/postmaster.pid" ]; then
    _services_log "postgres already running at $GRANTID_TEST_POSTGRES_URL"
    return 0
  fi
  local bin
  if ! bin=$(_services_pg_bin); then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      _services_log "installing postgresql with apt-get"
      (apt-get install -y postgresql >/dev/null 2>&1 || { apt-get update >/dev/null 2>&1 && apt-get install -y postgresql >/dev/null 2>&1; }) || true
    fi
    bin=$(_services_pg_bin) || { _services_log "no PostgreSQL server binaries (install postgresql-15)"; return 1; }
  fi
  if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
    useradd --system --no-create-home postgres >/dev/null 2>&1 || true
  fi
  local dir port
  dir=$(mktemp -d /tmp/grantid-pg.XXXXXX)
  chmod 755 "$dir"
  [ "$(id -u)" = 0 ] && chown postgres "$dir"
  port=$(_services_free_port)
  _services_log "starting postgres ($bin) in $dir on 127.0.0.1:$port"
  if ! _services_as_pg "'$bin/initdb' -D '$dir/data' -A trust -U postgres --no-sync >'$dir/initdb.log' 2>&1"; then
    _services_log "initdb failed:"; tail -5 "$dir/initdb.log"; return 1
  fi
  if ! _services_as_pg "'$bin/pg_ctl' -D '$dir/data' -l '$dir/server.log' -w -t 30 \
        -o \"-c listen_addresses=127.0.0.1 -p $port -k '$dir' -c max_connections=200\" start >/dev/null"; then
    _services_log "postgres did not start:"; tail -5 "$dir/server.log"; return 1
  fi
  _GRANTID_PG_DIR=$dir
  _GRANTID_PG_BIN=$bin
  export GRANTID_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres"
  # A throwaway server never issued an ID: apply the schema and declare it
  # a new deployment, so its first use needs no state-loss quarantine
  # (`grantid authority init --new-deployment`; docs/AUTHORITIES.md).
  local sql
  sql="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/authority/sql/v1.sql"
  { "$bin/psql" "$GRANTID_TEST_POSTGRES_URL" -q -v ON_ERROR_STOP=1 -f "$sql" \
      && "$bin/psql" "$GRANTID_TEST_POSTGRES_URL" -qAt -c 'SELECT grantid.declare_new_deployment()'; } \
    >/dev/null 2>&1 || _services_log "could not declare postgres a new deployment: its first use waits"
}

_services_start_redis() {
  if [ -n "${_GRANTID_REDIS_PORT:-}" ] && redis-cli -p "$_GRANTID_REDIS_PORT" ping >/dev/null 2>&1; then
    _services_log "redis already running at $GRANTID_TEST_REDIS_URL"
    return 0
  fi
  if ! command -v redis-server >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      _services_log "installing redis-server with apt-get"
      (apt-get install -y redis-server >/dev/null 2>&1 || { apt-get update >/dev/null 2>&1 && apt-get install -y redis-server >/dev/null 2>&1; }) || true
    fi
    command -v redis-server >/dev/null 2>&1 || { _services_log "no redis-server (apt-get install redis-server)"; return 1; }
  fi
  local dir port i
  dir=$(mktemp -d /tmp/grantid-redis.XXXXXX)
  port=$(_services_free_port)
  _services_log "starting redis-server on 127.0.0.1:$port (no persistence)"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null || return 1
  for i in $(seq 50); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  redis-cli -p "$port" ping >/dev/null 2>&1 || { _services_log "redis did not answer"; return 1; }
  # A throwaway server never issued an ID: declare it a new deployment, so
  # its first use needs no state-loss quarantine (what `grantid authority
  # init --new-deployment` records; docs/AUTHORITIES.md, "State loss").
  local run_id
  run_id=$(redis-cli -p "$port" INFO server | sed -n 's/^run_id:\([0-9a-f]*\).*/\1/p')
  redis-cli -p "$port" HSET grantid:store run_id "$run_id" epoch 1 quarantine_until 0 \
    reason "new deployment (test server)" >/dev/null
  _GRANTID_REDIS_DIR=$dir
  _GRANTID_REDIS_PORT=$port
  export GRANTID_TEST_REDIS_URL="redis://127.0.0.1:$port/"
}

services_start() {
  if [ "${GRANTID_SERVICES:-}" = none ]; then
    _services_log "GRANTID_SERVICES=none: starting nothing"
    return 0
  fi
  _services_start_postgres || _services_log "PostgreSQL unavailable: its tests will skip or fail"
  _services_start_redis || _services_log "Redis unavailable: its tests will skip or fail"
  [ -n "${GRANTID_TEST_POSTGRES_URL:-}" ] && _services_log "GRANTID_TEST_POSTGRES_URL=$GRANTID_TEST_POSTGRES_URL"
  [ -n "${GRANTID_TEST_REDIS_URL:-}" ] && _services_log "GRANTID_TEST_REDIS_URL=$GRANTID_TEST_REDIS_URL"
  return 0
}

services_stop() {
  if [ -n "${_GRANTID_PG_DIR:-}" ]; then
    _services_log "stopping postgres in $_GRANTID_PG_DIR"
    _services_as_pg "'$_GRANTID_PG_BIN/pg_ctl' -D '$_GRANTID_PG_DIR/data' -m immediate -w stop >/dev/null 2>&1" || true
    rm -rf "$_GRANTID_PG_DIR"
    _GRANTID_PG_DIR=
    unset GRANTID_TEST_POSTGRES_URL
  fi
  if [ -n "${_GRANTID_REDIS_PORT:-}" ]; then
    _services_log "stopping redis on port $_GRANTID_REDIS_PORT"
    redis-cli -p "$_GRANTID_REDIS_PORT" shutdown nosave >/dev/null 2>&1 || {
      [ -f "$_GRANTID_REDIS_DIR/redis.pid" ] && kill "$(cat "$_GRANTID_REDIS_DIR/redis.pid")" 2>/dev/null
    } || true
    rm -rf "$_GRANTID_REDIS_DIR"
    _GRANTID_REDIS_PORT=
    unset GRANTID_TEST_REDIS_URL
  fi
  return 0
}
