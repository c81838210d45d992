"""The skill library: interventions that were promoted and then helped.

"Helped" is a claim with evidence: the validation accuracy after the
promotion, paired problem by problem with the evaluation before it, has its
95% interval above zero (`evidence_shows_gain`), and the change's own paired
backtest showed a gain with its interval above zero (`backtest_shows_gain`:
before and after are read steps apart, so alone they credit the change with
what the policy learned meanwhile). One lucky problem of 32 is not a skill. A skill card is plain JSON:

    {"name": "lenient_extraction-no_answer_tag", "domain": "math",
     "trigger": {"labels": ["no_answer_tag"], "signature": "no_answer_tag 0.94, dead_groups 0.81"},
     "change": {"op": "replace", "name": "extract_answer", "source": "def extract_answer(r): ...",
                "kind": "reward", "template": "lenient_extraction", "title": "...", "hypothesis": "..."},
     "evidence": {"runs": ["run-a"], "deltas": [0.12], "backtests": [{...}],
                  "gains": [{"effect": 0.12, "ci_low": 0.04, "ci_high": 0.2, "p_value": 0.004,
                             "n": 64, "discordant": 10, "test": "mcnemar-exact"}]},
     "uses": 3, "helped": 1}

The proposer retrieves cards whose trigger labels appear in the current
failure table. Cards travel between runs as files: `export_skills` writes a
library file (or one file per card into a folder), `import_skills` reads
either. A global library at $EVOTUI_HOME/skills.json collects every card a
run learns, when EVOTUI_HOME is set.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, NotRequired, TYPE_CHECKING, TypedDict, cast

from backend.errors import EvoError
from backend.harness.loader import HarnessError, check_source
from backend.store import dumps, loads
from backend.store.base import Row


if TYPE_CHECKING:
    from .context import EvolveContext
    from .failures import FailureRow
    from .stats import Effect
    from backend.store import Store

FORMAT = 1
REQUIRED = {"name": str, "trigger": dict, "change": dict}
CHANGE_OPS = ("replace", "add", "remove", "set")


class SkillError(EvoError, ValueError):
    """A skill file or card is unusable; one line for the user."""


class SkillTrigger(TypedDict, total=False):
    """When a card applies: the failure labels it fixed, the failure table it was learned from."""

    labels: list[str]
    signature: str
    domain: str


class SkillChange(TypedDict, total=False):
    """A card's single-factor change: `op` (replace, add, remove, set) on the top-level `name`."""

    op: str
    name: str
    source: str
    """The definition's source (none for `remove`)."""
    kind: str
    template: str | None
    """The snippet it was made from (None for an LLM's or a hand-made change)."""
    title: str
    hypothesis: str
    expected: str


class GainEvidence(TypedDict):
    """A paired validation gain as a card keeps it (`gain_evidence`)."""

    effect: float
    ci_low: float
    ci_high: float
    p_value: NotRequired[float]
    n: int
    discordant: NotRequired[int | None]
    test: str
    against: NotRequired[str]
    """What the gain was measured against, when not the run's own evaluation before the promotion."""


class SkillEvidence(TypedDict, total=False):
    """Why a card is believed: per learning (run, intervention), its gain. Merging two cards
    concatenates these lists (`_merge_evidence`)."""

    runs: list[str]
    deltas: list[float]
    backtests: list[dict[str, Any]]
    """What the change's backtest measured (agreement and dead groups, old and new)."""
    interventions: list[int]
    gains: list[GainEvidence]


class SkillCard(TypedDict):
    """A skill card, as files and the proposers hold it (the module docstring shows one). The
    store keeps it as a `skills` row (`SkillRow`); `validate` makes one of untrusted JSON."""

    name: str
    trigger: SkillTrigger
    change: SkillChange
    domain: NotRequired[str]
    evidence: NotRequired[SkillEvidence]
    uses: NotRequired[int]
    helped: NotRequired[int]
    source: NotRequired[str]
    """Where the card came from: run:<name>, import:<file>, population:<name>."""


