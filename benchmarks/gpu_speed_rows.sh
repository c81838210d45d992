#!/usr/bin/env bash
# The speed rows that wait for a GPU, one `evotui bench` a card, in one device call of about
# DEADLINE_S seconds on four cards (each bench stops at its own timeout and keeps its log):
#
#   [GPUS=0,1,2,3] [STEPS=4] bash benchmarks/gpu_speed_rows.sh OUT [DEADLINE_S]
#
# STEPS: timed steps a row plus the first (which warms up and is not counted): 4 gives n = 3.
#
#   GPU 0  a code step at 64 x 8 (code.timeout_s 1 s, today's), against the same step at the
#          old 5 s limit (the path the issue timed at about 16 s a step)
#   GPU 1  a multi-turn SWE step (level 2) at 16 x 8 (swe.test_timeout_s 3 s), against 10 s
#   GPU 2  six runs sharing the card, today's against the same six under a private MPS daemon
#   GPU 3  the shared-prefix gradient against fp32 under SDPA and eager attention, then decode at
#          batch 512 x 256 with a kernel profile of eager decode steps
#
# Each bench writes OUT/<name>.txt (the table and its log) and OUT/<name>/ (rows.json).
# The cards share the host's cores; the code and SWE steps run tests on them, so read the
# step split (generation / tools+tests / training) next to the load each log starts with.
set -u
out=$1; deadline=${2:-540}
mkdir -p "$out"

source "$(dirname "$0")/gpu_lanes.sh"

# four lanes, one a card; on two cards (GPUS=0,1) lanes 0 and 2 share card 0 and lanes 1 and 3
# card 1, one after the other, each lane in half the time
gpus=${GPUS:-0,1,2,3}
IFS=, read -r -a card <<<"$gpus"
if [ "${#card[@]}" -ge 4 ]; then lane_s=$deadline; c0=${card[0]}; c1=${card[1]}; c2=${card[2]}; c3=${card[3]}
else lane_s=$((deadline / 2)); c0=${card[0]}; c1=${card[1]:-${card[0]}}; c2=$c0; c3=$c1; fi
half=$((lane_s / 2))
lane0() { bench code "$c0" "$lane_s" --only step --skip-hf --steps "${STEPS:-4}" --step-domain code --tasks 64 --group 8 \
    --step-new 256 --step-variants "timeout-5s:code.timeout_s=5"; }
lane1() { bench swe-turns "$c1" "$lane_s" --only step --skip-hf --steps "${STEPS:-4}" --step-domain swe --step-swe-levels 2 \
    --tasks 16 --group 8 --step-new 192 --step-variants "limit-10s:swe.test_timeout_s=10"; }
lane2() { bench card "$c2" "$lane_s" --only card --card-deadline $((lane_s - 30)) --card-new "" --card-mps; }
lane3() {
    for attn in sdpa eager; do
        CUDA_VISIBLE_DEVICES=$c3 timeout -k 20 120 python3 benchmarks/shared_prefix_grad.py --device cuda \
            --attn $attn > "$out/prefix-$attn.txt" 2>&1
        echo "prefix-$attn rc=$?" >> "$out/prefix-$attn.txt"
    done
    bench gen "$c3" $((lane_s - 150)) --only gen --profile; }
if [ "${#card[@]}" -ge 4 ]; then lane0 & lane1 & lane2 & lane3 & wait
else (lane0; lane2) & (lane1; lane3) & wait; fi
grep -h "rc=" "$out"/*.txt
