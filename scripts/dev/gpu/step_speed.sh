#!/usr/bin/env bash
# On the GPU machine: issue 11's side-by-side steps. gpubench against the Python eager
# reference in tools/twins at the batch the issue names and the same precision, one fresh
# process each, one after the other in one call:
#
#   bert-base-mlm 128 sequences     bert_reference.py --model mlm (transformers BertForMaskedLM)
#   bert-finetune 48 sequences      bert_reference.py --model squad (BertForQuestionAnswering)
#   transformer-big 16000 tokens    transformer_big_reference.py (the torch.nn twin); gpubench
#                                   also with 48 warm-up steps, as many as the Python harness
#                                   runs there (its step times never settle, so it warms up 50
#                                   steps where gpubench stops after one cycle of 8 batches)
#   nasnet-large 64 images          nasnet_reference.py (timm nasnetalarge), channels-last as
#                                   gpubench trains it
#   deeplabv3-resnet101 16 images   deeplab_reference.py (torchvision), gpubench's layout rule
#   mask-rcnn 16 images             maskrcnn_reference.py (torchvision maskrcnn_resnet50_fpn)
#   mt-dnn 8 sequences              no Python reference: fp32 against amp-bf16, which should be
#                                   at least as fast (give it as mt-dnn:amp-bf16)
#
#   scripts/dev/gpu/step_speed.sh GPUBENCH OUT [MODEL:PRECISION ...]
#       default: the six references at fp32 and amp-bf16, then mt-dnn
#   GRAPHS=1: gpubench also runs each case with runtime.cuda_graphs on
#   VARIANT=NAME:CONFIG: gpubench also runs each case with --config CONFIG (a YAML overlay),
#              compared with its default run and with Python (e.g. issue 11's
#              limit10:docs/results/2026-12-03-h200-headroom-attention-limit10/cudnn-limit10.yaml,
#              PyTorch's 10 algorithms per convolution)
#   WARM48=0: skip transformer-big's run with 48 warm-up steps
#   TWIN_ATTENTION=stored: the BERT and transformer-big references run with --attention stored
#              (explicit softmax, probabilities kept: gpubench's default) instead of PyTorch's
#              fused kernel; give it its own OUT, since finished references are kept
#   TWIN_COMPILE=1: the BERT and transformer-big references run through torch.compile
#              (--compile), issue 44's peer; give it its own OUT
#   PROFILE=1: both sides also profile 2 steps after their warm-up (GPUBENCH_PROFILE_TRACE,
#              which gpubench and tools/twins/harness.py both read), summarized by
#              scripts/dev/gpu/trace_summary.py into OUT/NAME.trace.txt (the trace itself is
#              deleted: too large to bring back); transformer-big's 48-step twin is skipped
#
# A case that finished is not run again (OUT/NAME.done), so a call cut by its deadline goes
# on in the next one. One line per comparison in OUT/summary.txt: both throughputs and
# gpubench / Python (above 1: gpubench is faster). Records, outputs and logs in OUT.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 GPUBENCH OUT [MODEL:PRECISION ...]" >&2; exit 2; }
GPUBENCH=$(realpath "$1")
OUT=$(realpath -m "$2")
shift 2
mkdir -p "$OUT"
cd "$(dirname "$0")/../../.."
summary="$OUT/summary.txt"
touch "$summary"
cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
  for p in fp32 amp-bf16; do
    for m in bert-base-mlm bert-finetune transformer-big nasnet-large deeplabv3-resnet101 mask-rcnn; do
      cases+=("$m:$p")
    done
  done
  cases+=(mt-dnn:amp-bf16)
fi

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

# ours NAME MODEL BATCH PRECISION [extra run flags...]: one gpubench run, its throughput (nan
# unless the job is ok: a failed or diverged job has no throughput).
ours() {
  local name=$1 m=$2 b=$3 p=$4
  shift 4
  rm -f "$OUT/$name.jsonl"  # a case cut by a deadline runs again whole
  traced "$name" "$GPUBENCH" run --gpu 0 --model "$m" --batch "$b" --precision "$p" "$@" \
    --journal "$OUT/$name.jsonl" --json "$OUT/$name.json" > "$OUT/$name.txt" 2> "$OUT/$name.log"
  value "$OUT/$name.json" "d['jobs'][0]['throughput'] if d['jobs'][0]['status']=='ok' else float('nan')"
}

# reference NAME SCRIPT ARGS...: one Python reference run, its throughput (nan when it failed or
# its losses were not finite).
reference() {
  local name=$1 script=$2
  shift 2
  # A reference that finished in an earlier call (its record has a throughput) is kept.
  if [ "$(value "$OUT/$name.json" "d['throughput']")" = nan ]; then
    traced "$name" python3 "tools/twins/$script" "$@" --json "$OUT/$name.json" > "$OUT/$name.txt" 2>&1
  fi
  value "$OUT/$name.json" "d['throughput'] if d.get('status', 'ok') == 'ok' else float('nan')"
}

