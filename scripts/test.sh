#!/usr/bin/env bash
# Installs what is missing, builds gpubench and its tests, and runs every test (ctest).
# Tests that need a GPU end in _CUDA and run only where a CUDA device is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build_dir=${GPUBENCH_BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j "${GPUBENCH_JOBS:-$(nproc)}"
