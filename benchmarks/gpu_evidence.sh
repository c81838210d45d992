#!/usr/bin/env bash
# The evidence runs of the README's Results, as run on the GPU machine (one call each).
#
#   bash benchmarks/gpu_evidence.sh NAME DEADLINE_S OUT_DIR -- COMPARE ARGS...
#
# Runs `evotui compare --profile gpu ... --out $COMPARES/NAME` in the background, and at
# DEADLINE_S seconds (the device call's limit, less a margin of two minutes) stops the grid
# (SIGTERM to compare, which passes it on: runs stop at their next step boundary with state
# saved, so a later call with the same arguments resumes them). Then writes the report of
# everything finished under that folder (`evotui report`) and packs report.md, report.json,
# compare.json, the SVGs and the log into OUT_DIR/NAME.tgz (the device returns at most a few
# files a call).
# Several of these can run side by side in one call, each with its own NAME.
set -uo pipefail
name=$1; deadline=$2; outdir=$3; shift 4
dir=${COMPARES:-/tmp/compares}/$name
mkdir -p "$dir" "$outdir"
python3 -m evotui compare --profile gpu --quiet --out "$dir" "$@" >"$dir/compare.stdout" 2>&1 &
pid=$!
t0=$SECONDS
while kill -0 $pid 2>/dev/null && (( SECONDS - t0 < deadline )); do sleep 5; done
if kill -0 $pid 2>/dev/null; then
  # SIGTERM to compare: it launches nothing more and passes the signal on; each run stops at its
  # next step boundary with its state saved (a re-run resumes it). A round in progress finishes
  # first; past 90 s the runs are killed and lose only their uncommitted step.
  echo "[$name] deadline ${deadline}s reached: stopping the grid (its runs resume on a re-run)"
  kill -TERM $pid
  for _ in $(seq 90); do kill -0 $pid 2>/dev/null || break; sleep 1; done
  if kill -0 $pid 2>/dev/null; then
    echo "[$name] still stopping after 90 s: killing its runs"
    pkill -KILL -f "evotui run --headless.*$dir"; kill -KILL $pid 2>/dev/null
  fi
fi
wait $pid; echo "[$name] compare exit $? after $((SECONDS - t0)) s"
tail -3 "$dir/compare.stdout"
python3 -m evotui report "$dir" --out "$dir" >"$dir/report.stdout" 2>&1 || tail -5 "$dir/report.stdout"
# what the databases hold and the report does not: each round's summary and the errors the runs
# logged (benchmarks/round_log.py), each run's micro-batch and generation batch by step (run_shapes.py)
here=$(dirname "$0")
python3 "$here/round_log.py" "$dir"/*-s*/ >"$dir/rounds.txt" 2>&1
python3 "$here/run_shapes.py" "$dir"/*-s*/ >"$dir/shapes.txt" 2>&1
(cd "$dir" && tar czf "$outdir/$name.tgz" --ignore-failed-read report.md report.json compare.json \
   compare.stdout rounds.txt shapes.txt ./*.svg 2>/dev/null)
du -sh "$dir" | tail -1
