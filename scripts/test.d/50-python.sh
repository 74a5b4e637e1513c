# Python package: builds the wheel with `pip install ./bindings-python` in a
# fresh venv under target/, then runs the pytest suite and `mypy --strict`
# on the typing sample. Sourced by scripts/test.sh from the repository root.
venv=target/python-venv
python=${GRANTID_PYTHON:-python3}
if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
  apt-get update -qq && apt-get install -y -qq python3-venv
fi
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check \
  maturin==1.16.0 pytest mypy 'psycopg[binary]>=3.1' 'redis>=4.2'
# The extension is built in release mode, as users get it; no debug info
# keeps the link short. --no-build-isolation uses the maturin pinned above
# (the backend runs `maturin` from PATH).
PATH="$PWD/$venv/bin:$PATH" CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/python} \
  "$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation ./bindings-python
# The C library beside the extension (test_c_and_python_logging.py loads
# it with ctypes); the debug build that step 10 / 40 already made.
cargo build -q -p grantid-ffi --locked
ffi_dir=${CARGO_TARGET_DIR:-target}
case "$ffi_dir" in /*) ;; *) ffi_dir="$PWD/$ffi_dir" ;; esac
export GRANTID_FFI_LIB="$ffi_dir/debug/libgrantid_ffi.so"
(
  cd bindings-python/tests
  # From the tests folder, so `import grantid` is the installed package.
  ../../"$venv"/bin/python -m pytest -q -p no:cacheprovider .
  ../../"$venv"/bin/python -m mypy --strict --no-incremental typing_sample.py
)
