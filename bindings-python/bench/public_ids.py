"""grantid.PublicIds per call, beside sqids and hashids (docs/PUBLIC_IDS.md).

    python bindings-python/bench/public_ids.py [--rounds N] [--round-ms MS]

Needs `grantid` and, for the peers, `pip install -r
bindings-python/bench/requirements.txt`; a peer that is not installed is
reported as such. Each row maps 4,096 IDs spread over [2^40, 2^63) (so
the cycle walk's length varies as in use) in a list comprehension; prints
the median ns per call of interleaved rounds and its ratio to `int(x)` in
the same loop, the cost of calling a C function that does next to
nothing.
"""

from __future__ import annotations

import argparse
import random
import sys
from typing import Any, Callable, List, Optional, Tuple

import grantid
from bench import measure

Row = Tuple[str, Callable[[], object], int]


N = 4096


def each(f: Callable[[Any], object], inputs: List[Any]) -> Callable[[], object]:
    return lambda: [f(x) for x in inputs]


def peers(ids: List[int]) -> List[Tuple[str, Optional[Callable[[], object]], str]]:
    out: List[Tuple[str, Optional[Callable[[], object]], str]] = []
    try:
        import sqids

        sq = sqids.Sqids()
        texts = [sq.encode([i]) for i in ids]
        out.append(("sqids encode([id])", each(lambda i: sq.encode([i]), ids), ""))
        out.append(("sqids decode(text)", each(sq.decode, texts), ""))
    except ImportError as e:
        out.append(("sqids", None, str(e)))
    try:
        import hashids

        hs = hashids.Hashids(salt="public-ids-bench")
        htexts = [hs.encode(i) for i in ids]
        out.append(("hashids encode(id)", each(hs.encode, ids), ""))
        out.append(("hashids decode(text)", each(hs.decode, htexts), ""))
    except ImportError as e:
        out.append(("hashids", None, str(e)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--round-ms", type=float, default=100.0)
    args = parser.parse_args()

    rng = random.Random(15)
    ids = [rng.randrange(1 << 40, 1 << 63) for _ in range(N)]
    pub = grantid.PublicIds(b"public-ids-bench")
    encoded = [pub.encode(i) for i in ids]
    texts = [pub.encode_str(i) for i in ids]
    rows: List[Row] = [
        ("int(x) (call floor)", each(int, ids), N),
        ("PublicIds.encode(id)", each(pub.encode, ids), N),
        ("PublicIds.decode(public)", each(pub.decode, encoded), N),
        ("PublicIds.encode_str(id)", each(pub.encode_str, ids), N),
        ("PublicIds.decode_str(text)", each(pub.decode_str, texts), N),
    ]
    missing = []
    for name, f, why in peers(ids):
        if f is None:
            missing.append((name, why))
        else:
            rows.append((name, f, N))
    ns = measure(rows, args.rounds, args.round_ms)
    floor = ns[0]
    print(f"Python {sys.version.split()[0]}, {args.rounds} rounds, median ns per call")
    print("| call | ns/call | ratio to int() |")
    print("|---|---:|---:|")
    for (name, _, _), x in zip(rows, ns):
        print(f"| {name} | {x:.1f} | {x / floor:.2f}x |")
    for name, why in missing:
        print(f"| {name} | not installed ({why}) | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
