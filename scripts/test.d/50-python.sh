# Python package: the pytest suite and `mypy --strict` on the typing sample,
# in a venv under target/, on the extension step 10 built (grantid-python's
# cdylib, the dev profile) beside the package's Python sources, as
# `maturin develop` would lay them out. (maturin would compile pyo3 again
# with its own environment, and the workspace's next build again after
# that.) The release wheel is built once, by the package tier, and
# installed there as a user would.
venv=$CARGO_TARGET_DIR/python-venv
python=${GRANTID_PYTHON:-python3}
if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
  apt-get update -qq && apt-get install -y -qq python3-venv
fi
req=bindings-python/tests/requirements.txt
if ! cmp -s "$req" "$venv/requirements.txt" 2>/dev/null; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
  cp "$req" "$venv/requirements.txt"
fi
[ -f "$GRANTID_BUILD/lib_grantid.so" ] || cargo build -q --workspace $GRANTID_FEATURES --locked
pkg=$CARGO_TARGET_DIR/python-dev
rm -rf "$pkg" && mkdir -p "$pkg"
cp -r bindings-python/python/grantid "$pkg/"
rm -rf "$pkg"/grantid/_grantid*.so "$pkg"/grantid/__pycache__
cp "$GRANTID_BUILD/lib_grantid.so" "$pkg/grantid/_grantid.abi3.so"
"$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
  | { read -r site; echo "$pkg" >"$site/grantid-dev.pth"; }
# The C library beside the extension (test_c_and_python_logging.py loads
# it with ctypes), and the CLI for the grpc:// tests: step 10's builds.
export GRANTID_FFI_LIB="$GRANTID_BUILD/libgrantid_ffi.so"
export GRANTID_BIN="$GRANTID_BUILD/grantid"
(
  cd bindings-python/tests
  # From the tests folder, so `import grantid` is the installed package.
  "$venv/bin/python" -m pytest -q -p no:cacheprovider .
  "$venv/bin/python" -m mypy --strict --no-incremental typing_sample.py
)
