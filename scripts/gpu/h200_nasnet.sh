#!/usr/bin/env bash
# On the GPU machine, after h200_build_test.sh: nasnet-large search + timed run at fp32 and
# amp-bf16 (wall time of each, process starts included), then timm's eager nasnetalarge and
# gpubench at one common batch and precision, each in both memory formats (NCHW, NHWC).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gpubench-out}
mkdir -p "$OUT"
. scripts/gpu/common.sh
for p in ${PRECISIONS:-fp32 amp-bf16}; do
  timed_search nasnet-large "$p"
  tail -4 "$OUT/nasnet-large-$p.log"
done
# One common batch: the largest power of two gpubench fits (timm keeps every cell output alive
# through the forward pass, so it may need a smaller one).
for p in ${PRECISIONS:-fp32 amp-bf16}; do
  b=$(field "$OUT/nasnet-large-$p.json" "d['jobs'][0]['search']['largest_pow2_batch']")
  b=$(fitting_reference --batch "$b" "$OUT/timm-nasnet-$p-nchw.json" \
    "$OUT/timm-nasnet-$p-nchw.txt" scripts/python/nasnet_reference.py --precision "$p")
  tail -3 "$OUT/timm-nasnet-$p-nchw.txt"
  python3 scripts/python/nasnet_reference.py --batch "$b" --precision "$p" --memory-format channels_last \
    --json "$OUT/timm-nasnet-$p-nhwc.json" > "$OUT/timm-nasnet-$p-nhwc.txt" 2>&1
  build/gpubench run --gpu 0 --model nasnet-large --precision "$p" --batch "$b" \
    --json "$OUT/nasnet-large-$p-b$b.json" > /dev/null 2>> "$OUT/compare.log"
  build/gpubench run --gpu 0 --model nasnet-large --precision "$p" --batch "$b" \
    --config scripts/gpu/nasnet-nchw.yaml --json "$OUT/nasnet-large-nchw-$p-b$b.json" \
    > /dev/null 2>> "$OUT/compare.log"
  ours=$(field "$OUT/nasnet-large-$p-b$b.json" "d['jobs'][0]['throughput']")
  ours_nchw=$(field "$OUT/nasnet-large-nchw-$p-b$b.json" "d['jobs'][0]['throughput']")
  timm_nchw=$(field "$OUT/timm-nasnet-$p-nchw.json" "d['throughput']")
  timm_nhwc=$(field "$OUT/timm-nasnet-$p-nhwc.json" "d['throughput']" 2>/dev/null || echo n/a)
  echo "$p batch $b: gpubench nhwc $ours, gpubench nchw $ours_nchw, timm nchw $timm_nchw, timm nhwc $timm_nhwc images/s" | tee -a "$OUT/compare.txt"
done
build/gpubench report "$OUT"/nasnet-large-fp32.json "$OUT"/nasnet-large-amp-bf16.json \
  > "$OUT/report.txt" 2>&1
build/gpubench report "$OUT"/nasnet-large-*.json --format md > "$OUT/report-all.md" 2>&1
cat "$OUT/report.txt"
