#!/usr/bin/env bash
# On the GPU machine: whole jobs (search, then the timed run in a fresh process), one
# `gpubench run` each, so that a call stopped at its deadline keeps every job that finished.
# Builds nothing.
#
#   scripts/dev/gpu/jobs.sh GPUBENCH OUTDIR MODEL:PRECISION[:CONFIG][@BATCH] [...] [-- RUN FLAGS...]
#
# A job's CONFIG (a YAML overlay, as `gpubench run --config`) names its files after it:
# MODEL-PRECISION-NAME for CONFIG=path/NAME.yaml. @BATCH times that batch with no search
# (`--batch BATCH`) and adds -bBATCH to the names.
# Writes OUTDIR/MODEL-PRECISION.{jsonl,json,log} (journal, results, progress) and appends the
# wall time of each to OUTDIR/walltimes.txt; prints one line per finished job last: status,
# searched and timed batch, probes, search seconds, warm-up seconds, throughput, peaks
# (reserved and allocated) and the losses at both ends of the window. Searches run in full
# (--no-cache), so their probes and seconds are the search's own.
set -uo pipefail
bin=${1:?usage: jobs.sh GPUBENCH OUTDIR MODEL:PRECISION...}
out=${2:?usage: jobs.sh GPUBENCH OUTDIR MODEL:PRECISION...}
shift 2
jobs=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do jobs+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
mkdir -p "$out"
for job in "${jobs[@]}"; do
  batch=""
  case $job in *@*) batch=${job##*@}; job=${job%@*} ;; esac
  IFS=: read -r m p cfg <<< "$job"
  name=$m-$p extra=()
  if [ -n "$cfg" ]; then name=$name-$(basename "$cfg" .yaml); extra=(--config "$cfg"); fi
  if [ -n "$batch" ]; then name=$name-b$batch; extra+=(--batch "$batch"); fi
  [ -s "$out/$name.json" ] && continue  # finished in an earlier call
  # A journal without its result: that job was cut (a call's deadline). Keep it aside and start
  # the job afresh (gpubench refuses to append a new run to an existing journal).
  [ -e "$out/$name.jsonl" ] && mv "$out/$name.jsonl" "$out/$name.cut-$(date +%s).jsonl"
  s=$(date +%s)
  "$bin" run --gpu 0 --model "$m" --precision "$p" --no-cache "${extra[@]}" "$@" \
    --journal "$out/$name.jsonl" --json "$out/$name.json" > /dev/null 2> "$out/$name.log"
  echo "$name: exit $?, wall $(( $(date +%s) - s )) s" >> "$out/walltimes.txt"
done
cat "$out/walltimes.txt"
python3 - "$out" <<'PY'
import glob, json, os, sys
G = 2.0 ** 30
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    for j in json.load(open(f)).get("jobs", []):
        s = j.get("search") or {}
        w = j.get("warmup") or {}
        alloc = (j.get("memory") or {}).get("allocator")
        print(f"{os.path.basename(f)[:-5]}: {j['status']} search {s.get('max_batch')} "
              f"timed {j['batch']} probes {s.get('probe_count')} search {s.get('seconds', 0):.1f} s "
              f"warm-up {w.get('seconds', 0):.1f} s | {j.get('throughput') or 0:.4g} "
              f"{j['throughput_unit']} | peak reserved {(j.get('peak_memory_bytes') or 0) / G:.1f} "
              f"allocated {(j.get('peak_allocated_bytes') or 0) / G:.1f} GiB | allocator {alloc} | "
              f"start {j.get('losses_start')} end {j.get('losses')} | {j.get('message', '')}")
PY
