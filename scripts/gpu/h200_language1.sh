#!/usr/bin/env bash
# On the GPU machine, after scripts/setup.sh: issue 3's workloads. bert-finetune and mt-dnn with
# the search at fp32 and amp-bf16 (wall time of each), then bert-finetune against transformers'
# BertForQuestionAnswering at a common batch and precision.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gpubench-out}
mkdir -p "$OUT"
. scripts/gpu/common.sh
for m in ${MODELS:-bert-finetune mt-dnn}; do
  for p in fp32 amp-bf16; do
    timed_search "$m" "$p"
    grep -E "probe|warm-up|timed|step" "$OUT/$m-$p.log" | tail -12
  done
done
for p in fp32 amp-bf16; do
  b=$(field "$OUT/bert-finetune-$p.json" "d['jobs'][0]['search']['largest_pow2_batch']")
  b=$(fitting_reference --batch "$b" "$OUT/hf-squad-$p.json" "$OUT/hf-squad-$p.txt" \
    scripts/python/bert_reference.py --model squad --precision "$p")
  build/gpubench run --gpu 0 --model bert-finetune --precision "$p" --batch "$b" \
    --json "$OUT/bert-finetune-$p-b$b.json" > /dev/null 2>> "$OUT/compare.log"
  ours=$(field "$OUT/bert-finetune-$p-b$b.json" "d['jobs'][0]['throughput']")
  hf=$(field "$OUT/hf-squad-$p.json" "d['throughput']")
  echo "$p batch $b: gpubench bert-finetune $ours, python HF BertForQuestionAnswering $hf examples/s, ratio $(python3 -c "print(round($ours / $hf, 3))")" | tee -a "$OUT/compare.txt"
done
build/gpubench report "$OUT"/bert-finetune-fp32.json "$OUT"/bert-finetune-amp-bf16.json \
  "$OUT"/mt-dnn-fp32.json "$OUT"/mt-dnn-amp-bf16.json 2>&1 | tee "$OUT/report.txt"
