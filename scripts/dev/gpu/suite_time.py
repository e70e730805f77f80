#!/usr/bin/env python3
"""Where a suite's time went, job by job, from its journal: a markdown table.

    scripts/dev/gpu/suite_time.py JOURNAL [JOURNAL ...]

Columns (seconds): the job's wall time; its search, split into the probes' model builds
(prepare) and their training steps, the rest being worker starts and the search's own work;
the timed runs in fresh processes (the confirm at the searched batch and any step-down), split
into the last one's warm-up and timed window; then "floor", the least this job could take
under the suite's rules with the step times it measured (below); then the probes, step-downs
and whether the losses were finite. The last row sums the columns.

The floor: a search of three probes (its first, the one at the answer and its cheapest failure:
an exact answer needs the fit and the failure seen), then one timed run in a fresh process
(its start and build as measured, the first step with its autotuning, the warm-up steps that
may still autotune or build plans for a new shape, `warmup.autotune_steps`: two, or a step's
whole cycle of batch shapes and one more, and a window of max(3, the step's representative
cycle) steps and at least 5 s). What a job takes above it is probes beyond three, warm-up
steps beyond those, step-downs and longer windows.
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


def floor_seconds(j):
    """The least the job could take under the suite's rules (module docstring); 0 if unknown."""
    s = j.get("search") or {}
    probes = s.get("probes") or []
    top = [p for p in probes if p.get("fits") and p.get("batch") == s.get("max_batch")]
    failures = [p["seconds"] for p in probes if not p.get("fits")]
    warm = (j.get("warmup") or {}).get("step_time_ms") or []
    timing = j.get("timing") or {}
    confirm = j.get("confirm") or []
    if not probes or not top or not warm or not confirm or not timing.get("steps"):
        return 0.0
    search = probes[0]["seconds"] + top[0]["seconds"] + (min(failures) if failures else 0.0)
    step = timing["step_time_ms_mean"] / 1000.0
    start = confirm[-1]["seconds"] - j["warmup"]["seconds"] - timing["window_seconds"]
    info = j.get("batch_info") or {}
    cycle = info.get("representative_steps") or info.get("batches") or 1
    cycle = cycle if isinstance(cycle, int) else 1
    warm_steps = max(2, (j.get("warmup") or {}).get("autotune_steps") or 2)
    return (search + start + warm[0] / 1000.0 + (warm_steps - 1) * step
            + max(max(cycle, 3) * step, 5.0))


def main(paths):
    head = ["job", "status", "wall", "search", "probe builds", "probe steps", "timed runs",
            "warm-up", "window", "floor", "probes", "timed runs (batches)", "losses finite"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    total = [0.0] * 8
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
                floor_seconds(j),
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
