#!/usr/bin/env bash
# The speed rows that wait for a GPU, one `evotui bench` a card, in one device call of about
# DEADLINE_S seconds on four cards (each bench stops at its own timeout and keeps its log):
#
#   bash benchmarks/gpu_speed_rows.sh OUT [DEADLINE_S]
#
#   GPU 0  a code step at 64 x 8, against the same step with a fresh process per test run
#          (code.sandbox_pool=false: the path before the warm pool)
#   GPU 1  an SWE step at levels 0,1, 32 x 8, then 64 x 8
#   GPU 2  a multi-turn SWE step (level 2) at 16 x 8, against the same with model.kv_reuse
#   GPU 3  the trainer's shared-prefix row at SWE prompt lengths (its per-module gradient line),
#          then six runs sharing the card with and without model.free_cache_for_training
#
# Each bench writes OUT/<name>.txt (the table and its log) and OUT/<name>/ (rows.json).
# The cards share the host's cores; the code and SWE steps run tests on them, so read the
# step split (generation / tools+tests / training) next to the load each log starts with.
set -u
out=$1; deadline=${2:-540}
mkdir -p "$out"

bench() {  # name gpu seconds args...
    local name=$1 gpu=$2 secs=$3
    CUDA_VISIBLE_DEVICES=$gpu timeout -k 20 "$secs" python3 -m evotui bench -- "${@:4}" --out "$out/$name" \
        > "$out/$name.txt" 2>&1
    echo "$name rc=$?" >> "$out/$name.txt"
}

half=$((deadline / 2))
bench code 0 "$deadline" --only step --skip-hf --step-domain code --tasks 64 --group 8 --step-new 256 \
    --step-variants "fresh-tests:code.sandbox_pool=false" &
(bench swe-32 1 "$half" --only step --skip-hf --step-domain swe --step-swe-levels 0,1 --tasks 32 --group 8 \
    --step-new 192 --step-variants ""
 bench swe-64 1 "$half" --only step --skip-hf --step-domain swe --step-swe-levels 0,1 --tasks 64 --group 8 \
    --step-new 192 --step-variants "") &
bench swe-turns 2 "$deadline" --only step --skip-hf --step-domain swe --step-swe-levels 2 --tasks 16 --group 8 \
    --step-new 192 --step-variants "kv_reuse:model.kv_reuse=true" &
(bench prefix 3 150 --only trainer --trainer-variants prefix --trainer-prompt 300,650
 bench card 3 $((deadline - 170)) --only card --card-deadline $((deadline - 200)) \
    --card-new model.free_cache_for_training=true) &
wait
grep -h "rc=" "$out"/*.txt
