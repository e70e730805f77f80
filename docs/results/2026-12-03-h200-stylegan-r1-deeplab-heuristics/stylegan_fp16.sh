#!/usr/bin/env bash
# Issue 18 on the GPU machine: why stylegan diverges in amp-fp16, and whether StyleGAN2-ADA's
# fp16 recipe (model settings fp16_resolutions, conv_clamp; docs/workloads/stylegan.md,
# "amp-fp16") trains. Builds nothing; about 5 minutes in all (each case has its own limit, and
# the whole script stops starting cases past its budget).
#
#   docs/results/2026-12-03-h200-stylegan-r1-deeplab-heuristics/stylegan_fp16.sh \
#     GPUBENCH_BINARY OUTDIR
#
# Cases (each one `gpubench run` at a fixed batch, cuDNN autotuning off so that no case spends
# its minute autotuning; the throughputs compare with each other, not with the suite's):
#   a  trace:   v1 under plain autocast (fp16_resolutions all, conv_clamp 0; the defaults before 2026-12-03), batch 132 (STYLEGAN_FP16_BATCH), the first 8 iterations
#               traced per layer (GPUBENCH_TRACE_ACTIVATIONS) with the scaler's overflow trace;
#               the first non-finite lines go into summary.txt, the whole trace to a-trace.log
#   b  anomaly: the same with GPUBENCH_DETECT_ANOMALY=1 (the first backward node returning NaN
#               throws, naming itself; with loss scaling that may be an ordinary overflow the
#               scaler would have skipped: read it with a's trace)
#   c  recipe:  the same batch, short timed runs: fp16_resolutions 4 + conv_clamp 256 (ADA's);
#               conv_clamp 256 alone; fp16_resolutions 4 alone; and the first of those that
#               is ok traced too (c-trace.log), if time is left
#   d  search:  the first recipe variant that came out ok, as a whole job (search, then the
#               timed run, autotuning on), if time is left
# Writes OUTDIR/summary.txt: one line per case (settings, batch, status, losses at the start and
# end of the window, skipped updates of D and G, throughput, message).
set -uo pipefail
bin=${1:?usage: stylegan_fp16.sh GPUBENCH_BINARY OUTDIR}
out=${2:?usage: stylegan_fp16.sh GPUBENCH_BINARY OUTDIR}
mkdir -p "$out"
start=$(date +%s)
budget=${STYLEGAN_FP16_BUDGET_S:-400}
# The batch of cases a-c: 132, where the searched job diverged on 2026-12-03 (STYLEGAN_FP16_BATCH).
batch=${STYLEGAN_FP16_BATCH:-132}
summary=$out/summary.txt
: > "$summary"

# overlay NAME MODEL_SETTINGS [RUNTIME_SETTINGS]: writes OUTDIR/NAME.yaml, prints its path.
overlay() {
  local f=$out/$1.yaml
  { echo "models:"; echo "  stylegan:"; echo "    model: {$2}"
    [ -n "${3:-}" ] && echo "    runtime: {$3}"; } > "$f"
  echo "$f"
}

left() { echo $(( budget - ($(date +%s) - start) )); }

# run_case NAME LIMIT_S CONFIG [gpubench flags...]: one run within min(LIMIT_S, budget left),
# its stderr in NAME.log, its record in NAME.json, one line in summary.txt.
run_case() {
  local name=$1 limit=$2 cfg=$3 s rc
  shift 3
  local l; l=$(left)
  [ "$l" -lt "$limit" ] && limit=$l
  if [ "$limit" -lt 20 ]; then echo "$name: not run (budget spent)" >> "$summary"; return; fi
  s=$(date +%s)
  timeout -k 10 "$limit" "$bin" run --gpu 0 --model stylegan --precision amp-fp16 \
    --config "$cfg" --timeout "$limit" "$@" -f none \
    --journal "$out/$name.jsonl" --json "$out/$name.json" > /dev/null 2> "$out/$name.log"
  rc=$?
  python3 - "$out/$name.json" "$name" "$rc" "$(( $(date +%s) - s ))" "$cfg" >> "$summary" <<'PY'
import json, os, sys
path, name, rc, wall, cfg = sys.argv[1:]
settings = open(cfg).read().split("model: ")[1].split("\n")[0] if os.path.exists(cfg) else "?"
try:
    j = json.load(open(path))["jobs"][0]
except Exception:
    print(f"{name}: {settings} | no record (exit {rc}, {wall} s: killed at its limit or failed "
          f"before one; see {name}.log)")
    sys.exit()
bi = j.get("batch_info") or {}
skips = []
for u in (j.get("runtime") or {}).get("updaters", []):
    skips.append(f"{u['name']} skipped {u.get('updates_skipped')}/{u.get('updates_checked')}"
                 f" (window {u.get('window_updates_skipped')}/{u.get('window_updates_checked')})")
fmt = lambda d: {k: float(f"{v:.4g}") for k, v in d.items()} if isinstance(d, dict) else d
print(f"{name}: {settings} | recorded fp16_resolutions {bi.get('fp16_resolutions')} conv_clamp "
      f"{bi.get('conv_clamp')} r1_pass {bi.get('r1_pass')} | batch {j.get('batch')} | "
      f"{j.get('status')} | start {fmt(j.get('losses_start'))} end {fmt(j.get('losses'))} | "
      f"{'; '.join(skips)} | {j.get('throughput') or 0:.4g} images/s | exit {rc}, {wall} s | "
      f"{(j.get('message') or '')[:300]}")
PY
}

