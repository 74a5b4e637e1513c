#!/usr/bin/env bash
# Builds every release artifact of grantid into dist/ (or $GRANTID_DIST):
#
#   grantid-VERSION-cp39-abi3-manylinux2014_x86_64...whl  Python wheel, glibc 2.17+
#   grantid-VERSION.tar.gz                                Python sdist
#   grantid-VERSION.tgz                                   npm main package (loader, types)
#   grantid-linux-x64-gnu-VERSION.tgz                     npm platform package (the addon)
#   grantid-c-VERSION-x86_64-linux-gnu.tar.gz             C: include/, lib/ (.so with soname, .a), lib/pkgconfig/grantid.pc
#   grantid-cli-VERSION-x86_64-linux-gnu.tar.gz           the grantid command, completions, docs
#   grantid-cli-VERSION-aarch64-linux-musl.tar.gz         the same, a static arm64 binary (cross-linked by zig)
#   SHA256SUMS
#
# `package.sh --all` builds the whole platform matrix (the platforms tier,
# scripts/platforms.d/), every cross build linked by zig:
#
#   wheels     manylinux2014 x86_64 and aarch64, musllinux_1_2 x86_64 and
#              aarch64, macOS x86_64 (10.14+) and arm64 (11.0+)
#   npm        linux-x64-gnu, linux-arm64-gnu, linux-x64-musl,
#              linux-arm64-musl, darwin-x64, darwin-arm64
#   C, CLI     x86_64 and aarch64, glibc and musl (the CLI's musl builds
#              static; the aarch64 glibc builds need glibc 2.17)
#
# The macOS builds link against text stubs of the Apple frameworks the
# authorities call (scripts/lib/macos/frameworks.py): zig ships a stub of
# libSystem only.
#
# Every artifact carries LICENSE-MIT and LICENSE-APACHE; release builds have
# no debug info (the `release` profile of Cargo.toml). Tools are installed
# once per machine and cached under $GRANTID_TOOLS (scripts/lib/env.sh,
# outside target/): cargo-c 0.10.24 (a debug build, see below), a venv with
# maturin, PyPI's ziglang (the manylinux2014 link) and cargo-zigbuild (the
# cross builds); @napi-rs/cli comes
# from bindings-node's lockfile. scripts/package.d/10-install.sh installs the
# results as a user would.
set -euo pipefail
all=0
case "${1:-}" in
  --all) all=1 ;;
  "") ;;
  *) echo "usage: scripts/package.sh [--all]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
. scripts/lib/env.sh
root=$PWD
dist=$(mkdir -p "${GRANTID_DIST:-dist}" && cd "${GRANTID_DIST:-dist}" && pwd)
# The release builds, under $GRANTID_PACKAGE_TARGET. The CLI and the Node
# addon share one directory (the same flags; the workspace-hack crate gives
# them the same features), so the addon reuses the CLI's build. cargo-c
# (its own embedded cargo) and maturin --zig (its own linker, which is in
# every unit's fingerprint) each keep one of their own: sharing would
# rebuild everything at every switch.
builds=${GRANTID_PACKAGE_TARGET:-$CARGO_TARGET_DIR/package}
host=x86_64-unknown-linux-gnu
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
licences=(LICENSE-MIT LICENSE-APACHE)
stage=$builds/stage
rm -rf "$stage" && mkdir -p "$stage"
find "$dist" -maxdepth 1 -type f \( -name 'grantid*' -o -name SHA256SUMS \) -delete
step() { echo "--- package: $*"; }

# ---- tools (cached) --------------------------------------------------------
# A debug build of cargo-c: it only drives cargo and rustc, which build the
# libraries in release as before. On 2 AMD EPYC cores it builds in 5.5
# minutes instead of 13.5, and `cargo cinstall` takes the same time (3m50s
# against 3m39s for this workspace).
cargo_tool cargo-c 0.10.24 cargo-cinstall
cinstall=$TOOL
venv=$GRANTID_TOOLS/package-venv
if ! "$venv/bin/python" -c 'import ziglang' 2>/dev/null || ! "$venv/bin/maturin" --version 2>/dev/null | grep -q '^maturin 1.16.0$' \
   || ! "$venv/bin/cargo-zigbuild" --version 2>/dev/null | grep -q '^cargo-zigbuild 0.24.1$' \
   || ! "$venv/bin/wheel" version 2>/dev/null | grep -q '^wheel 0.45.1$'; then
  step "installing maturin 1.16.0, ziglang, cargo-zigbuild and wheel into $venv (once)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check maturin==1.16.0 ziglang==0.17.1 cargo-zigbuild==0.24.1 \
    wheel==0.45.1
