#!/usr/bin/env bash
# ctest RunAllScriptWritesEveryReportAndContinues: scripts/run_all.sh end to end on the CPU with
# two smoke-size models. It must write the journal, results and every report; run again on the
# same folder it must continue the journal and run nothing twice; without --out the same command
# must find its folder again; several precisions get a folder each and one combined CSV; the CSV
# holds the same-batch rows.
# Usage: run_all_test.sh BUILD_DIR (the folder that holds the gpubench executable)
set -euo pipefail
build=$(cd "$1" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

small='{"vocab_size": 2000, "hidden_size": 64, "layers": 2, "heads": 2, "intermediate_size": 128, "max_positions": 64, "seq_length": 32, "masked_per_sequence": 5}'
cat > "$tmp/smoke.json" <<JSON
{"run": {"cpu_timing": {"warmup_steps": 1, "max_warmup_steps": 1, "min_steps": 2, "min_seconds": 0}},
 "models": {"bert-base": {"cpu_batch": 2, "model": $small},
            "bert-base-mlm": {"cpu_batch": 2, "model": $small}}}
JSON

run() {
  GPUBENCH_BUILD_DIR=$build "$repo/scripts/run_all.sh" --cpu --model bert-base --model bert-base-mlm \
    --out "$tmp/out" -- --config "$tmp/smoke.json" > "$tmp/stdout" 2> "$tmp/stderr"
}
run || fail "run_all.sh exited $? ($(tail -5 "$tmp/stderr"))"
for f in journal.jsonl results.json results.csv report.txt report.md report.html; do
  [ -s "$tmp/out/$f" ] || fail "$f was not written"
done
[ "$(wc -l < "$tmp/out/journal.jsonl")" -eq 3 ] || fail "journal: expected a header and 2 jobs"
grep -q "| bert-base-mlm" "$tmp/out/report.md" || fail "report.md lacks bert-base-mlm"
grep -q "<svg" "$tmp/out/report.html" || fail "report.html has no chart"
grep -q "Training throughput normalized" "$tmp/stdout" || fail "no table on stdout"

# Again on the same folder: continues the journal, runs nothing.
run || fail "second run_all.sh exited $? ($(tail -5 "$tmp/stderr"))"
grep -q "continuing $tmp/out/journal.jsonl" "$tmp/stderr" || fail "did not continue the journal"
grep -q "0 jobs run, 2 skipped" "$tmp/stderr" || fail "ran jobs again: $(grep 'jobs run' "$tmp/stderr")"
[ "$(wc -l < "$tmp/out/journal.jsonl")" -eq 3 ] || fail "the journal grew on a rerun"

# Relative paths are the caller's, not the repository's.
(cd "$tmp" && GPUBENCH_BUILD_DIR=$build "$repo/scripts/run_all.sh" --cpu --model bert-base \
  --out relative -- --config smoke.json > /dev/null 2>&1) || fail "run from another folder failed"
[ -s "$tmp/relative/report.md" ] || fail "--out relative was not written in the caller's folder"

# No --out: a folder named by the command, without a date, so the same command again continues.
default_run() {
  (cd "$tmp" && GPUBENCH_BUILD_DIR=$build "$repo/scripts/run_all.sh" --cpu --model bert-base \
    --precision fp32,tf32 -- --config smoke.json > default.out 2> default.err)
}
default_run || fail "run with the default folder failed ($(tail -5 "$tmp/default.err"))"
dflt=$tmp/results/cpu-bert-base-fp32+tf32
for f in fp32/journal.jsonl tf32/journal.jsonl fp32/report.md results.csv report.txt report.md \
  report.html; do
  [ -s "$dflt/$f" ] || fail "default folder: $f was not written"
done
# The combined CSV has a row for each precision.
grep -q ",fp32," "$dflt/results.csv" || fail "combined results.csv lacks the fp32 row"
grep -q ",tf32," "$dflt/results.csv" || fail "combined results.csv lacks the tf32 row"
default_run || fail "second run with the default folder failed"
grep -qF "continuing results/cpu-bert-base-fp32+tf32/fp32/journal.jsonl" "$tmp/default.err" ||
  fail "the same command did not find its folder again: $(cat "$tmp/default.err")"
[ "$(grep -c "0 jobs run, 1 skipped" "$tmp/default.err")" -eq 2 ] ||
  fail "the same command ran jobs again: $(grep 'jobs run' "$tmp/default.err")"

# The CSV holds the same-batch rows beside the max-batch ones.
GPUBENCH_BUILD_DIR=$build "$repo/scripts/run_all.sh" --cpu --model bert-base --same-batch \
  --out "$tmp/same" -- --config "$tmp/smoke.json" > /dev/null 2> "$tmp/same.err" ||
  fail "--same-batch run failed ($(tail -5 "$tmp/same.err"))"
[ "$(grep -c "^bert-base," "$tmp/same/results.csv")" -eq 2 ] ||
  fail "results.csv lacks the same-batch row: $(cat "$tmp/same/results.csv")"

# Bad input stops the script with exit 2 before anything runs.
code=0
"$repo/scripts/run_all.sh" --bogus > /dev/null 2>&1 || code=$?
[ "$code" -eq 2 ] || fail "unknown option: expected exit 2, got $code"
code=0
"$repo/scripts/run_all.sh" --gpu 0 --cpu > /dev/null 2>&1 || code=$?
[ "$code" -eq 2 ] || fail "--gpu with --cpu: expected exit 2, got $code"
code=0
"$repo/scripts/run_all.sh" --cpu --precision fp32,fp33 > /dev/null 2>&1 || code=$?
[ "$code" -eq 2 ] || fail "an unknown precision: expected exit 2, got $code"
code=0
"$repo/scripts/run_all.sh" --cpu --memory-tiers 6 > /dev/null 2>&1 || code=$?
[ "$code" -eq 3 ] || fail "--memory-tiers with --cpu: expected exit 3, got $code"
echo "run_all.sh: ok"