# first_nonfinite LOG: the first trace lines with non-finite values (activations or parameters)
# and the first overflow-trace lines, indented, into summary.txt.
first_nonfinite() {
  {
    echo "  first non-finite activations or parameters in $(basename "$1"):"
    grep -E "activation trace:.*nonfinite [1-9]" "$1" | head -8 | sed 's/^/    /'
    echo "  largest |x| per iteration (first 3 layers over 1e4):"
    grep -E "activation trace: it" "$1" |
      awk -F'max\\|x\\| ' 'NF > 1 { split($2, a, " "); if (a[1] + 0 > 1e4) print }' | head -3 |
      sed 's/^/    /'
    echo "  parameters after each update:"
    grep -E "activation trace:.*after (D|G) update" "$1" | head -16 | sed 's/^/    /'
    echo "  first overflow-trace lines:"
    grep -A3 -E "^overflow trace" "$1" | head -8 | sed 's/^/    /'
    echo "  anomaly / errors:"
    grep -iE "returned nan|anomaly|error" "$1" | grep -v "should be enabled only" | head -4 |
      sed 's/^/    /'
  } >> "$summary"
}

fixed=(--batch "$batch" --warmup-steps 3 --min-steps 3 --min-seconds 3 --max-seconds 3)
noautotune="cudnn_benchmark: false"

# a: the trace of v1 under plain autocast.
cfg=$(overlay a-trace "fp16_resolutions: all, conv_clamp: 0" "$noautotune")
GPUBENCH_TRACE_ACTIVATIONS=8 GPUBENCH_TRACE_OVERFLOW=1 run_case a-trace 100 "$cfg" "${fixed[@]}"
first_nonfinite "$out/a-trace.log"

# b: anomaly mode from the first backward on.
cfg=$(overlay b-anomaly "fp16_resolutions: all, conv_clamp: 0" "$noautotune")
GPUBENCH_DETECT_ANOMALY=1 run_case b-anomaly 60 "$cfg" "${fixed[@]}"
first_nonfinite "$out/b-anomaly.log"

# c: the recipe variants.
ok_variant=""
for v in "c-res4-clamp256|fp16_resolutions: '4', conv_clamp: 256" \
         "c-clamp256|fp16_resolutions: all, conv_clamp: 256" \
         "c-res4|fp16_resolutions: '4', conv_clamp: 0"; do
  name=${v%%|*} settings=${v#*|}
  cfg=$(overlay "$name" "$settings" "$noautotune")
  run_case "$name" 60 "$cfg" "${fixed[@]}"
  if [ -z "$ok_variant" ] && grep -q "^$name: .*| ok |" "$summary"; then ok_variant=$settings; fi
done

# c-trace: the first ok variant traced (its largest activations: how near 65504 it runs).
if [ -n "$ok_variant" ] && [ "$(left)" -gt 80 ]; then
  cfg=$(overlay c-trace "$ok_variant" "$noautotune")
  GPUBENCH_TRACE_ACTIVATIONS=6 run_case c-trace 45 "$cfg" "${fixed[@]}"
  first_nonfinite "$out/c-trace.log"
fi

# d: the whole job (search and timed run, autotuning on) with the first ok variant.
if [ -n "$ok_variant" ]; then
  cfg=$(overlay d-search "$ok_variant")
  run_case d-search "$(left)" "$cfg"
else
  echo "d-search: not run (no recipe variant came out ok)" >> "$summary"
fi

echo "total $(( $(date +%s) - start )) s" >> "$summary"
cat "$summary"
