#!/usr/bin/env bash
# On the GPU machine: does unsupmt's search probe peak at least as high as whole XLM iterations
# at the same batch? Issue 10, proposal 2: the probe (UnsupMtStep::prepare_probe) now trains
# only the two back-translation passes, on stand-in translations, with the optimizer state of
# both models allocated first: no auto-encoding pass, no greedy decode. A probe that peaked
# lower than the iteration would let the search pick a batch the timed run cannot train.
#
#   docs/results/2026-12-04-h200-bf16-suite-tiers-repeats/unsupmt_probe_check.sh GPUBENCH OUT
#   CASES="fp32:72000 amp-bf16:96000 fp32:36000 amp-bf16:48000"   precision:tokens (default)
#   GPUBENCH_DEADLINE_S=140   a case that would start after this many seconds is skipped;
#                             every worker is stopped at 175 s (or after 90 s of its own)
#
# Per case, two workers of GPUBENCH, each a fresh process (`gpubench worker`, the phases a
# `gpubench run` starts):
#   probe      phase "search" with search.min_batch = max_batch = first_probe = the batch: one
#              probe, as the search runs it (its build, prepare_probe(), one run()); its
#              peak_allocated_bytes, resident bytes and step seconds
#   iteration  phase "confirm" at the batch: the step built, then three whole iterations (the
#              confirm of a memory tier: the first creates the optimizer state mid-iteration,
#              the next two are steady); its peak_allocated_bytes over the three
# Both peaks count everything allocated (weights, batches, state, activations, workspaces).
# Default batches: just under the 2026-12-02 suites' searched batches (fp32 73800 tokens,
# amp-bf16 97900; a fresh process at 74600 and 98900 ran out of memory by fragmentation) and
# half of each. About 2.5 minutes on an H200 (fp32 iterations take about 14 s at 72000 tokens),
# never more than 3.
#
# OUT/summary.txt: one row per case: both peaks in GiB, probe - iteration (GiB and % of the
# iteration's), the probe's step seconds against the iteration's mean, and "ok" when the
# probe's peak is at least the iteration's, "SHORT" when it is below (the probe undershoots:
# the choice of sub-steps is wrong for that case). OUT/CASE-{probe,iteration}.{json,log} keep
# each worker's record and progress lines.
set -uo pipefail
if [ $# -ne 2 ]; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d' >&2
  exit 2
fi
exe=$(readlink -f "$1")
out=$2
[ -x "$exe" ] || { echo "unsupmt_probe_check: $exe is not an executable" >&2; exit 2; }
mkdir -p "$out"
out=$(readlink -f "$out")
cases=${CASES:-fp32:72000 amp-bf16:96000 fp32:36000 amp-bf16:48000}
device=${DEVICE:-cuda:0}
start=$(date +%s)
deadline=$((start + ${GPUBENCH_DEADLINE_S:-140}))
hard_stop=$((start + 175))
skipped=()
: > "$out/walltimes.txt"

# spec PHASE PRECISION BATCH: a worker's job spec (JSON) on stdout.
spec() {
  python3 - "$@" "$device" <<'PY'
import json, sys
phase, precision, batch, device = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
document = {"run": {"precision": precision},
            "models": {"unsupmt": {"search": {"min_batch": batch, "max_batch": batch,
                                              "first_probe": batch}}}}
print(json.dumps({"model": "unsupmt", "phase": phase,
                  "batch": batch if phase == "confirm" else 0, "device": device,
                  "overlays": [{"file": "unsupmt_probe_check", "document": document}],
                  "search_only": True}))
PY
}

for c in $cases; do
  p=${c%%:*}
  b=${c##*:}
  if [ "$(date +%s)" -ge "$deadline" ]; then
    skipped+=("$c")
    continue
  fi
  for kind in probe iteration; do
    phase=search
    [ "$kind" = iteration ] && phase=confirm
    name="$out/$p-$b-$kind"
    spec "$phase" "$p" "$b" > "$name.spec.json"
    rm -f "$name.json"  # a record left by an earlier call is not this one's
    left=$((hard_stop - $(date +%s)))
    [ "$left" -gt 90 ] && left=90
    if [ "$left" -lt 5 ]; then
      echo "$p $b $kind: not run (past the 175 s stop)" | tee -a "$out/walltimes.txt" >&2
      continue
    fi
    s=$(date +%s.%N)
    timeout "$left" "$exe" worker --spec "$name.spec.json" --out "$name.json" > "$name.log" 2>&1
    rc=$?
    e=$(date +%s.%N)
    echo "$p $b $kind: exit $rc, wall $(python3 -c "print(round($e - $s, 1))") s" |
      tee -a "$out/walltimes.txt" >&2
  done
done

python3 - "$out" "$cases" "$(($(date +%s) - start))" "${skipped[*]:-}" <<'PY' | tee "$out/summary.txt"
import json, os, sys
out, cases, wall, skipped = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4]
G = 2 ** 30

def record(name):
    path = os.path.join(out, name + '.json')
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)