class SkillRow(TypedDict):
    """A card as a `skills` row: the trigger, change and evidence as JSON text."""

    name: str
    domain: str
    trigger_json: str
    change_json: str
    evidence_json: str
    uses: int
    helped: int
    source: str


def evidence_shows_gain(gain: Effect | None) -> bool:
    """The one rule for learning a skill: a paired validation gain whose 95% interval is above zero."""
    return gain is not None and gain.n > 0 and gain.ci_low > 0


def backtest_shows_gain(ci_low: float | None) -> bool:
    """...and the change's own paired backtest (replay, probe or trial: the same policy, with and
    without the change) measured a gain on its target metric with the interval above zero.
    Changes judged without such a statistic (a diagnostic's retirement) never become skills."""
    return ci_low is not None and ci_low > 0


def gain_evidence(gain: Effect) -> GainEvidence:
    """What a card keeps of a `stats.Effect`: the effect, its interval, p-value and sample sizes."""
    d = gain.detail or {}
    return {"effect": round(gain.effect, 4), "ci_low": round(gain.ci_low, 4), "ci_high": round(gain.ci_high, 4),
            "p_value": round(gain.p_value, 6), "n": gain.n,
            "discordant": d.get("only_new", 0) + d.get("only_old", 0) if d else None, "test": gain.test}


def _card_from_row(row: Row) -> SkillCard:
    """A `skills` row as a card (the store boundary)."""
    return {"name": row["name"], "domain": row["domain"] or "", "trigger": loads(row["trigger_json"], {}),
            "change": loads(row["change_json"], {}), "evidence": loads(row["evidence_json"], {}),
            "uses": row["uses"] or 0, "helped": row["helped"] or 0, "source": row["source"] or ""}


def _card_row(card: SkillCard, name: str, source: str) -> SkillRow:
    """A card as a new `skills` row named `name`."""
    return {"name": name, "domain": card.get("domain") or card["trigger"].get("domain") or "",
            "trigger_json": dumps(card["trigger"]) or "{}", "change_json": dumps(card["change"]) or "{}",
            "evidence_json": dumps(card.get("evidence") or {}) or "{}", "uses": int(card.get("uses") or 0),
            "helped": int(card.get("helped") or 0), "source": source or card.get("source") or ""}


def cards(store: Store) -> list[SkillCard]:
    """Every card of the run, most helpful first, then by name."""
    return [_card_from_row(r) for r in store.skill_rows()]


