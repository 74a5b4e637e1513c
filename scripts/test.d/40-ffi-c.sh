# C ABI (ffi-c/): the C tests under AddressSanitizer + UBSan against the
# static and the shared library, the example, a valgrind run (ffi-c/Makefile;
# the header's drift is a Rust test of step 10). The libraries are step 10's
# build: only grantid-ffi is compiled again, to print the native libraries
# a static link needs.
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
make -C ffi-c -j2 tests CARGO_FEATURES="$GRANTID_FEATURES"
make -C ffi-c check CARGO_FEATURES="$GRANTID_FEATURES"
