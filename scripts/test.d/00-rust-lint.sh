# Formatting and lints of the whole workspace.
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The repository is self-contained: relative links and docs/*.md mentions resolve.
python3 scripts/lib/check_links.py --self-test
python3 scripts/lib/check_links.py
# The etcd authority is behind the `etcd` feature (it needs protoc): linted
# with it where protoc is or can be installed.
. scripts/lib/protoc.sh
if ensure_protoc; then
  cargo clippy -p grantid-authority -p grantid-cli --features grantid-authority/etcd,grantid-cli/etcd \
    --all-targets --locked -- -D warnings
else
  echo "etcd feature not linted: no protoc"
fi
