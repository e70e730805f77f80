#!/usr/bin/env bash
# libFuzzer campaign over gpubench's readers (issue 14): the config loader, the result-file
# reader, the journal reader with resume's parsing, the report's merge of many files, and the
# command line. Builds the fuzz targets in their own folder (clang, ASan + UBSan; never build/),
# then runs each target for SECONDS, niced, from the seed corpora in tests/fuzz/corpus/ with the
# dictionaries in tests/fuzz/, and prints executions, coverage and findings per target.
#
#   scripts/dev/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 3600 s, every target)
#   GPUBENCH_FUZZ_CI=1 scripts/dev/fuzz.sh 20                 (CI: short, fails on any finding)
#   GPUBENCH_SKIP_FUZZ=1 ...                              (skips it: exit 0)
#
# Environment: GPUBENCH_FUZZ_DIR (build folder, default build-fuzz), GPUBENCH_FUZZ_OUT (working
# corpora, logs and crash files, default $GPUBENCH_FUZZ_DIR/campaign), GPUBENCH_FUZZ_JOBS
# (parallel fuzzing processes per target, default 1), GPUBENCH_FUZZ_RUNS (stop a target after
# that many executions, or at SECONDS, whichever comes first), GPUBENCH_FUZZ_MAX_LEN (the
# largest input, default 8192 bytes, 4096 for cli), GPUBENCH_FUZZ_NO_BUILD=1 (run the targets
# as built, without ninja). Targets: config result journal
# report_merge cli. Exit 1 when a target found a crash, a leak, a timeout or a sanitizer report.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${GPUBENCH_SKIP_FUZZ:-0}" = 1 ]; then echo "fuzz: skipped (GPUBENCH_SKIP_FUZZ=1)"; exit 0; fi
seconds=${1:-3600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config result journal report_merge cli)
dir=${GPUBENCH_FUZZ_DIR:-build-fuzz}
out=${GPUBENCH_FUZZ_OUT:-$dir/campaign}
mkdir -p "$out"
out=$(cd "$out" && pwd)  # absolute: the cli target works in a scratch folder of its own

if [ "${GPUBENCH_FUZZ_NO_BUILD:-0}" != 1 ]; then  # 1: run the targets as they are built
  scripts/dev/configure_fuzz.sh "$dir"
  nice -n 19 ninja -C "$dir" gpubench_fuzz_targets
fi

f=$PWD/tests/fuzz
# The targets write their inputs to files (the readers take paths) and the journal target
# fsyncs: on a memory filesystem that costs little.
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=${GPUBENCH_FUZZ_TMPDIR:-/dev/shm}
declare -A dict=([config]=$f/yaml.dict [result]=$f/json.dict [journal]=$f/json.dict
  [report_merge]=$f/json.dict [cli]=$f/cli.dict)
# The largest input: a config, a result file's header and a few jobs, a journal's header and
# three records, or a few files to merge fit in 8 KiB; 24 arguments in 4 KiB. A reader's cost
# grows with its input: at 64 KiB the report target ran 76 executions a second, at 8 KiB 450,
# and reached more coverage in the same 20 s (mutations of the large seeds spent the time
# re-parsing the same records). Seeds longer than this are cut at it for the fuzzer;
# FuzzRegressionTest replays them whole.
declare -A max_len=([config]=8192 [result]=8192 [journal]=8192 [report_merge]=8192 [cli]=4096)
mkdir -p "$out"
status=0
printf '%-13s %12s %10s %8s %8s %s\n' target executions exec/s cov ft findings
for t in "${targets[@]}"; do
  mkdir -p "$out/corpus/$t" "$out/crashes"
  log="$out/$t.log"
  # The config target's dictionary is YAML's plus JSON's (its inputs are either; libFuzzer
  # takes one -dict).
  d=${dict[$t]}
  if [ "$t" = config ]; then cat "$f/yaml.dict" "$f/json.dict" >"$out/config.dict"; d=$out/config.dict; fi
  # -jobs N runs N processes, each logging to fuzz-K.log in the working folder (here: $out).
  parallel=()
  jobs=${GPUBENCH_FUZZ_JOBS:-1}
  [ "$jobs" -gt 1 ] && parallel=(-jobs="$jobs" -workers="$jobs")
  runs=()
  [ -n "${GPUBENCH_FUZZ_RUNS:-}" ] && runs=(-runs="$GPUBENCH_FUZZ_RUNS")
  set +e
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    nice -n 19 "$dir/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=3072 \
    -max_len="${GPUBENCH_FUZZ_MAX_LEN:-${max_len[$t]}}" -print_final_stats=1 "${parallel[@]}" "${runs[@]}" -dict="$d" \
    -artifact_prefix="$out/crashes/$t-" "$out/corpus/$t" "$f/corpus/$t" >"$log" 2>&1
  rc=$?
  set -e
  # -jobs writes fuzz-N.log files; the stats of all of them count.
  logs=("$log")
  if [ "$jobs" -gt 1 ]; then
    mkdir -p "$out/$t-jobs"
    mv fuzz-*.log "$out/$t-jobs/"
    logs=("$out/$t-jobs"/fuzz-*.log)
  fi
  execs=$(grep -h 'stat::number_of_executed_units' "${logs[@]}" | awk '{s+=$2} END {print s+0}')
  rate=$(grep -h 'stat::average_exec_per_sec' "${logs[@]}" | awk '{s+=$2} END {print s+0}')
  cov=$(grep -ho ' cov: [0-9]*' "${logs[@]}" | awk '{print $2}' | sort -n | tail -1)
  ft=$(grep -ho ' ft: [0-9]*' "${logs[@]}" | awk '{print $2}' | sort -n | tail -1)
  findings=$(ls "$out/crashes" 2>/dev/null | grep -c "^$t-" || true)
  printf '%-13s %12s %10s %8s %8s %s\n' "$t" "$execs" "$rate" "${cov:-?}" "${ft:-?}" "$findings"
  if [ "$rc" -ne 0 ] || [ "$findings" -gt 0 ]; then
    status=1
    echo "  $t: libFuzzer exited $rc; see $log and $out/crashes/$t-*" >&2
    grep -m3 -E 'ERROR: |fuzz invariant|SUMMARY|uncaught|terminate' "$log" >&2 || true
  fi
done
exit $status
