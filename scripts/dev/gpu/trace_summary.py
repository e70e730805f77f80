#!/usr/bin/env python3
"""Where a profiled step's device time goes, from a Chrome trace that gpubench wrote with
GPUBENCH_PROFILE_TRACE=PATH (libtorch's Kineto profiler: CPU operators and CUDA kernels).

    python3 scripts/dev/gpu/trace_summary.py TRACE.json [--top 25] [--steps N]

Prints the profiled span, the device's busy time within it (the union of kernel, copy and set
intervals: well below the span means the GPU waits on the host), the kernels with the most
device time, and the same time grouped by the operator that launched each kernel (the kernel's
"External id" matched to the innermost CPU operator with that id). Needs only the standard
library."""
import argparse
import collections
import json
import sys

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def load(path):
    with open(path) as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def union_length(intervals):
    total, end = 0.0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--steps", type=int, default=0, help="steps profiled (per-step times)")
    args = parser.parse_args()
    events = [e for e in load(args.trace) if e.get("ph") == "X" and "dur" in e]
    device = [e for e in events if e.get("cat") in DEVICE_CATS]
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    if not device:
        print("trace_summary: no device events in the trace (was it a CUDA run?)")
        return 1
    start = min(e["ts"] for e in events)
    stop = max(e["ts"] + e["dur"] for e in events)
    span = stop - start
    busy = union_length([(e["ts"], e["ts"] + e["dur"]) for e in device])
    kernel_sum = sum(e["dur"] for e in device)
    per = f" ({span / args.steps / 1e3:.1f} ms a step)" if args.steps else ""
    print(f"span {span / 1e3:.1f} ms{per}; device busy {busy / 1e3:.1f} ms "
          f"({100 * busy / span:.0f}% of the span); {len(device)} device events, "
          f"sum {kernel_sum / 1e3:.1f} ms")

    by_kernel = collections.defaultdict(lambda: [0.0, 0])
    for e in device:
        entry = by_kernel[e["name"]]
        entry[0] += e["dur"]
        entry[1] += 1
    print(f"\ntop kernels by device time (of {kernel_sum / 1e3:.1f} ms)")
    print(f"{'ms':>9} {'%':>5} {'count':>6}  kernel")
    for name, (dur, count) in sorted(by_kernel.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"{dur / 1e3:9.2f} {100 * dur / kernel_sum:5.1f} {count:6d}  {name[:140]}")

    # The innermost operator of each external id: the one with the shortest duration.
    op_of = {}
    for e in ops:
        ext = e.get("args", {}).get("External id")
        if ext is None:
            continue
        best = op_of.get(ext)
        if best is None or e["dur"] < best["dur"]:
            op_of[ext] = e
    by_op = collections.defaultdict(lambda: [0.0, 0, ""])
    for e in device:
        ext = e.get("args", {}).get("External id")
        op = op_of.get(ext)
        name = op["name"] if op else "(no operator)"
        shapes = ""
        if op:
            dims = op.get("args", {}).get("Input Dims")
            if dims:
                shapes = str(dims)[:90]
        entry = by_op[name]
        entry[0] += e["dur"]
        entry[1] += 1
        if not entry[2]:
            entry[2] = shapes
    print(f"\ndevice time by launching operator")
    print(f"{'ms':>9} {'%':>5} {'kernels':>7}  operator  (input dims of one call)")
    for name, (dur, count, shapes) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"{dur / 1e3:9.2f} {100 * dur / kernel_sum:5.1f} {count:7d}  {name}  {shapes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
