# The whole platform matrix (scripts/package.sh --all) into
# $CARGO_TARGET_DIR/platforms/dist: the package tier's artifacts, and the
# wheels, npm packages, C and CLI tarballs of aarch64 glibc, x86_64 musl and
# aarch64 musl Linux, each cross-linked by zig.
GRANTID_DIST=$CARGO_TARGET_DIR/platforms/dist ./scripts/package.sh --all
