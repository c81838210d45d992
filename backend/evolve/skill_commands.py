"""What `evotui skills ...` does, over a run or a skill library file; returns data, prints nothing.

Each function takes a `Store`, a run folder, a `run.db` path, or (for reading)
a skill library file or folder of card files, and returns plain data. User
mistakes raise `SkillError` (or `StoreError`) with one line to show.

    >>> skills_list("runs/a")                       # doctest: +SKIP
    [{'name': 'lenient_extraction', 'domain': 'math', 'labels': ['no_answer_tag'], ...}]
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TypedDict

from backend.store import Store

from . import skills as sk
from .skills import SkillCard, SkillError


Source = Store | str | Path
"""A run (its `Store`, folder or `run.db`) or, for reading, a skill library file or folder of cards."""


def _is_run(path: Path) -> bool:
    return path.suffix == ".db" or (path.is_dir() and (path / "run.db").exists())


@contextmanager
def _store(store_or_path: Source, readonly: bool) -> Iterator[Store]:
    if isinstance(store_or_path, Store):
        yield store_or_path
        return
    path = Path(store_or_path).expanduser()
    if not _is_run(path):
        raise SkillError(f"{path} is not an evotui run (no run.db)")
    store = Store.open(path, readonly=readonly, create=False)
    try:
        yield store
    finally:
        store.close()


def _cards(store_or_path: Source) -> list[SkillCard]:
    if not isinstance(store_or_path, Store):
        path = Path(store_or_path).expanduser()
        if not path.exists():
            raise SkillError(f"no such run or skill library: {path}")
        if not _is_run(path):  # a library file or a folder of cards
            files = sorted(path.glob("*.json")) if path.is_dir() else [path]
            return [c for f in files for c in sk.read_file(f)]
    with _store(store_or_path, readonly=True) as store:
        return sk.cards(store)


class SkillSummary(TypedDict):
    """One card as `evotui skills list` shows it."""

    name: str
    domain: str
    labels: list[str]
    change: str
    title: str
    uses: int
    helped: int


class Imported(TypedDict):
    """One card an import wrote: its name and what happened (`skills.upsert`'s action)."""

    name: str
    action: str


def skills_list(store_or_path: Source) -> list[SkillSummary]:
    """One summary row per card: name, domain, trigger labels, change, uses, helped."""
    return [{"name": c["name"], "domain": c.get("domain", ""), "labels": c["trigger"].get("labels", []),
             "change": f"{c['change'].get('op')} {c['change'].get('name')}",
             "title": c["change"].get("title") or "", "uses": c.get("uses", 0), "helped": c.get("helped", 0)}
            for c in _cards(store_or_path)]


def skills_show(store_or_path: Source, name: str) -> SkillCard:
    """The full card named `name`."""
    for c in _cards(store_or_path):
        if c["name"] == name:
            return c
    raise SkillError(f"no skill named '{name}'")


def export_skills(store_or_path: Source, dest: str | Path) -> list[str]:
    """Write the cards to `dest` (a .json library file, or a folder: one file per card)."""
    if isinstance(store_or_path, Store) or _is_run(Path(store_or_path).expanduser()):
        with _store(store_or_path, readonly=True) as store:
            return [str(p) for p in sk.export_skills(store, dest)]
    dest = Path(dest).expanduser()
    if dest.suffix != ".json":
        raise SkillError("exporting a library needs a .json destination file")
    sk.write_library(dest, _cards(store_or_path))
    return [str(dest)]


def import_skills(store_or_path: Source, src: str | Path) -> list[Imported]:
    """Import cards from a library file, a card file or a folder into a run."""
    with _store(store_or_path, readonly=False) as store:
        return [{"name": n, "action": a} for n, a in sk.import_skills(store, src)]
