# Throwaway PostgreSQL, Redis, MariaDB, etcd and DynamoDB (moto) servers for
# the tests: sourced, never run.
#
# services_start starts a PostgreSQL 15 (initdb + pg_ctl in a temporary
# directory, trust auth, 127.0.0.1, a free port), a redis-server (no
# persistence, a free port), a MariaDB (mariadb-install-db + mariadbd in a
# temporary directory, root without password on 127.0.0.1, a free port,
# database grantid_test) and a single-member etcd (a temporary data
# directory, free client and peer ports), installing redis-server,
# mariadb-server (with galera-4, for a test's one-node Galera cluster) and
# etcd-server / etcd-client with apt when missing, and
# exports GRANTID_TEST_POSTGRES_URL, GRANTID_TEST_REDIS_URL,
# GRANTID_TEST_MYSQL_URL and GRANTID_TEST_ETCD_URL. Each is declared a new
# deployment (docs/AUTHORITIES.md, "State loss"). PostgreSQL also takes
# TLS, with a certificate of a throwaway CA (openssl; the CA, and a server
# certificate and key for 127.0.0.1 and localhost that other test servers
# may use, in $GRANTID_TEST_TLS_DIR): GRANTID_TEST_POSTGRES_TLS_URL is the
# same server through `sslmode=verify-full`.
# services_stop stops what services_start started. Both are idempotent.
# Set GRANTID_SERVICES=none to start nothing (tests needing a server then
# skip, or fail under GRANTID_REQUIRE_SERVICES=1), or to a comma-separated
# list (postgres,redis,mariadb,etcd,dynamodb) to start only those. DynamoDB
# is moto's (_services_start_dynamodb): GRANTID_TEST_DYNAMODB_URL names a
# table on it (tests make tables of their own beside it), with
# AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION exported.

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

# A throwaway CA and a server certificate for 127.0.0.1 and localhost:
# $GRANTID_TEST_TLS_DIR/{ca.crt,server.crt,server.key}.
_services_tls() {
  [ -n "${GRANTID_TEST_TLS_DIR:-}" ] && [ -f "$GRANTID_TEST_TLS_DIR/server.key" ] && return 0
  _services_apt openssl openssl || return 1
  local dir
  dir=$(mktemp -d /tmp/grantid-tls.XXXXXX)
  chmod 755 "$dir"
  {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
      -subj "/CN=grantid test CA" -keyout "$dir/ca.key" -out "$dir/ca.crt" \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -subj "/CN=localhost" -keyout "$dir/server.key" -out "$dir/server.csr" \
    && printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$dir/ext" \
    && openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
      -days 2 -extfile "$dir/ext" -out "$dir/server.crt"
  } >"$dir/openssl.log" 2>&1 || { _services_log "openssl failed:"; tail -5 "$dir/openssl.log"; return 1; }
  _GRANTID_TLS_DIR=$dir
  export GRANTID_TEST_TLS_DIR=$dir
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
  local ssl=""
  if _services_tls; then
    cp "$GRANTID_TEST_TLS_DIR/server.crt" "$GRANTID_TEST_TLS_DIR/server.key" "$dir/"
    chmod 600 "$dir/server.key"
    [ "$(id -u)" = 0 ] && chown postgres "$dir/server.crt" "$dir/server.key"
    ssl="-c ssl=on -c ssl_cert_file='$dir/server.crt' -c ssl_key_file='$dir/server.key'"
  fi
  _services_log "starting postgres ($bin) in $dir on 127.0.0.1:$port"
  if ! _services_as_pg "'$bin/initdb' -D '$dir/data' -A trust -U postgres --no-sync >'$dir/initdb.log' 2>&1"; then
    _services_log "initdb failed:"; tail -5 "$dir/initdb.log"; return 1
  fi
  if ! _services_as_pg "'$bin/pg_ctl' -D '$dir/data' -l '$dir/server.log' -w -t 30 \
        -o \"-c listen_addresses=127.0.0.1 -p $port -k '$dir' -c max_connections=200 $ssl\" start >/dev/null"; then
    _services_log "postgres did not start:"; tail -5 "$dir/server.log"; return 1
  fi
  _GRANTID_PG_DIR=$dir
  _GRANTID_PG_BIN=$bin
  export GRANTID_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres"
  if [ -n "$ssl" ]; then
    export GRANTID_TEST_POSTGRES_TLS_URL="postgres://postgres@localhost:$port/postgres?sslmode=verify-full&sslrootcert=$GRANTID_TEST_TLS_DIR/ca.crt"
  fi
  # A throwaway server never issued an ID: apply the schema and declare it
  # a new deployment, so its first use needs no state-loss quarantine
  # (`grantid authority init --new-deployment`; docs/AUTHORITIES.md).
  local sql
  sql="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/authority/src/engines/postgres/v1.sql"
  { "$bin/psql" "$GRANTID_TEST_POSTGRES_URL" -q -v ON_ERROR_STOP=1 -f "$sql" \
      && "$bin/psql" "$GRANTID_TEST_POSTGRES_URL" -qAt -c 'SELECT grantid.declare_new_deployment()'; } \
    >/dev/null 2>&1 || _services_log "could not declare postgres a new deployment: its first use waits"
}

