#!/usr/bin/env bash
# The 8-bit KV cache (`model.kv_int8`) against the cache in the model's dtype, on one card in one
# device call (each comparison inside one process):
#
#   bash benchmarks/gpu_kv_int8.sh OUT [DEADLINE_S]
#
#   gen.txt   `evotui bench -- --only gen,dist --profile`: decode at 512 x 256 for every engine
#             variant (the int8 row among them), the distribution check of both caches against
#             the policy's forward, and a profile of the fastest variant's decode steps
#   step.txt  `evotui bench -- --only step --skip-hf --steps 8`: today's path, wideoc (gpu-fast's
#             settings compiled) and wideoc8 (the same with the int8 cache); DEADLINE_S (330)
#             bounds it: the compiled variants' first step compiles
set -u
out=$1; deadline=${2:-330}
mkdir -p "$out"

source "$(dirname "$0")/gpu_lanes.sh"

fast="train.length_buckets=true,train.causal_only=true,train.lora_base_dtype=true,train.checkpoint_overlap=true"
fast="$fast,train.compile=true,train.pass_tokens=65536"
bench gen 0 200 --only gen,dist --profile
bench step 0 "$deadline" --only step --skip-hf --steps 8 --step-variants "wideoc:$fast;wideoc8:$fast,model.kv_int8=true"
grep -h "rc=" "$out"/*.txt
