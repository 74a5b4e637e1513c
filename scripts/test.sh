#!/usr/bin/env bash
# The project's tests, in tiers (README, "Tests"):
#
#   ./scripts/test.sh                   the default tier, what every change runs (the README's test command)
#   ./scripts/test.sh package           release artifacts, built once and installed as a user would
#   ./scripts/test.sh nightly           the long runs: loom bound 4, torture and churn long, fuzzing
#                                       60 s per harness, the benchmarks
#   ./scripts/test.sh platforms         every platform's artifacts (package.sh --all), run under emulation
#   ./scripts/test.sh default package   several tiers in one run, one summary (what .ci/run runs)
#   ./scripts/test.sh default 10 40     only the steps whose file name starts with 10 or 40
#
# A tier is a folder of steps: scripts/test.d/ (default), scripts/package.d/,
# scripts/nightly.d/, scripts/platforms.d/. Each step runs in name order in a bash of its own with
# `set -euo pipefail`; a failing step is reported and the next one runs.
# Each tier has a time budget (GRANTID_BUDGET_DEFAULT_S, ..._PACKAGE_S,
# ..._NIGHTLY_S, ..._PLATFORMS_S): a step still running when its tier's budget is spent is
# stopped and reported with its tier, name and time, and the rest of that
# tier is not started, so that a slow machine fails loudly before CI's limit.
# At the end: one line per step (time, ok / FAILED / TIMEOUT / not started)
# and the total. The exit status is non-zero if any step did not pass.
set -u
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
. scripts/lib/env.sh

tiers=()
prefixes=()
for arg in "$@"; do
  case "$arg" in
    default | package | nightly | platforms) tiers+=("$arg") ;;
    *) prefixes+=("$arg") ;;
  esac
done
[ ${#tiers[@]} -gt 0 ] || tiers=(default)

tier_dir() { case "$1" in default) echo scripts/test.d ;; *) echo "scripts/$1.d" ;; esac; }
# Measured from a clean clone on 2 cores (README, "Tests"): the default
# tier's budget is about twice its time, the package tier's covers a new
# machine's one-time tool builds, and the two together (5,100 s) stay under
# CI's 90 minutes.
budget_of() {
  case "$1" in
    default) echo "${GRANTID_BUDGET_DEFAULT_S:-2400}" ;;
    package) echo "${GRANTID_BUDGET_PACKAGE_S:-2700}" ;;
    nightly) echo "${GRANTID_BUDGET_NIGHTLY_S:-10800}" ;;
    platforms) echo "${GRANTID_BUDGET_PLATFORMS_S:-10800}" ;;
  esac
}

# The servers, for the default tier. Tests that need a server fail (instead
# of skipping) when it is missing. (The long runs start their own.)
need_services=no
for tier in "${tiers[@]}"; do [ "$tier" != default ] || need_services=yes; done
if [ "$need_services" = yes ]; then
  . scripts/lib/services.sh
  export GRANTID_REQUIRE_SERVICES=1
  services_start
  trap services_stop EXIT
fi
# protoc: every build of the tiers has all features on, `etcd` among them.
. scripts/lib/protoc.sh
ensure_protoc || exit 1

summary=()
failed=0
started=$(date +%s)
for tier in "${tiers[@]}"; do
  budget=$(budget_of "$tier")
  tier_t0=$(date +%s)
  spent=no
  for step in "$(tier_dir "$tier")"/*.sh; do
    name=$(basename "$step" .sh)
    if [ ${#prefixes[@]} -gt 0 ]; then
      keep=no
      for prefix in "${prefixes[@]}"; do case "$name" in "$prefix"*) keep=yes ;; esac; done
      [ "$keep" = yes ] || continue
    fi
    if [ "$spent" = yes ]; then
      summary+=("$(printf '%-8s %-18s %6s  %s' "$tier" "$name" - "not started (budget spent)")")
      failed=1
      continue
    fi
    left=$((budget - ($(date +%s) - tier_t0)))
    echo "=== $tier/$name (tier budget left: ${left}s)"
    t0=$(date +%s)
    # The step's own bash, with the shared helpers (services.sh only
    # defines functions; the servers' URLs are in the environment).
    timeout --kill-after=30 "$left" \
      bash -c 'set -euo pipefail; . scripts/lib/env.sh; . scripts/lib/services.sh; . "$0"' "$step"
    rc=$?
    took=$(($(date +%s) - t0))
    if [ $rc -eq 0 ]; then
      result=ok
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      result="TIMEOUT: tier $tier spent its ${budget}s budget in step $name, after ${took}s of it"
      spent=yes
    else
      result="FAILED ($rc)"
    fi
    echo "=== $tier/$name: $result in ${took}s"
    # A build that dies for want of disk says little of it (rustc exits
    # 101): a failed step shows what was left.
    [ $rc -eq 0 ] || df -h "$CARGO_TARGET_DIR" /tmp 2>/dev/null | sed 's/^/    disk: /'
    summary+=("$(printf '%-8s %-18s %5ss  %s' "$tier" "$name" "$took" "$result")")
    [ $rc -eq 0 ] || failed=1
  done
done
echo
echo "=== summary ($(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'))"
printf '%s\n' "${summary[@]}"
echo "total: $(($(date +%s) - started))s, tiers: ${tiers[*]}; disk left: $(df -h --output=avail "$CARGO_TARGET_DIR" 2>/dev/null | tail -n 1 | tr -d ' '), target: $(du -sh "$CARGO_TARGET_DIR" 2>/dev/null | cut -f1)"
if [ $failed -ne 0 ]; then
  echo "FAILED"
  exit 1
fi
echo "all steps passed"
