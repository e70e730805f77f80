#!/usr/bin/env bash
# Runs every workload (or a suite, or chosen models) on one GPU at one precision, then writes
# the reports. A thin wrapper over the CLI: `gpubench run ... --journal`, then `gpubench report`.
#
#   scripts/run_all.sh [--gpu N | --cpu] [--precision fp32|tf32|amp-bf16|amp-fp16]
#                      [--suite all|image|language | --model NAME ...] [--memory-tiers 6,8,11,24,48]
#                      [--out DIR] [-- more 'gpubench run' options, e.g. --config FILE]
#
# Writes into DIR (default results/DATE-gpuN-PRECISION):
#   journal.jsonl   every finished job, appended as it ends; results.json and results.csv
#   tiers.jsonl     the memory-tier searches (with --memory-tiers)
#   report.txt, report.md, report.html   everything above, beside the 2020 GPUs
# The same command again with the same --out continues an interrupted run: jobs already in the
# journal are not repeated. Exit code: 0 when every job succeeded, 1 when any failed (the
# reports are written either way), 2 for bad input, 3 when the GPU is not there.
set -euo pipefail
cd "$(dirname "$0")/.."

device=(--gpu 0)
device_tag=gpu0
precision=fp32
selection=()
tiers=""
out=""
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) device=(--gpu "$2"); device_tag=gpu$2; shift 2 ;;
    --cpu) device=(--device cpu); device_tag=cpu; shift ;;
    --precision) precision=$2; shift 2 ;;
    --suite|--model) selection+=("$1" "$2"); shift 2 ;;
    --memory-tiers) tiers=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_all.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#selection[@]} -eq 0 ] && selection=(--suite all)

gpubench=${GPUBENCH_BUILD_DIR:-build}/gpubench
[ -x "$gpubench" ] || scripts/setup.sh
out=${out:-results/$(date -u +%Y%m%d-%H%M%S)-$device_tag-$precision}
mkdir -p "$out"
say() { echo "run_all: $*" >&2; }

# Runs (or, when its journal exists, continues) one suite, its table left for the report at the
# end; $1 is the journal, the rest are the
# options of a new run. Exit codes 0 and 1 go on to the report; anything else stops the script.
suite() {
  local journal=$1 code=0 start
  shift
  start=$(date +%s)
  if [ -s "$journal" ]; then
    say "continuing $journal"
    "$gpubench" run --resume "$journal" "${device[@]}" "${outputs[@]}" > /dev/null || code=$?
  else
    "$gpubench" run "${device[@]}" --journal "$journal" "${outputs[@]}" "$@" > /dev/null || code=$?
  fi
  [ "$code" -gt 1 ] && exit "$code"
  say "$journal: wall time $(( $(date +%s) - start )) s"
  return "$code"
}

status=0
outputs=(--json "$out/results.json" --csv "$out/results.csv")
suite "$out/journal.jsonl" "${selection[@]}" --precision "$precision" "${extra[@]}" || status=1
journals=("$out/journal.jsonl")
if [ -n "$tiers" ]; then
  outputs=()
  suite "$out/tiers.jsonl" "${selection[@]}" --precision "$precision" --memory-tiers "$tiers" \
    "${extra[@]}" || status=1
  journals+=("$out/tiers.jsonl")
fi

"$gpubench" report "${journals[@]}" --format table --output "$out/report.txt"
"$gpubench" report "${journals[@]}" --format md --output "$out/report.md"
"$gpubench" report "${journals[@]}" --format html --output "$out/report.html"
cat "$out/report.txt"
say "wrote $out/report.txt, report.md, report.html, results.json, results.csv"
exit "$status"
