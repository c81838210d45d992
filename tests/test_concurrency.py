"""Concurrency: the engine writes rollouts at full speed while a TUI and a
shell (`evotui approve`) write commands. No command is lost and no
'database is locked' reaches anyone."""

import subprocess
import sys
import textwrap

from backend.store import Store, integrity_ok
from engine_waits import communicate, files, run_process

WRITER = textwrap.dedent("""
    import sys
    from backend.store import Store
    s = Store.open(sys.argv[1])
    rows = [{"step": 0, "completion": "x" * 200, "reward": 0.5, "labels": "no_answer_tag"} for _ in range(500)]
    for step in range(1, int(sys.argv[2]) + 1):
        for r in rows:
            r["step"] = step
        s.commit_step({"step": step, "n_rollouts": len(rows)}, rows,
                      [[{"step": step, "label": "no_answer_tag", "evidence": "e"}] for _ in rows])
        for c in s.pending_commands():       # the engine acks at step boundaries
            s.ack_command(c["id"], "applied", "ok")
    print("writer done")
""")

TUI = textwrap.dedent("""
    import sys
    from backend.store import Store
    s = Store.open(sys.argv[1])
    for i in range(int(sys.argv[2])):
        s.send_command("pause" if i % 2 else "resume", {"i": i}, source="tui")
        s.data_version(); s.rows("SELECT id, reward FROM rollouts ORDER BY id DESC LIMIT 50")
    print("tui done")
""")


def test_commands_survive_full_speed_writes(tmp_path):
    db = tmp_path / "run.db"
    s = Store.open(db)
    s.create_run("r", {"domain": "math"}, 0, 1)
    s.insert("interventions", {"status": "passed", "title": "t"})
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db), "40"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tui = subprocess.Popen([sys.executable, "-c", TUI, str(db), "60"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    shell_errors = []
    for _ in range(15):
        p = run_process([sys.executable, "-m", "evotui", "approve", str(tmp_path), "1"])
        if p.returncode != 0:
            shell_errors.append(p.stderr)
    written = files(db, db.parent / "run.db-wal")
    out_w, err_w = communicate(writer, "the writer to commit its steps", written)
    out_t, err_t = communicate(tui, "the TUI to send its commands", written)
    assert "writer done" in out_w, err_w
    assert "tui done" in out_t, err_t
    assert not shell_errors
    for err in (err_w, err_t):
        assert "locked" not in err
    assert s.count("commands") == 60 + 15
    assert s.scalar("SELECT count(*) FROM commands WHERE verb = 'approve'") == 15
    assert s.count("rollouts") == 40 * 500
    assert integrity_ok(db)
