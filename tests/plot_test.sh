#!/usr/bin/env bash
# scripts/plot.py on the report golden's CSV: the numbers each figure draws (--print, no
# matplotlib needed), a file that is no gpubench CSV refused, and, where matplotlib is installed,
# the PNG files written.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${GPUBENCH_PYTHON3:-python3}
csv=$root/tests/golden/report.csv
fail=0
out=$("$python" "$root/scripts/plot.py" --print "$csv") || { echo "plot.py --print failed"; exit 1; }
expect() {
  if ! grep -qxF "$1" <<<"$out"; then echo "missing line: $1"; fail=1; fi
}
# The H200's amp-bf16 over its fp32 (52.56 / 19.90); a run that timed out draws no bar.
expect "precision: nasnet-large: NVIDIA H200 amp-bf16: 2.641"
expect "normalized: deeplabv3: NVIDIA H200 fp32: 19.87"
# A tier where nothing fits is a point at 0, in the order of the caps.
expect "tiers: transformer-big on NVIDIA H200 fp32: 6 GiB: 0, 8 GiB: 4300, 11 GiB: 9800, 24 GiB: 36500, 48 GiB: 83000"
expect "per_kwh: transformer-big: NVIDIA H200 fp32: 1.146e+09"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'a,b\n1,2\n' > "$tmp/other.csv"
if err=$("$python" "$root/scripts/plot.py" --print "$tmp/other.csv" 2>&1); then
  echo "a CSV without gpubench's columns was accepted"; fail=1
elif ! grep -q "not a gpubench CSV" <<<"$err"; then
  echo "unexpected refusal: $err"; fail=1
fi
if "$python" -c "import matplotlib" 2>/dev/null; then
  "$python" "$root/scripts/plot.py" "$csv" --out "$tmp/figures" > /dev/null || fail=1
  for f in normalized precision tiers per_kwh; do
    [ -s "$tmp/figures/$f.png" ] || { echo "no $f.png"; fail=1; }
  done
else
  echo "matplotlib not installed: the PNG files were not drawn"
fi
exit $fail