def validate(card: object, where: str) -> SkillCard:
    """Check the shape of one card read from a file (untrusted JSON) and return it typed; raise
    SkillError naming the file and the problem."""
    if not isinstance(card, dict):
        raise SkillError(f"{where}: a skill card must be a JSON object")
    for key, typ in REQUIRED.items():
        if not isinstance(card.get(key), typ):
            raise SkillError(f"{where}: skill card lacks '{key}' ({typ.__name__})")
    ch = card["change"]
    if ch.get("op") not in CHANGE_OPS or not isinstance(ch.get("name"), str) or not ch["name"]:
        raise SkillError(f"{where}: skill '{card['name']}' has no valid change (op and name)")
    if ch["op"] != "remove" and not isinstance(ch.get("source"), str):
        raise SkillError(f"{where}: skill '{card['name']}' change has no source")
    if ch["op"] != "remove":
        try:  # a card's source becomes harness code: refuse what the harness check would
            check_source(ch["source"])
        except HarnessError as e:
            raise SkillError(f"{where}: skill '{card['name']}' change fails the harness check: {e}") from None
    for count in ("uses", "helped"):  # a card's record is arithmetic (`track_record`)
        value = card.get(count, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SkillError(f"{where}: skill '{card['name']}' {count} must be a whole number >= 0, got {value!r}")
    labels = card["trigger"].get("labels", [])
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise SkillError(f"{where}: skill '{card['name']}' trigger labels must be a list of strings")
    return cast(SkillCard, card)


def _identity(change: SkillChange) -> tuple[Any, ...]:
    return change.get("op"), change.get("name"), re.sub(r"\s+", " ", change.get("source") or "").strip()


def _merge_evidence(a: SkillEvidence, b: SkillEvidence) -> SkillEvidence:
    """`a` with `b`'s lists appended (other values: `b`'s). Cards from files may carry keys of
    their own, kept as they are."""
    out: dict[str, Any] = dict(a)
    for k, v in (b or {}).items():
        out[k] = (out.get(k) or []) + v if isinstance(v, list) else v
    return cast(SkillEvidence, out)


def upsert(store: Store, card: SkillCard, source: str = "") -> tuple[str, str]:
    """Insert a card, or merge it into the card with the same change. Returns (name, 'added'|'merged')."""
    rows = store.skill_rows()
    for row in rows:
        old = _card_from_row(row)
        if _identity(old["change"]) == _identity(card["change"]):
            store.update_skill(row["id"], {
                "evidence_json": dumps(_merge_evidence(old.get("evidence") or {}, card.get("evidence") or {})),
                "uses": old.get("uses", 0) + int(card.get("uses") or 0),
                "helped": old.get("helped", 0) + int(card.get("helped") or 0)})
            return old["name"], "merged"
    taken = {r["name"] for r in rows}
    name, n = card["name"], 2
    while name in taken:
        name, n = f"{card['name']}-{n}", n + 1
    store.add_skill(dict(_card_row(card, name, source)))
    return name, "added"


def bump(store: Store, names: list[str], uses: int = 0, helped: int = 0,
         evidence: SkillEvidence | None = None) -> None:
    """Count a use of (or a help by) the named skills."""
    for name in names:
        r = store.skill_row(name)
        if r is None:
            continue
        values = {"uses": (r["uses"] or 0) + uses, "helped": (r["helped"] or 0) + helped}
        if evidence:
            values["evidence_json"] = dumps(_merge_evidence(loads(r["evidence_json"], {}), evidence))
        store.update_skill(r["id"], values)


def track_record(card: SkillCard) -> float:
    """A card's prior from its record: (helped + 1) / (failed uses + 2), smoothed odds of helping.

    A card is learned with `helped` 1 and `uses` 0 (it helped without being proposed from a
    card), and the global library adds up `helped` when two runs learn the same change, so
    `helped` can exceed `uses`: failed uses are never below 0 (below 0, a card two runs had
    learned would divide by zero in every round of every run that read it)."""
    helped = max(0, int(card.get("helped") or 0))
    failed = max(0, int(card.get("uses") or 0) - helped)
    return (1 + helped) / (2 + failed)


def retrieve(store: Store, table: list[FailureRow], domain: str, k: int = 4,
             shared: bool = True) -> list[SkillCard]:
    """Cards whose trigger labels show up in the failure table, best match first; `shared`:
    the global library's cards too (`evolve.skill_library`), else the run's own.

    Match = sum of the shares of the trigger labels present, times a prior from
    the card's `track_record`."""
    shares = {e["label"]: e["share"] for e in table}
    scored: list[tuple[float, str, SkillCard]] = []
    for card in cards(store) + (global_cards(exclude=store) if shared else []):
        if card.get("domain") and domain and card["domain"] != domain:
            continue
        match = sum(shares.get(lbl, 0.0) for lbl in card["trigger"].get("labels", []))
        if match > 0:
            scored.append((match * (0.5 + track_record(card)), card["name"], card))
    scored.sort(key=lambda t: (-t[0], t[1]))
    return [c for _, _, c in scored[:k]]


# ---------------------------------------------------------------- files


def read_file(path: Path) -> list[SkillCard]:
    """Cards in one JSON file: a library {"evotui_skills": 1, "skills": [...]} or a single card."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise SkillError(f"cannot read {path}: {e.strerror or e}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise SkillError(f"{path}: not a valid JSON skill file ({e})") from None
    if isinstance(data, dict) and "skills" in data:
        if not isinstance(data["skills"], list):
            raise SkillError(f"{path}: 'skills' must be a list of cards")
        return [validate(c, f"{path} card {i + 1}") for i, c in enumerate(data["skills"])]
    return [validate(data, str(path))]


def write_library(path: Path, items: list[SkillCard]) -> None:
    """Write `items` as one library file, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"evotui_skills": FORMAT, "skills": items}, indent=2) + "\n")
    os.replace(tmp, path)  # never leave a half-written library behind


