#!/usr/bin/env bash
# On the GPU machine (prepared 2026-12-07; first run on an H100: docs/results/2026-12-08-h100-fused-kernels): issue 44 items 2-5, the fused
# vocabulary cross-entropy (runtime.fused_loss), the fused residual + dropout + LayerNorm
# (runtime.fused_norm), stored attention's fused masks + softmax + dropout
# (runtime.fused_softmax) and CUDA graphs over them, checked and timed, in stages that continue where an earlier call stopped
# (marker files and finished records under results/fused/), inside one call's time.
#
#   docs/results/2026-12-07-fused-kernels/call.sh [STAGE...]   (default: build check pairs)
#   DEADLINE_S=560        seconds this call may use
#   FUSED_VARIANTS="loss" the variants pairs times beside "off" (each one fresh process a case):
#                         loss (runtime.fused_loss), norm (runtime.fused_norm), softmax
#                         (runtime.fused_softmax), all three, graphs (all three and
#                         runtime.cuda_graphs: issue 44 item 5)
#   FUSED_CASES="M:B:P ..." the cases (model, batch, precision)
#
# build   setup.sh for the executable and the tests (target all: the _CUDA tests need them);
#         cmake's "own CUDA kernels: 1" line must be in build.log, or nothing else runs
# check   the kernels against ATen and the workloads' fixed-seed losses fused against not
#         (ctest -R '(VocabLossTest|ResidualNormTest|AttentionSoftmaxTest).*_CUDA'), into check.log
# pairs   each case at a fixed batch, "off" (both settings false) and each variant, one fresh
#         process each (pairs/M-P-VARIANT.*); summary.txt compares each variant with off:
#         throughput, the first losses and peak memory
# peers   the torch.compile peers (below), after the pairs or in a call of their own
# Everything under results/fused goes to $OUT/fused.tgz after each stage.
set -uo pipefail
cd "$(dirname "$(readlink -f "$0")")/../../.."
OUT=${OUT:-/tmp/out}
R=results/fused
mkdir -p "$OUT" "$R"
deadline=$(( $(date +%s) + ${DEADLINE_S:-560} ))
left() { echo $(( deadline - $(date +%s) )); }
log() { echo "call [$(date -u +%T)] $*" | tee -a "$R/call.log" >&2; }
pack() { tar -C results -czf "$OUT/fused.tgz" fused; }
log "card: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1); $(left) s left"

build() {
  [ -f "$R/build.done" ] && [ -x build/gpubench_tests ] && return 0
  local s=$(date +%s)
  { date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
    git log -1 --format='device copy: commit %h %s' 2>/dev/null; } > "$R/env.txt" 2>&1
  GPUBENCH_JOBS=16 GPUBENCH_TARGET=all scripts/setup.sh > "$R/build.log" 2>&1 || { log "build failed"; tail -30 "$R/build.log"; return 2; }
  grep -h "own CUDA kernels" "$R/build.log" build/CMakeFiles/CMakeOutput.log 2>/dev/null | head -2 >> "$R/env.txt"
  build/gpubench info > "$R/info.txt" 2>&1
  log "build: $(( $(date +%s) - s )) s"
  touch "$R/build.done"
}

check() {
  [ -f "$R/check.done" ] && return 0
  (cd build && ctest -R '(VocabLossTest|ResidualNormTest|AttentionSoftmaxTest).*_CUDA' --output-on-failure) > "$R/check.log" 2>&1
  local rc=$?
  grep -E "tests passed|Failed|Skipped|Not Run" "$R/check.log" | tail -5 >&2
  log "check: ctest exit $rc"
  touch "$R/check.done"
}

# one NAME NEED_S ARGS...: one `gpubench run` into pairs/NAME.*, skipped when done or when
# fewer than NEED_S seconds are left.
one() {
  local d=$R/pairs name=$1 need=$2 s rc
  shift 2
  mkdir -p "$d"
  [ -f "$d/$name.json" ] && return 0
  if [ "$(left)" -lt "$need" ]; then log "$name: skipped, $(left) s left"; return 1; fi
  s=$(date +%s)
  timeout --signal=TERM --kill-after=15 "$(left)" "$@" --journal "$d/$name.jsonl" \
    --json "$d/$name.json" --format summary > "$d/$name.txt" 2> "$d/$name.log"
  rc=$?
  echo "$name: exit $rc, wall $(( $(date +%s) - s )) s" | tee -a "$d/walltimes.txt" >&2
  [ $rc -le 1 ] || rm -f "$d/$name.json"
}

