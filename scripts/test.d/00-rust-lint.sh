# Formatting, lints, the one build graph and the feature matrix.
cargo fmt --all -- --check
# The workspace with every feature (the build every later step reuses).
cargo clippy --workspace --all-targets $GRANTID_FEATURES --locked -- -D warnings
# The repository is self-contained: relative links and docs/*.md mentions resolve.
python3 scripts/lib/check_links.py --self-test
python3 scripts/lib/check_links.py
# Every negative control of the deployment fuzzer still applies to this
# tree (scripts/deploy-fuzz-controls.sh runs them; a control that no longer
# applies proves nothing).
for patch in scripts/deploy-fuzz-controls/*.patch; do
  git apply --check "$patch" || { echo "$patch no longer applies: write it again on this tree" >&2; exit 1; }
done
# One build graph: workspace-hack (cargo-hakari) is up to date and every
# member but the core's own (.config/hakari.toml) depends on it, so a `-p`
# build compiles third-party crates with the workspace's features.
cargo_tool cargo-hakari 0.9.39
"$TOOL" hakari generate --diff
"$TOOL" hakari manage-deps --dry-run
"$TOOL" hakari verify
# The feature matrix: every crate with features builds, without warnings,
# with no features, with each feature alone, and with all of them (a
# backend that reaches into another's module fails here).
cargo_tool cargo-hack 0.6.46
"$TOOL" hack clippy --workspace --each-feature --locked -- -D warnings
