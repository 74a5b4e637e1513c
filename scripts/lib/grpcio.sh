# The official Python gRPC client for the tests of `grantid serve`: sourced,
# never run.
#
# grpcio_client DIR: makes sure the venv $CARGO_TARGET_DIR/grpcio-venv holds
# server/tests/python/requirements.txt (built again when that file changes),
# writes the stubs of proto/grantid/v1/grantid.proto and of the service
# design's proto/hispeeddesign/idgen/v1/id_generator.proto into DIR (import
# them as `grantid.v1` and `hispeeddesign.idgen.v1`), and sets GRPCIO_PYTHON
# to the venv's python.
grpcio_client() {
  local stubs=$1 venv=$CARGO_TARGET_DIR/grpcio-venv req=server/tests/python/requirements.txt
  if ! cmp -s "$req" "$venv/requirements.txt" 2>/dev/null; then
    rm -rf "$venv"
    "${GRANTID_PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
    cp "$req" "$venv/requirements.txt"
  fi
  mkdir -p "$stubs/grantid/v1" "$stubs/hispeeddesign/idgen/v1"
  touch "$stubs/grantid/__init__.py" "$stubs/grantid/v1/__init__.py" "$stubs/hispeeddesign/__init__.py" \
    "$stubs/hispeeddesign/idgen/__init__.py" "$stubs/hispeeddesign/idgen/v1/__init__.py"
  "$venv/bin/python" -m grpc_tools.protoc -I proto --python_out="$stubs" \
    --grpc_python_out="$stubs" proto/grantid/v1/grantid.proto proto/hispeeddesign/idgen/v1/id_generator.proto
  GRPCIO_PYTHON=$venv/bin/python
}
