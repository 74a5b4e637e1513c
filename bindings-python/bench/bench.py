"""grantid's Python calls against the ID generators Python users pick instead.

    python bindings-python/bench/bench.py [--rounds N] [--round-ms MS]

Needs `grantid` (pip install ./bindings-python) and, for the peers,
`pip install -r bindings-python/bench/requirements.txt`; a peer that is not
installed is reported as such. Prints ns per ID (median of interleaved
rounds; each loop is timeit's, so its small per-iteration cost is in every
row alike) and each row's ratio to `int()`, the cost of calling a C function
that does nothing, and to grantid's `next_id`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import timeit
from typing import Callable, List, Optional, Tuple

import grantid


def peers() -> List[Tuple[str, Optional[Callable[[], object]], int, str]]:
    """(name, function, IDs per call, why missing) of every peer."""
    out: List[Tuple[str, Optional[Callable[[], object]], int, str]] = []
    try:
        import uuid_utils

        out.append(("uuid_utils.uuid7()", uuid_utils.uuid7, 1, ""))
    except ImportError as e:
        out.append(("uuid_utils.uuid7()", None, 1, str(e)))
    try:
        from sonyflake_turbo import SonyFlake

        # Sonyflake issues 256 IDs per 10 ms per machine ID; 1,024 machine IDs
        # (26 M IDs/s) keep its capacity from binding, as grantid's does here.
        sf = SonyFlake(*range(1024))
        out.append(("sonyflake-turbo next(sf)", sf.__next__, 1, ""))
        out.append(("sonyflake-turbo sf(1000), per ID", lambda: sf(1000), 1000, ""))
    except ImportError as e:
        out.append(("sonyflake-turbo next(sf)", None, 1, str(e)))
    try:
        from snowflake import SnowflakeGenerator

        gen = SnowflakeGenerator(1)
        out.append(("snowflake-id next(gen)", gen.__next__, 1, ""))
    except ImportError as e:
        out.append(("snowflake-id next(gen)", None, 1, str(e)))
    return out


def measure(
    rows: List[Tuple[str, Callable[[], object], int]], rounds: int, round_ms: float
) -> List[float]:
    timers = [timeit.Timer("f()", globals={"f": f}) for _, f, _ in rows]
    numbers = []
    for t in timers:
        n, _ = t.autorange()
        # autorange aims at 0.2 s; scale to the round length asked for.
        numbers.append(max(1, int(n * round_ms / 200)))
    samples: List[List[float]] = [[] for _ in rows]
    for _ in range(rounds):
        # Interleaved, so load from elsewhere on the machine falls alike.
        for i, t in enumerate(timers):
            secs = t.timeit(numbers[i])
            samples[i].append(secs * 1e9 / (numbers[i] * rows[i][2]))
    return [statistics.median(s) for s in samples]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--round-ms", type=float, default=100.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        # Capacity does not bind: 22 sequence bits (4.2 M IDs per ms).
        gen = grantid.Generator(
            "file:" + os.path.join(tmp, "state.json"),
            namespace="bench-unbound",
            layout=grantid.Layout(41, 0, 22),
            max_drift_ms=1000,
        )
        with gen:
            rows: List[Tuple[str, Callable[[], object], int]] = [
                ("int() (call floor)", int, 1),
                ("grantid next_id()", gen.next_id, 1),
                ("grantid next_id_str()", gen.next_id_str, 1),
                ("grantid next_ids(1000), per ID", lambda: gen.next_ids(1000), 1000),
                ("grantid next_ids_array(1000), per ID", lambda: gen.next_ids_array(1000), 1000),
            ]
            missing = []
            for name, f, per, why in peers():
                if f is None:
                    missing.append((name, why))
                else:
                    rows.append((name, f, per))
            ns = measure(rows, args.rounds, args.round_ms)

    floor = ns[0]
    base = ns[1]
    print(f"Python {sys.version.split()[0]}, {args.rounds} rounds, median ns per ID")
    print("| call | ns/ID | ratio to int() | ratio to next_id |")
    print("|---|---:|---:|---:|")
    for (name, _, _), x in zip(rows, ns):
        print(f"| {name} | {x:.1f} | {x / floor:.2f}x | {x / base:.2f}x |")
    for name, why in missing:
        print(f"| {name} | not installed ({why}) | - | - |")
    by_name = dict((name, x) for (name, _, _), x in zip(rows, ns))
    print()
    print(f"next_id / int() floor: {base / floor:.2f}x (target <= 1.5x)")
    if "uuid_utils.uuid7()" in by_name:
        print(
            f"uuid_utils.uuid7() / next_id: {by_name['uuid_utils.uuid7()'] / base:.2f}x (target >= 2.5x)"
        )
    print(
        f"next_ids(1000): {by_name['grantid next_ids(1000), per ID']:.1f} ns per ID (target <= 15 ns)"
    )
    print(
        f"next_ids_array(1000): {by_name['grantid next_ids_array(1000), per ID']:.2f} ns per ID (target <= 2 ns)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
