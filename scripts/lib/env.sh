# Shared environment for the scripts: sourced, never run.
# Makes sure cargo is on PATH (rustup installs it under ~/.cargo/bin).
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi

# The one build of the workspace that the test tiers share: every feature
# on (so `etcd`, which needs protoc), the dev profile, one target directory.
# Every cargo call of the tiers passes $GRANTID_FEATURES (or a package's
# --all-features), and the workspace-hack crate gives every third-party
# crate the same features in any selection, so no crate is compiled twice.
# The binaries the steps run are taken from $GRANTID_BUILD, never through
# `cargo run -p`.
# One toolchain for every rustc the builds start: rustup's rustc proxy
# otherwise takes a toolchain from a rust-toolchain.toml in the directory
# it runs in, which a tool like cargo-c (not started through rustup's cargo)
# runs in a dependency's folder (flagset 0.4.7 ships one naming 1.65).
if [ -z "${RUSTUP_TOOLCHAIN:-}" ] && command -v rustup >/dev/null 2>&1; then
  RUSTUP_TOOLCHAIN=$(cd / && rustup show active-toolchain 2>/dev/null | cut -d' ' -f1)
  [ -n "$RUSTUP_TOOLCHAIN" ] && export RUSTUP_TOOLCHAIN || unset RUSTUP_TOOLCHAIN
fi

GRANTID_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export GRANTID_ROOT
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$GRANTID_ROOT/target}
export GRANTID_FEATURES=--all-features
export GRANTID_BUILD=$CARGO_TARGET_DIR/debug
# Tools the scripts install (cargo-c, cargo-hakari, cargo-hack, the
# packaging venv): once per machine, outside target/, so a clean clone
# reuses them.
export GRANTID_TOOLS=${GRANTID_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/grantid-dev/tools}

# cargo_tool CRATE VERSION [BIN]: installs the cargo subcommand CRATE at
# VERSION into $GRANTID_TOOLS/CRATE-VERSION unless it is there, and sets
# TOOL to its binary BIN (default CRATE). A debug build: the tools only drive
# cargo and rustc, and build in a third of the time. Call it as "$TOOL"
# (`"$TOOL" hack check ...`), not through PATH: pyo3's build script watches
# PATH, and a changed PATH compiles pyo3 again.
cargo_tool() {
  local crate=$1 version=$2 bin=${3:-$1} dir="$GRANTID_TOOLS/$1-$2"
  if [ ! -x "$dir/bin/$bin" ]; then
    echo "installing $crate $version into $dir (once per machine)"
    cargo install "$crate" --locked --version "=$version" --debug --root "$dir" || return 1
  fi
  TOOL=$dir/bin/$bin
}

# test_exe NAME: the executable of the test or bench target NAME of the
# workspace's test build, from the list step 10 wrote (calling cargo here
# would build again what steps 40-60 compiled with their own arguments).
test_exe() {
  local list=$CARGO_TARGET_DIR/test-executables.json
  [ -s "$list" ] || cargo test --workspace --all-targets $GRANTID_FEATURES --locked --no-run \
    --message-format=json-render-diagnostics >"$list"
  python3 -c '
import json, sys
found = [m["executable"] for m in map(json.loads, open(sys.argv[1]))
         if m.get("reason") == "compiler-artifact" and m.get("executable")
         and m["target"]["name"] == sys.argv[2] and m["profile"]["test"]]
if not found:
    sys.exit("no test or bench target named " + sys.argv[2] + " in " + sys.argv[1])
print(found[0])' "$list" "$1"
}

# npm_ci DIR: `npm ci` in DIR unless its node_modules was installed from
# the lockfile it has now (npm ci always deletes node_modules first).
npm_ci() {
  local stamp=$1/node_modules/.grantid-package-lock.json
  cmp -s "$1/package-lock.json" "$stamp" 2>/dev/null && return 0
  (cd "$1" && npm ci --no-audit --no-fund --loglevel=error) && cp "$1/package-lock.json" "$stamp"
}
