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
# Every artifact carries LICENSE-MIT and LICENSE-APACHE; release builds have
# no debug info (the `release` profile of Cargo.toml). Tools are installed
# once per machine and cached under $GRANTID_TOOLS (scripts/lib/env.sh,
# outside target/): cargo-c 0.10.24 (a debug build, see below), a venv with
# maturin, PyPI's ziglang (the manylinux2014 link) and cargo-zigbuild (the
# cross builds); @napi-rs/cli comes
# from bindings-node's lockfile. scripts/package.d/90-install.sh installs the
# results as a user would.
set -euo pipefail
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
   || ! "$venv/bin/cargo-zigbuild" --version 2>/dev/null | grep -q '^cargo-zigbuild 0.24.1$'; then
  step "installing maturin 1.16.0, ziglang and cargo-zigbuild into $venv (once)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check maturin==1.16.0 ziglang==0.17.1 cargo-zigbuild==0.24.1
fi
if [ ! -x bindings-node/node_modules/.bin/napi ]; then
  (cd bindings-node && npm ci --no-audit --no-fund --loglevel=error)
fi

# Every artifact carries every authority: the `etcd` feature on (protoc is
# needed to build it, never to run it).
. scripts/lib/protoc.sh
ensure_protoc
features=(--features etcd)

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

# ---- the CLI for other Linux targets: static musl binaries, linked by zig --
# (GRANTID_CROSS_CLI names the Rust targets; the completions are the host
# build's, the same text.)
for target in ${GRANTID_CROSS_CLI-aarch64-unknown-linux-musl}; do
  step "grantid CLI for $target (cargo zigbuild)"
  rustup target list --installed | grep -qx "$target" || rustup target add "$target"
  CARGO_TARGET_DIR=$builds/cross PATH="$venv/bin:$PATH" cargo zigbuild --locked --release -p grantid-cli \
    "${features[@]}" --target "$target"
  arch=${target%%-*} abi=${target##*-}
  cross=$stage/grantid-cli-$version-$arch-linux-$abi
  mkdir -p "$cross"
  cp -r "$cli/completions" "$cli/doc" "$cli"/LICENSE-* "$cli/README.md" "$cross/"
  cp "$builds/cross/$target/release/grantid" "$cross/"
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

# ---- Python: abi3 wheel for glibc 2.17+ (zig links it) and the sdist -------
step "Python wheel and sdist (maturin --zig, manylinux2014)"
CARGO_TARGET_DIR=$builds/python PATH="$venv/bin:$PATH" maturin build --locked --release --zig --compatibility manylinux2014 \
  "${features[@]}" --target "$host" -m bindings-python/Cargo.toml -o "$dist"
CARGO_TARGET_DIR=$builds/python PATH="$venv/bin:$PATH" maturin sdist -m bindings-python/Cargo.toml -o "$dist"

# ---- Node: napi-rs per-platform packages ------------------------------------
step "Node packages (napi-rs per-platform layout)"
napi=$root/bindings-node/node_modules/.bin/napi
# The main package: the loader, types and authorities; its binaries come
# from the platform packages named in optionalDependencies.
main=$stage/node/grantid
mkdir -p "$main"
(cd bindings-node && node scripts/copy-authority.js)
(cd bindings-node && tar -cf - index.js index.mjs index.d.ts authorities.js authorities.mjs \
   authorities.d.ts authority README.md package.json) | tar -xf - -C "$main"
cp "${licences[@]}" "$main/"
# napi keeps the platform packages (npm/) and the build output (out/) inside
# the package folder; neither is in its "files", so neither is packed.
(cd "$main" && "$napi" create-npm-dirs --npm-dir npm)
built=()
for target in $(node -p "require('./bindings-node/package.json').napi.targets.join(' ')"); do
  if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    echo "skipped Node target $target: its Rust standard library is not installed here (rustup target add $target)"
    continue
  fi
  if [ "$target" != "$host" ]; then
    echo "skipped Node target $target: no cross linker is set up on this machine"
    continue
  fi
  (cd bindings-node && "$napi" build --platform --release "${features[@]}" --target "$target" --target-dir "$builds/release" --output-dir "$main/out" \
     --js index.js --dts index.d.ts)
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
