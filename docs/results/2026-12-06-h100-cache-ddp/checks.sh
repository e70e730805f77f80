#!/usr/bin/env bash
# On a one-GPU machine (issues 45 and 41): two checks of the code that landed on 2026-12-06.
#
#   docs/results/2026-12-06-h100-cache-ddp/checks.sh GPUBENCH OUTDIR
#   DEADLINE_S=480   seconds this may use; a step that cannot finish before it is skipped
#
# 1. The cache of search answers (issue 45 item 2): the language suite at amp-bf16 with an empty
#    cache (cold: full searches, each answer stored), then the same command again (rerun: each
#    cached answer verified with two probes). Both into OUTDIR/{cold,rerun}.{jsonl,json,txt,log}.
# 2. Data parallel at world size 1 through NCCL against the plain run (issue 41): bert-base
#    amp-bf16 at a fixed batch of 256, --repeat 3 each, in the order plain, ddp, ddp, plain so
#    that a drift of clocks favours neither side. OUTDIR/{plain,ddp}-{1,2}.*.
# OUTDIR/summary.txt says what each step found; OUTDIR/walltimes.txt each command's wall time.
set -uo pipefail
bin=${1:?usage: checks.sh GPUBENCH OUTDIR}
out=${2:?usage: checks.sh GPUBENCH OUTDIR}
deadline=$(( $(date +%s) + ${DEADLINE_S:-480} ))
mkdir -p "$out"
left() { echo $(( deadline - $(date +%s) )); }

# step NAME NEEDED_S ARGS...: one `gpubench run`, skipped when fewer than NEEDED_S seconds are left.
step() {
  local name=$1 need=$2 s rc
  shift 2
  if [ -f "$out/$name.json" ]; then return 0; fi
  if [ "$(left)" -lt "$need" ]; then echo "$name: skipped, $(left) s left" >> "$out/walltimes.txt"; return 0; fi
  s=$(date +%s)
  timeout --signal=TERM --kill-after=20 "$(left)" "$bin" run "$@" --journal "$out/$name.jsonl" \
    --json "$out/$name.json" --format summary > "$out/$name.txt" 2> "$out/$name.log"
  rc=$?
  echo "$name: exit $rc, wall $(( $(date +%s) - s )) s" >> "$out/walltimes.txt"
}

export GPUBENCH_CACHE_DIR=$out/cache
step cold 200 --gpu 0 --suite language --precision amp-bf16
step rerun 120 --gpu 0 --suite language --precision amp-bf16
unset GPUBENCH_CACHE_DIR

ddp=(--model bert-base --precision amp-bf16 --batch 256 --repeat 3 --no-cache)
step plain-1 60 --gpu 0 "${ddp[@]}"
step ddp-1 60 --gpus 0 "${ddp[@]}"
step ddp-2 60 --gpus 0 "${ddp[@]}"
step plain-2 60 --gpu 0 "${ddp[@]}"

python3 - "$out" > "$out/summary.txt" 2>&1 <<'PY'
import json, math, os, sys
out = sys.argv[1]
def jobs(name):
    try:
        return {j["model"]: j for j in json.load(open(os.path.join(out, name + ".json")))["jobs"]}
    except Exception as e:  # noqa: BLE001 - a step that wrote nothing is a result too
        print(f"{name}: no result ({e})")
        return {}
cold, rerun = jobs("cold"), jobs("rerun")
print("cache: model | batch cold/rerun | source | probes cold/rerun | search s cold/rerun | job wall s cold/rerun | throughput rerun/cold")
tot = [0.0, 0.0]
for m, c in cold.items():
    r = rerun.get(m, {})
    cs, rs = c.get("search") or {}, r.get("search") or {}
    ratio = r.get("throughput", 0) / c["throughput"] if c.get("throughput") else 0
    tot[0] += c.get("wall_seconds", 0); tot[1] += r.get("wall_seconds", 0)
    print(f"{m} | {c.get('batch')}/{r.get('batch')} | {rs.get('source', 'search')} | "
          f"{len(cs.get('probes', []))}/{len(rs.get('probes', []))} | "
          f"{cs.get('seconds', 0):.0f}/{rs.get('seconds', 0):.0f} | "
          f"{c.get('wall_seconds', 0):.0f}/{r.get('wall_seconds', 0):.0f} | {ratio:.3f} | "
          f"status {c.get('status')}/{r.get('status')}")
print(f"cache: jobs' wall seconds, cold {tot[0]:.0f}, rerun {tot[1]:.0f}")
def stats(name):
    j = jobs(name).get("bert-base", {})
    return j.get("throughput_stats") or {}, j
pairs = []
for n in ("plain-1", "ddp-1", "ddp-2", "plain-2"):
    s, j = stats(n)
    dp = j.get("data_parallel") or {}
    print(f"{n}: status {j.get('status')}, median {s.get('median', 0):.1f}, 95% [{s.get('ci95_low', 0):.1f}, "
          f"{s.get('ci95_high', 0):.1f}], n {s.get('n')}, world size {dp.get('world_size', 1)}, "
          f"sync {((dp.get('gradient_sync') or {}).get('name'))}")
    pairs.append(s.get("median", 0))
if all(pairs):
    plain = math.sqrt(pairs[0] * pairs[3]); ddp = math.sqrt(pairs[1] * pairs[2])
    print(f"ddp/plain (geometric means of the two medians each): {ddp / plain:.4f}; "
          f"first pair {pairs[1] / pairs[0]:.4f}, second pair {pairs[2] / pairs[3]:.4f}")
PY
cat "$out/summary.txt"
