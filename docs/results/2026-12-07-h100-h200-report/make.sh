#!/usr/bin/env bash
# Issue 46 item 1: one report of the H100 and the H200, both measured with the tree at 7903cfb,
# beside the eight 2020 cards (normalized to the RTX 8000), in md, csv, json and html, from the
# raw journals alone. Run on any machine with a built gpubench, from the repository's root:
#
#   docs/results/2026-12-07-h100-h200-report/make.sh [GPUBENCH]     (default build/gpubench)
#
# Prices per card-hour: the midpoints of the "specialty provider" on-demand ranges of May 2026
# in https://www.mercatus-ai.com/blog/cloud-gpu-pricing (H100 SXM5 $2.50-3.50, H200 SXM5
# $3.50-4.50), an example a reader replaces with their own quote (report --price-per-hour).
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/../../.."
G=${1:-build/gpubench}
here=docs/results/2026-12-07-h100-h200-report
R=docs/results
journals=(
  "$R/2026-12-06-h100-suites/bf16/journal.jsonl"
  "$R/2026-12-06-h100-suites/fp32/journal.jsonl"
  "$R/2026-12-07-suites-7903cfb/h100/tf32/journal.jsonl"
  "$R/2026-12-07-suites-7903cfb/h200/bf16/journal.jsonl"
  "$R/2026-12-07-suites-7903cfb/h200/fp32/journal.jsonl"
)
# Until the H200 has run the tree of 7903cfb, its latest suites stand in: an earlier tree
# (the records' git_commit says which), so an H100/H200 ratio is the card and two days of code.
stand_in=(
  "$R/2026-12-04-h200-bf16-suite-tiers-repeats/bf16/journal.jsonl"
  "$R/2026-12-04-h200-fp32-suite-host-bound/fp32/journal.jsonl"
)
have=()
for j in "${journals[@]}"; do
  if [ -s "$j" ]; then have+=("$j"); else echo "make.sh: no $j (not measured yet): left out" >&2; fi
done
if ! printf '%s\n' "${have[@]}" | grep -q h200; then
  echo "make.sh: the H200's suites of 2026-12-04 (an earlier tree) stand in for 7903cfb's" >&2
  have+=("${stand_in[@]}")
fi
prices=(--price-per-hour "H100=3.00")
if printf '%s\n' "${have[@]}" | grep -q h200; then prices+=(--price-per-hour "H200=4.00"); fi
for f in md csv json html; do
  "$G" report "${have[@]}" "${prices[@]}" --format "$f" -o "$here/report.$f"
done
"$G" report "${have[@]}" "${prices[@]}" --wide > "$here/report.txt"
printf '%s\n' "${have[@]}" > "$here/inputs.txt"
echo "make.sh: wrote $here/report.{md,csv,json,html,txt} from ${#have[@]} journals" >&2
