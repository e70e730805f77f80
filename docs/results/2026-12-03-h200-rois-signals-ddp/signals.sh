#!/usr/bin/env bash
# Issue 12's GPU signals in one call (about 3 min on an H200; at most 5 by the timeouts):
#   docs/results/2026-12-03-h200-rois-signals-ddp/signals.sh GPUBENCH_BINARY OUTDIR
# 1. `info` with the dense-matmul peak probe (fp32, tf32, bf16, fp16), text and JSON;
# 2. bert-base fp32 at a fixed batch of 512, three timed runs in fresh processes (--repeat 3):
#    the NVML fields (clocks, power limit, default clock, throttle shares), the energy counter
#    (joules per step, units per joule), the allocator counters, TFLOP/s and share of peak, the
#    spread of the three runs;
# 3. bert-base's search under a 24 GiB cap (a memory tier): the cap less what the process holds
#    outside the allocator;
# 4. summary.txt with all of it, and the report with an H200 price.
set -uo pipefail
BIN=${1:?usage: signals.sh GPUBENCH_BINARY OUTDIR}
OUT=${2:?usage: signals.sh GPUBENCH_BINARY OUTDIR}
mkdir -p "$OUT"
S="$OUT/summary.txt"
: > "$S"
t0=$(date +%s)
timeout 60 "$BIN" info --json > "$OUT/info.json" 2> "$OUT/info.err"; echo "info: exit $?" >> "$S"
timeout 15 "$BIN" info --no-peak >> "$S" 2>&1
timeout 160 "$BIN" run --gpu 0 --model bert-base --precision fp32 --batch 512 --repeat 3 \
  --json "$OUT/bert-base-repeat3.json" > "$OUT/repeat.txt" 2> "$OUT/repeat.log"
echo "repeat run: exit $? after $(( $(date +%s) - t0 )) s" >> "$S"
timeout 60 "$BIN" run --gpu 0 --model bert-base --memory-tiers 24 \
  --json "$OUT/bert-base-tier24.json" > "$OUT/tier.txt" 2> "$OUT/tier.log"
echo "tier search: exit $? after $(( $(date +%s) - t0 )) s" >> "$S"
python3 - "$OUT" >> "$S" 2>&1 <<'PY'
import json, sys, os
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None
info = load("info.json")
if info:
    for d in info["devices"]:
        if "matmul_peak_tflops" in d:
            print("peak TFLOP/s", d["name"], d["matmul_peak_tflops"])
doc = load("bert-base-repeat3.json")
if doc:
    j = doc["jobs"][0]
    print("status", j["status"], "|", j["message"])
    print("throughput", j["throughput"], "stats", j.get("throughput_stats"))
    for r in j.get("repeats", []):
        print("  repeat", r["status"], r["throughput"], "steps", r["steps"], "window", r["window_seconds"])
    c = j.get("clocks", {})
    for k in ["available", "samples", "sm_clock_mhz", "sm_clock_max_mhz", "sm_clock_default_mhz",
              "power_w", "power_limit_w", "temperature_c_max", "throttle_reasons",
              "throttle_reason_share", "power_capped", "throttled", "throttle_note", "energy"]:
        print("clocks." + k, c.get(k, "MISSING"))
    print("compute", j.get("compute", "MISSING"))
    m = j.get("memory", {})
    for k in ["allocator_counters_warmup", "allocator_counters_window", "outside_allocator_bytes"]:
        print("memory." + k, m.get(k, "MISSING"))
tier = load("bert-base-tier24.json")
if tier:
    j = tier["jobs"][0]
    print("tier 24 GiB:", j["status"], "max batch", (j.get("search") or {}).get("max_batch"),
          "memory.cap", j.get("memory", {}).get("cap", "MISSING"))
PY
"$BIN" report "$OUT"/bert-base-repeat3.json "$OUT"/bert-base-tier24.json --price H200=30000 \
  > "$OUT/report.txt" 2>&1
echo "report: exit $?" >> "$S"
cat "$OUT/report.txt" >> "$S"
echo "total $(( $(date +%s) - t0 )) s" >> "$S"
cat "$S"
