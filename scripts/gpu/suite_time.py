#!/usr/bin/env python3
"""Where a suite's time went, job by job, from its journal: a markdown table.

    scripts/gpu/suite_time.py JOURNAL [JOURNAL ...]

Columns (seconds): the job's wall time; its search, split into the probes' model builds
(prepare) and their training steps, the rest being worker starts and the search's own work;
the timed runs in fresh processes (the confirm at the searched batch and any step-down), split
into the last one's warm-up and timed window; then the probes, step-downs and whether the
losses were finite. The last row sums the columns.
"""
import json
import math
import sys


def rows(path):
    for line in open(path):
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a torn last line
        job = record.get("job")
        if job:
            yield job


def finite(losses):
    values = [v for v in (losses or {}).values()]
    return bool(values) and all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def main(paths):
    head = ["job", "status", "wall", "search", "probe builds", "probe steps", "timed runs",
            "warm-up", "window", "probes", "timed runs (batches)", "losses finite"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    total = [0.0] * 7
    for path in paths:
        for j in rows(path):
            s = j.get("search") or {}
            probes = s.get("probes") or []
            confirm = j.get("confirm") or []
            cols = [
                j.get("wall_seconds") or 0.0,
                s.get("seconds") or 0.0,
                sum(p.get("prepare_seconds", 0.0) for p in probes),
                sum(p.get("steps_seconds", 0.0) for p in probes),
                sum(c.get("seconds", 0.0) for c in confirm),
                (j.get("warmup") or {}).get("seconds") or 0.0,
                (j.get("timing") or {}).get("window_seconds") or 0.0,
            ]
            total = [a + b for a, b in zip(total, cols)]
            runs = ", ".join(f"{c['batch']} {c['status']}" for c in confirm)
            both = finite(j.get("losses_start")) and finite(j.get("losses"))
            print(f"| {j['model']} {j['precision']} | {j['status']} | "
                  + " | ".join(f"{c:.0f}" for c in cols)
                  + f" | {s.get('probe_count', len(probes))} | {runs} | {'yes' if both else 'NO'} |")
    print("| **sum** | | " + " | ".join(f"**{c:.0f}**" for c in total) + " | | | |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
