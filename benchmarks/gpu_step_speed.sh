#!/usr/bin/env bash
# Issue 38's rows that wait for a GPU, in one device call of about DEADLINE_S seconds on four
# cards (each lane stops at its own timeout and keeps its log):
#
#   bash benchmarks/gpu_step_speed.sh OUT [DEADLINE_S]
#
#   GPU 0  twins under MPS with the checkpoint written during the next step: six runs of one seed on
#          the card (static, its twin, the expert harness, both evolving arms, a load run),
#          `train.checkpoint_overlap=true` (benchmarks/gpu_twins.py --mps)
#   GPU 1  the math GRPO step at 64 x 8 (today; buckets + causal attention; those with
#          `train.lora_base_dtype`, with `train.checkpoint_overlap`, with `train.compile`, and
#          lora16 with passes of 65,536 tokens, `train.pass_tokens`), then the
#          checkpoint beside a step's commit against one after the other
#          (benchmarks/checkpoint_save.py), and scoring with the harness beside the evaluator
#          (benchmarks/score_overlap.py)
#   GPU 2  six runs sharing the card, timed over the same steps: today's against MPS with length
#          buckets + causal attention
#   GPU 3  one training update per trainer variant (causal, lora16, compiled, wide) with a profile,
#          then decode at 512 x 256 with profiles of the first and the last eight decode steps
#
# Each bench writes OUT/<name>.txt (its table and log) and OUT/<name>/ (rows.json).
set -u
out=$1; deadline=${2:-540}
mkdir -p "$out"

source "$(dirname "$0")/gpu_lanes.sh"

lane0() { OUT=$out/twins-mps script twins-mps 0 "$deadline" benchmarks/gpu_twins.py --mps --suites default \
    --seeds 0 --per-card 6 --steps "${TWIN_STEPS:-20}" --deadline $((deadline - 60)) --runs /tmp/twins_mps_runs \
    --set train.checkpoint_overlap=true; }
lane1() {
    bench step 1 $((deadline - 150)) --only step --skip-hf --steps "${STEPS:-6}" --step-variants \
        "causal:train.length_buckets=true,train.causal_only=true;lora16:train.length_buckets=true,train.causal_only=true,train.lora_base_dtype=true;overlap:train.length_buckets=true,train.causal_only=true,train.checkpoint_overlap=true;compiled:train.length_buckets=true,train.causal_only=true,train.compile=true;wide:train.length_buckets=true,train.causal_only=true,train.lora_base_dtype=true,train.pass_tokens=65536"
    script checkpoint 1 90 benchmarks/checkpoint_save.py --device cuda --repeats 20
    script score 1 60 benchmarks/score_overlap.py --tasks 64 --group 8 --repeats 10; }
lane2() { bench card 2 "$deadline" --only card --card-deadline $((deadline - 30)) --card-mps \
    --card-new train.length_buckets=true,train.causal_only=true; }
lane3() {
    bench trainer 3 360 --only trainer --trainer-variants causal,lora16,compiled,wide --profile
    bench gen 3 $((deadline - 370)) --only gen --profile; }
lane0 & lane1 & lane2 & lane3 & wait
grep -h "rc=" "$out"/*.txt
