# The container image's build places, shared by scripts/image.sh and its
# test (scripts/package.d/20-image.sh): sourced, never run.
#
# image_builds: the package tier's place ($GRANTID_PACKAGE_TARGET, as in
# scripts/package.sh); the musl build, the staged build context and the
# image storage live under it.
image_builds=${GRANTID_PACKAGE_TARGET:-$CARGO_TARGET_DIR/package}
image_name=localhost/grantid
# buildah_ ARGS...: buildah on a storage of the project's own (vfs, no
# overlay mount needed), never the machine's default store.
buildah_() {
  buildah --root "$image_builds/containers/storage" --runroot "$image_builds/containers/run" \
    --storage-driver vfs "$@"
}
