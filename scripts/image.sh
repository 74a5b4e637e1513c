#!/usr/bin/env bash
# Builds the container image of `grantid serve` and the CLI
# (deploy/Containerfile) into dist/ (or $GRANTID_DIST):
#
#   grantid-image-VERSION.oci.tar   OCI archive, image localhost/grantid:VERSION
#                                   (`podman load -i`, `docker load -i`)
#
# 1. `grantid` (crate grantid-cli, every feature) is built for
#    x86_64-unknown-linux-musl, in release, under $GRANTID_PACKAGE_TARGET/musl
#    (the package tier's place, scripts/package.sh). ring's C code is
#    compiled by Debian's musl-gcc (musl-tools): the cc crate picks it for
#    the musl target by itself, and rustc links with its own musl, so the
#    build needs no linker setup.
# 2. The binary is checked static (no program interpreter, no shared
#    library needed) and stripped of its symbols.
# 3. buildah copies it, with the machine's CA bundle and the licences, into
#    an image FROM scratch (no compiler and no network in the image build),
#    in a storage of its own under the same place (vfs driver, chroot
#    isolation: no daemon, no user namespace needed).
# Installs with apt-get what it needs (musl-tools, buildah, protoc, ...).
# scripts/package.d/20-image.sh runs it and tests the image.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/env.sh
. scripts/lib/protoc.sh
. scripts/lib/image.sh
dist=$(mkdir -p "${GRANTID_DIST:-dist}" && cd "${GRANTID_DIST:-dist}" && pwd)
musl=x86_64-unknown-linux-musl
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
step() { echo "--- image: $*"; }

need=()
command -v musl-gcc >/dev/null || need+=(musl-tools)
command -v buildah >/dev/null || need+=(buildah)
command -v file >/dev/null || need+=(file)
command -v readelf >/dev/null || need+=(binutils)
[ -s /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
if [ ${#need[@]} -gt 0 ]; then
  step "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
ensure_protoc
rustup target list --installed | grep -qx "$musl" || rustup target add "$musl"

step "grantid for $musl"
CARGO_TARGET_DIR=$image_builds/musl cargo build --locked --release -p grantid-cli --all-features --target "$musl"

context=$image_builds/image-context
rm -rf "$context" && mkdir -p "$context/state" "$context/root/etc/ssl/certs" \
  "$context/root/usr/share/doc/grantid" "$context/root/var/lib"
cp "$image_builds/musl/$musl/release/grantid" "$context/grantid"
strip --strip-all "$context/grantid"
if readelf -l "$context/grantid" | grep -q 'INTERP' || readelf -d "$context/grantid" | grep -q '(NEEDED)'; then
  echo "$context/grantid is not static:" >&2
  file "$context/grantid" >&2
  readelf -d "$context/grantid" >&2
  exit 1
fi
file "$context/grantid" | grep -q ', stripped' || { file "$context/grantid" >&2; exit 1; }
file "$context/grantid"
cp /etc/ssl/certs/ca-certificates.crt "$context/root/etc/ssl/certs/"
cp LICENSE-MIT LICENSE-APACHE "$context/root/usr/share/doc/grantid/"
find "$context" -type d -exec chmod 0755 {} +
find "$context" -type f -exec chmod 0644 {} +
chmod 0755 "$context/grantid"

step "image $image_name:$version"
buildah_ rmi -f "$image_name:$version" >/dev/null 2>&1 || true
buildah_ bud --isolation chroot --quiet -f "$PWD/deploy/Containerfile" \
  --build-arg VERSION="$version" \
  --build-arg REVISION="$(git rev-parse HEAD 2>/dev/null || true)" \
  --build-arg SOURCE="${GRANTID_IMAGE_SOURCE:-$(git remote get-url origin 2>/dev/null || true)}" \
  -t "$image_name:$version" "$context"
archive=$dist/grantid-image-$version.oci.tar
rm -f "$archive"
buildah_ push --quiet "$image_name:$version" "oci-archive:$archive:$image_name:$version"
# Earlier builds left untagged: the storage keeps one image.
buildah_ rmi --prune >/dev/null 2>&1 || true
ls -l "$archive"