fi
if [ ! -x bindings-node/node_modules/.bin/napi ]; then
  (cd bindings-node && npm ci --no-audit --no-fund --loglevel=error)
fi

# Every artifact carries every authority: the `etcd` (protoc is needed to
# build it, never to run it) and `dynamodb` features on.
. scripts/lib/protoc.sh
ensure_protoc
features=(--features etcd,dynamodb)

# The targets beyond the host's x86_64 glibc build. zig links each cross
# build; an aarch64 glibc build names glibc 2.17 (manylinux2014's floor).
if [ $all = 1 ]; then
  cross_linux=(aarch64-unknown-linux-gnu x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
  # The host's own glibc artifacts (CLI, C libraries, Node addon) linked
  # again by zig against glibc 2.17: the host's toolchain links against the
  # build machine's glibc (2.34 symbols on Debian 12).
  relink=("$host")
  cross_macos=(x86_64-apple-darwin aarch64-apple-darwin)
  # (named by what the stubs are written from: a changed list is a new
  # SDKROOT, which rebuilds and links the macOS builds again)
  macos_sdk=$builds/macos-sdk-$(cat scripts/lib/macos/frameworks.py scripts/lib/macos/imports.txt | sha256sum | cut -c1-12)
  rm -rf "$builds"/macos-sdk* && python3 scripts/lib/macos/frameworks.py "$macos_sdk"
else
  cross_linux=()
  relink=()
  cross_macos=()
fi
zig_target() { # the Rust target with zig's glibc floor
  case $1 in
    *-linux-gnu) echo "$1.2.17" ;;
    *) echo "$1" ;;
  esac
}
add_target() {
  rustup target list --installed | grep -qx "$1" || rustup target add "$1"
}
# $1 = a Rust target -> ARCH-linux-ABI (the names of the tarballs)
linux_name() {
  local arch=${1%%-*} abi=${1##*-}
  echo "$arch-linux-$abi"
}
# musl_libc TARGET FILE: zig links a musl shared object against its libc
# stub, `libc.so`; musl's loader takes any libc name as itself, but the
# musllinux policy (auditwheel, and Alpine's own builds) names the loader,
# libc.musl-ARCH.so.1: FILE is made to need that.
musl_libc() {
  [[ $1 == *-musl ]] || return 0
  if readelf -d "$2" | grep -q 'NEEDED.*\[libc\.so\]'; then
    patchelf --replace-needed libc.so "libc.musl-${1%%-*}.so.1" "$2"
  fi
}
# The oldest macOS each macOS build runs on (maturin names the wheels by
# it; zig would take its newest). x86_64: 10.14, for security-framework's
# default `OSX_10_14` (rustls-native-certs): its names are missing on
# older ones. arm64: 11.0, the first.
macos_floor() {
  case $1 in
    x86_64-apple-darwin) echo 10.14 ;;
    aarch64-apple-darwin) echo 11.0 ;;
  esac
}
# cross_build TARGET static|dynamic CARGO-ARGS...: a release build for
# TARGET, linked by zig (cargo zigbuild); sets cross_out to its output
# folder. A `dynamic` build (the Node addon, the C shared library) of a
# musl target turns crt-static off (a shared library cannot hold libc),
# in a folder of its own, so the static CLI's build is not redone. A
# macOS build links against the framework stubs ($macos_sdk).
cross_build() {
  local target=$1 kind=$2 dir=$builds/cross flags=()
  shift 2
  if [ "$kind" = dynamic ] && [[ $target == *-musl ]]; then
    dir=$builds/cross-dynamic
    flags=(RUSTFLAGS="-C target-feature=-crt-static")
  fi
  [[ $target != *-apple-darwin ]] || flags=(SDKROOT="$macos_sdk" MACOSX_DEPLOYMENT_TARGET="$(macos_floor "$target")")
  add_target "$target"
  env "${flags[@]}" CARGO_TARGET_DIR="$dir" PATH="$venv/bin:$PATH" cargo zigbuild --locked --release \
    "${features[@]}" --target "$(zig_target "$target")" "$@"
  cross_out=$dir/$target/release
}

