#!/usr/bin/env bash
# Runs every test of the project: the README's test command, and what CI runs.
#
# Each step is a script in scripts/test.d/, run in name order, each in its own
# subshell with `set -e`; a failing step is reported and the others still run.
# The exit status is non-zero if any step failed.
#
#   ./scripts/test.sh              all steps
#   ./scripts/test.sh 10 30        only steps whose file name starts with 10 or 30
set -u
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
. scripts/lib/env.sh
. scripts/lib/services.sh
# Tests that need a server fail (instead of skipping) when it is missing.
export GRANTID_REQUIRE_SERVICES=1
services_start
trap services_stop EXIT

failed=()
started=$(date +%s)
for step in scripts/test.d/*.sh; do
  name=$(basename "$step" .sh)
  if [ $# -gt 0 ]; then
    keep=no
    for prefix in "$@"; do case "$name" in "$prefix"*) keep=yes ;; esac; done
    [ "$keep" = yes ] || continue
  fi
  echo "=== $name"
  t0=$(date +%s)
  ( set -euo pipefail; . "$step" )
  rc=$?
  echo "=== $name: $([ $rc -eq 0 ] && echo ok || echo "FAILED ($rc)") in $(( $(date +%s) - t0 ))s"
  [ $rc -eq 0 ] || failed+=("$name")
done
echo "=== all steps in $(( $(date +%s) - started ))s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED steps: ${failed[*]}"
  exit 1
fi
echo "all steps passed"
