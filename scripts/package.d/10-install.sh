# Install tests: builds dist/ with scripts/package.sh, then installs each
# artifact as a user would, away from the repository: the Python wheel into a
# fresh venv with no Rust on PATH, the two npm tarballs into a fresh project
# offline, a C program built with `pkg-config --cflags --libs grantid`
# against the unpacked C tarball, and the CLI from its tarball. Each checks
# the licence files, the absence of debug info, and a few real calls.
# Every artifact carries every authority: each also takes IDs from a
# throwaway etcd, and the CLI and the C library from a DynamoDB (moto)
# (started here unless the tier's services run).
# Budget: a few minutes (plus the tools' one-time build on a fresh machine).
need=()
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v readelf >/dev/null || need+=(binutils)
command -v unzip >/dev/null || need+=(unzip)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
root=$PWD
dist=$CARGO_TARGET_DIR/install-test/dist
GRANTID_DIST=$dist ./scripts/package.sh
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
work=$(mktemp -d /tmp/grantid-install.XXXXXX)
. scripts/lib/services.sh
trap 'services_stop; rm -rf "$work"' EXIT
[ -n "${GRANTID_TEST_ETCD_URL:-}" ] || GRANTID_SERVICES=etcd services_start
etcd=${GRANTID_TEST_ETCD_URL:?no etcd to check the artifacts against}
[ -n "${GRANTID_TEST_DYNAMODB_URL:-}" ] || GRANTID_SERVICES=dynamodb services_start
# A table of this step's own on the DynamoDB (moto), made by the CLI below.
ddb=${GRANTID_TEST_DYNAMODB_URL:?no DynamoDB to check the artifacts against}
ddb=${ddb/grantid_test/grantid_install_$$}
# moto takes any credentials; the SDK's chain needs some.
aws_env=(AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-grantid-test}"
  AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-grantid-test}")
. scripts/lib/install/common.sh

echo "--- install: Python wheel in a fresh venv, no Rust on PATH"
wheel=$(ls "$dist"/grantid-"$version"-cp39-abi3-*manylinux_2_17_x86_64*.whl)
sdist=$dist/grantid-$version.tar.gz
has_licences "$(unzip -l "$wheel")" "$wheel"
has_licences "$(tar -tzf "$sdist")" "$sdist"
env -i HOME="$work" PATH="$plain_path" sh -c '! command -v cargo && ! command -v rustc' >/dev/null
python3 -m venv "$work/venv"
env -i HOME="$work" PATH="$work/venv/bin:$plain_path" \
  pip install -q --no-index --disable-pip-version-check "$wheel"
so=$(ls "$work"/venv/lib/python3*/site-packages/grantid/_grantid*.so)
no_debug_info "$so"
(cd "$work" && env -i HOME="$work" PATH="$work/venv/bin:$plain_path" \
  python "$root/scripts/lib/install/check.py" "$work/py-state.json" "$root/conformance/vectors.json" 100000 "$etcd")

echo "--- install: npm main and platform tarballs in a fresh project, offline"
mkdir -p "$work/node-app"
main_tgz=$dist/grantid-$version.tgz
platform_tgz=$dist/grantid-linux-x64-gnu-$version.tgz
has_licences "$(tar -tzf "$main_tgz")" "$main_tgz"
has_licences "$(tar -tzf "$platform_tgz")" "$platform_tgz"
if tar -tzf "$main_tgz" | grep -q '\.node$'; then
  echo "$main_tgz carries a binary: it belongs in the platform package" >&2
  exit 1
fi
(
  cd "$work/node-app"
  npm init -y >/dev/null
  npm install --offline --no-audit --no-fund --loglevel=error "$main_tgz" "$platform_tgz"
  no_debug_info node_modules/grantid-linux-x64-gnu/grantid.linux-x64-gnu.node
  cp "$root/scripts/lib/install/check.js" "$root/bindings-node/__test__/helpers.js" .
  node check.js "$work/node-state.json" "$root/conformance/vectors.json" 100000 \
    grantid-linux-x64-gnu "$etcd"
)

