#!/usr/bin/env bash
# Runs every workload (or a suite, or chosen models) on one GPU at one precision, then writes
# the reports. A thin wrapper over the CLI: `gpubench run ... --journal`, then `gpubench report`.
#
#   scripts/run_all.sh [--gpu N | --cpu] [--precision fp32|tf32|amp-bf16|amp-fp16]
#                      [--suite all|image|language | --model NAME ...] [--memory-tiers 6,8,11,24,48]
#                      [--same-batch] [--out DIR] [-- more 'gpubench run' options, e.g. --config FILE]
#
# Writes into DIR (default results/DATE-gpuN-PRECISION, relative to the current folder):
#   journal.jsonl   every finished job, appended as it ends; results.json and results.csv
#   tiers.jsonl     the memory-tier searches (with --memory-tiers)
#   same-batch.jsonl  with --same-batch, each workload with a 2020 row again at the RTX 8000's
#                   2020 batch: a same-batch score beside the max-batch one in the reports
#   report.txt, report.md, report.html   everything above, beside the 2020 GPUs
# The same command again with the same --out continues an interrupted run as it was started
# (its journals keep their options): jobs already done are not repeated. Exit code: 0 when every
# job succeeded, 1 when any failed, 2 for bad input, 3 when the device is not there, 4 when the
# run stopped early; the reports are written for whatever was measured.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

device=(--gpu 0)
device_tag=gpu0
precision=fp32
selection=()
tiers=""
same_batch=""
out=""
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) device=(--gpu "$2"); device_tag=gpu$2; shift 2 ;;
    --cpu) device=(--device cpu); device_tag=cpu; shift ;;
    --precision) precision=$2; shift 2 ;;
    --suite|--model) selection+=("$1" "$2"); shift 2 ;;
    --memory-tiers) tiers=$2; shift 2 ;;
    --same-batch) same_batch=1; shift ;;
    --out) out=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_all.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#selection[@]} -eq 0 ] && selection=(--suite all)
if [ -n "$tiers" ] && [ "$device_tag" = cpu ]; then
  echo "run_all.sh: --memory-tiers emulates smaller GPUs; it needs --gpu N, not --cpu" >&2
  exit 3
fi

build_dir=${GPUBENCH_BUILD_DIR:-build}
case $build_dir in /*) ;; *) build_dir=$repo/$build_dir ;; esac
gpubench=$build_dir/gpubench
[ -x "$gpubench" ] || GPUBENCH_BUILD_DIR=$build_dir "$repo/scripts/setup.sh"
out=${out:-results/$(date -u +%Y%m%d-%H%M%S)-$device_tag-$precision}
mkdir -p "$out"
say() { echo "run_all: $*" >&2; }

# Runs (or, when its journal exists, continues) one suite; its table is left for the reports at
# the end. $1 is the journal, the rest are the options of a new run. Returns gpubench's code.
suite() {
  local journal=$1 code=0 start
  shift
  start=$(date +%s)
  if [ -s "$journal" ]; then
    say "continuing $journal as it was started (another --out starts a new run)"
    "$gpubench" run --resume "$journal" "${device[@]}" ${outputs[@]+"${outputs[@]}"} \
      > /dev/null || code=$?
  else
    "$gpubench" run "${device[@]}" --journal "$journal" ${outputs[@]+"${outputs[@]}"} "$@" \
      > /dev/null || code=$?
  fi
  say "$journal: exit $code, wall time $(( $(date +%s) - start )) s"
  return "$code"
}

status=0
worst() { [ "$1" -gt "$status" ] && status=$1; return 0; }
outputs=(--json "$out/results.json" --csv "$out/results.csv")
code=0
suite "$out/journal.jsonl" "${selection[@]}" --precision "$precision" \
  ${extra[@]+"${extra[@]}"} || code=$?
worst "$code"
if [ -n "$tiers" ] && [ "$code" -le 1 ]; then
  outputs=()
  code=0
  suite "$out/tiers.jsonl" "${selection[@]}" --precision "$precision" --memory-tiers "$tiers" \
    ${extra[@]+"${extra[@]}"} || code=$?
  worst "$code"
fi

if [ -n "$same_batch" ] && [ "$code" -le 1 ]; then
  outputs=()
  code=0
  suite "$out/same-batch.jsonl" "${selection[@]}" --precision "$precision" --same-batch \
    ${extra[@]+"${extra[@]}"} || code=$?
  worst "$code"
fi

# Reports of whatever was measured, even when a run stopped with an error.
journals=()
for j in "$out/journal.jsonl" "$out/tiers.jsonl" "$out/same-batch.jsonl"; do
  [ -s "$j" ] && journals+=("$j")
done
if [ ${#journals[@]} -gt 0 ]; then
  for format in table md html; do
    name=$([ $format = table ] && echo txt || echo $format)
    "$gpubench" report "${journals[@]}" --format $format --output "$out/report.$name" ||
      worst 4
  done
  [ -f "$out/report.txt" ] && cat "$out/report.txt"
  say "wrote $out/report.txt, report.md, report.html, results.json, results.csv"
fi
exit "$status"
