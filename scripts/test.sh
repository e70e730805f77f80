#!/usr/bin/env bash
# Installs what is missing, builds gpubench and its tests, and runs every test (ctest).
# Tests that need a GPU end in _CUDA and run only where a CUDA device is visible. The HTML
# report check (HtmlReportRendersInChromium) needs Chromium, which this installs too;
# GPUBENCH_SKIP_BROWSER_TESTS=1 skips that check (and the install).
set -euo pipefail
cd "$(dirname "$0")/.."
export GPUBENCH_TARGET=all  # the executable and the test binary
if [ "${GPUBENCH_SKIP_BROWSER_TESTS:-0}" = 1 ]; then
  scripts/setup.sh
else
  GPUBENCH_WITH_BROWSER=1 scripts/setup.sh
fi
build_dir=${GPUBENCH_BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j "${GPUBENCH_JOBS:-$(nproc)}"

# Issue 14: the CPU tests of everything but the models under ASan + UBSan, then each fuzz target
# for a short bounded time from the seed corpora (a finding fails CI). Costs about 12 min on 2
# cores, most of it building build-fuzz once (docs/reliability.md, "CI");
# GPUBENCH_SKIP_SANITIZE=1 skips both, GPUBENCH_SKIP_FUZZ=1 the fuzzing alone.
if [ "${GPUBENCH_SKIP_SANITIZE:-0}" != 1 ]; then
  scripts/dev/sanitize.sh
  GPUBENCH_FUZZ_OUT=build-fuzz/ci scripts/dev/fuzz.sh "${GPUBENCH_FUZZ_CI_SECONDS:-20}"
fi
