#!/usr/bin/env bash
# Issue 15's GPU split: do runs of one seed stay identical when their batch sizes no longer
# follow the other runs on the card? (docs/results/gpu-trajectory-split/README.md)
#
#   bash benchmarks/trajectory_split.sh [OUT_DIR]          # one device call, one card, < 600 s
#
# Two phases, four 30-step static-expert runs of seed 1 at once on the card in each (the GPU
# profile, evolution off, 32 + 32 held-out problems), so every run shares the card with three
# others, as in the evidence runs:
#   on:  the evidence runs' settings (train.micro_batch=64 fixed, no share): a run meets an
#        out-of-memory error when its neighbours hold the memory it needs, and the loop
#        retries with half the micro-batch for the rest of the run;
#   off: model.gpu_share=0.22 and the micro-batch planned from the share (auto_micro_batch).
# Then every pair of runs within a phase goes through benchmarks/twin_steps.py (6 pairs a
# phase) and each run's micro-batch and generation batch per step and its out-of-memory
# retries are listed (benchmarks/run_shapes.py). The prediction of the memory explanation:
# in "on", pairs split exactly where their micro-batch series part; in "off", every pair is
# identical for all 30 steps. SPLIT_DESIGN=mixed runs two "on" and two "off" runs at once
# instead (one phase; the "off" runs can still be pushed out of memory by unbounded
# neighbours, so it tests less). SPLIT_STEPS, SPLIT_PHASE_S (deadline a phase) override.
set -uo pipefail
out=${1:-${OUT:-/tmp/trajectory_split}}
steps=${SPLIT_STEPS:-30}
phase_s=${SPLIT_PHASE_S:-260}
root=${SPLIT_ROOT:-/tmp/trajectory_split_runs}
rm -rf "$root"; mkdir -p "$root" "$out"
log="$out/trajectory_split.txt"
exec > >(tee "$log") 2>&1

common=(--headless --quiet --profile gpu --steps "$steps" --seed 1
        --set evolve.enabled=false --set "harness=$PWD/backend/harness/defaults/math_expert.py"
        --set eval.n_val=32 --set eval.n_test=32 --set "eval.every=$steps")
on=(--set train.auto_micro_batch=false --set train.micro_batch=64)
off=(--set model.gpu_share=0.22 --set train.auto_micro_batch=true)

watch_memory() {  # the card's used memory every 5 s, for the phase's peak
  while true; do nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits; sleep 5; done
}

any_alive() { local p; for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }

phase() {  # phase NAME RUN... where each RUN is "name:on" or "name:off"
  local name=$1; shift
  local pids=() runs=()
  echo "== phase $name: $* ($(date -u +%T))"
  watch_memory >"$root/$name.mem" 2>/dev/null & local mem=$!
  for spec in "$@"; do
    local run=${spec%%:*} kind=${spec##*:} extra
    if [[ $kind == on ]]; then extra=("${on[@]}"); else extra=("${off[@]}"); fi
    python3 -m evotui run "${common[@]}" "${extra[@]}" --run-dir "$root/$run" >"$root/$run.log" 2>&1 &
    pids+=($!); runs+=("$root/$run")
  done
  local t0=$SECONDS
  while (( SECONDS - t0 < phase_s )) && any_alive "${pids[@]}"; do sleep 3; done
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null && echo "deadline: stopped pid $p at its next step"; done
  for p in "${pids[@]}"; do wait "$p"; done
  kill "$mem" 2>/dev/null; wait "$mem" 2>/dev/null
  echo "phase $name: $((SECONDS - t0)) s; card memory used, peak: $(sort -t, -k1 -n "$root/$name.mem" | tail -1) MiB (used, total)"
  for r in "${runs[@]}"; do grep -h -m3 -iE "error|Traceback" "$r.log" | sed "s|^|  $(basename "$r"): |"; done
}

pairs() {  # every pair of the given run names
  local names=("$@") i j args=()
  for ((i = 0; i < ${#names[@]}; i++)); do
    for ((j = i + 1; j < ${#names[@]}; j++)); do args+=("$root/${names[i]}" "$root/${names[j]}"); done
  done
  python3 benchmarks/twin_steps.py "${args[@]}"
}

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
git log --oneline -1 2>/dev/null
if [[ ${SPLIT_DESIGN:-phases} == mixed ]]; then
  phase mixed on1:on on2:on off1:off off2:off
  echo "== twins"; pairs on1 on2; pairs off1 off2
  runs=(on1 on2 off1 off2)
else
  phase on on1:on on2:on on3:on on4:on
  phase off off1:off off2:off off3:off off4:off
  echo "== twins, source on (micro-batch 64, no share)"; pairs on1 on2 on3 on4
  echo "== twins, source off (gpu_share 0.22, micro-batch from the share)"; pairs off1 off2 off3 off4
  runs=(on1 on2 on3 on4 off1 off2 off3 off4)
fi
echo "== batch sizes and out-of-memory retries per run"
python3 benchmarks/run_shapes.py "${runs[@]/#/$root/}"
echo "log: $log"
