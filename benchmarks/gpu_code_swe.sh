#!/usr/bin/env bash
# The four-arm comparison on code and on SWE at the gpu profile, side by side on one host:
# 3 seeds x (static, static-expert, coevolve, coevolve-expert) a domain, 12 runs a domain.
#
#   bash benchmarks/gpu_code_swe.sh OUT DEADLINE_S CODE_GPUS SWE_GPUS
#
# CODE_GPUS and SWE_GPUS are CUDA_VISIBLE_DEVICES lists ("0,1" and "2,3" on four cards); an
# empty list ("") skips that domain. Steps
# and evaluation cadence: CODE_STEPS (40) with CODE_EVERY (10), SWE_STEPS (16) with SWE_EVERY (8).
# SWE trains and is tested on the one-shot levels 0 and 1 (the multi-turn levels 2-4 took most of
# a step and of each held-out evaluation at six runs a card: one step in six minutes).
# Code is also tested on all 164 HumanEval problems (the gpu profile's eval.n_ood), reported beside.
# OUT holds one compare folder a domain; a second call with the same OUT resumes both (finished
# runs kept, the others resumed from their last checkpoint). Each compare stops cleanly at
# DEADLINE_S (SIGTERM) and then writes its report; benchmarks/step_split.py then splits the steps.
set -u
out=$1; deadline=$2; code_gpus=$3; swe_gpus=$4
mkdir -p "$out"

grid() {  # domain gpus steps every [--set ...]
    local n_gpus; n_gpus=$(awk -F, '{print NF}' <<<"$2")
    local jobs=12
    CUDA_VISIBLE_DEVICES=$2 timeout -s TERM -k 60 "$deadline" python3 -m evotui compare --profile gpu \
        --steps "$3" --seeds "${SEEDS:-0,1,2}" --arms static,static-expert,coevolve,coevolve-expert \
        --jobs "$jobs" --set domain="$1" --set eval.every="$4" \
        --set model.gpu_share="${SHARE:-$(python3 -c "print(round(0.9 * $n_gpus / $jobs, 3))")}" \
        "${@:5}" --out "$out/$1" --quiet > "$out/$1.log" 2>&1
    echo "$1 compare rc=$?" | tee -a "$out/$1.log"
}

# held-out code answers get the harnesses' token budget (a HumanEval body outgrows 128 tokens)
[ -n "$code_gpus" ] && grid code "$code_gpus" "${CODE_STEPS:-40}" "${CODE_EVERY:-10}" --set eval.max_new_tokens=256 &
# and held-out SWE answers the expert harness's 192: at 128, 44 of 126 well-formed level-0 edits
# of the base model were cut (docs/results/cpu-swe-levels rows)
# SWE_SET: more --set arguments for the SWE grid (e.g. "train.shared_prefix=true"), space-separated
swe_set=(); for kv in ${SWE_SET:-}; do swe_set+=(--set "$kv"); done
[ -n "$swe_gpus" ] && grid swe "$swe_gpus" "${SWE_STEPS:-16}" "${SWE_EVERY:-8}" --set "swe.levels='0,1'" \
    --set "swe.test_mix='0:4,1:3'" --set eval.max_new_tokens=192 "${swe_set[@]}" &
wait
# the step split per arm, and every run's steps in a small file to bring back (the databases stay)
for d in code swe; do
    [ -d "$out/$d" ] && python3 benchmarks/step_split.py "$out/$d" --json "$out/$d.steps.json" | tee "$out/$d.steps.md"
done
