#!/usr/bin/env bash
# On the GPU machine: mask-rcnn at batch 16 with the RoI heads sized as before (roi_heads
# fixed_max: 512 box and 128 mask RoIs for every image) and as maskrcnn-benchmark works
# (per_batch: the batch-wide bound, 2112 box and 2048 mask slots at batch 16), in amp-bf16 and
# fp32 (issue 17, item 1). One fresh `gpubench run` per case, about 3 minutes in all.
#
#   docs/results/2026-12-03-h200-rois-signals-ddp/maskrcnn_rois.sh GPUBENCH OUT
#
# Writes OUT/mask-rcnn-PRECISION-ROIHEADS.{json,jsonl,txt,log} and OUT/summary.txt: one line
# per case with status, throughput, peak memory (reserved and allocated), the heads' slots and
# the RoIs and positives per image the heads counted in the timed window; then the per_batch /
# fixed_max ratios. A case whose record exists is not run again.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 GPUBENCH OUT" >&2; exit 2; }
GPUBENCH=$(realpath "$1")
OUT=$(realpath -m "$2")
mkdir -p "$OUT"
cd "$(dirname "$0")/../../.."

for heads in fixed_max per_batch; do
  printf 'models:\n  mask-rcnn:\n    model: {roi_heads: %s}\n' "$heads" > "$OUT/roi-heads-$heads.yaml"
done

for p in amp-bf16 fp32; do
  for heads in fixed_max per_batch; do
    name=mask-rcnn-$p-$heads
    [ -s "$OUT/$name.json" ] && continue
    rm -f "$OUT/$name.jsonl"  # a case cut short runs again whole
    s=$(date +%s)
    timeout 150 "$GPUBENCH" run --gpu 0 --model mask-rcnn --batch 16 --precision "$p" \
      --config "$OUT/roi-heads-$heads.yaml" --json "$OUT/$name.json" --journal "$OUT/$name.jsonl" \
      > "$OUT/$name.txt" 2> "$OUT/$name.log"
    echo "$name: exit $?, wall $(( $(date +%s) - s )) s" >> "$OUT/walltimes.txt"
  done
done

python3 - "$OUT" > "$OUT/summary.txt" <<'PY'
import json, os, sys
out = sys.argv[1]
G = 2.0 ** 30
rows = {}
for p in ("amp-bf16", "fp32"):
    for heads in ("fixed_max", "per_batch"):
        name = f"mask-rcnn-{p}-{heads}"
        try:
            job = json.load(open(os.path.join(out, name + ".json")))["jobs"][0]
        except Exception as e:  # no record: the run failed before writing one
            print(f"{name}: no record ({type(e).__name__})")
            continue
        rh = (job.get("runtime") or {}).get("roi_heads") or {}
        bi = job.get("batch_info") or {}
        tp = job.get("throughput") or 0
        rows[(p, heads)] = (tp, job.get("peak_memory_bytes") or 0, job.get("peak_allocated_bytes") or 0)
        print(f"{name}: {job['status']} batch {job['batch']} | {tp:.4g} {job['throughput_unit']} | "
              f"peak reserved {(job.get('peak_memory_bytes') or 0) / G:.2f} GiB allocated "
              f"{(job.get('peak_allocated_bytes') or 0) / G:.2f} GiB | slots box "
              f"{rh.get('box_slots', bi.get('box_roi_slots'))} mask {rh.get('mask_slots', bi.get('mask_roi_slots'))} | "
              f"per image: RoIs {rh.get('rois_per_image')} positives {rh.get('positives_per_image')} "
              f"over {rh.get('steps')} steps | losses {job.get('losses')} | {job.get('message', '')}")
for p in ("amp-bf16", "fp32"):
    a, b = rows.get((p, "fixed_max")), rows.get((p, "per_batch"))
    if a and b and a[0] > 0:
        print(f"{p}: per_batch / fixed_max throughput {b[0] / a[0]:.3f}, peak reserved "
              f"{(b[1] - a[1]) / G:+.2f} GiB, peak allocated {(b[2] - a[2]) / G:+.2f} GiB")
PY
cat "$OUT/walltimes.txt" 2>/dev/null
cat "$OUT/summary.txt"
