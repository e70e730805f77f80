#!/usr/bin/env bash
# On the GPU machine, 2026-12-07: the checks of this session's code, in stages that continue where
# an earlier call stopped (marker files under results/dev/), inside one call's time.
#
#   docs/results/2026-12-07-h100-fast-paths/call.sh [STAGE...]   (default: build fastpaths torchrun suite)
#   DEADLINE_S=560   seconds this call may use; a stage that cannot start in time is left for the
#                    next call
#
# build      setup.sh for the executable; env.txt, info.txt
# fastpaths  issue 44: the language workloads at amp-bf16 and a fixed batch, runtime.fast_paths
#            off then on, one fresh process each (fastpaths/M-{off,on}.*); summary.txt compares
#            throughput, the first and last losses and peak memory
# torchrun   issue 41 item 7: one real torchrun launch (one rank over NCCL: this libtorch has no
#            Gloo, and one GPU holds one NCCL rank) against the plain run of the same job, in the
#            order plain, torchrun, torchrun, plain
# suite      issue 45: the suite of twelve at SUITE_PRECISION (default fp32, where the new warm-up
#            and window rules apply), cold (--no-cache: full searches), through
#            scripts/run_all.sh; a later call resumes it from its journal
# Everything under results/dev goes to $OUT/dev.tgz.
set -uo pipefail
cd "$(dirname "$(readlink -f "$0")")/../../.."
OUT=${OUT:-/tmp/out}
R=results/dev
mkdir -p "$OUT" "$R"
deadline=$(( $(date +%s) + ${DEADLINE_S:-560} ))
left() { echo $(( deadline - $(date +%s) )); }
log() { echo "call [$(date -u +%T)] $*" | tee -a "$R/call.log" >&2; }
log "card: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1); $(left) s left"

# one NAME NEED_S ARGS...: one `gpubench run` into DIR/NAME.*, skipped when done or when fewer
# than NEED_S seconds are left.
one() {
  local dir=$1 name=$2 need=$3 s rc
  shift 3
  mkdir -p "$dir"
  [ -f "$dir/$name.json" ] && return 0
  if [ "$(left)" -lt "$need" ]; then log "$name: skipped, $(left) s left"; return 1; fi
  s=$(date +%s)
  timeout --signal=TERM --kill-after=15 "$(left)" "$@" --journal "$dir/$name.jsonl" \
    --json "$dir/$name.json" --format summary > "$dir/$name.txt" 2> "$dir/$name.log"
  rc=$?
  echo "$name: exit $rc, wall $(( $(date +%s) - s )) s" | tee -a "$dir/walltimes.txt" >&2
  [ $rc -le 1 ] || rm -f "$dir/$name.json"
}

build() {
  [ -x build/gpubench ] && [ -f "$R/build.done" ] && return 0
  local s=$(date +%s)
  { date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
    git log -1 --format='device copy: commit %h %s' 2>/dev/null; command -v torchrun; } > "$R/env.txt" 2>&1
  GPUBENCH_JOBS=16 GPUBENCH_TARGET=gpubench scripts/setup.sh > "$R/build.log" 2>&1 || { log "build failed"; tail -30 "$R/build.log"; return 2; }
  build/gpubench info > "$R/info.txt" 2>&1
  log "build: $(( $(date +%s) - s )) s"
  touch "$R/build.done"
}

