#!/usr/bin/env bash
# On the development machine (2 cores, Debian 12, libtorch 1.13 CPU), 2026-12-07: the reliability
# checks of docs/reliability.md, each with its log and wall time beside this script, so that
# every figure that page gives has a raw record. Run from the repository root after
# `GPUBENCH_TARGET=all scripts/setup.sh`:
#
#   docs/results/2026-12-07-cpu-reliability/run.sh [STEP...]
#       default: env sanitize fuzz20 fuzz60 faults html
#
# env       the machine, compilers, libtorch and the commit (env.txt)
# sanitize  scripts/dev/sanitize.sh: the CPU tests under ASan + UBSan, its build included
# fuzz20    GPUBENCH_FUZZ_CI=1 scripts/dev/fuzz.sh 20: what CI runs, each target 20 s
# fuzz60    GPUBENCH_FUZZ_NO_BUILD=1 scripts/dev/fuzz.sh 60: each target 60 s from the seeds
# faults    scripts/dev/fault_injection.py: 40 trials of every fault kind (seed 7), then 16
#           kill trials with a window shorter than the run (seed 141414)
# html      scripts/dev/check_html.sh --hostile on tests/hostile/hostile-report.json
set -uo pipefail
here=$(dirname "$(readlink -f "$0")")
cd "$here/../../.."
step() {  # step NAME COMMAND...: COMMAND's output in NAME.log, its exit and wall time in walltimes.txt
  local name=$1 s rc=0
  shift
  s=$(date +%s)
  echo "$name: $* (started $(date -u +%FT%TZ))" >> "$here/walltimes.txt"
  "$@" > "$here/$name.log" 2>&1 || rc=$?
  echo "$name: exit $rc, $(( $(date +%s) - s )) s" | tee -a "$here/walltimes.txt"
}
for s in ${@:-env sanitize fuzz20 fuzz60 faults html}; do
  case $s in
    env) { date -u +%FT%TZ; uname -srm; nproc; grep -m1 "model name" /proc/cpuinfo
           head -1 /etc/debian_version; c++ --version | head -1; clang --version | head -1
           dpkg-query -W libtorch-dev 2>/dev/null; chromium --version 2>/dev/null
           git log -1 --format='commit %H %s'; git status --short | head -5; } > "$here/env.txt" 2>&1 ;;
    sanitize) step sanitize scripts/dev/sanitize.sh ;;
    fuzz20) step fuzz20 env GPUBENCH_FUZZ_CI=1 scripts/dev/fuzz.sh 20 ;;
    fuzz60) step fuzz60 env GPUBENCH_FUZZ_NO_BUILD=1 GPUBENCH_FUZZ_OUT=build-fuzz/campaign-60 \
              scripts/dev/fuzz.sh 60 ;;
    faults) step faults nice -n 19 python3 scripts/dev/fault_injection.py --gpubench build/gpubench \
              --trials 40 --seed 7 --summary "$here/faults-summary.json"
            step faults-short nice -n 19 python3 scripts/dev/fault_injection.py \
              --gpubench build/gpubench --trials 16 --kinds kill-parent,kill-worker \
              --run-seconds 2.4 --seed 141414 --summary "$here/faults-short-summary.json" ;;
    html) step html scripts/dev/check_html.sh --hostile build/gpubench tests/hostile/hostile-report.json ;;
    *) echo "unknown step $s" >&2; exit 2 ;;
  esac
done
