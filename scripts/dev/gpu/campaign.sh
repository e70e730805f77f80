#!/usr/bin/env bash
# On the GPU machine: the measurements issues 3 to 7 ask for, in stages that continue where an
# earlier call stopped (journals and marker files under results/$CARD/), inside one call's time.
#
#   scripts/dev/gpu/campaign.sh [STAGE...]     (default: build stylegan fp32 bf16 tiers refs)
#   GPUBENCH_DEADLINE_S=560  seconds this call may use; a stage still running then is stopped
#                            (its journal keeps every finished job) and the next call resumes it
#   CARD=h200                names the results folder, results/$CARD, and the archive, $CARD.tgz
#                            (default h200, the card these stages were written for: the folders
#                            below are named for that default)
#
# Stages: fp32-language / bf16-language (run_all.sh --suite language: the suite's six language
# jobs alone), build (setup.sh for the executable alone; GPUBENCH_CUDA_TESTS=1 also builds and runs
# the _CUDA tests), stylegan (health_check.sh's stylegan part: its step at batch 16), fp32 / bf16
# (the whole suite with search and timed run through scripts/run_all.sh, wall time recorded), tiers (bert-base, nasnet-large and
# transformer-big under 6, 8, 11, 24, 48 GiB caps), refs (the Python eager references beside
# gpubench at one common batch and precision), speed (scripts/dev/gpu/step_speed.sh into
# results/h200/speed: issue 11's side-by-side steps at the issue's batches, the cases
# GPUBENCH_SPEED_CASES names or all), jobs (scripts/dev/gpu/jobs.sh into
# results/h200/jobs: the whole jobs GPUBENCH_JOBS_LIST names, "MODEL:PRECISION ..."), profile
# (step_speed.sh's side-by-side cases with both sides profiled: results/h200/profile), graphs
# (graphs_check.sh: CUDA graphs off against on, into results/h200/graphs), ddp (ddp_ws1.sh into
# results/h200/ddp), stylegan16 (stylegan_fp16.sh into results/h200/stylegan16), fidelity
# (fidelity.sh into results/h200/fidelity), attention (attention.sh into results/h200/attention),
# probe (unsupmt_probe_check.sh into results/h200/probe), repeats (speed_repeats.sh into
# results/h200/repeats: GPUBENCH_REPEAT_CASES, default transformer-big:fp32, REPEATS rounds of
# gpubench and Python alternating, default 3). graphs, ddp, stylegan16, fidelity, attention and
# probe run one-off experiments kept beside their results in docs/results/ (the folder of the
# day each first ran). Everything under results/h200/ is packed into $OUT; carry results/h200
# into the next call (device tool: carry ["results/h200"]) to go on.
set -uo pipefail
self=$(readlink -f "$0")
cd "$(dirname "$self")/../../.."
OUT=${OUT:-/tmp/gpubench-out}
CARD=${CARD:-h200}
R=results/$CARD
past=docs/results  # where the one-off experiments live, each beside its results
mkdir -p "$OUT" "$R/refs"
deadline=$(( $(date +%s) + ${GPUBENCH_DEADLINE_S:-560} ))
left() { echo $(( deadline - $(date +%s) )); }
log() { echo "campaign [$(date -u +%T)] $*" | tee -a "$R/campaign.log" >&2; }
done_mark() { [ -f "$R/$1.done" ]; }
. scripts/dev/gpu/common.sh

# Runs a stage command with what is left of the deadline; a stage that finishes is marked done.
stage() {
  local name=$1
  shift
  if done_mark "$name"; then log "$name: done earlier"; return 0; fi
  if [ "$(left)" -lt 30 ]; then log "$name: no time left in this call"; return 1; fi
  log "$name: start ($(left) s left)"
  local s=$(date +%s) rc=0
  timeout --signal=TERM --kill-after=20 "$(left)" "$@" || rc=$?
  log "$name: exit $rc after $(( $(date +%s) - s )) s"
  echo "$name $(( $(date +%s) - s )) s exit $rc" >> "$R/walltimes.txt"
  # run_all exits 1 when a job failed: the stage ran; the journal says which job and why.
  if [ $rc -le 1 ]; then touch "$R/$name.done"; fi
  return 0
}

build() {
  { date -u +%FT%TZ
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python3 -c 'import torch, torchvision, timm, transformers as t; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "torchvision", torchvision.__version__, "timm", timm.__version__, "transformers", t.__version__)'
    git log -1 --format='commit %h %s' 2>/dev/null || echo "commit ${GPUBENCH_GIT_COMMIT:-unknown}"
  } > "$R/env.txt" 2>&1
  GPUBENCH_JOBS=16 GPUBENCH_TARGET=gpubench scripts/setup.sh > "$R/build.log" 2>&1 || return 2
  build/gpubench info > "$R/info.txt" 2>&1
  if [ "${GPUBENCH_CUDA_TESTS:-0}" = 1 ]; then
    GPUBENCH_JOBS=16 GPUBENCH_TARGET=all scripts/setup.sh >> "$R/build.log" 2>&1 || return 2
    ctest --test-dir build -R _CUDA --output-on-failure > "$R/ctest-cuda.log" 2>&1
    grep -E "tests passed|Failed" "$R/ctest-cuda.log" | tail -3
  fi
}

