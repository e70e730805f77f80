#!/usr/bin/env bash
# On the one-GPU H200 (issue 15): data-parallel training at world size 1 through NCCL against
# the plain run, bert-base at a fixed batch, fp32 and amp-bf16. The bucketed all-reduce, its
# copies and the NCCL call must cost under 2 % of the plain run's throughput. Builds nothing.
#
#   docs/results/2026-12-03-h200-rois-signals-ddp/ddp_ws1.sh GPUBENCH OUTDIR [BATCH]
#                                (BATCH: default 32 sequences)
#
# Writes OUTDIR/summary.txt (first: `gpubench info`'s backend line; then per precision the two
# throughputs, their ratio and PASS/FAIL at 2 %), and each run's .json, .jsonl and .log. About
# 2-3 minutes: four timed runs of ~25-35 s each (process start, warm-up, a 15 s window).
set -uo pipefail
bin=${1:?usage: ddp_ws1.sh GPUBENCH OUTDIR [BATCH]}
out=${2:?usage: ddp_ws1.sh GPUBENCH OUTDIR [BATCH]}
batch=${3:-32}
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"
"$bin" info > "$out/info.txt" 2>&1
grep -i "data-parallel" "$out/info.txt" >> "$summary" || echo "info: no data-parallel line" >> "$summary"

# run NAME FLAGS...: one timed run at the fixed batch.
run() {
  local name=$1 s
  shift
  s=$(date +%s)
  "$bin" run --model bert-base --batch "$batch" --min-seconds 15 "$@" --format none \
    --journal "$out/$name.jsonl" --json "$out/$name.json" > /dev/null 2> "$out/$name.log"
  echo "$name: exit $?, wall $(( $(date +%s) - s )) s" >> "$out/walltimes.txt"
}
# Alternating order (plain first for fp32, data-parallel first for amp-bf16), so that a drift
# of clocks over the minutes does not favour one side.
run plain-fp32 --gpu 0 --precision fp32
run ddp-fp32 --gpus 0 --precision fp32
run ddp-amp-bf16 --gpus 0 --precision amp-bf16
run plain-amp-bf16 --gpu 0 --precision amp-bf16

python3 - "$out" >> "$summary" <<'PY'
import json, os, sys
out = sys.argv[1]
def job(name):
    try:
        return json.load(open(os.path.join(out, name + ".json")))["jobs"][0]
    except Exception as e:  # noqa: BLE001 - a run that wrote nothing is a result too
        return {"status": f"no result ({e})", "throughput": 0}
worst = 0.0
for p in ("fp32", "amp-bf16"):
    a, b = job("plain-" + p), job("ddp-" + p)
    ta, tb = a.get("throughput") or 0, b.get("throughput") or 0
    dp = b.get("data_parallel") or {}
    sync = (dp.get("gradient_sync") or {})
    buckets = (sync.get("networks", {}).get("model") or {}).get("buckets")
    line = (f"{p}: plain {ta:.1f} ({a['status']}, median step "
            f"{(a.get('timing') or {}).get('step_time_ms_median', 0):.2f} ms) | world size 1 "
            f"{dp.get('backend', '?')} {tb:.1f} ({b['status']}, median step "
            f"{(b.get('timing') or {}).get('step_time_ms_median', 0):.2f} ms, {buckets} buckets, "
            f"{sync.get('allreduces_started_in_backward')} all-reduces in backward, "
            f"{sync.get('allreduces_started_at_update')} at the update, launch "
            f"{(b.get('runtime') or {}).get('launch')})")
    if ta > 0 and tb > 0:
        ratio = tb / ta
        worst = max(worst, 1 - ratio)
        line += f" | ratio {ratio:.4f}: {'PASS' if ratio >= 0.98 else 'FAIL'} (within 2 %)"
    else:
        worst = 1.0
        line += f" | FAIL: {a.get('message', '')} {b.get('message', '')}"
    print(line)
print(f"verdict: {'PASS' if worst <= 0.02 else 'FAIL'}: the slowest world-size-1 run is "
      f"{worst * 100:.2f} % below the plain run")
PY
cat "$out/walltimes.txt" >> "$summary"
cat "$summary"