# ---- the CLI ---------------------------------------------------------------
step "grantid CLI"
CARGO_TARGET_DIR=$builds/release cargo build --locked --release -p grantid-cli "${features[@]}" --target "$host"
cli=$stage/grantid-cli-$version-x86_64-linux-gnu
mkdir -p "$cli/completions" "$cli/doc"
cp "$builds/release/$host/release/grantid" "$cli/"
cp "${licences[@]}" cli/README.md "$cli/"
cp docs/CLI.md docs/DESIGN.md "$cli/doc/"
for shell in bash zsh fish; do "$cli/grantid" completions "$shell" > "$cli/completions/grantid.$shell"; done
tar -C "$stage" -czf "$dist/$(basename "$cli").tar.gz" "$(basename "$cli")"

# ---- the CLI for other Linux targets, linked by zig (musl: static) -------
# (the package tier builds the arm64 musl one; --all the host's again, for
# glibc 2.17; the completions are the host build's, the same text.)
cli_cross=("${relink[@]}" "${cross_linux[@]}")
[ $all = 1 ] || cli_cross=(aarch64-unknown-linux-musl)
for target in "${cli_cross[@]}"; do
  step "grantid CLI for $target (cargo zigbuild)"
  cross_build "$target" static -p grantid-cli
  cross=$stage/grantid-cli-$version-$(linux_name "$target")
  if [ "$cross" != "$cli" ]; then
    mkdir -p "$cross"
    cp -r "$cli/completions" "$cli/doc" "$cli"/LICENSE-* "$cli/README.md" "$cross/"
  fi
  cp "$cross_out/grantid" "$cross/"
  tar -C "$stage" -czf "$dist/$(basename "$cross").tar.gz" "$(basename "$cross")"
done

# ---- C: cargo-c installs the libraries, header and pkg-config file ---------
step "C libraries (cargo cinstall)"
c=$stage/grantid-c-$version-x86_64-linux-gnu
"$cinstall" cinstall --locked --release -p grantid-ffi "${features[@]}" --target "$host" \
  --target-dir "$builds/cargo-c" --destdir "$stage/c-destdir" --prefix /usr --libdir lib
mv "$stage/c-destdir/usr" "$c"
# The profile drops debug info from what rustc links; an archive also holds
# the standard library's objects, which ship with theirs.
strip --strip-debug "$c/lib/libgrantid.a"
# The tarball unpacks anywhere: the .pc file finds its prefix from its own
# place (pkg-config's ${pcfiledir}) instead of cargo-c's /usr.
sed -i 's|^prefix=.*|prefix=${pcfiledir}/../..|' "$c/lib/pkgconfig/grantid.pc"
mkdir -p "$c/share/doc/grantid"
cp "${licences[@]}" "$c/"
cp ffi-c/README.md docs/DESIGN.md "$c/share/doc/grantid/"
tar -C "$stage" -czf "$dist/$(basename "$c").tar.gz" "$(basename "$c")"

