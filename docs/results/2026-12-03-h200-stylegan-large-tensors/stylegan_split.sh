#!/usr/bin/env bash
# Issue 18 on the GPU machine: does splitting convolutions whose tensors pass 2^31 elements
# (models/conv_gradfix.h, GPUBENCH_CONV_SPLIT_ELEMENTS) keep stylegan's fp32 R1 pass finite at
# batch 132, where it exploded with D unchanged (docs/results/2026-12-03-h200-stylegan-r1-deeplab-
# heuristics)? Builds nothing; about 4 minutes.
#
#   docs/results/2026-12-03-h200-stylegan-large-tensors/stylegan_split.sh GPUBENCH_BINARY OUTDIR
#
# Cases, each one `gpubench run` at a fixed batch (short window):
#   split     amp-fp16, batch 132, R1 pass fp32, cuDNN autotuning off, the first 6 iterations'
#             losses traced (GPUBENCH_TRACE_ACTIVATIONS=6): the split on (the default)
#   nosplit   the same with GPUBENCH_CONV_SPLIT_ELEMENTS=0 (the tree before the split)
#   bf16      amp-bf16 at batch 212 (the suite's searched batch), the suite's settings: the
#             split's cost where it now also applies (the suite recorded 31.96 images/s)
# Writes OUTDIR/summary.txt: per case status, the losses at both ends of the window, skipped
# updates, throughput, and the traced per-iteration d and r1 losses.
set -uo pipefail
bin=${1:?usage: stylegan_split.sh GPUBENCH_BINARY OUTDIR}
out=${2:?usage: stylegan_split.sh GPUBENCH_BINARY OUTDIR}
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"
short=(--warmup-steps 3 --min-steps 3 --min-seconds 3 --max-seconds 5)

# one NAME LIMIT_S PRECISION BATCH [flags...]: the run, then its summary lines.
one() {
  local name=$1 limit=$2 precision=$3 batch=$4 s rc
  shift 4
  s=$(date +%s)
  timeout -k 10 "$limit" "$bin" run --gpu 0 --model stylegan --precision "$precision" \
    --batch "$batch" --timeout "$limit" "$@" -f none \
    --journal "$out/$name.jsonl" --json "$out/$name.json" > /dev/null 2> "$out/$name.log"
  rc=$?
  python3 - "$out/$name.json" "$name" "$rc" "$(( $(date +%s) - s ))" >> "$summary" <<'PY'
import json, sys
path, name, rc, wall = sys.argv[1:]
try:
    j = json.load(open(path))["jobs"][0]
except Exception:
    print(f"{name}: no record (exit {rc}, {wall} s)")
    sys.exit()
skips = [f"{u['name']} skipped {u.get('updates_skipped')}/{u.get('updates_checked')}"
         for u in (j.get("runtime") or {}).get("updaters", [])]
fmt = lambda d: {k: float(f"{v:.4g}") for k, v in d.items()} if isinstance(d, dict) else d
print(f"{name}: batch {j.get('batch')} | {j.get('status')} | start {fmt(j.get('losses_start'))} "
      f"end {fmt(j.get('losses'))} | {'; '.join(skips)} | {j.get('throughput') or 0:.4g} images/s"
      f" | exit {rc}, {wall} s | {(j.get('message') or '')[:200]}")
PY
  grep -E "activation trace: it [0-9]+ \| d-step loss" "$out/$name.log" |
    sed -E 's/activation trace: /  /; s/ \| nonfinite.*//' >> "$summary"
}

r1_fp32=$(dirname "$0")/stylegan-r1-fp32.yaml
GPUBENCH_TRACE_ACTIVATIONS=6 one split 120 amp-fp16 132 --config "$r1_fp32" "${short[@]}"
GPUBENCH_TRACE_ACTIVATIONS=6 GPUBENCH_CONV_SPLIT_ELEMENTS=0 \
  one nosplit 120 amp-fp16 132 --config "$r1_fp32" "${short[@]}"
one bf16 150 amp-bf16 212
cat "$summary"
