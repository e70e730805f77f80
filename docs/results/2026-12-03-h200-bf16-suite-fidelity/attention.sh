#!/usr/bin/env bash
# On the GPU machine (issue 17, item 2): bert-base, bert-finetune and mt-dnn with
# model.attention stored and fused (docs/attention.md), in fp32 and amp-bf16: the max-batch
# search, then throughput at the batch found (a `gpubench run` per job, through jobs.sh).
#
#   docs/results/2026-12-03-h200-bf16-suite-fidelity/attention.sh GPUBENCH OUTDIR [MODEL...]
#                                (MODEL: default all three, 12 jobs)
#   PRECISIONS="amp-bf16 fp32"   the precisions, in this order (default both)
#
# Bounded: a short warm-up and window (attention-{stored,fused}.yaml), each phase killed after
# 120 s, and no job starts after DEADLINE_S seconds (default 420), so one call stays under
# about 10 minutes; a job not run is listed as skipped. Jobs already in OUTDIR are kept, so a
# second call with the same OUTDIR finishes what the first left: e.g. one call with
# `bert-base bert-finetune` (8 jobs, about 6-7 min) and one with `mt-dnn` (4 jobs, about 5-6
# min). Pairs run together (stored, then fused, per model and precision), so a cut run still
# compares like with like.
# Writes OUTDIR/summary.txt (every job in OUTDIR so far): max batch, throughput, peak reserved
# memory, and the fused/stored ratios.
set -uo pipefail
bin=${1:?usage: attention.sh GPUBENCH OUTDIR}
out=${2:?usage: attention.sh GPUBENCH OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
shift 2
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(bert-base bert-finetune mt-dnn)
deadline=${DEADLINE_S:-420}
mkdir -p "$out"
start=$(date +%s)
for m in "${models[@]}"; do
  for p in ${PRECISIONS:-amp-bf16 fp32}; do
    for a in stored fused; do
      if [ $(( $(date +%s) - start )) -ge "$deadline" ]; then
        echo "$m-$p-attention-$a: skipped (deadline ${deadline} s)" >> "$out/walltimes.txt"
        continue
      fi
      "$here/../../../scripts/dev/gpu/jobs.sh" "$bin" "$out" "$m:$p:$here/attention-$a.yaml" \
        -- --timeout 120 > /dev/null 2>&1
    done
  done
done
python3 - "$out" "$(( $(date +%s) - start ))" <<'PY' | tee "$out/summary.txt"
import json, os, sys
out, wall = sys.argv[1], sys.argv[2]
G = 2.0 ** 30
print(f"attention stored vs fused (docs/attention.md); wall {wall} s")
print(f"{'model':14} {'precision':9} {'attention':9} {'status':8} {'max batch':>9} "
      f"{'throughput':>11} {'peak GiB':>8}")
rows = {}
for m in ("bert-base", "bert-finetune", "mt-dnn"):
    for p in ("amp-bf16", "fp32"):
        for a in ("stored", "fused"):
            path = os.path.join(out, f"{m}-{p}-attention-{a}.json")
            try:
                job = json.load(open(path))["jobs"][0]
            except (OSError, ValueError, IndexError, KeyError):
                print(f"{m:14} {p:9} {a:9} {'missing':8}")
                continue
            batch = (job.get("search") or {}).get("max_batch")
            thr = job.get("throughput") or 0
            attention = ((job.get("config") or {}).get("model") or {}).get("attention")
            rows[(m, p, a)] = (batch, thr)
            print(f"{m:14} {p:9} {str(attention):9} {job['status']:8} {str(batch):>9} "
                  f"{thr:11.1f} {(job.get('peak_memory_bytes') or 0) / G:8.1f}"
                  + (f"  {job['message']}" if job.get("message") else ""))
print()
for m in ("bert-base", "bert-finetune", "mt-dnn"):
    for p in ("amp-bf16", "fp32"):
        s, f = rows.get((m, p, "stored")), rows.get((m, p, "fused"))
        if s and f and s[0] and s[1]:
            print(f"{m:14} {p:9} fused/stored: max batch x{(f[0] or 0) / s[0]:.2f}, "
                  f"throughput x{f[1] / s[1]:.2f}")
PY
cat "$out/walltimes.txt"
