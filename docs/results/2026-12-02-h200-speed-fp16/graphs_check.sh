#!/usr/bin/env bash
# On the GPU machine: CUDA graphs off against on (config key runtime.cuda_graphs), per workload
# and precision, at a fixed batch and a fixed number of steps, so that the losses after those
# steps can be compared: equal step counts, then the largest relative difference over the
# workload's losses, and the throughput of each. Prints one table row per workload and
# precision, and the table again at the end.
#
#   docs/results/2026-12-02-h200-speed-fp16/graphs_check.sh GPUBENCH OUT
#   MODELS="bert-base mt-dnn" PRECISIONS="amp-bf16" \
#     docs/results/2026-12-02-h200-speed-fp16/graphs_check.sh build/gpubench /tmp/g
#
# Each run warms up exactly W steps (W covers the capture of every batch shape: two cycles of
# the translation workloads' batches, mt-dnn's first 185 draws) and times exactly N steps
# (rounded up to the workload's representative cycle). Default MODELS: the host-bound language
# steps, where graphs can pay; the image workloads spend most of a run in cuDNN autotuning
# (13-170 s of warm-up each on the H200), so ask for them by name. Default run time: about 6 min
# for the default models (4 runs each of about 15-30 s, process start and warm-up included).
#
# What to look for: "same steps" yes everywhere; loss differences near 0 (dropout draws the
# same numbers under graphs when the RNG offsets line up, so exact equality is possible; cuDNN
# autotuning can pick non-deterministic kernels, so conv workloads may differ a little even
# eager against eager); a `launch` of cuda-graphs in every "on" run (else the note says why);
# the on/off throughput ratio, which decides where graphs become the default.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 GPUBENCH OUT" >&2; exit 2; }
GPUBENCH=$1
OUT=$2
mkdir -p "$OUT"
MODELS=${MODELS:-bert-base-mlm bert-finetune mt-dnn transformer-big}
PRECISIONS=${PRECISIONS:-fp32 amp-bf16}
STEPS=${STEPS:-30}

declare -A BATCH=([bert-base]=128 [bert-base-mlm]=128 [bert-finetune]=48 [mt-dnn]=8
  [transformer-big]=16000 [conv-seq2seq]=16000 [unsupmt]=8000 [nasnet-large]=64 [deeplabv3]=16
  [deeplabv3-resnet101]=16 [yolov3]=16 [pix2pixhd]=2 [stylegan]=16 [mask-rcnn]=16)
declare -A WARMUP=([mt-dnn]=200 [transformer-big]=16 [conv-seq2seq]=16)

summary="$OUT/summary.txt"
printf "%-20s %-9s %6s %10s %10s %7s %10s %14s %s\n" model precision batch off on on/off \
  "same steps" "max loss diff" "launch (on)" | tee "$summary"
for m in $MODELS; do
  b=${BATCH[$m]:-}
  [ -n "$b" ] || { echo "graphs_check: no batch set for '$m'" >&2; continue; }
  w=${WARMUP[$m]:-5}
  for p in $PRECISIONS; do
    for g in false true; do
      cfg="$OUT/$m-$p-graphs-$g.yaml"
      cat > "$cfg" <<EOF
run:
  timing: {warmup_steps: $w, max_warmup_steps: $w, max_warmup_seconds: 100000,
           steady_tolerance: 0, min_steps: $STEPS, min_seconds: 0}
models:
  $m:
    runtime: {cuda_graphs: $g}
EOF
      "$GPUBENCH" run --gpu 0 --model "$m" --batch "$b" --precision "$p" --config "$cfg" \
        --json "$OUT/$m-$p-graphs-$g.json" > "$OUT/$m-$p-graphs-$g.txt" \
        2> "$OUT/$m-$p-graphs-$g.log"
      echo "$m $p graphs $g: exit $?" >> "$OUT/exits.txt"
    done
    python3 - "$OUT/$m-$p-graphs-false.json" "$OUT/$m-$p-graphs-true.json" "$m" "$p" "$b" \
      >> "$summary" <<'EOF'
import json, sys
def job(path):
    try:
        return json.load(open(path))["jobs"][0]
    except Exception:
        return None
off, on = job(sys.argv[1]), job(sys.argv[2])
model, precision, batch = sys.argv[3:6]
def steps(j):
    return j["warmup"].get("steps", 0) + j["timing"].get("steps", 0)
def rate(j):
    return j["throughput"] if j and j.get("status") == "ok" else float("nan")
if off is None or on is None or off.get("status") != "ok" or on.get("status") != "ok":
    status = "/".join(str(j.get("status")) if j else "missing" for j in (off, on))
    print(f"{model:20s} {precision:9s} {batch:>6s} {rate(off):10.4g} {rate(on):10.4g} "
          f"{'':>7s} {'':>10s} {'':>14s} failed ({status}: see the .log files)")
    sys.exit(0)
same = steps(off) == steps(on)
diffs = []
for name, a in off["losses"].items():
    b = on["losses"].get(name)
    if a is None or b is None:
        diffs.append(float("inf"))
    else:
        diffs.append(abs(a - b) / max(abs(a), 1e-30))
worst = max(diffs) if diffs else float("nan")
launch = on.get("runtime", {}).get("launch", "?")
note = on.get("runtime", {}).get("cuda_graphs_note", "")
print(f"{model:20s} {precision:9s} {batch:>6s} {rate(off):10.4g} {rate(on):10.4g} "
      f"{rate(on) / rate(off):7.3f} {'yes' if same else 'NO':>10s} {worst:14.3g} {launch} {note}")
EOF
    tail -1 "$summary"
  done
done
echo
echo "graphs_check: throughput in each workload's unit; records and logs in $OUT"
cat "$summary"