# ---- C for other Linux targets (--all): the host's tree (header, pkg-config
# file, docs) with each target's libraries, cargo-c's names and soname ------
if [ ${#cross_linux[@]} -gt 0 ]; then
  command -v patchelf >/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends patchelf; }
  components=$(rustup component list --installed)
  grep -q '^llvm-tools' <<<"$components" || rustup component add llvm-tools
  llvm_strip=$(ls "$(rustc --print sysroot)"/lib/rustlib/*/bin/llvm-strip)
  soname=$(readelf -d "$c/lib/libgrantid.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  real=$(basename "$(readlink -f "$c/lib/libgrantid.so")")
fi
# (cargo-c's tree, kept apart: the host's own tarball is made again.)
[ ${#cross_linux[@]} -eq 0 ] || { rm -rf "$stage/c-template" && cp -a "$c" "$stage/c-template"; }
for target in "${relink[@]}" "${cross_linux[@]}"; do
  step "C libraries for $target (cargo zigbuild)"
  cross_build "$target" dynamic -p grantid-ffi
  out=$cross_out
  cc=$stage/grantid-c-$version-$(linux_name "$target")
  rm -rf "$cc" && cp -a "$stage/c-template" "$cc"
  cp "$out/libgrantid_ffi.so" "$cc/lib/$real"
  patchelf --set-soname "$soname" "$cc/lib/$real"
  musl_libc "$target" "$cc/lib/$real"
  cp "$out/libgrantid_ffi.a" "$cc/lib/libgrantid.a"
  "$llvm_strip" --strip-debug "$cc/lib/libgrantid.a"
  # What a static link needs besides the archive, as rustc says for this
  # target (cargo-c's Libs.private for the host).
  probe=(--crate-type staticlib --crate-name probe --target "$target" --print native-static-libs)
  [[ $target != *-musl ]] || probe+=(-C target-feature=-crt-static)
  native=$(echo | rustc "${probe[@]}" -o "$stage/probe.a" - 2>&1 | sed -n 's/.*native-static-libs: //p')
  [ -n "$native" ] || { echo "rustc named no native libraries for $target" >&2; exit 1; }
  sed -i "s|^Libs.private:.*|Libs.private: $native|" "$cc/lib/pkgconfig/grantid.pc"
  tar -C "$stage" -czf "$dist/$(basename "$cc").tar.gz" "$(basename "$cc")"
done

# ---- Python: abi3 wheel for glibc 2.17+ (zig links it) and the sdist -------
step "Python wheel and sdist (maturin --zig, manylinux2014)"
CARGO_TARGET_DIR=$builds/python PATH="$venv/bin:$PATH" maturin build --locked --release --zig --compatibility manylinux2014 \
  "${features[@]}" --target "$host" -m bindings-python/Cargo.toml -o "$dist"
CARGO_TARGET_DIR=$builds/python PATH="$venv/bin:$PATH" maturin sdist -m bindings-python/Cargo.toml -o "$dist"
for target in "${cross_linux[@]}"; do
  case $target in
    *-linux-gnu) tag=(--compatibility manylinux2014) ;;
    *) tag=(--compatibility musllinux_1_2) ;;
  esac
  step "Python wheel for $target (maturin --zig ${tag[*]})"
  add_target "$target"
  CARGO_TARGET_DIR=$builds/python PATH="$venv/bin:$PATH" maturin build --locked --release --zig "${tag[@]}" \
    "${features[@]}" --target "$target" -m bindings-python/Cargo.toml -o "$dist"
  if [[ $target == *-musl ]]; then
    # The extension names musl's loader (musl_libc); `wheel pack` writes
    # the wheel again with its RECORD hashed anew, under the same name.
    whl=$(ls "$dist/grantid-$version-cp39-abi3-musllinux_1_2_${target%%-*}.whl")
    rm -rf "$stage/wheel" && "$venv/bin/wheel" unpack -d "$stage/wheel" "$whl" >/dev/null
    for so in "$stage"/wheel/*/grantid/*.so; do musl_libc "$target" "$so"; done
    "$venv/bin/wheel" pack -d "$dist" "$stage"/wheel/*/ >/dev/null
  fi
done
for target in "${cross_macos[@]}"; do
  step "Python wheel for $target (maturin --zig, framework stubs)"
  add_target "$target"
  SDKROOT=$macos_sdk MACOSX_DEPLOYMENT_TARGET=$(macos_floor "$target") CARGO_TARGET_DIR=$builds/python \
    PATH="$venv/bin:$PATH" maturin build --locked --release --zig \
    "${features[@]}" --target "$target" -m bindings-python/Cargo.toml -o "$dist"
done

# ---- Node: napi-rs per-platform packages ------------------------------------
step "Node packages (napi-rs per-platform layout)"
napi=$root/bindings-node/node_modules/.bin/napi
# The main package: the loader, types and authorities (their SQL and Lua
# are in the addon); its binaries come from the platform packages named in
# optionalDependencies.
main=$stage/node/grantid
mkdir -p "$main"
(cd bindings-node && tar -cf - index.js index.mjs index.d.ts authorities.js authorities.mjs \
   authorities.d.ts README.md package.json) | tar -xf - -C "$main"
cp "${licences[@]}" "$main/"
# napi keeps the platform packages (npm/) and the build output (out/) inside
# the package folder; neither is in its "files", so neither is packed.
(cd "$main" && "$napi" create-npm-dirs --npm-dir npm)
built=()
for target in $(node -p "require('./bindings-node/package.json').napi.targets.join(' ')"); do
  if [ "$target" = "$host" ]; then
    # (It writes the loader and the types, compared below.)
    (cd bindings-node && "$napi" build --platform --release "${features[@]}" --target "$target" --target-dir "$builds/release" \
       --output-dir "$main/out" --js index.js --dts index.d.ts)
  fi
  if [ $all = 1 ]; then
    # The addon linked by zig (for the host, again, against glibc 2.17),
    # in the C libraries' build (what `napi build -x` runs, without its own
    # copy of the build), named as napi names it.
    cross_build "$target" dynamic -p grantid-node
    arch=${target%%-*}
    case $arch in x86_64) arch=x64 ;; aarch64) arch=arm64 ;; esac
    mkdir -p "$main/out"
    if [[ $target == *-apple-darwin ]]; then
      cp "$cross_out/libgrantid_node.dylib" "$main/out/grantid.darwin-$arch.node"
    else
      cp "$cross_out/libgrantid_node.so" "$main/out/grantid.linux-$arch-${target##*-}.node"
      musl_libc "$target" "$main/out/grantid.linux-$arch-${target##*-}.node"
    fi
  elif [ "$target" != "$host" ]; then
    echo "skipped Node target $target: package.sh --all builds it"
    continue
  fi
  built+=("$target")