# traced NAME COMMAND...: COMMAND, with PROFILE=1 under GPUBENCH_PROFILE_TRACE, then the trace's
# summary in OUT/NAME.trace.txt.
traced() {
  local name=$1 rc=0
  shift
  if [ "${PROFILE:-0}" != 1 ]; then "$@"; return; fi
  GPUBENCH_PROFILE_TRACE="$OUT/$name.trace.json" "$@" || rc=$?
  if [ -f "$OUT/$name.trace.json" ]; then
    python3 scripts/dev/gpu/trace_summary.py "$OUT/$name.trace.json" --top 30 > "$OUT/$name.trace.txt" 2>&1
    rm -f "$OUT/$name.trace.json"
  fi
  return $rc
}

graphs_config() {  # graphs_config MODEL: a config turning CUDA graphs on for MODEL
  printf 'models:\n  %s:\n    runtime: {cuda_graphs: true}\n' "$1" > "$OUT/graphs-$1.yaml"
  echo "$OUT/graphs-$1.yaml"
}

line() { echo "$*" | tee -a "$summary"; }

for c in "${cases[@]}"; do
  IFS=: read -r m p <<< "$c"
  [ -f "$OUT/$m-$p.done" ] && continue
  warm=()
  case $m in
    bert-base-mlm) b=128 unit=examples/s py=(bert_reference.py --model mlm --batch 128) ;;
    bert-finetune) b=48 unit=examples/s py=(bert_reference.py --model squad --batch 48) ;;
    transformer-big)
      b=16000 unit=words/s warm=(--warmup-steps 48)
      py=(transformer_big_reference.py --tokens 16000 --check "$OUT/$m-$p.json") ;;
    nasnet-large) b=64 unit=images/s py=(nasnet_reference.py --batch 64 --memory-format channels_last) ;;
    deeplabv3-resnet101) b=16 unit=images/s py=(deeplab_reference.py --batch 16 --memory-format auto) ;;
    mask-rcnn) b=16 unit=images/s py=(maskrcnn_reference.py --batch 16) ;;
    mt-dnn) b=8 unit=examples/s py=() ;;
    *) echo "step_speed: no side-by-side case for '$m'" >&2; exit 2 ;;
  esac
  case ${py[0]:-} in
    bert_reference.py|transformer_big_reference.py)
      [ -n "${TWIN_ATTENTION:-}" ] && py+=(--attention "$TWIN_ATTENTION") ;;
  esac
  if [ "${TWIN_COMPILE:-0}" = 1 ]; then
    case ${py[0]:-} in bert_reference.py|transformer_big_reference.py) ;; *) echo "step_speed: TWIN_COMPILE=1: no compiled twin for '$m'" >&2; exit 2 ;; esac
    py+=(--compile)
  fi
  start=$(date +%s)
  g=$(ours "$m-$p" "$m" "$b" "$p")
  if [ "$m" = mt-dnn ]; then
    f=$(ours "$m-fp32" "$m" "$b" fp32)
    line "mt-dnn batch 8: fp32 $f, $p $g examples/s, $p/fp32 $(ratio "$g" "$f")"
  else
    py_t=$(reference "py-$m-$p" "${py[0]}" "${py[@]:1}" --precision "$p")
    line "$m $p batch $b: gpubench $g, python $py_t $unit, gpubench/python $(ratio "$g" "$py_t")"
    if [ ${#warm[@]} -gt 0 ] && [ "${PROFILE:-0}" != 1 ] && [ "${WARM48:-1}" != 0 ]; then
      gw=$(ours "$m-$p-warm48" "$m" "$b" "$p" "${warm[@]}")
      line "$m $p batch $b: gpubench after 48 warm-up steps $gw, gpubench/python $(ratio "$gw" "$py_t")"
    fi
  fi
  if [ "${GRAPHS:-0}" = 1 ]; then
    gg=$(ours "$m-$p-graphs" "$m" "$b" "$p" ${warm[@]+"${warm[@]}"} --config "$(graphs_config "$m")")
    line "$m $p batch $b: gpubench with CUDA graphs $gg $unit, graphs/eager $(ratio "$gg" "$g")"
  fi
  if [ -n "${VARIANT:-}" ] && [ "$m" != mt-dnn ]; then
    vn=${VARIANT%%:*}
    gv=$(ours "$m-$p-$vn" "$m" "$b" "$p" --config "$(realpath "${VARIANT#*:}")")
    line "$m $p batch $b: gpubench with $vn $gv $unit, $vn/default $(ratio "$gv" "$g"), $vn/python $(ratio "$gv" "$py_t")"
  fi
  echo "$m:$p $(( $(date +%s) - start )) s" >> "$OUT/walltimes.txt"
  touch "$OUT/$m-$p.done"
done

for f in "$OUT"/mt-dnn-*.json; do
  [ -f "$f" ] || continue
  echo "$(basename "$f" .json): step ms median/min/max $(value "$f" "[round(d['jobs'][0]['timing'][k],1) for k in ('step_time_ms_median','step_time_ms_min','step_time_ms_max')]")"
done
echo
echo "step_speed: records and logs in $OUT"
cat "$summary"
