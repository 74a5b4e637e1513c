# Unit, integration, doc and conformance tests of every Rust crate.
cargo test --workspace --locked
