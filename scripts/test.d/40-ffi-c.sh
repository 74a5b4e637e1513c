# C ABI (ffi-c/): header drift, C tests under AddressSanitizer + UBSan
# against the static and the shared library, the example, a valgrind run.
# See ffi-c/Makefile; budget: well under 3 minutes on 2 cores.
need=()
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v make >/dev/null || need+=(make)
command -v valgrind >/dev/null || need+=(valgrind)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
  else
    echo "ffi-c tests need: ${need[*]} (install them, e.g. with apt-get)" >&2
    exit 1
  fi
fi
make -C ffi-c -j2 tests
make -C ffi-c check
