# Formatting and lints of the whole workspace.
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The repository is self-contained: relative links and docs/*.md mentions resolve.
python3 scripts/lib/check_links.py --self-test
python3 scripts/lib/check_links.py
