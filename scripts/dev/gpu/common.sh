# Shared by the scripts/dev/gpu/*.sh measurement scripts (sourced, not run).

# field FILE EXPR: EXPR evaluated on the JSON in FILE (bound to d).
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

# timed_search MODEL PRECISION: gpubench's search and timed run, its wall time (process starts
# included) appended to $OUT/walltimes.txt; writes $OUT/MODEL-PRECISION.{json,txt,log}. The
# search runs in full (--no-cache: no cached answer verified instead).
timed_search() {
  local m=$1 p=$2 s e rc
  s=$(date +%s.%N)
  build/gpubench run --gpu 0 --model "$m" --precision "$p" --no-cache --json "$OUT/$m-$p.json" \
    > "$OUT/$m-$p.txt" 2> "$OUT/$m-$p.log"
  rc=$?
  e=$(date +%s.%N)
  echo "$m $p: exit $rc, wall $(python3 -c "print(round($e - $s, 1))") s" | tee -a "$OUT/walltimes.txt"
}

# fitting_reference FLAG BATCH JSON TXT SCRIPT ARGS...: runs the Python reference SCRIPT with
# FLAG BATCH, then BATCH/2, BATCH/4 until one fits (the Python side can need more memory), its
# result in JSON and output in TXT; prints the batch it ran at (BATCH when none did).
fitting_reference() {
  local flag=$1 b=$2 json=$3 txt=$4 script=$5 try
  shift 5
  for try in $b $((b / 2)) $((b / 4)); do
    if python3 "$script" "$@" "$flag" "$try" --json "$json" > "$txt" 2>&1; then b=$try; break; fi
  done
  echo "$b"
}
