#!/usr/bin/env bash
# On the GPU machine: build against the PyTorch wheel's CUDA libtorch, run every test (the _CUDA
# ones included) and record the environment. Logs go to $OUT (the device tool's output folder).
set -uo pipefail
cd "$(dirname "$0")/../../.."
# Nothing can be installed on the GPU machine, so no Chromium: the HTML check runs in CI.
export GPUBENCH_SKIP_BROWSER_TESTS=${GPUBENCH_SKIP_BROWSER_TESTS:-1}
OUT=${OUT:-/tmp/gpubench-out}
mkdir -p "$OUT"
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
  nproc; cmake --version | head -1
} > "$OUT/env.txt" 2>&1
start=$(date +%s)
GPUBENCH_JOBS=16 GPUBENCH_TARGET=all scripts/setup.sh > "$OUT/build.log" 2>&1
status=$?
echo "build: exit $status in $(( $(date +%s) - start )) s" | tee -a "$OUT/env.txt"
[ $status -eq 0 ] || { tail -60 "$OUT/build.log"; exit $status; }
build/gpubench info > "$OUT/info.txt" 2>&1; cat "$OUT/info.txt"
start=$(date +%s)
ctest --test-dir build -j 8 --output-on-failure > "$OUT/ctest.log" 2>&1
echo "ctest: exit $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/env.txt"
grep -E "tests passed|FAILED|Failed" "$OUT/ctest.log" | head -20