tiers() {
  local j=$R/tiers/tiers.jsonl
  mkdir -p "$R/tiers"
  if [ -s "$j" ]; then
    build/gpubench run --resume "$j" 2>> "$R/tiers/progress.log"
  else
    build/gpubench run --gpu 0 --model bert-base --model nasnet-large --model transformer-big \
      --memory-tiers 6,8,11,24,48 --no-cache --journal "$j" 2>> "$R/tiers/progress.log"
  fi > "$R/tiers/table.txt"
  local rc=$?
  build/gpubench report "$j" "$R/fp32/journal.jsonl" --format md > "$R/tiers/report.md" 2>&1
  return $rc
}

# The Python reference of one workload and gpubench at one batch both fit; the largest power of
# two gpubench found, halved while the Python side runs out of memory.
ref() {  # model precision script args...
  local model=$1 p=$2 script=$3
  shift 3
  local j=$R/$([ "$p" = fp32 ] && echo fp32 || echo bf16)/journal.jsonl b ours py
  [ -f "$j" ] || { log "ref $model $p: no $j yet (run its suite stage first)"; return 2; }
  b=$(python3 - "$j" "$model" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    job = d.get("job")
    if job and job["model"] == sys.argv[2] and job.get("search"):
        print(job["search"]["largest_pow2_batch"])
PY
)
  b=${b##*$'\n'}
  [ -n "$b" ] && [ "$b" -gt 0 ] || { log "ref $model $p: no searched batch in $j"; return 2; }
  if grep -q "^$model $p " "$R/refs/compare.txt" 2>/dev/null; then return 0; fi  # done earlier
  local flag=--batch
  [ "$model" = transformer-big ] && flag=--tokens
  b=$(fitting_reference $flag "$b" "$R/refs/$model-$p-python.json" \
    "$R/refs/$model-$p-python.txt" "tools/twins/$script" --precision "$p" "$@")
  [ -f "$R/refs/$model-$p-python.json" ] || { log "ref $model $p: python failed"; return 2; }
  build/gpubench run --gpu 0 --model "$model" --precision "$p" --batch "$b" \
    --journal "$R/refs/$model-$p-b$b.jsonl" --json "$R/refs/$model-$p-b$b.json" \
    > /dev/null 2>> "$R/refs/progress.log"
  [ -f "$R/refs/$model-$p-b$b.json" ] || { log "ref $model $p: gpubench at batch $b failed"; return 2; }
  ours=$(field "$R/refs/$model-$p-b$b.json" "d['jobs'][0]['throughput']")
  py=$(field "$R/refs/$model-$p-python.json" "d['throughput']")
  echo "$model $p batch $b: gpubench $ours, python $py, ratio $(python3 -c "print(round($ours / $py, 3))")" \
    | tee -a "$R/refs/compare.txt"
}

# Exit 2 (the stage stays open for the next call) unless every comparison was made.
refs() {
  local rc=0
  for p in fp32 amp-bf16; do
    ref bert-finetune "$p" bert_reference.py --model squad || rc=2
    ref nasnet-large "$p" nasnet_reference.py || rc=2
    ref deeplabv3-resnet101 "$p" deeplab_reference.py || rc=2
    ref mask-rcnn "$p" maskrcnn_reference.py || rc=2
    ref transformer-big "$p" transformer_big_reference.py || rc=2
  done
  return $rc
}

# `timeout` runs programs, not shell functions: a function stage runs as this script again.
if [ "${1:-}" = --fn ]; then
  "$2"
  exit $?
fi

for s in ${*:-build stylegan fp32 bf16 tiers refs}; do
  case $s in
    # Always rebuilt (incremental on a warm machine); when it fails nothing else runs, so no stage
    # times a stale binary or marks itself done without one.
    build) rm -f "$R/build.done"; stage build "$self" --fn build
           [ -f "$R/build.done" ] || { log "build failed (see $R/build.log): stopping"; break; } ;;
    stylegan) stage stylegan scripts/dev/gpu/health_check.sh build/gpubench "$R/health" stylegan ;;
    # The suites time their searches in full: --no-cache, or a stage after another of the same
    # jobs would verify the cached answers instead (docs/search.md, "The cache of answers").
    fp32) stage fp32 scripts/run_all.sh --gpu 0 --precision fp32 --out "$R/fp32" -- --no-cache ;;
    bf16) stage bf16 scripts/run_all.sh --gpu 0 --precision amp-bf16 --out "$R/bf16" -- --no-cache ;;
    # The language half of a suite alone (its six jobs), into results/h200/PRECISION-language.
    fp32-language) stage fp32-language scripts/run_all.sh --gpu 0 --precision fp32 --suite language \
                     --out "$R/fp32-language" -- --no-cache ;;
    bf16-language) stage bf16-language scripts/run_all.sh --gpu 0 --precision amp-bf16 \
                     --suite language --out "$R/bf16-language" -- --no-cache ;;
    tiers) stage tiers "$self" --fn tiers ;;
    refs) stage refs "$self" --fn refs ;;
    # GPUBENCH_SPEED_CASES="MODEL:PRECISION ..." (default: all of step_speed.sh's cases).
    # VARIANT, TWIN_ATTENTION and TWIN_COMPILE (step_speed.sh) are passed through; SPEED_DIR
    # names the folder under results/h200 (default speed: give a twin setting its own).
    speed) stage "speed-$(printf %s "${GPUBENCH_SPEED_CASES:-all}${VARIANT:-}${TWIN_ATTENTION:-}${TWIN_COMPILE:-}${SPEED_DIR:-}" | md5sum | cut -c1-8)" \
             scripts/dev/gpu/step_speed.sh build/gpubench "$R/${SPEED_DIR:-speed}" ${GPUBENCH_SPEED_CASES:-} ;;
    # step_speed.sh's cases with both sides profiled (PROFILE=1), into results/h200/profile:
    # GPUBENCH_PROFILE_CASES (default: the two language cases slower than eager in amp-bf16).
    profile) stage profile env PROFILE=1 scripts/dev/gpu/step_speed.sh build/gpubench "$R/profile" \
               ${GPUBENCH_PROFILE_CASES:-bert-base-mlm:amp-bf16 transformer-big:amp-bf16} ;;
    # CUDA graphs off against on (graphs_check.sh into results/h200/graphs), for MODELS and
    # PRECISIONS as graphs_check.sh reads them; one stage per choice of the two.
    graphs) stage "graphs-$(printf %s "${MODELS:-} ${PRECISIONS:-}" | md5sum | cut -c1-8)" \
              "$past/2026-12-02-h200-speed-fp16/graphs_check.sh" build/gpubench "$R/graphs" ;;
    # Issue 15: world size 1 through NCCL against the plain run (bert-base, fp32 and amp-bf16).
    ddp) stage ddp "$past/2026-12-03-h200-rois-signals-ddp/ddp_ws1.sh" build/gpubench "$R/ddp" ;;
    # Issue 18: stylegan in amp-fp16, traced, and the fp16 recipe's variants.
    stylegan16) stage stylegan16 \
                  "$past/2026-12-03-h200-stylegan-r1-deeplab-heuristics/stylegan_fp16.sh" \
                  build/gpubench "$R/stylegan16" ;;
    # One stage per list: a later call with another list runs it (jobs.sh skips finished jobs).
    jobs) stage "jobs-$(printf %s "${GPUBENCH_JOBS_LIST:?}" | md5sum | cut -c1-8)" \
            scripts/dev/gpu/jobs.sh build/gpubench "$R/jobs" ${GPUBENCH_JOBS_LIST} ;;
    # Issue 17: mt-dnn across seeds and autotuning off/on (fidelity.sh, at the amp-bf16 suite's
    # batches), and attention stored/fused (attention.sh, for PRECISIONS; no job starts in the
    # last 70 s of the call).
    fidelity) stage fidelity env DEADLINE_S=$(( $(left) - 70 )) \
                "$past/2026-12-03-h200-bf16-suite-fidelity/fidelity.sh" \
                build/gpubench "$R/fidelity" "$R/bf16/journal.jsonl" ;;
    attention) stage "attention-$(printf %s "${PRECISIONS:-all}" | md5sum | cut -c1-8)" \
                 env DEADLINE_S=$(( $(left) - 70 )) \
                 "$past/2026-12-03-h200-bf16-suite-fidelity/attention.sh" build/gpubench \
                 "$R/attention" ;;
    # Issue 10: unsupmt's probe against whole iterations (CASES as unsupmt_probe_check.sh reads it).
    probe) stage probe env GPUBENCH_DEADLINE_S=$(( $(left) - 60 )) \
             "$past/2026-12-04-h200-bf16-suite-tiers-repeats/unsupmt_probe_check.sh" \
             build/gpubench "$R/probe" ;;
    # Issue 11: side-by-side cases repeated, gpubench and Python alternating.
    repeats) stage "repeats-$(printf %s "${GPUBENCH_REPEAT_CASES:-transformer-big:fp32}" | md5sum | cut -c1-8)" \
               scripts/dev/gpu/speed_repeats.sh build/gpubench "$R/repeats" "${REPEATS:-3}" \
               ${GPUBENCH_REPEAT_CASES:-transformer-big:fp32} ;;
    *) log "unknown stage '$s'"; exit 2 ;;
  esac
done
tar -C results -czf "$OUT/$CARD.tgz" "$CARD"
log "packed $R into \$OUT/$CARD.tgz ($(left) s left)"
