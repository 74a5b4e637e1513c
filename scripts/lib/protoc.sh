# protoc for the `etcd` cargo feature (etcd-client's build script compiles
# etcd's .proto files with it): sourced, never run. A plain build needs no
# protoc (docs/reference/etcd.md, "Setup").
#
# ensure_protoc installs Debian's protobuf-compiler with apt when protoc is
# missing (as root); it fails when protoc is still missing.
ensure_protoc() {
  command -v protoc >/dev/null 2>&1 && return 0
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "protoc: installing protobuf-compiler with apt-get"
    (DEBIAN_FRONTEND=noninteractive apt-get install -y protobuf-compiler >/dev/null 2>&1 \
      || { apt-get update >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y protobuf-compiler >/dev/null 2>&1; }) || true
  fi
  command -v protoc >/dev/null 2>&1 || { echo "protoc: missing (apt-get install protobuf-compiler)" >&2; return 1; }
}