echo "--- install: a C program against the unpacked C tarball, with pkg-config"
c_tgz=$dist/grantid-c-$version-x86_64-linux-gnu.tar.gz
has_licences "$(tar -tzf "$c_tgz")" "$c_tgz"
tar -C "$work" -xzf "$c_tgz"
prefix=$work/grantid-c-$version-x86_64-linux-gnu
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046
gcc -std=c11 -Wall -Wextra -Werror "$root/scripts/lib/install/app.c" $(pkg-config --cflags --libs grantid) -o "$work/app-shared"
LD_LIBRARY_PATH=$(pkg-config --variable=libdir grantid) "$work/app-shared" "file:$work/c-state.json"
# shellcheck disable=SC2046
gcc -std=c11 "$root/scripts/lib/install/app.c" $(pkg-config --cflags grantid) "$prefix/lib/libgrantid.a" \
  $(pkg-config --libs-only-l --static grantid | sed 's/-lgrantid //') -o "$work/app-static"
"$work/app-static" "file:$work/c-state.json"
"$work/app-static" "$etcd"
unset PKG_CONFIG_PATH
soname=$(readelf -d "$prefix"/lib/libgrantid.so | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libgrantid.so.${version%.*}" ] || { echo "soname is '$soname'" >&2; exit 1; }
[ -e "$prefix/lib/$soname" ] || { echo "$soname is not in lib/" >&2; exit 1; }
no_debug_info "$prefix/lib/$soname"
no_debug_info "$prefix/lib/libgrantid.a"

echo "--- install: the CLI from its tarball"
cli_tgz=$dist/grantid-cli-$version-x86_64-linux-gnu.tar.gz
has_licences "$(tar -tzf "$cli_tgz")" "$cli_tgz"
tar -C "$work" -xzf "$cli_tgz"
cli=$work/grantid-cli-$version-x86_64-linux-gnu/grantid
no_debug_info "$cli"
env -i HOME="$work" PATH="$plain_path" "$cli" --version | grep -qx "grantid $version"
[ "$(env -i HOME="$work" PATH="$plain_path" "$cli" next -n 5 -a static:3 | wc -l)" = 5 ]
[ "$(env -i HOME="$work" PATH="$plain_path" "$cli" next -n 5 -a "$etcd" --namespace install-etcd-v1 | wc -l)" = 5 ]
env -i HOME="$work" PATH="$plain_path" "$cli" authority status "$etcd" | grep -q install-etcd-v1 \
  || { echo "grantid authority status $etcd does not list namespace install-etcd-v1" >&2; exit 1; }
# DynamoDB: the CLI makes the table, the CLI and the static C program take IDs.
out=$(env -i HOME="$work" PATH="$plain_path" "${aws_env[@]}" "$cli" authority init --new-deployment "$ddb")
case "$out" in *"declared a new deployment"*) ;; *) echo "grantid authority init: $out" >&2; exit 1 ;; esac
[ "$(env -i HOME="$work" PATH="$plain_path" "${aws_env[@]}" "$cli" next -n 5 -a "$ddb" | wc -l)" = 5 ]
env -i HOME="$work" PATH="$plain_path" "${aws_env[@]}" "$work/app-static" "$ddb"
grep -q 'complete -c grantid' "$work/grantid-cli-$version-x86_64-linux-gnu/completions/grantid.fish"
echo "--- install: the static arm64 CLI under qemu-aarch64-static"
command -v qemu-aarch64-static >/dev/null || {
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user-static
}
arm_tgz=$dist/grantid-cli-$version-aarch64-linux-musl.tar.gz
has_licences "$(tar -tzf "$arm_tgz")" "$arm_tgz"
tar -C "$work" -xzf "$arm_tgz"
arm=$work/grantid-cli-$version-aarch64-linux-musl/grantid
readelf -h "$arm" | grep -q 'Machine:.*AArch64' || { echo "$arm is not an arm64 binary" >&2; exit 1; }
if readelf -l "$arm" | grep -q INTERP || readelf -d "$arm" | grep -q NEEDED; then
  echo "$arm is not static: it names an interpreter or shared libraries" >&2; exit 1
fi
no_debug_info "$arm"
run_arm() { env -i HOME="$work" PATH="$plain_path" qemu-aarch64-static "$arm" "$@"; }
run_arm --version | grep -qx "grantid $version"
run_arm next -n 1000 -a "file:$work/arm-state.json" > "$work/arm-ids"
[ "$(sort -u "$work/arm-ids" | wc -l)" = 1000 ] || { echo "arm64 CLI: 1000 IDs expected, distinct" >&2; exit 1; }
run_arm decode "$(head -n 1 "$work/arm-ids")" | grep -q worker
[ "$(run_arm next -n 5 -a "$etcd" --namespace install-etcd-v1 | wc -l)" = 5 ]
echo "arm64 CLI: ok, ran under qemu-aarch64-static (file: and etcd://)"
echo "install tests: ok"