pairs() {
  local d=$R/pairs cases=${FUSED_CASES:-bert-base-mlm:128:amp-bf16 transformer-big:16384:amp-bf16 unsupmt:16000:amp-bf16 bert-base:256:amp-bf16 conv-seq2seq:16384:amp-bf16 bert-base-mlm:128:fp32}
  local case m b p v
  mkdir -p "$d"
  # One overlay a variant: every model of the cases with the variant's runtime settings.
  local models
  models=$(for case in $cases; do echo "${case%%:*}"; done | sort -u)
  for v in off loss norm softmax all graphs; do
    local loss=false norm=false softmax=false graphs=false
    case $v in loss) loss=true ;; norm) norm=true ;; softmax) softmax=true ;;
      all) loss=true norm=true softmax=true ;;
      graphs) loss=true norm=true softmax=true graphs=true ;; esac
    { echo "models:"; for m in $models; do
        printf '  %s:\n    runtime:\n      fused_loss: %s\n      fused_norm: %s\n' "$m" $loss $norm
        printf '      fused_softmax: %s\n      cuda_graphs: %s\n' $softmax $graphs
      done; } > "$d/$v.yaml"
  done
  for case in $cases; do
    IFS=: read -r m b p <<< "$case"
    local job=(build/gpubench run --gpu 0 --model "$m" --precision "$p" --batch "$b" --no-cache --max-seconds 8)
    for v in off ${FUSED_VARIANTS:-loss}; do
      one "$m-$p-$v" 60 "${job[@]}" --config "$d/$v.yaml" || break 2
    done
    pack
  done
  python3 - "$d" > "$d/summary.txt" 2>&1 <<'PY'
import glob, json, os, sys
d = sys.argv[1]
def job(path):
    try:
        return json.load(open(path))["jobs"][0]
    except Exception as e:  # noqa: BLE001 - a run that wrote nothing is a result too
        return {"status": f"no record ({e})"}
print("job | variant | batch | status off/variant | ran (loss, norm, softmax, launch) | throughput off -> variant | variant/off | first losses off / variant | peak GiB off/variant")
for off in sorted(glob.glob(os.path.join(d, "*-off.json"))):
    m = os.path.basename(off)[:-9]
    a = job(off)
    for other in sorted(glob.glob(os.path.join(d, m + "-*.json"))):
        v = os.path.basename(other)[len(m) + 1:-5]
        if v == "off" or "-" in v:
            continue
        b = job(other)
        ta, tb = a.get("throughput") or 0, b.get("throughput") or 0
        ran = [tuple((r.get("runtime") or {}).get(k) for k in ("fused_loss", "fused_norm", "fused_softmax", "launch")) for r in (a, b)]
        pa, pb = (a.get("peak_memory_bytes") or 0) / 2**30, (b.get("peak_memory_bytes") or 0) / 2**30
        print(f"{m} | {v} | {a.get('batch')} | {a.get('status')}/{b.get('status')} | {ran[0]}/{ran[1]} | "
              f"{ta:.5g} -> {tb:.5g} {a.get('throughput_unit', '')} | {(tb / ta if ta else 0):.3f} | "
              f"{a.get('losses_start')} / {b.get('losses_start')} | {pa:.2f}/{pb:.2f}")
        for side, r in (("off", a), (v, b)):
            if r.get("status") != "ok":
                print(f"  {m} {side}: {r.get('message', '')[:400]}")
PY
  cat "$d/summary.txt" >&2
}

# The torch.compile peers (issue 44 item 6): scripts/dev/gpu/step_speed.sh through campaign.sh's
# speed stage into results/fused/compile-{fused,stored}: gpubench by default, gpubench with the
# overlay (fused-all.yaml: fused attention and the three fusions; stored-fused.yaml: stored
# attention and the three), and the Python twin under torch.compile with the same attention.
# PEER_CASES (default bert-base-mlm:amp-bf16 transformer-big:amp-bf16; the transformer-big
# twin's compile of its batch shapes took more than 250 s on 2026-12-06).
peers() {
  local here=docs/results/2026-12-07-fused-kernels
  local cases=${PEER_CASES:-bert-base-mlm:amp-bf16 transformer-big:amp-bf16}
  GPUBENCH_DEADLINE_S=$(( $(left) - 15 )) CARD=fused TWIN_COMPILE=1 WARM48=0 \
    VARIANT=fusedall:$here/fused-all.yaml SPEED_DIR=compile-fused GPUBENCH_SPEED_CASES="$cases" \
    scripts/dev/gpu/campaign.sh speed
  [ "$(left)" -gt 60 ] || return 0
  GPUBENCH_DEADLINE_S=$(( $(left) - 15 )) CARD=fused TWIN_COMPILE=1 TWIN_ATTENTION=stored \
    WARM48=0 VARIANT=storedfused:$here/stored-fused.yaml SPEED_DIR=compile-stored \
    GPUBENCH_SPEED_CASES="$cases" scripts/dev/gpu/campaign.sh speed
}

for s in ${*:-build check pairs}; do
  case $s in
    build) build || { pack; exit 2; } ;;
    check) check ;;
    pairs) pairs ;;
    peers) peers ;;
    *) log "unknown stage '$s'"; exit 2 ;;
  esac
  pack
done
log "packed $R into \$OUT/fused.tgz ($(left) s left)"
