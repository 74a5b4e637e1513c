"""Torture worker in Python: one grantid generator on the PostgreSQL
authority (by URL), forking children mid-run.

Each process (the parent, and every child of ``os.fork()``) records its IDs
in its own record file, in the format of torture/src/idfile.rs: the magic
``GTIDREC1``, the incarnation and the pid (little-endian u64 each), then 8
bytes little-endian per ID. A child's generator re-activates on its first
call (fresh incarnation, new worker, new grant), so the child writes its
header after that first call. The harness starts this script with the venv's
Python and proves every file like the Rust workers' files.

    fork_worker.py --url URL --namespace NS --dir DIR --stop-file PATH
                   --status PATH [--rate N] [--fork-every-s S] [--child-life-s S]
"""

import os
import struct
import sys
import time

import grantid

MAGIC = b"GTIDREC1"
CHUNK = 64


def parse(argv):
    args = {}
    it = iter(argv)
    for key in it:
        if not key.startswith("--"):
            raise SystemExit(f"fork_worker.py: unexpected argument {key!r}")
        args[key[2:]] = next(it)
    return args


def write_status(path, values):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for k, v in sorted(values.items()):
            f.write(f"{k}={int(v)}\n")
    os.replace(tmp, path)


def record(gen, directory, tag, rate, until, stop_file, counts):
    """Issues and records IDs until `until` (monotonic) or the stop file."""
    first = None
    while first is None:
        try:
            first = gen.next_ids(CHUNK)
        except grantid.GrantIdError as e:
            counts["err_" + type(e).__name__.lower()] = counts.get("err_" + type(e).__name__.lower(), 0) + 1
            time.sleep(0.005)
    inc = gen.stats()["incarnation"]
    path = os.path.join(directory, f"py-{tag}-{os.getpid()}.ids")
    with open(path, "xb", buffering=0) as f:
        f.write(MAGIC + struct.pack("<QQ", inc, os.getpid()))
        buf = bytearray(struct.pack(f"<{CHUNK}Q", *first))
        made = CHUNK
        start = last_flush = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= until or os.path.exists(stop_file):
                break
            try:
                ids = gen.next_ids(CHUNK)
                buf += struct.pack(f"<{CHUNK}Q", *ids)
                made += CHUNK
            except grantid.GrantIdError as e:
                key = "err_" + type(e).__name__.lower()
                counts[key] = counts.get(key, 0) + 1
                time.sleep(0.001)
            if len(buf) >= 32768 or now - last_flush >= 0.05:
                f.write(buf)
                buf.clear()
                last_flush = now
            due = start + made / rate
            if due > now:
                time.sleep(min(due - now, 0.05))
            counts["ids"] = made
        f.write(buf)
    return made


def main():
    a = parse(sys.argv[1:])
    url, ns, directory = a["url"], a["namespace"], a["dir"]
    stop_file, status = a["stop-file"], a["status"]
    rate = int(a.get("rate", "20000"))
    fork_every = float(a.get("fork-every-s", "3"))
    child_life = float(a.get("child-life-s", "2"))
    layout = grantid.Layout(timestamp_bits=41, worker_bits=4, sequence_bits=12)
    gen = grantid.Generator(
        url,
        namespace=ns,
        layout=layout,
        grant_duration_ms=200,
        horizon_ms=400,
        startup_timeout=60.0,
    )
    counts = {"ids": 0}
    forks = children_ok = children_failed = 0
    parent_ids = 0
    children = set()
    segment = 0
    while not os.path.exists(stop_file):
        # The parent records in segments between forks (one file per segment).
        until = time.monotonic() + fork_every
        parent_ids += record(gen, directory, f"parent{segment}", rate, until, stop_file, counts)
        segment += 1
        if os.path.exists(stop_file):
            break
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                child_counts = {"ids": 0}
                record(gen, directory, "child", rate, time.monotonic() + child_life, stop_file, child_counts)
            except BaseException as e:  # noqa: BLE001 - reported via the exit code
                sys.stderr.write(f"fork_worker child {os.getpid()}: {e!r}\n")
                code = 1
            os._exit(code)
        forks += 1
        children.add(pid)
        for child in list(children):
            done, code = os.waitpid(child, os.WNOHANG)
            if done:
                children.discard(child)
                if code == 0:
                    children_ok += 1
                else:
                    children_failed += 1
        st = gen.stats()
        write_status(status, {"ids": parent_ids, "forks": forks, "children_ok": children_ok,
                              "children_failed": children_failed, "worker": st["worker"] or 0,
                              "lease_losses": st["lease_losses"],
                              "uncertain_retries": st["uncertain_retries"],
                              **{k: v for k, v in counts.items() if k.startswith("err_")}})
    for child in children:
        _, code = os.waitpid(child, 0)
        if code == 0:
            children_ok += 1
        else:
            children_failed += 1
    gen.close()
    write_status(status, {"ids": parent_ids, "forks": forks, "children_ok": children_ok,
                          "children_failed": children_failed, "done": 1,
                          **{k: v for k, v in counts.items() if k.startswith("err_")}})


if __name__ == "__main__":
    main()
