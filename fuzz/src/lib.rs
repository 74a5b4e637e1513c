//! Fuzz harnesses live in `tests/`; see docs/RELIABILITY.md.
