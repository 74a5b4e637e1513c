#!/usr/bin/env bash
# Negative controls of the deployment fuzzer (docs/RELIABILITY.md,
# "Deployment fuzzer"): each patch in scripts/deploy-fuzz-controls/ reverts
# one fix of a duplicate path, in a scratch copy of the tree; the fuzzer,
# run on that build's grantid with the engines and case count the patch
# names (and the fuzzer options it names, such as a --focus), must find
# repeated IDs, or a namespace a hostile client stopped. A control it does
# not catch fails the run.
#
#   ./scripts/deploy-fuzz-controls.sh            every control
#   ./scripts/deploy-fuzz-controls.sh 1 5        the controls whose names start so
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/env.sh
root=$PWD
cargo build -q -p grantid-torture --bin deploy-fuzz $GRANTID_FEATURES --locked
fuzz=$CARGO_TARGET_DIR/debug/deploy-fuzz
scratch=${GRANTID_CONTROLS_DIR:-${TMPDIR:-/tmp}/grantid-deploy-fuzz-controls}
if [ ! -d "$scratch/tree" ]; then
  mkdir -p "$scratch"
  git worktree add --detach "$scratch/tree" HEAD >/dev/null
fi
git -C "$scratch/tree" checkout -q --detach "$(git rev-parse HEAD)"
status=0
summary=""
for patch in scripts/deploy-fuzz-controls/*.patch; do
  name=$(basename "$patch" .patch)
  if [ $# -gt 0 ]; then
    wanted=no
    for p in "$@"; do case $name in "$p"*) wanted=yes ;; esac; done
    [ $wanted = yes ] || continue
  fi
  engines=$(sed -n 's/^engines: //p' "$patch")
  cases=$(sed -n 's/^cases: //p' "$patch")
  read -r -a options <<<"$(sed -n 's/^options: //p' "$patch")"
  git -C "$scratch/tree" checkout -q -- .
  git -C "$scratch/tree" apply "$root/$patch"
  echo "=== control $name: building grantid with the fix reverted"
  # Its own target directory: artifacts of another checkout are never mixed.
  CARGO_TARGET_DIR=$scratch/target cargo build -q --manifest-path "$scratch/tree/Cargo.toml" \
    -p grantid-cli --bin grantid $GRANTID_FEATURES --locked
  start=$(date +%s)
  set +e
  scripts/with-services.sh "$fuzz" --grantid "$scratch/target/debug/grantid" \
    --engines "$engines" --cases "$cases" --seed 1 "${options[@]}" >"$scratch/$name.log" 2>&1
  rc=$?
  set -e
  # (A failing case's line is printed again in the run's summary.)
  found=$(grep -E '^case seed=.* (repeated|stopped)=[1-9]' "$scratch/$name.log" | sort -u | wc -l)
  line="$name: $found of $cases cases repeated IDs or stopped a namespace ($(( $(date +%s) - start )) s)"
  if [ "$rc" -eq 1 ] && [ "$found" -gt 0 ]; then
    echo "=== $line: caught"
    summary="$summary  caught   $line\n"
  else
    echo "=== $line: NOT caught (exit $rc; log $scratch/$name.log)"
    summary="$summary  MISSED   $line\n"
    status=1
  fi
done
git -C "$scratch/tree" checkout -q -- .
printf '\ndeploy-fuzz negative controls:\n%b' "$summary"
exit $status
