#!/usr/bin/env bash
# The math GRPO step with the fastest settings together, in one short device call on two cards:
#
#   bash benchmarks/gpu_step_best.sh OUT [DEADLINE_S]
#
#   GPU 0  the step at 64 x 8: today against `wideo` (buckets, causal attention,
#          `train.lora_base_dtype`, passes of 65,536 tokens, `train.checkpoint_overlap`) and
#          `wideoc` (those compiled, `train.compile`; its first step compiles)
#   GPU 1  one training update: wide, compiled and widec (wide compiled), each against today
#          (TRAINER: other variants; empty: no trainer lane)
# STEPS (6): steps a variant. TORCH_LOGS=recompiles in the environment logs why a layer recompiles.
set -u
out=$1; deadline=${2:-200}
mkdir -p "$out"

source "$(dirname "$0")/gpu_lanes.sh"

wide="train.length_buckets=true,train.causal_only=true,train.lora_base_dtype=true,train.pass_tokens=65536"
bench step 0 "$deadline" --only step --skip-hf --steps "${STEPS:-6}" --step-variants \
    "wideo:$wide,train.checkpoint_overlap=true;wideoc:$wide,train.checkpoint_overlap=true,train.compile=true" &
trainer=${TRAINER-wide,compiled,widec}  # TRAINER= (empty): no trainer lane
[ -n "$trainer" ] && bench trainer 1 "$deadline" --only trainer --trainer-variants "$trainer" &
wait
grep -h "rc=" "$out"/*.txt
