#!/usr/bin/env bash
# On the GPU machine, after h200_build_test.sh: bert-base search + timed run at fp32 and
# amp-bf16 (wall time of each, process starts included), then the Python eager reference
# (transformers BertForPreTraining) and gpubench at one common batch and precision.
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/gpubench-out}
mkdir -p "$OUT"
. scripts/dev/gpu/common.sh
for p in ${PRECISIONS:-fp32 amp-bf16}; do
  timed_search bert-base "$p"
  tail -4 "$OUT/bert-base-$p.log"
done
# One common batch for the eager comparison: HF computes logits at every position, so it needs
# more memory than bert-base; take the largest power of two both fit.
for p in ${PRECISIONS:-fp32 amp-bf16}; do
  b=$(field "$OUT/bert-base-$p.json" "d['jobs'][0]['search']['largest_pow2_batch']")
  b=$(fitting_reference --batch "$b" "$OUT/hf-bert-$p.json" "$OUT/hf-bert-$p.txt" \
    tools/twins/bert_reference.py --precision "$p")
  tail -3 "$OUT/hf-bert-$p.txt"
  build/gpubench run --gpu 0 --model bert-base --precision "$p" --batch "$b" \
    --json "$OUT/bert-base-$p-b$b.json" > /dev/null 2>> "$OUT/compare.log"
  build/gpubench run --gpu 0 --model bert-base --precision "$p" --batch "$b" \
    --config docs/results/2026-11-30-h200-bert-base/bert-hf-layout.yaml \
    --json "$OUT/bert-base-hf-layout-$p-b$b.json" \
    > /dev/null 2>> "$OUT/compare.log"
  ours=$(field "$OUT/bert-base-$p-b$b.json" "d['jobs'][0]['throughput']")
  ours_all=$(field "$OUT/bert-base-hf-layout-$p-b$b.json" "d['jobs'][0]['throughput']")
  hf=$(field "$OUT/hf-bert-$p.json" "d['throughput']")
  echo "$p batch $b: gpubench bert-base $ours, gpubench hf-layout $ours_all, python HF $hf examples/s" | tee -a "$OUT/compare.txt"
done
# The other precisions and the memory cap, at a glance: tf32 and amp-fp16 (dynamic loss
# scaling) at a fixed batch, and the search under a 24 GiB cap (a Titan RTX / RTX 6000 size).
build/gpubench run --gpu 0 --model bert-base --precision tf32 --batch 512 \
  --json "$OUT/bert-base-tf32-b512.json" > /dev/null 2>> "$OUT/other.log"
build/gpubench run --gpu 0 --model bert-base --precision amp-fp16 --batch 512 \
  --json "$OUT/bert-base-amp-fp16-b512.json" > /dev/null 2>> "$OUT/other.log"
build/gpubench run --gpu 0 --model bert-base --memory-cap 24 \
  --json "$OUT/bert-base-fp32-cap24.json" > /dev/null 2>> "$OUT/other.log"
tail -3 "$OUT/other.log"
build/gpubench report "$OUT"/bert-base-fp32.json "$OUT"/bert-base-amp-bf16.json \
  "$OUT"/bert-base-fp32-cap24.json > "$OUT/report.txt" 2>&1
build/gpubench report "$OUT"/bert-base-*.json --format md > "$OUT/report-all.md" 2>&1
cat "$OUT/report.txt"
