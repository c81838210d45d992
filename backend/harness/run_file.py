"""The harness files of a run directory: `harness.py` is the active version, `harness.draft.py` an edit.

`harness.py` always holds the code of the active harness version: the engine
writes it when it starts, whenever the active version changes, and when it
takes an operator's edit. An edit is never left in `harness.py` as if it were
current: before restoring the file, the engine moves a hand edit it finds
there to `harness.draft.py`, where the operator can keep working on it (the
TUI proposes every new text of either file as an intervention). A draft whose
code becomes the active version is done and is removed.

    >>> write_active(run_dir, active_code, is_version=lambda code: code in stored)  # doctest: +SKIP
    PosixPath('runs/x/harness.draft.py')        # a hand edit was there and is kept

Nothing here imports the harness loader: the TUI uses the file names too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

ACTIVE = "harness.py"
DRAFT = "harness.draft.py"


def read(path: Path) -> str | None:
    """The file's text, or None when it does not exist (or cannot be read)."""
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def write_active(run_dir: Path, code: str, is_version: Callable[[str], bool]) -> Path | None:
    """Make `harness.py` the active `code`. A hand edit found there (text that is no stored
    harness version, `is_version`) is first kept as the draft, whose path is returned."""
    run_dir = Path(run_dir)
    active = run_dir / ACTIVE
    kept = None
    current = read(active)
    if current is not None and current != code and current.strip() and not is_version(current):
        kept = save_draft(run_dir, current)
    if current != code:
        _atomic_write(active, code)
    draft = run_dir / DRAFT
    if kept is None and read(draft) == code:  # the draft was promoted: nothing left in progress
        draft.unlink(missing_ok=True)
    return kept


def save_draft(run_dir: Path, code: str) -> Path:
    """Write `code` as the operator's draft (replacing an older draft)."""
    path = Path(run_dir) / DRAFT
    _atomic_write(path, code)
    return path


def start_draft(run_dir: Path) -> Path:
    """The draft to edit: the existing one, else a copy of the active `harness.py`."""
    run_dir = Path(run_dir)
    path = run_dir / DRAFT
    if not path.exists():
        save_draft(run_dir, read(run_dir / ACTIVE) or "")
    return path


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
