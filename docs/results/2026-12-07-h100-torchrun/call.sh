#!/usr/bin/env bash
# On the GPU machine, 2026-12-07, this tree on one H100: issue 44's peers and the checks of this
# session's code, in stages that go on where an earlier call on the same warm machine stopped
# (marker files and records under results/dev/). Everything comes back as $OUT/dev.tgz.
#
#   docs/results/2026-12-07-h100-peers/call.sh [STAGE...]
#       default: build torchrun peers fused fp32lang peersfused fastpaths
#   DEADLINE_S=560   seconds this call may use
#
# build      setup.sh for the executable (the fast-paths folder's call.sh, which writes
#            results/dev/env.txt, info.txt, build.log)
# torchrun   one real torchrun launch (one NCCL rank) of bert-base amp-bf16 at batch 256: the
#            job ends ok, and its log has no "destroy_process_group() was not called" warning
#            (the communicator now shuts its NCCL group down)
# peers      issue 44: gpubench at amp-bf16 against the torch.compile twins with the same
#            attention, bert-base-mlm at 128 sequences and transformer-big at 16000 tokens
#            (scripts/dev/gpu/step_speed.sh): stored against stored (gpubench's default)
# fused      issue 44 item 4, branch fused-kernels (not on main: carried as
#            build-old/src-fused.tgz, `git archive fused-kernels`), built in build-old/fused
#            with its tests: its FusedKernels tests (the _CUDA ones among them), then its
#            scripts/dev/gpu/fused_check.sh (the fused kernels off against on)
# peersfused the same peers, fused attention against fused (fused.yaml beside this file)
# fp32lang   the three fp32 suite jobs the fast-paths call had no time for (bert-base,
#            bert-finetune, mt-dnn), cold, through scripts/run_all.sh
# fastpaths  the fast paths off against on again for the workloads with causal attention
#            (transformer-big, conv-seq2seq, unsupmt), timed before the mask fix landed
set -uo pipefail
here=$(dirname "$(readlink -f "$0")")
cd "$here/../../.."
OUT=${OUT:-/tmp/out}
R=results/dev
mkdir -p "$OUT" "$R"
deadline=$(( $(date +%s) + ${DEADLINE_S:-560} ))
left() { echo $(( deadline - $(date +%s) )); }
log() { echo "call [$(date -u +%T)] $*" | tee -a "$R/call.log" >&2; }
log "card: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1); $(left) s left"

stage() {  # stage NAME NEED_S COMMAND...: COMMAND within what is left, once (NAME.done)
  local name=$1 need=$2 s rc=0
  shift 2
  [ -f "$R/$name.done" ] && return 0
  if [ "$(left)" -lt "$need" ]; then log "$name: $(left) s left, for the next call"; return 1; fi
  s=$(date +%s)
  log "$name: start"
  timeout --signal=TERM --kill-after=15 $(( $(left) - 5 )) "$@" || rc=$?
  echo "$name: exit $rc after $(( $(date +%s) - s )) s" | tee -a "$R/walltimes.txt" >&2
  [ $rc -le 1 ] && touch "$R/$name.done"
  return 0
}

torchrun_once() {
  local d=$R/torchrun
  mkdir -p "$d"
  torchrun --nproc-per-node 1 --master-port 29517 --no-python build/gpubench run \
    --model bert-base --precision amp-bf16 --batch 256 --no-cache --max-seconds 8 \
    --json "$d/torchrun.json" --format summary > "$d/torchrun.txt" 2> "$d/torchrun.log"
  local rc=$?
  { echo "exit $rc"
    python3 -c "import json; j=json.load(open('$d/torchrun.json'))['jobs'][0]; print('status', j['status'], 'throughput', j['throughput'], 'world size', (j.get('data_parallel') or {}).get('world_size'))"
    echo "destroy_process_group warnings: $(grep -c 'destroy_process_group' "$d/torchrun.log")"; } > "$d/summary.txt" 2>&1
  cat "$d/summary.txt" >&2
}

peers() {
  WARM48=0 TWIN_COMPILE=1 TWIN_ATTENTION=stored scripts/dev/gpu/step_speed.sh build/gpubench \
    "$R/peers-stored" bert-base-mlm:amp-bf16 transformer-big:amp-bf16
}

peers_fused() {
  WARM48=0 TWIN_COMPILE=1 VARIANT="fused:$here/fused.yaml" scripts/dev/gpu/step_speed.sh \
    build/gpubench "$R/peers-fused" bert-base-mlm:amp-bf16 transformer-big:amp-bf16
}

fused() {
  local F=build-old/fused d=$R/fused
  mkdir -p "$d"
  if [ ! -f "$F/.unpacked" ]; then
    mkdir -p "$F" && tar -xzf build-old/src-fused.tgz -C "$F" && touch "$F/.unpacked" || return 2
  fi
  ( export GIT_CEILING_DIRECTORIES=$PWD/build-old GPUBENCH_GIT_COMMIT=fused-kernels-4caafd0
    cd "$F" && GPUBENCH_JOBS=16 GPUBENCH_TARGET=all scripts/setup.sh ) > "$d/build.log" 2>&1 \
    || { tail -40 "$d/build.log" >&2; return 2; }
  grep -i "fused kernels" "$d/build.log" "$F/build/setup.log" 2>/dev/null | head -3 >&2
  "$F/build/gpubench_tests" --gtest_filter='FusedKernels*' > "$d/tests.log" 2>&1
  tail -5 "$d/tests.log" >&2
  "$F/scripts/dev/gpu/fused_check.sh" "$F/build/gpubench" "$d/check" > "$d/check.log" 2>&1
  cat "$d/check/summary.txt" >&2
}

for s in ${@:-build torchrun peers fused fp32lang peersfused fastpaths}; do
  case $s in
    build) DEADLINE_S=$(left) "$here/../2026-12-07-h100-fast-paths/call.sh" build || break
           [ -x build/gpubench ] || break ;;
    torchrun) stage torchrun 60 "$here/call.sh" --fn torchrun_once ;;
    peers) stage peers 120 "$here/call.sh" --fn peers ;;
    fused) stage fused 240 "$here/call.sh" --fn fused ;;
    peersfused) stage peersfused 200 "$here/call.sh" --fn peers_fused ;;
    fp32lang) stage fp32lang 90 scripts/run_all.sh --gpu 0 --precision fp32 --model bert-base \
                --model bert-finetune --model mt-dnn --out "$R/fp32lang" -- --no-cache ;;
    fastpaths) stage fastpaths 150 env DEADLINE_S=$(( $(left) - 10 )) \
                 FASTPATH_CASES="transformer-big:16384 conv-seq2seq:16384 unsupmt:16000" \
                 "$here/../2026-12-07-h100-fast-paths/call.sh" fastpaths ;;
    --fn) "$2"; exit $? ;;
    *) log "unknown stage $s"; exit 2 ;;
  esac
done
tar -C results -czf "$OUT/dev.tgz" dev
log "packed results/dev into \$OUT/dev.tgz ($(left) s left)"