def export_skills(store: Store, dest: str | Path) -> list[Path]:
    """Write every card: into `dest` when it ends in .json, else one file per card in the folder."""
    dest = Path(dest).expanduser()
    items = cards(store)
    if dest.suffix == ".json":
        write_library(dest, items)
        return [dest]
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for c in items:
        p = dest / (re.sub(r"[^A-Za-z0-9_.-]+", "_", c["name"]) + ".json")
        p.write_text(json.dumps(c, indent=2) + "\n")
        out.append(p)
    return out


def import_skills(store: Store, path: str | Path) -> list[tuple[str, str]]:
    """Import a library file, a card file, or a folder of them. Every file is read and
    checked before any card is stored, so a corrupt file imports nothing."""
    path = Path(path).expanduser()
    if not path.exists():
        raise SkillError(f"no such skill file or folder: {path}")
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        raise SkillError(f"{path}: no .json skill files in this folder")
    found = [(c, str(f)) for f in files for c in read_file(f)]
    return [upsert(store, c, source=f"import:{src}") for c, src in found]


def shares_library(ctx: EvolveContext) -> bool:
    """Whether this run reads and adds to the global library (`evolve.skill_library`)."""
    return ctx.cfg.evolve.skill_library == "global"


def for_round(ctx: EvolveContext, table: list[FailureRow], k: int) -> list[SkillCard]:
    """The `k` cards a round's proposer (offline or LLM) may draw from; none, with a warning,
    when reading them fails. The library is written by other runs and other versions, and a
    card that breaks retrieval must cost the round its skills, not its other candidates
    (a card that breaks retrieval would otherwise stop every round of every run that reads it)."""
    try:
        return retrieve(ctx.store, table, ctx.harness.domain, k=k, shared=shares_library(ctx))
    except Exception as e:
        ctx.log("warning", f"skill cards left out of this round: {type(e).__name__}: {e}"[:300])
        return []


def global_library() -> Path | None:
    home = os.environ.get("EVOTUI_HOME")
    return Path(home).expanduser() / "skills.json" if home else None


def global_cards(exclude: Store | None = None) -> list[SkillCard]:
    """Cards of the global library (those not already in `exclude`'s store)."""
    path = global_library()
    if not path or not path.is_file():
        return []
    try:
        items = read_file(path)
    except SkillError:
        return []  # a broken global library must not stop a run
    have = {_identity(c["change"]) for c in cards(exclude)} if exclude is not None else set()
    return [c for c in items if _identity(c["change"]) not in have]


def save_global(card: SkillCard) -> None:
    """Merge one card into the global library (best effort)."""
    path = global_library()
    if not path:
        return
    try:
        items = read_file(path) if path.is_file() else []
    except SkillError:
        items = []
    for c in items:
        if _identity(c["change"]) == _identity(card["change"]):
            c["evidence"] = _merge_evidence(c.get("evidence") or {}, card.get("evidence") or {})
            c["helped"] = c.get("helped", 0) + card.get("helped", 0)
            break
    else:
        items.append(card)
    try:
        write_library(path, items)
    except OSError:
        pass
