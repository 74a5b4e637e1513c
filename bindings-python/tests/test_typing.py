"""The typing sample runs (mypy checks it in scripts/test.d/50-python.sh)."""

import typing_sample


def test_typing_sample_runs() -> None:
    typing_sample.main()
