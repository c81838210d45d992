#!/usr/bin/env bash
# A compare stopped and resumed twice finishes with every record stored once (one device call).
#
#   bash benchmarks/gpu_resume.sh STOP1_S STOP2_S OUT_DIR -- COMPARE ARGS...
#
# Starts `evotui compare ... --out DIR`, sends it SIGTERM at STOP1_S seconds (each run stops at
# its next step boundary, state saved), runs the same command again (it resumes every run),
# stops it again at STOP2_S seconds, and runs it a third time to the end. Then checks each run:
# finished, no step, rollout, policy version or harness version stored twice
# (benchmarks/resume_audit.py), and prints one line a run. Logs and the table go to OUT_DIR.
set -uo pipefail
stop1=$1; stop2=$2; outdir=$3; shift 4
dir=${COMPARES:-/tmp/compares}/resume
mkdir -p "$dir" "$outdir"
here=$(dirname "$0")

leg() {  # leg N DEADLINE (0: no deadline)
  python3 -m evotui compare --quiet --out "$dir" "$@" >>"$outdir/compare.log" 2>&1 &
  local pid=$! t0=$SECONDS
  while kill -0 $pid 2>/dev/null && { (( LEG_DEADLINE == 0 )) || (( SECONDS - t0 < LEG_DEADLINE )); }; do sleep 2; done
  if kill -0 $pid 2>/dev/null; then
    echo "leg $LEG: SIGTERM at $((SECONDS - t0)) s" | tee -a "$outdir/compare.log"
    kill -TERM $pid
  fi
  wait $pid; echo "leg $LEG: compare exit $? after $((SECONDS - t0)) s" | tee -a "$outdir/compare.log"
}
LEG=1 LEG_DEADLINE=$stop1 leg "$@"
LEG=2 LEG_DEADLINE=$stop2 leg "$@"
LEG=3 LEG_DEADLINE=0 leg "$@"
python3 "$here/resume_audit.py" "$dir"/*-s*/ | tee "$outdir/resume_audit.txt"
