# Sourced by the GPU lane scripts (gpu_speed_rows.sh, gpu_step_speed.sh): one command a card, its
# output in $out/<name>.txt with its exit code on the last line. $out is the caller's folder.

bench() {  # name gpu seconds args...: `evotui bench -- args` on one card, its rows in $out/<name>/
    local name=$1 gpu=$2 secs=$3
    CUDA_VISIBLE_DEVICES=$gpu timeout -k 20 "$secs" python3 -m evotui bench -- "${@:4}" --out "$out/$name" \
        > "$out/$name.txt" 2>&1
    echo "$name rc=$?" >> "$out/$name.txt"
}

script() {  # name gpu seconds script args...: a python script on one card
    local name=$1 gpu=$2 secs=$3
    CUDA_VISIBLE_DEVICES=$gpu timeout -k 20 "$secs" python3 "${@:4}" > "$out/$name.txt" 2>&1
    echo "$name rc=$?" >> "$out/$name.txt"
}
