#!/usr/bin/env bash
# Counted FLOPs per unit of one training step of a workload on the CPU (tests/flops_test.cpp,
# FlopCount.WorkloadStep): usage
#   scripts/dev/count_flops.sh WORKLOAD [BATCH] [MODEL_PATCH_JSON] [STEPS] [WARMUP]
# e.g. scripts/dev/count_flops.sh pix2pixhd 1 '{"height": 128, "width": 256}'
# Prints per-step FLOPs (forward and backward apart, by op), the FLOPs per unit and the step's
# batch_info. STEPS=0 prints only the batch_info (the data-dependent shapes).
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $# -ge 1 ]] || { sed -n 2,7p "$0"; exit 2; }
GPUBENCH_FLOPS_WORKLOAD="$1" GPUBENCH_FLOPS_BATCH="${2:-}" GPUBENCH_FLOPS_MODEL="${3:-{\}}" \
GPUBENCH_FLOPS_STEPS="${4:-1}" GPUBENCH_FLOPS_WARMUP="${5:-0}" \
  "${GPUBENCH_TESTS:-build/gpubench_tests}" --gtest_filter='FlopCount.WorkloadStep' |
  grep -v '^\[\|^Note: '
