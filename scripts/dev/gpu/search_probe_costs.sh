#!/usr/bin/env bash
# On the GPU machine: what the max-batch search's design (docs/search.md) needs confirmed, in
# about four minutes. Builds nothing: give it the gpubench binary and a folder for the results.
#
#   scripts/dev/gpu/search_probe_costs.sh GPUBENCH OUT [STAGE...]
#   GPUBENCH_DEADLINE_S=240   a stage that would start after this many seconds is skipped
#
# Stages, in this order by default (fp32, strict: the worst case for cuDNN workspaces; every
# probe is a search-only job under a 138 GiB cap, the card less about 1 GiB):
#   probe     one probe with cuDNN heuristics (the search's default) at the 2020 RTX 8000 batch
#             of nasnet-large (64), deeplabv3 (16) and pix2pixhd (2), plus nasnet-large at 16:
#             its cost (build, two steps) and peak, beside what autotuning cost and peaked at the
#             same batch on 2026-12-01
#   autotune  the same single probe with autotuning (search.cudnn_benchmark) for nasnet-large
#             at 16 and deeplabv3 at 16, with this build
#   search    the whole search, heuristics, of bert-base, nasnet-large, deeplabv3 and pix2pixhd
#             (search only, no timed run): probes, seconds, exactness
#   wscap     deeplabv3 at 16 with heuristics and CUDNN_CONV_WSCAP_DBG=1024: does cuDNN 9's
#             backend honour the workspace cap (a lower peak than in the probe stage)?
#   stylegan  stylegan at batch 4, heuristics then autotuning (its steps take seconds each, so
#             its whole search stays out of this script)
#   warmup    (not by default) timed runs of deeplabv3 at 16 and nasnet-large amp-bf16 at 64
#             with the new default (no emptyCache after each autotuning) and with PyTorch's
#             (run.cudnn_benchmark_empty_cache: true): warm-up seconds, first step
# Each stage writes OUT/STAGE.json (the result document), OUT/STAGE.jsonl (its journal) and
# OUT/STAGE.log (progress); a stage whose json exists is not run again. The table comes last.
set -uo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d' >&2
  exit 2
fi
exe=$(readlink -f "$1")
out=$2
shift 2
stages=${*:-probe autotune search wscap stylegan}
mkdir -p "$out"
out=$(readlink -f "$out")
[ -x "$exe" ] || { echo "search_probe_costs: $exe is not an executable" >&2; exit 2; }
start=$(date +%s)
deadline=$((start + ${GPUBENCH_DEADLINE_S:-240}))
skipped=()

# run_stage NAME CONFIG_YAML ARGS...: gpubench run with that config overlay, unless the stage
# ran before or the deadline has passed; its searches run in full (--no-cache).
run_stage() {
  local name=$1 yaml=$2 s e
  shift 2
  if [ -f "$out/$name.json" ]; then
    echo "search_probe_costs: $name: done earlier ($out/$name.json)" >&2
    return
  fi
  if [ "$(date +%s)" -ge "$deadline" ]; then
    skipped+=("$name")
    return
  fi
  printf '%s\n' "$yaml" > "$out/$name.yaml"
  rm -f "$out/$name.jsonl"
  s=$(date +%s.%N)
  "$exe" run --gpu 0 --config "$out/$name.yaml" --json "$out/$name.json" \
    --journal "$out/$name.jsonl" --timeout 300 --no-cache "$@" > "$out/$name.txt" 2> "$out/$name.log"
  local rc=$?
  e=$(date +%s.%N)
  echo "$name: exit $rc, wall $(python3 -c "print(round($e - $s, 1))") s" | tee -a "$out/walltimes.txt" >&2
}

# single MODEL BATCH [true|false]: a search of exactly one batch (one probe).
single() {
  printf '  %s: {search: {min_batch: %s, max_batch: %s, first_probe: %s, cudnn_benchmark: %s}}\n' \
    "$1" "$2" "$2" "$2" "${3:-false}"
}

for stage in $stages; do
  case $stage in
    probe)
      run_stage probe "models:
$(single nasnet-large 64)
$(single deeplabv3 16)
$(single pix2pixhd 2)" --model nasnet-large --model deeplabv3 --model pix2pixhd --memory-tiers 138
      run_stage probe16 "models:
$(single nasnet-large 16)" --model nasnet-large --memory-tiers 138
      ;;
    search)
      run_stage search "run: {}" --model bert-base --model nasnet-large --model deeplabv3 \
        --model pix2pixhd --memory-tiers 138
      ;;
    autotune)
      run_stage autotune "models:
$(single nasnet-large 16 true)
$(single deeplabv3 16 true)" --model nasnet-large --model deeplabv3 --memory-tiers 138
      ;;
    stylegan)
      run_stage stylegan-heuristics "models:
$(single stylegan 4)" --model stylegan --memory-tiers 138
      run_stage stylegan-autotune "models:
$(single stylegan 4 true)" --model stylegan --memory-tiers 138
      ;;
    wscap)
      export CUDNN_CONV_WSCAP_DBG=1024  # read by cuDNN itself, in the workers
      run_stage wscap "models:
$(single deeplabv3 16)" --model deeplabv3 --memory-tiers 138
      unset CUDNN_CONV_WSCAP_DBG
      ;;
    warmup)
      run_stage warmup-new "run: {cudnn_benchmark_empty_cache: false}" --model deeplabv3 \
        --batch 16 --min-seconds 2
      run_stage warmup-pytorch "run: {cudnn_benchmark_empty_cache: true}" --model deeplabv3 \
        --batch 16 --min-seconds 2
      run_stage warmup-new-bf16 "run: {cudnn_benchmark_empty_cache: false}" --model nasnet-large \
        --batch 64 --precision amp-bf16 --min-seconds 2
      run_stage warmup-pytorch-bf16 "run: {cudnn_benchmark_empty_cache: true}" \
        --model nasnet-large --batch 64 --precision amp-bf16 --min-seconds 2
      ;;
    *)
      echo "search_probe_costs: unknown stage '$stage' (probe search autotune stylegan wscap warmup)" >&2
      exit 2
      ;;
  esac
done

echo "" >&2
python3 - "$out" "$(($(date +%s) - start))" "${skipped[*]:-}" <<'PY'
import json, os, sys
out, wall, skipped = sys.argv[1], sys.argv[2], sys.argv[3]
G = 2 ** 30
# What autotuning cost at the same batch on 2026-12-01 (shared/measurements/h200-2026-12-01.md):
# the timed run's first warm-up step (autotuning included) and its peak allocated memory, fp32.
dec1 = {('nasnet-large', 64): 'first timed step 42.1 s, peak allocated 45.2 GiB',
        ('deeplabv3', 16): 'first timed step 19.1 s, peak allocated 120.1 GiB',
        ('pix2pixhd', 2): 'first timed step 72.3 s, peak allocated 136.9 GiB',
        ('nasnet-large', 16): 'search probe 24.3 s, peak reserved 20.6 GiB'}

def jobs(name):
    path = os.path.join(out, name + '.json')
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return json.load(f).get('jobs', [])

print(f"search_probe_costs: {wall} s wall" + (f"; skipped (deadline): {skipped}" if skipped else ""))
# Each stage's exit status and wall time (this call's and earlier ones'); a stage that wrote no
# result document says why in OUT/STAGE.log.
walltimes = os.path.join(out, 'walltimes.txt')
if os.path.exists(walltimes):
    with open(walltimes) as f:
        for line in f:
            name = line.split(':', 1)[0]
            missing = '' if os.path.exists(os.path.join(out, name + '.json')) else \
                f"  (no {name}.json: see {os.path.join(out, name + '.log')})"
            print('  ' + line.rstrip() + missing)
print()
print("| stage | model | cuDNN | batch | fits | probe s | build s | steps s | peak reserved GiB | "
      "peak allocated GiB | resident GiB | the same batch autotuned on 2026-12-01 |")
print("|---|---|---|--:|---|--:|--:|--:|--:|--:|--:|---|")
for name in ['probe', 'probe16', 'autotune', 'wscap', 'stylegan-heuristics', 'stylegan-autotune']:
    for j in jobs(name):
        s = j.get('search') or {}
        for p in s.get('probes', []):
            ref_text = dec1.get((j['model'], p['batch']), '')
            mode = 'autotune' if s.get('cudnn_benchmark') else 'heuristics'
            if name == 'wscap':
                mode += ', WSCAP 1024'
            print(f"| {name} | {j['model']} | {mode} | {p['batch']} | {'yes' if p['fits'] else 'OOM'} | "
                  f"{p['seconds']:.1f} | {p.get('prepare_seconds', 0):.1f} | {p.get('steps_seconds', 0):.1f} | "
                  f"{p['peak_bytes'] / G:.1f} | {p.get('peak_allocated_bytes', 0) / G:.1f} | "
                  f"{p['resident_bytes'] / G:.2f} | {ref_text} |")
        if not s:
            print(f"| {name} | {j['model']} | | | {j.get('status')} | | | | | | | {j.get('message', '')[:60]} |")
print()
print("| search (138 GiB cap) | max batch | probes | converged | search s | stop | probes (batch, +fit/x OOM, phase, s) |")
print("|---|--:|--:|---|--:|---|---|")
for j in jobs('search'):
    s = j.get('search') or {}
    trail = ' '.join(f"{p['batch']}{'+' if p['fits'] else 'x'}{p['phase'][0]}{p['seconds']:.0f}"
                     for p in s.get('probes', []))
    print(f"| {j['model']} | {s.get('max_batch', 0)} | {len(s.get('probes', []))} | "
          f"{s.get('converged')} | {s.get('seconds', 0):.1f} | {s.get('stop_reason', j.get('message', ''))} | {trail} |")
rows = [n for n in ['warmup-new', 'warmup-pytorch', 'warmup-new-bf16', 'warmup-pytorch-bf16'] if jobs(n)]
if rows:
    print()
    print("| warm-up | model | precision | steps | seconds | first step s | reason | step ms |")
    print("|---|---|---|--:|--:|--:|---|--:|")
    for n in rows:
        for j in jobs(n):
            w = j.get('warmup', {})
            st = w.get('step_time_ms', [])
            print(f"| {n} | {j['model']} | {j['precision']} | {w.get('steps')} | {w.get('seconds', 0):.1f} | "
                  f"{(st[0] / 1000 if st else 0):.1f} | {w.get('reason')}: {w.get('detail', '')} | "
                  f"{j.get('timing', {}).get('step_time_ms_median', 0):.1f} |")
PY
