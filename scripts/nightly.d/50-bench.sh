# The benchmarks on release builds, with their tables (scripts/bench.sh,
# docs/BENCHMARKS.md); nothing here asserts a timing.
scripts/bench.sh