# Whether a Redis server answers on 127.0.0.1:$1: PONG, not any reply (a
# socket Linux connects to itself while nothing listens reads its own PING
# back).
_services_redis_pong() {
  [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ]
}

_services_start_redis() {
  if [ -n "${_GRANTID_REDIS_PORT:-}" ] && _services_redis_pong "$_GRANTID_REDIS_PORT"; then
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
    _services_redis_pong "$port" && break
    sleep 0.1
  done
  _services_redis_pong "$port" || { _services_log "redis did not answer"; return 1; }
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

# Whether a command is on PATH, or a file given by its absolute path exists.
_services_have() {
  case $1 in
    /*) [ -e "$1" ] ;;
    *) command -v "$1" >/dev/null 2>&1 ;;
  esac
}

# Installs Debian packages when a command (or a file, by absolute path) is
# missing (as root, with apt).
_services_apt() {
  local cmd=$1; shift
  _services_have "$cmd" && return 0
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    _services_log "installing $* with apt-get"
    (DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >/dev/null 2>&1 \
      || { apt-get update >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >/dev/null 2>&1; }) || true
  fi
  _services_have "$cmd" || { _services_log "no $cmd (apt-get install $*)"; return 1; }
}

_services_start_mariadb() {
  if [ -n "${_GRANTID_MARIADB_DIR:-}" ] && [ -f "$_GRANTID_MARIADB_DIR/mariadb.pid" ]; then
    _services_log "mariadb already running at $GRANTID_TEST_MYSQL_URL"
    return 0
  fi
  _services_apt mariadbd mariadb-server mariadb-client || return 1
  # Galera's provider, for the test that starts a one-node Galera cluster
  # and expects it refused (authority/tests/mysql_identity.rs); optional.
  _services_apt /usr/lib/galera/libgalera_smm.so galera-4 || true
  local dir port i user=mysql
  dir=$(mktemp -d /tmp/grantid-mariadb.XXXXXX)
  chmod 755 "$dir"
  if [ "$(id -u)" = 0 ]; then chown mysql "$dir"; else user=$(id -un); fi
  port=$(_services_free_port)
  _services_log "starting mariadb in $dir on 127.0.0.1:$port"
  if ! mariadb-install-db --no-defaults --datadir="$dir/data" --user="$user" \
      --auth-root-authentication-method=normal --skip-test-db >"$dir/install.log" 2>&1; then
    _services_log "mariadb-install-db failed:"; tail -5 "$dir/install.log"; return 1
  fi
  # In a subshell: not a job of this shell (no "Killed" notice at the stop).
  ( mariadbd --no-defaults --datadir="$dir/data" --user="$user" --port="$port" \
      --bind-address=127.0.0.1 --socket="$dir/sock" --pid-file="$dir/mariadb.pid" \
      --log-error="$dir/server.log" --max-connections=300 >/dev/null 2>&1 & )
  for i in $(seq 100); do
    mariadb-admin --no-defaults -uroot -h127.0.0.1 -P"$port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  mariadb-admin --no-defaults -uroot -h127.0.0.1 -P"$port" ping >/dev/null 2>&1 \
    || { _services_log "mariadb did not answer:"; tail -5 "$dir/server.log"; return 1; }
  _GRANTID_MARIADB_DIR=$dir
  export GRANTID_TEST_MYSQL_URL="mysql://root@127.0.0.1:$port/grantid_test"
  # A throwaway server never issued an ID: apply the schema and declare it
  # a new deployment, so its first use needs no state-loss quarantine.
  local sql
  sql="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/authority/src/engines/mysql/v1.sql"
  { mariadb --no-defaults -uroot -h127.0.0.1 -P"$port" -e 'CREATE DATABASE IF NOT EXISTS grantid_test' \
      && mariadb --no-defaults -uroot -h127.0.0.1 -P"$port" grantid_test < "$sql" \
      && mariadb --no-defaults -uroot -h127.0.0.1 -P"$port" grantid_test -e 'CALL grantid_declare_new_deployment()'; } \
    >/dev/null 2>&1 || _services_log "could not declare mariadb a new deployment: its first use waits"
}

_services_start_etcd() {
  if [ -n "${_GRANTID_ETCD_DIR:-}" ] && [ -f "$_GRANTID_ETCD_DIR/etcd.pid" ]; then
    _services_log "etcd already running at $GRANTID_TEST_ETCD_URL"
    return 0
  fi
  _services_apt etcd etcd-server || return 1
  _services_apt etcdctl etcd-client || return 1
  local dir port peer i
  dir=$(mktemp -d /tmp/grantid-etcd.XXXXXX)
  port=$(_services_free_port)
  peer=$(_services_free_port)
  _services_log "starting etcd in $dir on 127.0.0.1:$port"
  ( etcd --name default --data-dir "$dir/data" \
      --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
      --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
      --initial-cluster "default=http://127.0.0.1:$peer" --initial-cluster-token "grantid-test-$port" \
      >"$dir/etcd.log" 2>&1 &
    echo $! >"$dir/etcd.pid" )
  for i in $(seq 100); do
    ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$port" endpoint health >/dev/null 2>&1 && break
    sleep 0.1
  done
  ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$port" endpoint health >/dev/null 2>&1 \
    || { _services_log "etcd did not answer:"; tail -5 "$dir/etcd.log"; return 1; }
  _GRANTID_ETCD_DIR=$dir
  export GRANTID_TEST_ETCD_URL="etcd://127.0.0.1:$port"
  # A throwaway cluster never issued an ID: declare it a new deployment
  # (the store record `grantid authority init --new-deployment` writes).
  local cluster
  cluster=$(ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$port" endpoint status -w json 2>/dev/null \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["Status"]["header"]["cluster_id"])' 2>/dev/null)
  [ -n "$cluster" ] && ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$port" put grantid/store \
    "{\"cluster_id\":$cluster,\"epoch\":1,\"quarantine_until_ms\":0,\"reason\":\"new deployment (test server)\"}" \
    >/dev/null 2>&1 || _services_log "could not declare etcd a new deployment: its first use waits"
}

# moto, PyPI's implementation of the AWS APIs, in a venv of its own under
# $GRANTID_TOOLS (once per machine), serving DynamoDB one request at a time
# (scripts/lib/moto_server.py).
_services_moto_version=5.2.5
_services_moto_python() {
  local venv=$GRANTID_TOOLS/moto-$_services_moto_version
  if ! "$venv/bin/python" -c 'import moto.server, boto3' >/dev/null 2>&1; then
    rm -rf "$venv"
    python3 -m venv "$venv" || return 1
    "$venv/bin/pip" install -q --disable-pip-version-check "moto[server]==$_services_moto_version" || return 1
  fi
  echo "$venv/bin/python"
}

_services_start_dynamodb() {
  if [ -n "${_GRANTID_MOTO_PID:-}" ] && kill -0 "$_GRANTID_MOTO_PID" 2>/dev/null; then
    _services_log "dynamodb (moto) already running at $GRANTID_TEST_DYNAMODB_ENDPOINT"
    return 0
  fi
  local python port i root
  python=$(_services_moto_python) || return 1
  port=$(_services_free_port)
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  _GRANTID_MOTO_LOG=$(mktemp /tmp/grantid-moto.XXXXXX)
  _services_log "starting dynamodb (moto $_services_moto_version) on 127.0.0.1:$port"
  "$python" "$root/scripts/lib/moto_server.py" 127.0.0.1 "$port" >"$_GRANTID_MOTO_LOG" 2>&1 &
  _GRANTID_MOTO_PID=$!
  for i in $(seq 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null && break
    sleep 0.1
  done
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null \
    || { _services_log "moto did not answer:"; tail -5 "$_GRANTID_MOTO_LOG"; return 1; }
  # moto takes any credentials; the SDK's chain takes these first.
  export AWS_ACCESS_KEY_ID=grantid-test AWS_SECRET_ACCESS_KEY=grantid-test AWS_REGION=us-east-1
  export GRANTID_TEST_DYNAMODB_ENDPOINT="http://127.0.0.1:$port" GRANTID_TEST_MOTO_PYTHON=$python
  export GRANTID_TEST_DYNAMODB_URL="dynamodb://grantid_test?region=us-east-1&endpoint=http://127.0.0.1:$port"
}

services_start() {
  if [ "${GRANTID_SERVICES:-}" = none ]; then
    _services_log "GRANTID_SERVICES=none: starting nothing"
    return 0
  fi
  local wanted=,${GRANTID_SERVICES:-postgres,redis,mariadb,etcd,dynamodb}, name
  for name in postgres redis mariadb etcd dynamodb; do
    case $wanted in
      *,$name,*) "_services_start_$name" || _services_log "$name unavailable: its tests will skip or fail" ;;
    esac
  done
  [ -n "${GRANTID_TEST_POSTGRES_URL:-}" ] && _services_log "GRANTID_TEST_POSTGRES_URL=$GRANTID_TEST_POSTGRES_URL"
  [ -n "${GRANTID_TEST_POSTGRES_TLS_URL:-}" ] && _services_log "GRANTID_TEST_POSTGRES_TLS_URL=$GRANTID_TEST_POSTGRES_TLS_URL"
  [ -n "${GRANTID_TEST_REDIS_URL:-}" ] && _services_log "GRANTID_TEST_REDIS_URL=$GRANTID_TEST_REDIS_URL"
  [ -n "${GRANTID_TEST_MYSQL_URL:-}" ] && _services_log "GRANTID_TEST_MYSQL_URL=$GRANTID_TEST_MYSQL_URL"
  [ -n "${GRANTID_TEST_ETCD_URL:-}" ] && _services_log "GRANTID_TEST_ETCD_URL=$GRANTID_TEST_ETCD_URL"
  [ -n "${GRANTID_TEST_DYNAMODB_URL:-}" ] && _services_log "GRANTID_TEST_DYNAMODB_URL=$GRANTID_TEST_DYNAMODB_URL"
  return 0
}

services_stop() {
  if [ -n "${_GRANTID_TLS_DIR:-}" ]; then
    rm -rf "$_GRANTID_TLS_DIR"
    _GRANTID_TLS_DIR=
    unset GRANTID_TEST_TLS_DIR
  fi
  if [ -n "${_GRANTID_PG_DIR:-}" ]; then
    _services_log "stopping postgres in $_GRANTID_PG_DIR"
    _services_as_pg "'$_GRANTID_PG_BIN/pg_ctl' -D '$_GRANTID_PG_DIR/data' -m immediate -w stop >/dev/null 2>&1" || true
    rm -rf "$_GRANTID_PG_DIR"
    _GRANTID_PG_DIR=
    unset GRANTID_TEST_POSTGRES_URL GRANTID_TEST_POSTGRES_TLS_URL
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
  if [ -n "${_GRANTID_MARIADB_DIR:-}" ]; then
    _services_log "stopping mariadb in $_GRANTID_MARIADB_DIR"
    if [ -f "$_GRANTID_MARIADB_DIR/mariadb.pid" ]; then
      kill -9 "$(cat "$_GRANTID_MARIADB_DIR/mariadb.pid")" 2>/dev/null || true
    fi
    rm -rf "$_GRANTID_MARIADB_DIR"
    _GRANTID_MARIADB_DIR=
    unset GRANTID_TEST_MYSQL_URL
  fi
  if [ -n "${_GRANTID_ETCD_DIR:-}" ]; then
    _services_log "stopping etcd in $_GRANTID_ETCD_DIR"
    kill -9 "$(cat "$_GRANTID_ETCD_DIR/etcd.pid")" 2>/dev/null || true
    rm -rf "$_GRANTID_ETCD_DIR"
    _GRANTID_ETCD_DIR=
    unset GRANTID_TEST_ETCD_URL
  fi
  if [ -n "${_GRANTID_MOTO_PID:-}" ]; then
    _services_log "stopping dynamodb (moto, pid $_GRANTID_MOTO_PID)"
    kill -9 "$_GRANTID_MOTO_PID" 2>/dev/null || true
    rm -f "$_GRANTID_MOTO_LOG"
    _GRANTID_MOTO_PID=
    unset GRANTID_TEST_DYNAMODB_URL GRANTID_TEST_DYNAMODB_ENDPOINT
  fi
  return 0
}
