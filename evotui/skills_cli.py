"""`evotui skills list|show|export|import`: the skill library from a shell.

    evotui skills list [RUN | LIBRARY]        (default: the global library under $EVOTUI_HOME)
    evotui skills show RUN NAME
    evotui skills export RUN PATH             (PATH.json = one library file, else a folder of cards)
    evotui skills import RUN PATH
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from backend.errors import UsageError


def _global_library() -> Path:
    home = os.environ.get("EVOTUI_HOME")
    if home:
        return Path(home).expanduser() / "skills.json"
    from platformdirs import user_data_dir

    return Path(user_data_dir("evotui")) / "skills.json"


def _need(args: list[str], n: int, usage: str) -> None:
    if len(args) < n:
        raise UsageError(f"usage: evotui skills {usage}")


def skills(action: str, args: list[str]) -> int:
    from backend.evolve import skill_commands

    if action == "list":
        src = Path(args[0]).expanduser() if args else _global_library()
        if not args and not src.exists():
            print(f"no skills yet (global library {src} does not exist)")
            return 0
        rows = skill_commands.skills_list(src)
        if not rows:
            print("no skills")
            return 0
        print(f"{'name':<32} {'domain':<6} {'uses':>4} {'helped':>6}  trigger / change")
        for r in rows:
            labels = ",".join(r.get("labels") or [])
            print(f"{r['name']:<32} {r.get('domain') or '-':<6} {r.get('uses') or 0:>4} {r.get('helped') or 0:>6}  "
                  f"{labels} / {r.get('change') or r.get('title') or ''}"[:160])
        return 0
    if action == "show":
        _need(args, 2, "show RUN NAME")
        print(json.dumps(skill_commands.skills_show(Path(args[0]).expanduser(), args[1]), indent=2, default=str))
        return 0
    if action == "export":
        _need(args, 2, "export RUN PATH")
        written = skill_commands.export_skills(Path(args[0]).expanduser(), Path(args[1]).expanduser())
        print(f"exported {len(written)} file(s): " + ", ".join(written))
        return 0
    if action == "import":
        _need(args, 2, "import RUN PATH")
        done = skill_commands.import_skills(Path(args[0]).expanduser(), Path(args[1]).expanduser())
        for d in done:
            print(f"{d['action']:<7} {d['name']}")
        print(f"imported {len(done)} skill(s)")
        return 0
    return 2
