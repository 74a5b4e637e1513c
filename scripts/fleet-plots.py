#!/usr/bin/env python3
"""Plots of churn runs (docs/FLEET.md): one SVG per run directory.

Long runs are drawn as means over windows of several samples.

    scripts/fleet-plots.py OUT_DIR RUN_DIR [RUN_DIR ...]

Each RUN_DIR holds the series.csv and summary.json grantid-churn wrote
(--out). The SVG, OUT_DIR/<label>.svg, has four panels over time: starts per
second, worker slots (in use, waiting for a killed process's lease to
expire, released but cooling, free), time to first grant (p50, p99) and
authority load (grants answered per second, PostgreSQL commits per second).
It also prints one Markdown table of the runs (the table of docs/FLEET.md).
Needs matplotlib (scripts/churn-scenarios.sh installs it in a venv).
"""
import csv
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

# Stable SVG output: no random ids, no date.
matplotlib.rcParams["svg.hashsalt"] = "grantid-fleet"
matplotlib.rcParams["svg.fonttype"] = "none"


def num(v):
    return float(v) if v not in ("", None) else None


def mean_row(rows):
    out = {}
    for k in rows[0]:
        vals = [num(r[k]) for r in rows if num(r[k]) is not None]
        out[k] = str(sum(vals) / len(vals)) if vals else ""
    return out


def plot(out_dir: Path, run: Path) -> Path:
    summary = json.loads((run / "summary.json").read_text())
    rows = list(csv.DictReader((run / "series.csv").open()))
    # Long runs: means over windows, so the SVG stays small (at most ~300
    # points per line).
    step = max(1, len(rows) // 300)
    if step > 1:
        rows = [mean_row(rows[i : i + step]) for i in range(0, len(rows), step)]
    t = [float(r["t_s"]) for r in rows]
    col = lambda k: [num(r[k]) for r in rows]  # noqa: E731
    fig, ax = plt.subplots(4, 1, figsize=(9, 11), sharex=True)
    title = (
        f"{summary['label']}: {summary['target_live']} live on {summary['worker_slots']} slots, "
        f"grant {summary['grant_ms']} ms, horizon {summary['horizon_ms']} ms, "
        f"grace {summary['lease_grace_ms']} ms"
    )
    fig.suptitle(title, fontsize=10)
    ax[0].plot(t, col("starts_per_s"), label="starts/s")
    ax[0].plot(t, col("live"), label="live processes", alpha=0.7)
    ax[0].set_ylabel("per s / count")
    ax[0].legend(loc="upper right", fontsize=8)
    slots = [col(k) for k in ("in_use", "waiting_expiry", "cooling", "free")]
    if all(v is not None for s in slots for v in s):
        ax[1].stackplot(
            t,
            *slots,
            labels=["in use", "waiting for expiry (killed)", "cooling (released)", "free"],
        )
    ax[1].set_ylabel("worker slots")
    ax[1].legend(loc="lower right", fontsize=8)
    ax[2].plot(t, col("ttfg_p50_ms"), label="time to first grant p50")
    ax[2].plot(t, col("ttfg_p99_ms"), label="p99")
    ax[2].set_ylabel("ms")
    ax[2].legend(loc="upper right", fontsize=8)
    ax[3].plot(t, col("grants_per_s"), label="grants answered/s")
    if any(v is not None for v in col("pg_xact_per_s")):
        ax[3].plot(t, col("pg_xact_per_s"), label="PostgreSQL commits/s", alpha=0.7)
    ax[3].set_ylabel("per s")
    ax[3].set_xlabel("seconds since the start")
    ax[3].legend(loc="upper right", fontsize=8)
    for a in ax:
        a.grid(alpha=0.3)
    out = out_dir / f"{summary['label']}.svg"
    fig.savefig(out, metadata={"Date": None})
    plt.close(fig)
    return out


def fmt(v, digits=0):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def table(runs) -> str:
    head = (
        "| run | authority | slots | live target / mean | grant / horizon ms | starts | "
        "starts/s sustained | first grant p50 / p99 ms | slots in use / waiting / cooling / free "
        "(mean) | grants/s | PG commits/s / WAL flushes/s | PG connections | killed reused: "
        "kill to grant p50 / p99 / max ms | refused (wait + none) / while free | uncertain | "
        "IDs / duplicates | stranded | tool CPU cores |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for run in runs:
        s = json.loads((Path(run) / "summary.json").read_text())
        led = s["ledger"]
        t = s["ttfg_steady_ms"] or {}
        r = led["reuse_after_kill_ms"] or {}
        m = s["slots_mean_steady"]
        auth = s["authorities"][0].split("://")[0]
        stranded = s["stranded_seen_in_samples"] + s["leased_after_all_leases_ended"]
        lines.append(
            "| "
            + " | ".join(
                [
                    s["label"],
                    auth,
                    fmt(s["worker_slots"]),
                    f"{fmt(s['target_live'])} / {fmt(s['live_mean_steady'])}",
                    f"{fmt(s['grant_ms'])} / {fmt(s['horizon_ms'])}",
                    fmt(s["starts"]),
                    fmt(s["starts_per_s_sustained"], 1),
                    f"{fmt(t.get('p50'), 1)} / {fmt(t.get('p99'), 1)}",
                    " / ".join(fmt(m[k]) for k in ("in_use", "waiting_expiry", "cooling", "free")),
                    fmt(s["grants_per_s_steady"]),
                    f"{fmt(s['pg_xact_per_s_steady'])} / {fmt(s['pg_wal_sync_per_s_steady'])}",
                    fmt(s["pg_connections_max"]),
                    f"{fmt(led['killed_reused'])}: {fmt(r.get('p50'))} / {fmt(r.get('p99'))} / {fmt(r.get('max'))}",
                    f"{fmt(led['refused_wait'] + led['refused_none_free'])} / {fmt(led['refused_while_free'])}",
                    fmt(led["uncertain"]),
                    f"{fmt(s['ids'])} / {fmt(s['duplicate_ids'])}",
                    fmt(stranded),
                    fmt(s["cpu_cores_mean"], 2),
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    for run in sys.argv[2:]:
        print(plot(out_dir, Path(run)))
    print(table(sys.argv[2:]))


if __name__ == "__main__":
    main()
