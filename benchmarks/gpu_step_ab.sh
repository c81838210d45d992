#!/usr/bin/env bash
# Two commits' GRPO step on one card, in one device call (same machine, same warm-up):
#
#   bash benchmarks/gpu_step_ab.sh OUT BEFORE AFTER [DEADLINE_S]
#
# BEFORE and AFTER are folders holding a snapshot of each commit (`git archive COMMIT backend
# evotui benchmarks pyproject.toml`). For each, after's first:
#   harness-<X>.txt  benchmarks/harness_request.py --repeats 10 --gap-ms 50 (the request's cost)
#   <X>/step.txt     `evotui bench -- --only step --skip-hf --steps 8` with VARIANTS (default:
#                    wideoc, gpu-fast's settings compiled); AFTER also runs AFTER_VARIANTS, and
#                    BEFORE_VARIANTS replaces BEFORE's (empty: today's path alone)
# and once, with AFTER's code: commit.txt, benchmarks/step_commit.py --steps 30 on the card's disk.
# DEADLINE_S (default 170): each step lane's limit; AFTER's gets 90 s more per AFTER_VARIANTS entry.
# FIRST=before runs BEFORE's lanes first (to see whether the order moves a column).
set -u
out=$1; before=$(cd "$2" && pwd); after=$(cd "$3" && pwd); deadline=${4:-170}
mkdir -p "$out"
fast="train.length_buckets=true,train.causal_only=true,train.lora_base_dtype=true,train.checkpoint_overlap=true"
variants=${VARIANTS:-"wideoc:$fast,train.compile=true,train.pass_tokens=65536"}
extra=${AFTER_VARIANTS:-}
site=${SITE:-/tmp/site}

lane() {  # name folder seconds variants
    local name=$1 src=$2 secs=$3 vs=$4
    (cd "$src" && export PYTHONPATH="$site:$src" && \
        timeout -k 10 60 python3 benchmarks/harness_request.py --repeats 10 --gap-ms 50 > "$out/harness-$name.txt" 2>&1
        mkdir -p "$out/$name"
        timeout -k 20 "$secs" python3 -m evotui bench -- --only step --skip-hf --steps 8 \
            --step-variants "$vs" --out "$out/$name" > "$out/$name/step.txt" 2>&1
        echo "$name rc=$?" >> "$out/$name/step.txt")
}

mkdir -p "${EVOTUI_HOME:-/root}"
(cd "$after" && PYTHONPATH="$site:$after" timeout -k 10 60 python3 benchmarks/step_commit.py --steps 30 \
    --dir "${EVOTUI_HOME:-/root}" > "$out/commit.txt" 2>&1)
n_extra=$(echo "$extra" | tr ';' '\n' | grep -c . || true)
if [ "${FIRST:-after}" = before ]; then
    lane before "$before" "$deadline" "${BEFORE_VARIANTS-$variants}"
    lane after "$after" $((deadline + 90 * n_extra)) "$variants${extra:+;$extra}"
else
    lane after "$after" $((deadline + 90 * n_extra)) "$variants${extra:+;$extra}"
    lane before "$before" "$deadline" "${BEFORE_VARIANTS-$variants}"
fi
grep -h "rc=" "$out"/*/step.txt
