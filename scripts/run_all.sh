#!/usr/bin/env bash
# Runs every workload (or a suite, or chosen models) at one or more precisions, then writes the
# reports. A thin wrapper over the CLI: `gpubench run ... --journal`, then `gpubench report`.
#
#   scripts/run_all.sh [--gpu N | --gpus LIST | --cpu] [--precision P[,P...]]
#                      [--suite all|image|language | --model NAME ...]
#                      [--memory-tiers 6,8,11,24,48]
#                      [--same-batch] [--out DIR] [-- more 'gpubench run' options]
#
# P is fp32, tf32, amp-bf16 or amp-fp16 (default fp32); several, comma-separated, run one after
# the other. LIST is a data-parallel run's GPUs (--gpus 0,1 or all: one rank per GPU). Options
# after -- go to every `gpubench run` (e.g. -- --config FILE).
# DIR defaults to results/DEVICE-SELECTION-PRECISIONS (results/gpu0-all-fp32+amp-bf16), relative
# to the current folder, with no date in it: the same command again finds the same folder and
# continues an interrupted run as it was started (its journals keep their options); jobs already
# done are not repeated. To measure again from scratch, give another --out or remove the folder.
# With one precision DIR holds:
#   journal.jsonl   every finished job, appended as it ends; results.json (that run's document)
#   tiers.jsonl     the memory-tier searches (with --memory-tiers)
#   same-batch.jsonl  with --same-batch, each workload with a 2020 row again at the RTX 8000's
#                   2020 batch: a same-batch score beside the max-batch one in the reports
#   results.csv     one row per job of every journal above (tiers and same-batch rows included)
#   report.txt, report.md, report.html   everything above, beside the 2020 GPUs
# With several precisions, DIR/PRECISION/ holds each one's files as above, and DIR itself the
# combined results.csv and reports of all of them.
# Exit code: 0 when every job succeeded, 1 when any failed, 2 for bad input, 3 when the device is
# not there, 4 when a run stopped early; the reports are written for whatever was measured.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

device=(--gpu 0)
device_tag=gpu0
device_set=""
precisions=fp32
selection=()
selection_tag=""
tiers=""
same_batch=""
out=""
extra=()
usage_error() { echo "run_all.sh: $*" >&2; exit 2; }
pick_device() {
  [ -z "$device_set" ] || usage_error "give one of --gpu, --gpus and --cpu, not $device_set and $1"
  device_set=$1
}
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) pick_device "$1"; device=(--gpu "${2:?--gpu needs a number}"); device_tag=gpu$2
           shift 2 ;;
    --gpus) pick_device "$1"; device=(--gpus "${2:?--gpus needs a list such as 0,1 or all}")
            device_tag=gpus${2//,/-}; shift 2 ;;
    --cpu) pick_device "$1"; device=(--device cpu); device_tag=cpu; shift ;;
    --precision) precisions=${2:?--precision needs a value}; shift 2 ;;
    --suite|--model) selection+=("$1" "${2:?$1 needs a value}")
                     selection_tag+=${selection_tag:++}$2; shift 2 ;;
    --memory-tiers) tiers=$2; shift 2 ;;
    --same-batch) same_batch=1; shift ;;
    --out) out=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown option '$1' (see --help)" ;;
  esac
done
if [ ${#selection[@]} -eq 0 ]; then
  selection=(--suite all)
  selection_tag=all
fi
IFS=, read -r -a precision_list <<< "$precisions"
for p in "${precision_list[@]}"; do
  case $p in
    fp32|tf32|amp-bf16|amp-fp16) ;;
    *) usage_error "--precision: unknown precision '$p'; choose from fp32, tf32, amp-bf16," \
         "amp-fp16 (comma-separated for several)" ;;
  esac
done
if [ -n "$tiers" ] && [ "$device_tag" = cpu ]; then
  echo "run_all.sh: --memory-tiers emulates smaller GPUs; it needs --gpu N, not --cpu" >&2
  exit 3
fi

build_dir=${GPUBENCH_BUILD_DIR:-build}
case $build_dir in /*) ;; *) build_dir=$repo/$build_dir ;; esac
gpubench=$build_dir/gpubench
[ -x "$gpubench" ] || GPUBENCH_BUILD_DIR=$build_dir "$repo/scripts/setup.sh"
# A folder name from the selection: letters, digits, '.', '_', '-' and '+' only.
selection_tag=$(printf %s "$selection_tag" | tr -c 'A-Za-z0-9._+-' _)
out=${out:-results/$device_tag-$selection_tag-${precisions//,/+}}
mkdir -p "$out"
say() { echo "run_all: $*" >&2; }

status=0
worst() { [ "$1" -gt "$status" ] && status=$1; return 0; }

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

# The CSV and the three reports of the journals in "$@" into folder $1. A report that cannot be
# written makes the exit code 4; what was measured stays in the journals.
reports() {
  local dir=$1 format name
  shift
  "$gpubench" report "$@" --format csv --output "$dir/results.csv" || worst 4
  for format in table md html; do
    name=$([ $format = table ] && echo txt || echo $format)
    "$gpubench" report "$@" --format $format --output "$dir/report.$name" || worst 4
  done
}

# One precision into folder $2: the suite, then its tiers and same-batch runs, then its reports.
# Adds its journals to all_journals.
one_precision() {
  local precision=$1 dir=$2 code=0 j
  local journals=()
  mkdir -p "$dir"
  outputs=(--json "$dir/results.json")
  suite "$dir/journal.jsonl" "${selection[@]}" --precision "$precision" \
    ${extra[@]+"${extra[@]}"} || code=$?
  worst "$code"
  if [ -n "$tiers" ] && [ "$code" -le 1 ]; then
    outputs=()
    code=0
    suite "$dir/tiers.jsonl" "${selection[@]}" --precision "$precision" --memory-tiers "$tiers" \
      ${extra[@]+"${extra[@]}"} || code=$?
    worst "$code"
  fi
  if [ -n "$same_batch" ] && [ "$code" -le 1 ]; then
    outputs=()
    code=0
    suite "$dir/same-batch.jsonl" "${selection[@]}" --precision "$precision" --same-batch \
      ${extra[@]+"${extra[@]}"} || code=$?
    worst "$code"
  fi
  # Reports of whatever was measured, even when a run stopped with an error.
  for j in "$dir/journal.jsonl" "$dir/tiers.jsonl" "$dir/same-batch.jsonl"; do
    [ -s "$j" ] && journals+=("$j")
  done
  if [ ${#journals[@]} -gt 0 ]; then
    reports "$dir" "${journals[@]}"
    all_journals+=("${journals[@]}")
  fi
  # Exit 2 (bad input) or 3 (no device) will not change for the next precision.
  [ "$code" -ne 2 ] && [ "$code" -ne 3 ]
}

all_journals=()
if [ ${#precision_list[@]} -eq 1 ]; then
  one_precision "${precision_list[0]}" "$out" || true
else
  for p in "${precision_list[@]}"; do
    one_precision "$p" "$out/$p" || break
  done
  [ ${#all_journals[@]} -gt 0 ] && reports "$out" "${all_journals[@]}"
fi
if [ -f "$out/report.txt" ]; then
  cat "$out/report.txt"
  say "wrote $out/report.txt, report.md, report.html and results.csv"
  [ ${#precision_list[@]} -gt 1 ] && say "each precision's own files are in $out/PRECISION/"
fi
exit "$status"
