#!/usr/bin/env bash
# The `cargo` that `napi build` runs in the default tier (CARGO=this file).
# napi always passes `--target TRIPLE`; for the host's own triple that puts
# the build in target/TRIPLE/ and compiles the addon's whole graph again
# (about 130 s on 2 cores) beside the workspace's build in target/debug/.
# This drops the host's triple, so cargo reuses that build, and links the
# addon where napi then looks for it. Any other target passes through.
set -euo pipefail
host=$(rustc -vV | sed -n 's/^host: //p')
args=()
triple=
profile=debug
while [ $# -gt 0 ]; do
  case "$1" in
    --target)
      if [ "$2" = "$host" ]; then triple=$2; else args+=("$1" "$2"); fi
      shift 2
      continue
      ;;
    --release) profile=release ;;
    --profile) args+=("$1"); shift; profile=$1; [ "$profile" = dev ] && profile=debug ;;
  esac
  args+=("$1")
  shift
done
# napi runs `$CARGO`; cargo runs its build scripts with CARGO set to itself.
unset CARGO
cargo "${args[@]}"
if [ -n "$triple" ]; then
  dir=${CARGO_TARGET_DIR:?napi-cargo.sh needs CARGO_TARGET_DIR}
  mkdir -p "$dir/$triple/$profile"
  for lib in "$dir/$profile"/lib*.so; do
    ln -f "$lib" "$dir/$triple/$profile/"
  done
fi
