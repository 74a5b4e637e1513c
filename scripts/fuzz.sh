#!/usr/bin/env bash
# Fuzzing, long form (docs/RELIABILITY.md, "Fuzzing"): runs every bolero
# harness of fuzz/tests/ for SECONDS each (default 60).
#
#   ./scripts/fuzz.sh [SECONDS]                      random engine, stable (default)
#   FUZZ_ENGINE=libfuzzer ./scripts/fuzz.sh [SECONDS]  libFuzzer through cargo-bolero,
#                                                    on nightly (installs cargo-bolero)
#   FUZZ_TARGETS="parse_id_text from_url_bytes" ./scripts/fuzz.sh 30   some targets only
#
# The random engine replays fuzz/corpus/<target>/corpus/ first (cargo test
# does too), then feeds random inputs until the budget is spent. libFuzzer
# grows that corpus in place (commit the small, new inputs that matter) and
# writes a crashing input to fuzz/corpus/<target>/crashes/, which cargo test
# then replays: fix the bug, keep the input as a regression test.
# The short form is part of `cargo test --workspace` (1 s per harness).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
engine=${FUZZ_ENGINE:-random}
case "$seconds" in '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac

# (test file, harness) pairs: every `#[test]` of fuzz/tests/.
targets=()
for file in fuzz/tests/*.rs; do
  test=$(basename "$file" .rs)
  for name in $(sed -n '/^#\[test\]/{n;s/^fn \([a-z0-9_]*\).*/\1/p}' "$file"); do
    if [ -z "${FUZZ_TARGETS:-}" ] || [[ " $FUZZ_TARGETS " == *" $name "* ]]; then
      targets+=("$test:$name")
    fi
  done
done
[ ${#targets[@]} -gt 0 ] || { echo "no target matches FUZZ_TARGETS=$FUZZ_TARGETS" >&2; exit 2; }

if [ "$engine" = libfuzzer ]; then
  if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "libFuzzer needs a nightly toolchain: rustup toolchain install nightly" >&2
    exit 2
  fi
  command -v cargo-bolero >/dev/null || cargo install cargo-bolero --locked
  # cargo-bolero finds the harness by name among the test binaries.
  run() { cargo +nightly bolero test -p grantid-fuzz --engine libfuzzer -T "${seconds}s" "$2"; }
else
  # Release build: many more inputs per second than a debug one.
  cargo test --release --locked -p grantid-fuzz --no-run
  run() {
    BOLERO_RANDOM_TEST_TIME_MS=$((seconds * 1000)) \
      cargo test --release --locked -q -p grantid-fuzz --test "$1" -- --exact "$2" --nocapture
  }
fi

echo "$(date -u +%FT%TZ) engine=$engine seconds=$seconds targets=${#targets[@]} load=$(cut -d' ' -f1-3 /proc/loadavg)"
failed=()
for target in "${targets[@]}"; do
  echo "=== ${target#*:} (${target%%:*})"
  run "${target%%:*}" "${target#*:}" 2>&1 | grep -v '^$' || failed+=("${target#*:}")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]} (the input is printed above; bolero prints BOLERO_RANDOM_SEED to replay it)"
  exit 1
fi
echo "=== all ${#targets[@]} targets ran ${seconds}s each, no failure"
