# arm64_sysroot: Debian's arm64 packages unpacked into one folder (once per
# machine, under $GRANTID_TOOLS): the C library, libstdc++ (Node) and
# CPython 3.11 with its standard library. qemu-aarch64-static runs arm64
# programs against it (`-L`), as an arm64 Debian would. Sets ARM64_SYSROOT.
# Sourced by scripts/platforms.d/.
arm64_sysroot() {
  local root=$GRANTID_TOOLS/arm64-sysroot-bookworm
  if [ ! -x "$root/usr/bin/python3.11" ]; then
    echo "building the arm64 sysroot in $root (once per machine)"
    dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
    apt-get update -qq
    local debs
    debs=$(mktemp -d)
    (cd "$debs" && apt-get download -q \
      libc6:arm64 libgcc-s1:arm64 libstdc++6:arm64 libcrypt1:arm64 zlib1g:arm64 \
      python3.11-minimal:arm64 libpython3.11-minimal:arm64 libpython3.11-stdlib:arm64 \
      libexpat1:arm64 libffi8:arm64 libssl3:arm64 libbz2-1.0:arm64 liblzma5:arm64 \
      libsqlite3-0:arm64 libuuid1:arm64 libncursesw6:arm64 libtinfo6:arm64 \
      libreadline8:arm64 libdb5.3:arm64 libnsl2:arm64 libtirpc3:arm64 libgssapi-krb5-2:arm64 \
      libkrb5-3:arm64 libk5crypto3:arm64 libkrb5support0:arm64 libcom-err2:arm64 \
      libkeyutils1:arm64 >/dev/null)
    rm -rf "$root.tmp" && mkdir -p "$root.tmp"
    for deb in "$debs"/*.deb; do dpkg -x "$deb" "$root.tmp"; done
    rm -rf "$debs" "$root" && mv "$root.tmp" "$root"
  fi
  ARM64_SYSROOT=$root
}
