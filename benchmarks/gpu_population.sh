#!/usr/bin/env bash
# The population against best-of-N static and the copy-only population on one suite, at the gpu
# profile: 3 seeds x (population, population-copy, best-of-n), N = 3 members or runs each,
# 30 steps, a comparison (and held-out evaluation) every 10 steps.
#
#   bash benchmarks/gpu_population.sh OUT DEADLINE_S GPUS "['dataset_a','dataset_b']"
#
# Environment: STEPS (30), SEEDS (0,1,2), N (3), SHARE (0.12 of a card a run), EVERY (10: steps
# between comparisons and held-out evaluations), ARMS (population,population-copy,best-of-n),
# HARNESS (empty: the default math harness; a path: every arm starts from it), JOBS (8 a card),
# N_VAL (200: validation problems, what the comparisons pair), EXTRA (more compare arguments, such as
# "--set population.stuck_movers=1" or "--mps").
#
# OUT is the compare folder: a second call with the same OUT resumes it (finished arms kept,
# populations resumed from population.sqlite). The compare stops cleanly at DEADLINE_S (SIGTERM),
# then writes its report.
set -u
out=$1; deadline=$2; gpus=$3; datasets=$4
n_gpus=$(awk -F, '{print NF}' <<<"$gpus")
CUDA_VISIBLE_DEVICES=$gpus timeout -s TERM -k 60 "$deadline" python3 -m evotui compare --profile gpu \
    --steps "${STEPS:-30}" --seeds "${SEEDS:-0,1,2}" --population "${N:-3}" \
    --arms "${ARMS:-population,population-copy,best-of-n}" --jobs "${JOBS:-$((8 * n_gpus))}" \
    --set model.gpu_share="${SHARE:-0.12}" --set population.every="${EVERY:-10}" --set eval.every="${EVERY:-10}" \
    ${HARNESS:+--set "harness='$HARNESS'"} \
    --set "math.datasets=$datasets" --set eval.n_val="${N_VAL:-200}" ${EXTRA:-} --out "$out" --quiet
echo "compare rc=$?"
