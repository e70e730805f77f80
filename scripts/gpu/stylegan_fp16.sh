#!/usr/bin/env bash
# On the GPU machine (issue 18): why stylegan diverges in amp-fp16, and whether StyleGAN2-ADA's
# fp16 recipe trains it. Builds nothing. About 5-6 minutes; each case has its own time limit.
#
#   scripts/gpu/stylegan_fp16.sh GPUBENCH OUTDIR [BATCH]   (BATCH: default 132, the searched one)
#
# 1. trace: GPUBENCH_TRACE_ACTIVATIONS=8 (every G and D layer's dtype, max |x| and non-finite
#    count for the first 8 iterations; the parameters after each update) at the default settings;
#    OUTDIR/trace.log, its first non-finite lines in the summary.
# 2. anomaly: GPUBENCH_DETECT_ANOMALY=5 (backward in anomaly mode from the 5th backward: the
#    first backward node that returns NaN is named); OUTDIR/anomaly.log.
# 3. the recipe (fp16 in the 4 highest resolutions, clamp 256) and the clamp alone, each a timed
#    run at BATCH through jobs.sh: status, losses at both ends, skipped updates, throughput.
# Writes OUTDIR/summary.txt.
set -uo pipefail
bin=${1:?usage: stylegan_fp16.sh GPUBENCH OUTDIR [BATCH]}
out=${2:?usage: stylegan_fp16.sh GPUBENCH OUTDIR [BATCH]}
batch=${3:-132}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"

# traced NAME ENV=VALUE SECONDS: one run at the batch with a diagnosis switch, stderr kept.
traced() {
  local name=$1 env=$2 limit=$3 s rc
  s=$(date +%s)
  timeout --kill-after=10 "$limit" env "$env" "$bin" run --gpu 0 --model stylegan \
    --precision amp-fp16 --batch "$batch" --max-seconds 5 --format none \
    --json "$out/$name.json" > /dev/null 2> "$out/$name.log"
  rc=$?
  echo "$name ($env): exit $rc, wall $(( $(date +%s) - s )) s" >> "$summary"
  grep -m 12 -iE "nan|inf[^o]|non-finite|anomaly|returned" "$out/$name.log" | cut -c1-220 \
    | sed 's/^/  /' >> "$summary"
  python3 - "$out/$name.json" >> "$summary" 2>/dev/null <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
print("  status", j["status"], "|", j.get("message", "")[:200])
PY
}

traced trace GPUBENCH_TRACE_ACTIVATIONS=8 110
traced anomaly GPUBENCH_DETECT_ANOMALY=5 90

# The recipe's variants as timed runs at the batch (jobs.sh writes their records and a line each).
timeout --kill-after=10 150 "$here/jobs.sh" "$bin" "$out/jobs" \
  "stylegan:amp-fp16:$here/stylegan-fp16-recipe.yaml@$batch" \
  "stylegan:amp-fp16:$here/stylegan-fp16-clamp.yaml@$batch" -- --max-seconds 8 >> "$summary" 2>&1
echo "recipe variants: exit $?" >> "$summary"
cat "$summary"
