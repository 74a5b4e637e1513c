# Every artifact of the matrix read as a user's loader would
# (scripts/lib/install/inspect_artifacts.py): its machine, no debug info, glibc 2.17
# at most for the glibc builds (the host's own x86_64 builds report
# theirs), libc.musl for the musl libraries, static musl CLIs, and each
# wheel's tag as `auditwheel show` finds it; for macOS (built, not run)
# the Mach-O architecture and floor, the entry point, and every library and
# import bound to a part of macOS. Prints the artifact table of the README's
# "Packages".
command -v readelf >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends binutils; }
venv=$GRANTID_TOOLS/package-venv
"$venv/bin/auditwheel" --version 2>/dev/null | grep -q '6.8.2' \
  || "$venv/bin/pip" install -q --disable-pip-version-check auditwheel==6.8.2
rustup component list --installed | grep -q '^llvm-tools' || rustup component add llvm-tools
llvm_bin=$(dirname "$(ls "$(rustc --print sysroot)"/lib/rustlib/*/bin/llvm-objdump)")
"$venv/bin/python" scripts/lib/install/inspect_artifacts.py "$CARGO_TARGET_DIR/platforms/dist" "$venv/bin/auditwheel" "$llvm_bin"
