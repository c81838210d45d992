"""The harness file and the engine's handle on it.

A harness is one Python file with these top-level names, each of which can be
changed alone (the evolution stage edits one at a time):

    DOMAIN          "math" | "code" | "swe"
    PROMPT          {"system": str, "template": str}     ({question} is filled in)
    SAMPLING        {"temperature", "top_p", "max_new_tokens"}
    REWARD_WEIGHTS  {"name": weight}   one per `reward_<name>(r)` function
    ADVANTAGE       {"rule": "group_std" | "group_mean" | "rank", "eps": float,
                     "std": "population" | "sample"}
    FILTERS         {"drop_dead_groups": bool, "drop_truncated": bool, "drop_invalid": bool}
    CURRICULUM      {"datasets": {name: weight}, "level": int, ...}
    VALIDITY        [labels that mark a rollout invalid (reward hacks)]
    reward_<name>(r) -> float         a reward component
    diagnose_<label>(r) -> str | None evidence when the failure label applies

`r` is a read-only view of a rollout (question, answer, completion, finish,
...: `namespace.VIEW_FIELDS`). The code never runs in this process: a
`Harness` here is the code, its hash and its validated constants
(`HarnessSpec`), obtained from the sandboxed harness worker. Applying it to
rollouts is `backend.harness.semantics.apply_harness`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.types import Rollout

from .check import MAX_BYTES, HarnessError, check_source, parse
from .namespace import VIEW_FIELDS, RolloutView
from .semantics import advantages
from .spec import HarnessSpec, sha

if TYPE_CHECKING:
    from .client import HarnessWorker


__all__ = [  # the harness API the rest of the engine imports from here
    "Harness", "HarnessError", "HarnessSpec", "MAX_BYTES", "RolloutView", "advantages", "check_source",
    "default_harness_path", "load_default", "parse", "sha",
]


@dataclass(frozen=True)
class Harness:
    """A harness as the engine holds it: code plus validated constants, no live objects."""

    code: str
    sha: str
    spec: HarnessSpec

    @classmethod
    def from_code(cls, code: str, worker: HarnessWorker | None = None) -> "Harness":
        """Check and load `code` in the harness worker; raises HarnessError (one line)."""
        from .client import WorkerFailure, shared_worker

        try:
            spec = (worker or shared_worker()).load(code)
        except WorkerFailure as e:
            raise HarnessError(f"harness could not be loaded: {e}") from None
        return cls(code=code, sha=sha(code), spec=spec)

    @classmethod
    def from_file(cls, path: str | Path) -> "Harness":
        p = Path(path)
        try:
            code = p.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise HarnessError(f"cannot read harness {p}: {e}") from None
        return cls.from_code(code)

    # ------------------------------------------------------------ parts (copies: callers may not mutate)
    domain = property(lambda self: self.spec.domain)
    prompt = property(lambda self: dict(self.spec.prompt))
    sampling = property(lambda self: dict(self.spec.sampling))
    weights = property(lambda self: dict(self.spec.weights))
    advantage = property(lambda self: dict(self.spec.advantage))
    filters = property(lambda self: dict(self.spec.filters))
    curriculum = property(lambda self: {k: (dict(v) if isinstance(v, dict) else v)
                                        for k, v in self.spec.curriculum.items()})
    validity = property(lambda self: set(self.spec.validity))
    rewards = property(lambda self: tuple(self.spec.rewards))
    diagnostics = property(lambda self: tuple(self.spec.diagnostics))

    # ------------------------------------------------------------ one rollout (tools, tests, previews)
    def score(self, view: Any) -> tuple[float, dict[str, Any]]:
        """(reward, components) of one rollout view, through the worker like any batch."""
        out = self._apply_one(view)
        return out.reward, dict(out.components, **({"_errors": out.errors} if out.errors else {}))

    def diagnose(self, view: Any) -> list[tuple[str, str]]:
        """(label, evidence) pairs of one rollout view, through the worker."""
        return list(self._apply_one(view).labels)

    def _apply_one(self, view: Any) -> Any:
        from .semantics import apply_harness

        if not isinstance(view, dict):  # a RolloutView
            view = {k: getattr(view, k) for k in RolloutView.__slots__}
        plain = _plain(view)
        return apply_harness(self, [Rollout((0,), **{k: plain.get(k) for k in VIEW_FIELDS})]).rollouts[0]

    def messages(self, task: Any) -> list[dict[str, Any]]:
        from backend.envs.base import message_prompt

        p = self.spec.prompt
        return message_prompt(p.get("system", ""), p.get("template", "{question}"), task)


def _plain(x: Any) -> Any:
    """A JSON-able copy of a (possibly frozen) view."""
    if hasattr(x, "items"):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def default_harness_path(domain: str) -> Path:
    return Path(__file__).parent / "defaults" / f"{domain}.py"


def load_default(domain: str) -> Harness:
    return Harness.from_file(default_harness_path(domain))
