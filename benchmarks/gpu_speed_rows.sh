#!/usr/bin/env bash
# The speed rows that wait for a GPU, one `evotui bench` a card, in one device call of about
# DEADLINE_S seconds on four cards (each bench stops at its own timeout and keeps its log):
#
#   [GPUS=0,1,2,3] [STEPS=4] bash benchmarks/gpu_speed_rows.sh OUT [DEADLINE_S]
#
# STEPS: timed steps a row plus the first (which warms up and is not counted): 4 gives n = 3.
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

# four lanes, one a card; on two cards (GPUS=0,1) lanes 0 and 2 share card 0 and lanes 1 and 3
# card 1, one after the other, each lane in half the time
gpus=${GPUS:-0,1,2,3}
IFS=, read -r -a card <<<"$gpus"
if [ "${#card[@]}" -ge 4 ]; then lane_s=$deadline; c0=${card[0]}; c1=${card[1]}; c2=${card[2]}; c3=${card[3]}
else lane_s=$((deadline / 2)); c0=${card[0]}; c1=${card[1]:-${card[0]}}; c2=$c0; c3=$c1; fi
half=$((lane_s / 2))
lane0() { bench code "$c0" "$lane_s" --only step --skip-hf --steps "${STEPS:-4}" --step-domain code --tasks 64 --group 8 --step-new 256 \
    --step-variants "fresh-tests:code.sandbox_pool=false"; }
lane1() { bench swe-32 "$c1" "$half" --only step --skip-hf --steps "${STEPS:-4}" --step-domain swe --step-swe-levels 0,1 --tasks 32 \
    --group 8 --step-new 192 --step-variants ""
    bench swe-64 "$c1" "$half" --only step --skip-hf --steps "${STEPS:-4}" --step-domain swe --step-swe-levels 0,1 --tasks 64 --group 8 \
    --step-new 192 --step-variants ""; }
lane2() { bench swe-turns "$c2" "$lane_s" --only step --skip-hf --steps "${STEPS:-4}" --step-domain swe --step-swe-levels 2 --tasks 16 \
    --group 8 --step-new 192 --step-variants "kv_reuse:model.kv_reuse=true"; }
lane3() { bench prefix "$c3" 150 --only trainer --trainer-variants prefix --trainer-prompt 300,650
    [ "$lane_s" -gt 320 ] && bench card "$c3" $((lane_s - 170)) --only card --card-deadline $((lane_s - 200)) \
    --card-new model.free_cache_for_training=true; }
if [ "${#card[@]}" -ge 4 ]; then lane0 & lane1 & lane2 & lane3 & wait
else (lane0; lane2) & (lane1; lane3) & wait; fi
grep -h "rc=" "$out"/*.txt
