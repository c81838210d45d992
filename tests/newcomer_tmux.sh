#!/usr/bin/env bash
# A newcomer's first session, scripted in tmux: start bare `evotui` in an 80x24 terminal, wait
# until the run is live, press S (stop), confirm (Tab, Enter), and check from the run's database
# that the engine stopped within the target. The pane's text is saved at each stage.
#
#   tests/newcomer_tmux.sh                 # bare `evotui` (the CPU default run), target 5 s
#   TARGET_S=10 tests/newcomer_tmux.sh     # another target
#   tests/newcomer_tmux.sh run --steps 3 --set eval.n_val=4 --set eval.n_test=4   # `evotui ARGS...`
#   WAIT_FOR=': train' tests/newcomer_tmux.sh ...   # stop only once the activity matches (grep -E)
#
# Environment: EVOTUI (the command, default: evotui on PATH, else .venv/bin/evotui), PYTHON (for
# reading run.db), EVOTUI_HOME (default: a new temporary folder, so no run of yours is touched),
# OUT (folder for the pane captures, default: $EVOTUI_HOME), SIZE (default 80x24).
# Exit 0: stopped within the target with the run's state saved; 1: not; 2: it never got there.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
EVOTUI=${EVOTUI:-$(command -v evotui || echo "$here/.venv/bin/evotui")}
PYTHON=${PYTHON:-$(test -x "$here/.venv/bin/python" && echo "$here/.venv/bin/python" || command -v python3)}
export EVOTUI_HOME=${EVOTUI_HOME:-$(mktemp -d -t evotui-newcomer-XXXXXX)}
OUT=${OUT:-$EVOTUI_HOME}
TARGET_S=${TARGET_S:-5}
SIZE=${SIZE:-80x24}
LIVE_TIMEOUT_S=${LIVE_TIMEOUT_S:-300}
WAIT_FOR=${WAIT_FOR:-.}
session="evotui-newcomer-$$"
mkdir -p "$OUT"

command -v tmux >/dev/null || { echo "tmux is not installed" >&2; exit 2; }

cleanup() {
    tmux kill-session -t "$session" 2>/dev/null || true
    # an engine the TUI started and that is still alive (the run never got live, or quitting left it)
    for db in "$EVOTUI_HOME"/runs/*/run.db; do
        [ -f "$db" ] || continue
        pid=$(run_field "$db" pid)
        if [ -n "$pid" ] && [ "$pid" != "None" ]; then kill -TERM "$pid" 2>/dev/null || true; fi
    done
}
trap cleanup EXIT

run_field() {  # run_field RUN_DB COLUMN: one column of the runs row, read-only
    "$PYTHON" - "$1" "$2" <<'EOF'
import sqlite3, sys
conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True, timeout=5)
row = conn.execute(f"SELECT {sys.argv[2]} FROM runs WHERE id = 1").fetchone()
print("" if row is None or row[0] is None else row[0])
EOF
}

capture() {  # capture NAME: the pane's text now
    tmux capture-pane -p -t "$session" > "$OUT/pane-$1.txt"
}

wait_for() {  # wait_for SECONDS COMMAND...: poll every 0.1 s until COMMAND succeeds
    local deadline=$(( $(date +%s) + $1 )); shift
    until "$@"; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}

run_db() { ls "$EVOTUI_HOME"/runs/*/run.db 2>/dev/null | head -n 1; }
live() {  # the run exists, the engine says running and is doing something, the TUI shows the run
    local db; db=$(run_db); [ -n "$db" ] || return 1
    [ "$(run_field "$db" status)" = "running" ] || return 1
    run_field "$db" activity | grep -Eq -- "$WAIT_FOR" || return 1
    tmux capture-pane -p -t "$session" | grep -q "running"
}
dialog() { tmux capture-pane -p -t "$session" | grep -q "Stop the run?"; }
stopped() { [ "$(run_field "$(run_db)" status)" = "stopped" ]; }

cols=${SIZE%x*}; rows=${SIZE#*x}
tmux new-session -d -s "$session" -x "$cols" -y "$rows" \
    "cd '$here' && EVOTUI_HOME='$EVOTUI_HOME' '$EVOTUI' $*; echo '[evotui exited]'; sleep 600"
echo "EVOTUI_HOME=$EVOTUI_HOME; started \`evotui $*\` in tmux ($SIZE)"

if ! wait_for "$LIVE_TIMEOUT_S" live; then
    capture never-live
    echo "the run was not live within ${LIVE_TIMEOUT_S}s; pane: $OUT/pane-never-live.txt" >&2
    cat "$OUT/pane-never-live.txt" >&2
    exit 2
fi
db=$(run_db)
echo "live: $(run_field "$db" activity)"
capture live

tmux send-keys -t "$session" S
wait_for 10 dialog || { capture no-dialog; echo "S opened no dialog" >&2; cat "$OUT/pane-no-dialog.txt" >&2; exit 2; }
capture dialog
activity=$(run_field "$db" activity)
tmux send-keys -t "$session" Tab
sleep 0.2
t0=$(date +%s.%N)
tmux send-keys -t "$session" Enter
if ! wait_for 120 stopped; then
    capture not-stopped
    echo "not stopped 120 s after the confirmation" >&2
    exit 1
fi
t1=$(date +%s.%N)
sleep 1
capture stopped
took=$("$PYTHON" -c "print(f'{$t1 - $t0:.1f}')")
commands=$("$PYTHON" - "$db" <<'EOF'
import sqlite3, sys
conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True, timeout=5)
print(", ".join(f"{v} {s}" for v, s in conn.execute("SELECT verb, status FROM commands ORDER BY id")))
EOF
)
echo "stop confirmed while the engine was at '$activity'; run stopped ${took}s later (target ${TARGET_S}s)"
echo "commands: $commands; last committed step: $(run_field "$db" step); load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "--- the pane after the stop ($OUT/pane-stopped.txt):"
cat "$OUT/pane-stopped.txt"
"$PYTHON" -c "import sys; sys.exit(0 if $t1 - $t0 <= $TARGET_S else 1)"
