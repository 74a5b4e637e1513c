//! loom models live in `tests/`; run them with `scripts/loom.sh`.