print(f"unsupmt_probe_check: {wall} s wall" + (f"; skipped (deadline): {skipped}" if skipped else ""))
print("probe: the two back-translation passes on stand-ins, state first; iteration: whole XLM "
      "iterations (4 updates, 2 greedy decodes), peak of 3 in a fresh process")
print(f"{'precision':<9} {'tokens':>7} {'probe GiB':>10} {'iter GiB':>9} {'probe-iter':>11} "
      f"{'%':>6} {'probe s':>8} {'iter s':>7} {'resident':>9}  verdict")
bad = 0
for c in cases:
    p, b = c.split(':')
    probe, iteration = record(f"{p}-{b}-probe"), record(f"{p}-{b}-iteration")
    row = f"{p:<9} {b:>7}"
    if probe is None or iteration is None:
        print(row + "  not run (see walltimes.txt and the .log files)")
        continue
    probes = (probe.get('search') or {}).get('probes') or []
    pr = probes[0] if probes else {}
    if not pr.get('fits'):
        print(row + f"  probe did not fit: {pr.get('error') or probe.get('message')}")
        continue
    if iteration.get('status') != 'ok':
        print(row + f"  iteration {iteration.get('status')}: {iteration.get('message', '')[:160]}")
        continue
    pp, ip = pr['peak_allocated_bytes'], iteration['peak_allocated_bytes']
    steps = (iteration.get('memory') or {}).get('confirm_steps', 3)
    # The confirm's seconds are not in its record: its wall time from walltimes.txt, less the
    # probe's build as an estimate of the build, per iteration.
    iter_s = float('nan')
    with open(os.path.join(out, 'walltimes.txt')) as f:
        for line in f:
            if line.startswith(f"{p} {b} iteration:"):
                iter_s = (float(line.rsplit('wall', 1)[1].split()[0]) - pr.get('prepare_seconds', 0)) / steps
    verdict = "ok" if pp >= ip else "SHORT"
    bad += pp < ip
    print(row + f" {pp / G:>10.2f} {ip / G:>9.2f} {(pp - ip) / G:>+11.3f} "
          f"{100 * (pp - ip) / ip if ip else float('nan'):>+6.2f} {pr.get('steps_seconds', 0):>8.1f} {iter_s:>7.1f} "
          f"{pr.get('resident_bytes', 0) / G:>9.2f}  {verdict} (probe steps: {pr.get('steps')})")
print("iter s: (confirm wall - probe build) / iterations, process start included: an upper bound")
print("the whole-iteration one-run probes this replaces (2026-12-02, steps_seconds): fp32 73400 "
      "tokens 13.9 s, amp-bf16 97300 tokens 8.7 s")
if bad:
    print(f"{bad} case(s) SHORT: the probe peaks below the iteration; do not merge the probe as is")
PY
