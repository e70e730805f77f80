#!/usr/bin/env bash
# On the GPU machine: the host-bound and slower-than-PyTorch steps of issue 11, gpubench against
# the Python eager references in scripts/python at the same batch and precision, one process
# each, side by side:
# - bert-base-mlm at 128 against bert_reference.py --model mlm (transformers BertForMaskedLM);
# - transformer-big at 16000 tokens against transformer_big_reference.py; gpubench a second time
#   with 48 warm-up steps, as many as the Python harness runs there (its step times never
#   settle, so it warms up 50 steps where gpubench stops after one cycle of 8 batches): the
#   difference between the two gpubench rows is warm-up, not step speed;
# - mt-dnn at 8, fp32 against amp-bf16 (no Python reference): amp-bf16 should be at least as
#   fast.
# With GRAPHS=1, gpubench also runs each with runtime.cuda_graphs on.
#
#   scripts/gpu/step_speed.sh GPUBENCH OUT        (about 5 min; 7 with GRAPHS=1)
#
# Prints one line per comparison: both throughputs and gpubench / Python (above 1: gpubench is
# faster), and the table again at the end. Records, outputs and logs in OUT.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 GPUBENCH OUT" >&2; exit 2; }
GPUBENCH=$(realpath "$1")
OUT=$(realpath -m "$2")
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
summary="$OUT/summary.txt"
: > "$summary"

value() {  # value FILE EXPR: EXPR on the JSON in FILE (bound to d); "nan" when unreadable
  python3 -c "import json,sys
try:
    d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))
except Exception:
    print('nan')" "$@"
}
ratio() {  # ratio A B: A/B, or n/a when either is missing (nan, None: a failed or diverged run)
  python3 -c "import sys
try:
    a, b = map(float, sys.argv[1:])
    print(f'{a/b:.3f}' if a == a and b == b and b > 0 else 'n/a')
except ValueError:
    print('n/a')" "$1" "$2"
}

# ours NAME MODEL BATCH PRECISION [extra run flags...]: one gpubench run, its throughput.
ours() {
  local name=$1 m=$2 b=$3 p=$4
  shift 4
  "$GPUBENCH" run --gpu 0 --model "$m" --batch "$b" --precision "$p" "$@" \
    --json "$OUT/$name.json" > "$OUT/$name.txt" 2> "$OUT/$name.log"
  value "$OUT/$name.json" "d['jobs'][0]['throughput'] if d['jobs'][0]['status']=='ok' else float('nan')"
}

graphs_config() {  # graphs_config MODEL: a config turning CUDA graphs on for MODEL
  printf 'models:\n  %s:\n    runtime: {cuda_graphs: true}\n' "$1" > "$OUT/graphs-$1.yaml"
  echo "$OUT/graphs-$1.yaml"
}

line() { echo "$*" | tee -a "$summary"; }

for p in fp32 amp-bf16; do
  g=$(ours "bert-base-mlm-$p" bert-base-mlm 128 "$p")
  python3 scripts/python/bert_reference.py --model mlm --batch 128 --precision "$p" \
    --json "$OUT/py-bert-mlm-$p.json" > "$OUT/py-bert-mlm-$p.txt" 2>&1
  py=$(value "$OUT/py-bert-mlm-$p.json" "d['throughput']")
  line "bert-base-mlm $p batch 128: gpubench $g, python $py examples/s, gpubench/python $(ratio "$g" "$py")"
  if [ "${GRAPHS:-0}" = 1 ]; then
    gg=$(ours "bert-base-mlm-$p-graphs" bert-base-mlm 128 "$p" --config "$(graphs_config bert-base-mlm)")
    line "bert-base-mlm $p batch 128: gpubench with CUDA graphs $gg, gpubench/python $(ratio "$gg" "$py")"
  fi
done

for p in fp32 amp-bf16; do
  g=$(ours "transformer-big-$p" transformer-big 16000 "$p")
  g48=$(ours "transformer-big-$p-warm48" transformer-big 16000 "$p" --warmup-steps 48)
  python3 scripts/python/transformer_big_reference.py --tokens 16000 --precision "$p" \
    --check "$OUT/transformer-big-$p.json" --json "$OUT/py-transformer-big-$p.json" \
    > "$OUT/py-transformer-big-$p.txt" 2>&1
  py=$(value "$OUT/py-transformer-big-$p.json" "d['throughput']")
  line "transformer-big $p 16000 tokens: gpubench $g, python $py words/s, gpubench/python $(ratio "$g" "$py")"
  line "transformer-big $p 16000 tokens: gpubench after 48 warm-up steps $g48, gpubench/python $(ratio "$g48" "$py")"
  if [ "${GRAPHS:-0}" = 1 ]; then
    gg=$(ours "transformer-big-$p-graphs" transformer-big 16000 "$p" --warmup-steps 48 \
      --config "$(graphs_config transformer-big)")
    line "transformer-big $p 16000 tokens: gpubench with CUDA graphs $gg, gpubench/python $(ratio "$gg" "$py")"
  fi
done

f=$(ours mt-dnn-fp32 mt-dnn 8 fp32)
b=$(ours mt-dnn-amp-bf16 mt-dnn 8 amp-bf16)
line "mt-dnn batch 8: fp32 $f, amp-bf16 $b examples/s, amp-bf16/fp32 $(ratio "$b" "$f")"
if [ "${GRAPHS:-0}" = 1 ]; then
  cfg=$(graphs_config mt-dnn)
  fg=$(ours mt-dnn-fp32-graphs mt-dnn 8 fp32 --config "$cfg")
  bg=$(ours mt-dnn-amp-bf16-graphs mt-dnn 8 amp-bf16 --config "$cfg")
  line "mt-dnn batch 8 with CUDA graphs: fp32 $fg, amp-bf16 $bg examples/s, amp-bf16/fp32 $(ratio "$bg" "$fg")"
fi
for f in "$OUT"/mt-dnn-*.json; do
  echo "$(basename "$f" .json): step ms median/min/max $(value "$f" "[round(d['jobs'][0]['timing'][k],1) for k in ('step_time_ms_median','step_time_ms_min','step_time_ms_max')]")" \
    | tee -a "$summary"
done

echo
echo "step_speed: records and logs in $OUT"
cat "$summary"
