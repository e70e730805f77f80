#!/usr/bin/env bash
# On the GPU machine: step_speed.sh's side-by-side cases repeated, gpubench and the Python
# reference alternating (gpubench, Python, gpubench, Python, ...), each a fresh process. For a
# case whose one-run ratio lies within run-to-run noise of 1 (transformer-big fp32: 0.994 and
# 0.999 in two calls), the repeats say whether gpubench is at least as fast or not.
#
#   scripts/dev/gpu/speed_repeats.sh GPUBENCH OUT N MODEL:PRECISION [MODEL:PRECISION ...]
#
# Round K goes to OUT/rK (step_speed.sh's records and summary, WARM48=0); a round finished in an
# earlier call is kept. OUT/summary.txt: every round's pair, then per case the medians of both
# sides, the median of the per-round ratios, and the lowest and highest ratio.
set -uo pipefail
[ $# -ge 4 ] || { echo "usage: $0 GPUBENCH OUT N MODEL:PRECISION..." >&2; exit 2; }
bin=$1 out=$2 n=$3
shift 3
mkdir -p "$out"
here=$(dirname "$0")
for k in $(seq 1 "$n"); do
  WARM48=0 GRAPHS=0 VARIANT='' "$here/step_speed.sh" "$bin" "$out/r$k" "$@" > "$out/r$k.log" 2>&1
done
python3 - "$out" "$n" > "$out/summary.txt" <<'PY'
import re, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
pat = re.compile(r"^(\S+) (\S+) batch (\d+): gpubench ([0-9.naN]+), python ([0-9.naN]+) (\S+), ")
cases = {}
for k in range(1, n + 1):
    try:
        lines = open(f"{out}/r{k}/summary.txt").read().splitlines()
    except OSError:
        continue
    for line in lines:
        m = pat.match(line)
        if not m:
            continue
        model, prec, batch, ours, py, unit = m.groups()
        print(f"round {k}: {line}")
        cases.setdefault((model, prec, batch, unit), []).append((float(ours), float(py)))
for (model, prec, batch, unit), pairs in cases.items():
    good = [(o, p) for o, p in pairs if o == o and p == p and p > 0]
    if not good:
        print(f"{model} {prec} batch {batch}: no complete pair")
        continue
    ratios = [o / p for o, p in good]
    print(f"{model} {prec} batch {batch}: {len(good)} pairs; gpubench median "
          f"{statistics.median(o for o, _ in good):.1f}, python median "
          f"{statistics.median(p for _, p in good):.1f} {unit}; gpubench/python median "
          f"{statistics.median(ratios):.4f}, lowest {min(ratios):.4f}, highest {max(ratios):.4f}")
PY
cat "$out/summary.txt"
