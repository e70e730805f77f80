#!/usr/bin/env bash
# On the GPU machine (issue 18): are mask-rcnn and yolov3 healthy at their 2020 batch (16) in
# fp32, amp-bf16 and amp-fp16, does the Python mask-rcnn reference stay finite, and how fast is
# stylegan's step at batch 16 (issue 11). Builds nothing.
#
#   scripts/dev/gpu/health_check.sh GPUBENCH OUTDIR [PART...]      (about 5 minutes on an H200)
#
# Parts (default: all three): detection (yolov3 and mask-rcnn, about 3 minutes), stylegan,
# python (maskrcnn_reference.py). The summary covers every JSON under OUTDIR.
#
# Writes OUTDIR/MODEL-PRECISION-b16.{json,log}, OUTDIR/maskrcnn-python-amp-bf16.{json,txt} and
# prints one line per run last: status, throughput, the losses after the warm-up and at the end
# of the window. Look for: status ok with every loss finite; diverged names the loss.
set -uo pipefail
bin=${1:?usage: health_check.sh GPUBENCH OUTDIR}
out=${2:?usage: health_check.sh GPUBENCH OUTDIR}
shift 2
parts=" ${*:-detection stylegan python} "
mkdir -p "$out"
cd "$(dirname "$(readlink -f "$0")")/../../.."

one() {  # model precision batch [extra flags]
  local m=$1 p=$2 b=$3 s
  shift 3
  s=$(date +%s)
  "$bin" run --gpu 0 --model "$m" --precision "$p" --batch "$b" --min-seconds 3 "$@" \
    --journal "$out/$m-$p-b$b.jsonl" --json "$out/$m-$p-b$b.json" > /dev/null 2> "$out/$m-$p-b$b.log"
  echo "$m $p b$b: exit $?, wall $(( $(date +%s) - s )) s" >> "$out/walltimes.txt"
}

if [[ $parts == *" detection "* ]]; then
  for p in fp32 amp-bf16 amp-fp16; do one yolov3 "$p" 16; done
  for p in fp32 amp-bf16 amp-fp16; do one mask-rcnn "$p" 16; done
fi
if [[ $parts == *" stylegan "* ]]; then one stylegan fp32 16; fi
if [[ $parts == *" python "* ]]; then
  s=$(date +%s)
  PYTHONUNBUFFERED=1 python3 tools/twins/maskrcnn_reference.py --batch 16 --precision amp-bf16 \
    --min-seconds 3 --json "$out/maskrcnn-python-amp-bf16.json" > "$out/maskrcnn-python-amp-bf16.txt" 2>&1
  echo "maskrcnn_reference.py amp-bf16 b16: exit $?, wall $(( $(date +%s) - s )) s" >> "$out/walltimes.txt"
fi

cat "$out/walltimes.txt"
python3 - "$out" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    d = json.load(open(f))
    if "jobs" in d:
        for j in d["jobs"]:
            w = j.get("warmup") or {}
            print(f"{j['model']} {j['precision']} b{j['batch']}: {j['status']} "
                  f"{j.get('throughput') or 0:.2f} {j['throughput_unit']} "
                  f"warm-up {sum(w.get('step_time_ms', [])) / 1000:.1f} s | "
                  f"start {j.get('losses_start')} | end {j.get('losses')} | {j.get('message', '')}")
    else:
        print(f"python {os.path.basename(f)}: {d.get('status')} {d.get('throughput')} "
              f"| start {d.get('losses_start')} | end {d.get('losses_end')}")
PY
