# Every Rust test once, every feature on: unit, integration, doc and
# conformance tests, the authorities on the throwaway PostgreSQL, Redis,
# MariaDB and etcd, the CLI and the service (cli/tests/serve.rs), the
# fuzz harnesses' short form, and each bench once in test mode (no timing;
# the gRPC load bench's rows at 0.2 s each, step 70 runs the criterion
# suites for real). The binaries and examples later steps run are built
# here too.
cargo build --workspace --bins --examples $GRANTID_FEATURES --locked
# The executables, listed for later steps (test_exe in scripts/lib/env.sh).
cargo test --workspace --all-targets $GRANTID_FEATURES --locked --no-run \
  --message-format=json-render-diagnostics >"$CARGO_TARGET_DIR/test-executables.json"
cargo test --workspace --all-targets $GRANTID_FEATURES --locked
cargo test --workspace --doc $GRANTID_FEATURES --locked