done
cmp bindings-node/index.js "$main/out/index.js" || {
  echo "bindings-node/index.js differs from what napi generates: rebuild and commit it" >&2; exit 1; }
# Each built addon into its platform package (`napi artifacts` does this
# only when every listed target was built).
for addon in "$main"/out/grantid.*.node; do
  platform=${addon##*/grantid.}
  cp "$addon" "$main/npm/${platform%.node}/"
done
node - "$main/package.json" "$main/npm" "$version" "${built[@]}" <<'EOF'
// The main package ships no binary and names one optional dependency per
// built platform package (what `napi pre-publish` adds before publishing).
const fs = require('node:fs')
const path = require('node:path')
const [file, npmDir, version, ...built] = process.argv.slice(2)
const pkg = JSON.parse(fs.readFileSync(file, 'utf8'))
pkg.files = pkg.files.filter((f) => f !== '*.node')
delete pkg.scripts
delete pkg.devDependencies
pkg.optionalDependencies = {}
for (const dir of fs.readdirSync(npmDir)) {
  const sub = JSON.parse(fs.readFileSync(path.join(npmDir, dir, 'package.json'), 'utf8'))
  const hasBinary = fs.readdirSync(path.join(npmDir, dir)).some((f) => f.endsWith('.node'))
  if (hasBinary) pkg.optionalDependencies[sub.name] = version
}
if (Object.keys(pkg.optionalDependencies).length !== built.length) {
  throw new Error(`built ${built} but found binaries for ${Object.keys(pkg.optionalDependencies)}`)
}
fs.writeFileSync(file, JSON.stringify(pkg, null, 2) + '\n')
EOF
npm pack --silent --pack-destination "$dist" "$main" >/dev/null
for dir in "$main"/npm/*/; do
  if ls "$dir"*.node >/dev/null 2>&1; then
    cp "${licences[@]}" "$dir"
    node -e "const f=process.argv[1],p=require(f);p.files=[...p.files,...process.argv.slice(2)];require('fs').writeFileSync(f,JSON.stringify(p,null,2)+'\n')" \
      "$dir/package.json" "${licences[@]}"
    npm pack --silent --pack-destination "$dist" "$dir" >/dev/null
  fi
done

(cd "$dist" && sha256sum grantid* > SHA256SUMS)
step "dist/"
ls -l "$dist"
