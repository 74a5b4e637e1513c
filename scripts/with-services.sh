#!/usr/bin/env bash
# Runs a command with throwaway PostgreSQL, Redis, MariaDB and etcd servers:
#   scripts/with-services.sh cargo test -p grantid-authority
# The servers' URLs are exported as GRANTID_TEST_POSTGRES_URL,
# GRANTID_TEST_REDIS_URL, GRANTID_TEST_MYSQL_URL and GRANTID_TEST_ETCD_URL;
# the servers are stopped when the command ends.
set -u
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/env.sh"
. "$here/lib/services.sh"
trap services_stop EXIT
trap 'exit 130' INT TERM
services_start
"$@"
