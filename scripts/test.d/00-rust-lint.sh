# Formatting and lints of the whole workspace.
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
