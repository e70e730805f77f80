#!/usr/bin/env bash
# Checks the analytic FLOPs per unit (scripts/dev/flops_analytic.py, the derivations of
# docs/workloads/*.md) against a counted training step (scripts/dev/count_flops.sh) at a size the
# CPU can run, and the full-size formula against configs/models/*.yaml's flops_per_unit.
#   scripts/dev/check_flops.sh [WORKLOAD...]     (default: the six derived this way)
# Needs build/gpubench_tests and python3 with PyYAML. Slow: about 10 minutes for all six on two
# loaded cores (mt-dnn counts 34 steps of a narrowed BERT). Exit 1 on a mismatch: counted and
# analytic must agree within 0.1 % (mt-dnn 0.5 %), the yaml and the full-size formula within 0.5 % (rounding).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# workload | batch | model patch for the count | steps | warm-up | tolerance. mt-dnn's counts the
# timed cycle after its 10 opening steps, narrowed so that the SAN heads weigh more: their
# first-segment length is drawn, the formula takes half the padded length.
cases=(
  "deeplabv3|2|{\"image_size\": 129}|1|0|1e-3"
  "stylegan|1|{\"resolution\": 256}|1|0|1e-3"
  "pix2pixhd|1|{\"height\": 64, \"width\": 128}|1|0|1e-3"
  "mask-rcnn|1|{}|1|0|1e-3"
  "mt-dnn|8|{\"hidden_size\": 128, \"layers\": 2, \"heads\": 2, \"intermediate_size\": 512}|24|10|5e-3"
  "unsupmt|1500|{\"dim\": 128, \"layers\": 2, \"heads\": 2, \"ffn_dim\": 512, \"corpus_sentences\": 200000}|1|0|1e-3"
)
want=("$@")
status=0
for c in "${cases[@]}"; do
  IFS='|' read -r name batch patch steps warmup tolerance <<<"$c"
  if [[ ${#want[@]} -gt 0 && ! " ${want[*]} " =~ " $name " ]]; then continue; fi
  scripts/dev/count_flops.sh "$name" "$batch" "$patch" "$steps" "$warmup" >"$out/$name.txt"
  counted=$(sed -n 's/.*steps: .* FLOPs per unit \([0-9.e+]*\) .*/\1/p' "$out/$name.txt")
  info=()
  [[ $name == unsupmt ]] && info=(--batch-info "$out/$name.txt")
  analytic=$(python3 scripts/dev/flops_analytic.py "$name" --set "$patch" --batch "$batch" "${info[@]}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["train_flops_per_unit"])')
  stated=$(sed -n 's/^flops_per_unit: *\([0-9.e+]*\).*/\1/p' "configs/models/$name.yaml")
  full=""
  if [[ $name != unsupmt ]]; then
    full=$(python3 scripts/dev/flops_analytic.py "$name" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["train_flops_per_unit"])')
  fi
  python3 - "$name" "$counted" "$analytic" "$stated" "$full" "$tolerance" <<'PY' || status=1
import sys
name, counted, analytic, stated, full = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
ok = abs(analytic / counted - 1) <= float(sys.argv[6])
line = f"{name}: counted {counted:.6g}, analytic {analytic:.6g} ({100 * (analytic / counted - 1):+.3f} %)"
if full:
    good = abs(float(stated) / float(full) - 1) <= 5e-3
    ok = ok and good
    line += f"; full size {float(full):.4g}, yaml {stated}" + ("" if good else " MISMATCH")
print(("ok   " if ok else "FAIL ") + line)
sys.exit(0 if ok else 1)
PY
done
exit $status
