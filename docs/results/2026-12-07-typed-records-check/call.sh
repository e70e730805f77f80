#!/usr/bin/env bash
# On the GPU machine, 2026-12-07 (issue 40's "confirm one suite job still runs the same"): the
# tree with clocks and data_parallel typed builds against libtorch 2.11, and one suite job
# (bert-base amp-bf16, search and timed run, no cache) writes a record that the same binary reads
# back and reports. Everything goes to $OUT/check.tgz.
set -uo pipefail
cd "$(dirname "$(readlink -f "$0")")/../../.."
OUT=${OUT:-/tmp/out}
R=results/check
mkdir -p "$OUT" "$R"
{ date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
} > "$R/env.txt" 2>&1
s=$(date +%s)
GPUBENCH_JOBS=16 GPUBENCH_TARGET=gpubench scripts/setup.sh > "$R/build.log" 2>&1 \
  || { tail -30 "$R/build.log"; tar -C results -czf "$OUT/check.tgz" check; exit 2; }
echo "build $(( $(date +%s) - s )) s" >> "$R/walltimes.txt"
build/gpubench info > "$R/info.txt" 2>&1
s=$(date +%s)
timeout 300 build/gpubench run --gpu 0 --model bert-base --precision amp-bf16 --no-cache \
  --journal "$R/journal.jsonl" --json "$R/bert-base-amp-bf16.json" > "$R/run.txt" 2> "$R/run.log"
echo "run exit $? after $(( $(date +%s) - s )) s" >> "$R/walltimes.txt"
build/gpubench report "$R/bert-base-amp-bf16.json" --wide > "$R/report.txt" 2>&1
echo "report exit $?" >> "$R/walltimes.txt"
tar -C results -czf "$OUT/check.tgz" check
cat "$R/walltimes.txt"