fastpaths() {
  local d=$R/fastpaths
  mkdir -p "$d"
  local cases=${FASTPATH_CASES:-bert-base-mlm:128 transformer-big:16384 bert-base:256 unsupmt:16000 mt-dnn:64 bert-finetune:64 conv-seq2seq:16384}
  local case m b
  # A --config overlay sets a workload's runtime under models.NAME.
  { echo "models:"; for case in $cases; do printf '  %s:\n    runtime:\n      fast_paths: false\n' "${case%%:*}"; done; } > "$d/plain.yaml"
  for case in $cases; do
    m=${case%%:*} b=${case##*:}
    local job=(build/gpubench run --gpu 0 --model "$m" --precision amp-bf16 --batch "$b" --no-cache --max-seconds 8)
    one "$d" "$m-off" ${FASTPATH_NEED_S:-75} "${job[@]}" --config "$d/plain.yaml" || break
    one "$d" "$m-on" ${FASTPATH_NEED_S:-60} "${job[@]}" || break
  done
  python3 - "$d" > "$d/summary.txt" 2>&1 <<'PY'
import glob, json, os, sys
d = sys.argv[1]
def job(path):
    try:
        return json.load(open(path))["jobs"][0]
    except Exception as e:  # noqa: BLE001 - a run that wrote nothing is a result too
        return {"status": f"no record ({e})"}
print("model | batch | status off/on | throughput off -> on | on/off | first loss off/on | last loss off/on | peak GiB off/on")
for off in sorted(glob.glob(os.path.join(d, "*-off.json"))):
    m = os.path.basename(off)[:-9]
    a, b = job(off), job(os.path.join(d, m + "-on.json"))
    ta, tb = a.get("throughput") or 0, b.get("throughput") or 0
    la, lb = a.get("losses_start") or {}, b.get("losses_start") or {}
    ea, eb = a.get("losses") or {}, b.get("losses") or {}
    pa, pb = (a.get("peak_memory_bytes") or 0) / 2**30, (b.get("peak_memory_bytes") or 0) / 2**30
    print(f"{m} | {a.get('batch')} | {a.get('status')}/{b.get('status')} | {ta:.5g} -> {tb:.5g} {a.get('throughput_unit', '')} | "
          f"{(tb / ta if ta else 0):.3f} | {la} / {lb} | {ea} / {eb} | {pa:.2f}/{pb:.2f}")
    for side, r in (("off", a), ("on", b)):
        if r.get("status") != "ok":
            print(f"  {m} {side}: {r.get('message', '')[:400]}")
PY
  cat "$d/summary.txt" >&2
}

torchrun_check() {
  local d=$R/torchrun
  local job=(--model bert-base --precision amp-bf16 --batch 256 --repeat 2 --no-cache --max-seconds 8)
  one "$d" plain-1 70 build/gpubench run --gpu 0 "${job[@]}" || return 0
  one "$d" torchrun-1 70 torchrun --nproc-per-node 1 --master-port 29517 --no-python build/gpubench run "${job[@]}" || return 0
  one "$d" torchrun-2 70 torchrun --nproc-per-node 1 --master-port 29517 --no-python build/gpubench run "${job[@]}" || return 0
  one "$d" plain-2 70 build/gpubench run --gpu 0 "${job[@]}" || return 0
  python3 - "$d" > "$d/summary.txt" 2>&1 <<'PY'
import json, math, os, sys
d = sys.argv[1]
med = {}
for n in ("plain-1", "torchrun-1", "torchrun-2", "plain-2"):
    try:
        j = json.load(open(os.path.join(d, n + ".json")))["jobs"][0]
    except Exception as e:  # noqa: BLE001
        print(f"{n}: no record ({e})"); continue
    s = j.get("throughput_stats") or {}
    dp = j.get("data_parallel") or {}
    med[n] = s.get("median") or j.get("throughput") or 0
    print(f"{n}: status {j.get('status')}, throughput {j.get('throughput')}, median {s.get('median')}, "
          f"world size {dp.get('world_size', 1)}, launch {dp.get('launch') or dp.get('launcher')}, "
          f"backend {dp.get('backend')}, message {j.get('message', '')[:300]}")
if len(med) == 4 and all(med.values()):
    t = math.sqrt(med["torchrun-1"] * med["torchrun-2"]); p = math.sqrt(med["plain-1"] * med["plain-2"])
    print(f"torchrun / plain (geometric means of the pairs): {t / p:.4f}")
PY
  cat "$d/summary.txt" >&2
}

suite() {
  [ -f "$R/suite.done" ] && return 0
  if [ "$(left)" -lt 60 ]; then log "suite: $(left) s left, for the next call"; return 0; fi
  local s=$(date +%s) rc=0
  log "suite: start ($(left) s left)"
  local p=${SUITE_PRECISION:-fp32}
  timeout --signal=TERM --kill-after=20 $(( $(left) - 10 )) scripts/run_all.sh --gpu 0 \
    --precision "$p" --out "$R/$p" -- --no-cache >> "$R/suite.log" 2>&1 || rc=$?
  echo "suite: exit $rc after $(( $(date +%s) - s )) s" | tee -a "$R/walltimes.txt" >&2
  [ $rc -le 1 ] && touch "$R/suite.done"
}

for stage in ${@:-build fastpaths torchrun suite}; do
  case $stage in
    build) build || break ;;
    fastpaths) fastpaths ;;
    torchrun) torchrun_check ;;
    suite) suite ;;
    *) log "unknown stage $stage"; exit 2 ;;
  esac
done
tar -C results -czf "$OUT/dev.tgz" dev
log "packed results/dev into \$OUT/dev.tgz ($(left) s left)"
