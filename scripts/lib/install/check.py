"""Checks an installed grantid wheel, as a user's program would use it.

Usage: python check.py STATE_FILE VECTORS_JSON COUNT [ETCD_URL]

COUNT IDs from `file:STATE_FILE` (distinct and rising), every encode and
decode of the conformance vectors, the package's metadata and licence
files, a typed error; with ETCD_URL, 1,000 IDs from etcd too. Run by the
package tier on the host's wheel and by the platforms tier on each Linux
wheel, in an interpreter of the wheel's own platform.
"""

import importlib.metadata as md
import json
import platform
import sys

import grantid

state, vectors_path, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
etcd = sys.argv[4] if len(sys.argv) > 4 else ""

meta = md.metadata("grantid")
assert meta["License-Expression"] == "MIT OR Apache-2.0", meta["License-Expression"]
files = {str(f) for f in md.files("grantid") or []}
assert any(f.endswith("LICENSE-MIT") for f in files), files
assert any(f.endswith("LICENSE-APACHE") for f in files), files

with grantid.Generator("file:" + state, namespace="install-v1") as gen:
    ids = [gen.next_id() for _ in range(3)] + gen.next_ids(count - 3)
    assert len(set(ids)) == len(ids) == count and ids == sorted(ids)
    assert gen.decode(ids[0]).worker == gen.stats()["worker"]
    assert int(gen.next_id_str()) > ids[-1]

checked = 0
with open(vectors_path) as f:
    vectors = json.load(f)
# The vectors name a layout's fields as Layout's keywords do.
fields = ("timestamp_bits", "worker_bits", "sequence_bits", "datacenter_bits", "epoch_ms", "tick_ms")
for spec in vectors["layouts"]:
    layout = grantid.Layout(**{k: spec[k] for k in fields})
    for v in spec["encode"]:
        want = int(v["id"])
        assert layout.encode(v["timestamp"], v["worker"], v["sequence"]) == want, (spec["name"], v)
        d = layout.decode(want)
        assert (d.timestamp, d.worker, d.sequence) == (v["timestamp"], v["worker"], v["sequence"]), v
        checked += 1
assert checked > 0

try:
    grantid.Layout(60, 10, 12)
except grantid.InvalidArgument as e:
    assert e.code == "INVALID_ARGUMENT"
else:
    raise AssertionError("an 82-bit layout was accepted")

if etcd:
    with grantid.Generator(etcd, namespace="install-etcd-v1") as gen:
        from_etcd = gen.next_ids(1000)
        assert len(set(from_etcd)) == 1000

print(
    f"python: ok on {platform.machine()} ({platform.python_implementation()} {platform.python_version()}): "
    f"{len(ids)} IDs, {checked} conformance vectors" + (f", 1000 IDs from {etcd}" if etcd else "")
)
