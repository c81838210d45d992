#!/usr/bin/env bash
# Issue 38's card line measured on three cards at once, and the settings it times checked for
# twins and step time, in one device call of about DEADLINE_S seconds on four cards:
#
#   bash benchmarks/gpu_card_pool.sh OUT [DEADLINE_S]
#
# CARDS (1,2,3): the cards that run a card row each; CHECKS (0): the card for the twins and the
# step, empty to leave them out (on a 2-card machine: CARDS=0,1 CHECKS=).
#
#   GPU 0     twins under MPS with the wide settings (`gpu_twins.py --mps`), then the math step at
#             64 x 8: today against `wide` (buckets, causal attention, `train.lora_base_dtype`,
#             passes of 65,536 tokens) and `widec` (those compiled, `train.compile`)
#   GPU 1-3   six runs sharing the card, today against MPS with the wide settings, one card row a
#             card: three independent lanes
#
# What decides the card line, fixed before the run: the lanes pooled
# (`benchmarks/card_pool.py`, inverse-variance weights on the log ratio). The line is met if the
# pooled 95% interval's lower bound is at least 1.5x.
set -u
out=$1; deadline=${2:-540}
mkdir -p "$out"

source "$(dirname "$0")/gpu_lanes.sh"

wide="train.length_buckets=true,train.causal_only=true,train.lora_base_dtype=true,train.pass_tokens=65536"
checks() {
    OUT=$out/twins-wide script twins-wide "$1" 200 benchmarks/gpu_twins.py --mps --suites default --seeds 0 \
        --per-card 6 --steps 20 --deadline 180 --runs /tmp/twins_wide_runs $(tr , '\n' <<<"$wide" | sed 's/^/--set /')
    bench step "$1" $((deadline - 220)) --only step --skip-hf --steps 6 --step-variants \
        "wide:$wide;widec:$wide,train.compile=true"; }
card() { bench "card$1" "$1" "$deadline" --only card --card-deadline $((deadline - 40)) --card-mps --card-new "$wide"; }
cards=${CARDS-1,2,3}; check=${CHECKS-0}
[ -n "$check" ] && checks "$check" &
for c in ${cards//,/ }; do card "$c" & done
wait
python3 "$(dirname "$0")/card_pool.py" $(for c in ${cards//,/ }; do echo "$out/card$c/rows.json"; done) \
    > "$out/pool.txt" 2>&1
grep -h "rc=" "$out"/*.txt; cat "$out/pool.txt"
