#!/usr/bin/env bash
# Decode with several commits' engine on one card in one device call, then the GRPO step of the
# last with the 8-bit KV cache:
#
#   bash benchmarks/gpu_decode_ab.sh OUT SNAPSHOT...
#
# Each SNAPSHOT is a folder holding one commit's code (`git archive COMMIT backend evotui
# benchmarks pyproject.toml`); its lane writes OUT/<folder name>/gen.txt:
#   `evotui bench -- --only gen,dist --profile --skip-hf`: decode at 512 x 256 for every engine
#   variant (the int8 KV cache among them), the distribution check against the policy's
#   forward (both caches), and a profile of the fastest variant's decode steps.
# ORDER=reverse runs the lanes last snapshot first (whether the order moves a column).
# STEP=1 adds OUT/<last>/step.txt: `evotui bench -- --only step --skip-hf --steps 8` with today's
# path, wideoc (gpu-fast's settings compiled) and wideoc8 (the same, `model.kv_int8`); the
# compiled variants' first step compiles: give it STEP_S (330) seconds.
set -u
out=$1; shift
mkdir -p "$out"
site=${SITE:-/tmp/site}
snaps=("$@")
[ "${ORDER:-}" = reverse ] && snaps=($(printf '%s\n' "$@" | tac))

for snap in "${snaps[@]}"; do
    name=$(basename "$snap"); src=$(cd "$snap" && pwd)
    mkdir -p "$out/$name"
    (cd "$src" && PYTHONPATH="$site:$src" timeout -k 10 "${GEN_S:-200}" python3 -m evotui bench -- \
        --only gen,dist --profile --skip-hf --out "$out/$name" > "$out/$name/gen.txt" 2>&1
     echo "$name gen rc=$?" >> "$out/$name/gen.txt")
done
if [ "${STEP:-0}" = 1 ]; then
    last=${!#}; name=$(basename "$last"); src=$(cd "$last" && pwd)
    fast="train.length_buckets=true,train.causal_only=true,train.lora_base_dtype=true"
    fast="$fast,train.checkpoint_overlap=true,train.compile=true,train.pass_tokens=65536"
    (cd "$src" && PYTHONPATH="$site:$src" timeout -k 20 "${STEP_S:-330}" python3 -m evotui bench -- \
        --only step --skip-hf --steps 8 --step-variants "wideoc:$fast;wideoc8:$fast,model.kv_int8=true" \
        --out "$out/$name/step" > "$out/$name/step.txt" 2>&1
     echo "$name step rc=$?" >> "$out/$name/step.txt")
fi
grep -h "rc=" "$out"/*/*.txt
