"""What the TUI knows about the run: deltas from polls folded into one state.

Owned by the UI thread; workers never touch it. `apply` returns the topics that
changed so each screen redraws only what it shows, and the commands the engine
acknowledged since the last poll.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from backend.store.reader import MIX_WINDOW, RunDelta, loads

TOPICS = frozenset({"run", "steps", "mix", "evals", "events", "rounds", "versions", "commands",
                    "interventions", "skills", "rollouts", "engine", "log"})
EVENTS_KEPT = 2000


@dataclass
class RunState:
    run: dict = field(default_factory=dict)
    steps: list[dict] = field(default_factory=list)
    mix: dict[int, dict[str, int]] = field(default_factory=dict)
    evals: list[dict] = field(default_factory=list)
    events: deque = field(default_factory=lambda: deque(maxlen=EVENTS_KEPT))
    rounds: list[dict] = field(default_factory=list)
    versions: list[dict] = field(default_factory=list)
    commands: dict[int, dict] = field(default_factory=dict)
    interventions: list[dict] = field(default_factory=list)
    max_rollout_id: int = 0
    skills_version: int = 0
    log_lines: list[str] = field(default_factory=list)
    loaded: bool = False
    _config: tuple | None = field(default=None, repr=False)  # (config_json, parsed): parsed once per change
    _series: dict = field(default_factory=dict, repr=False)  # column -> (steps read, xs, ys)

    def apply(self, delta: RunDelta) -> tuple[set[str], list[dict]]:
        """Fold a delta in; returns (changed topics, newly acknowledged commands)."""
        changed: set[str] = set()
        if delta.run != self.run:
            self.run = delta.run
            changed.add("run")
        if delta.steps:
            self.steps.extend(delta.steps)
            changed.add("steps")
        if delta.mix:
            for row in delta.mix:
                self.mix.setdefault(row["step"], {})[row["label"]] = row["n"]
            for old in sorted(self.mix)[:-MIX_WINDOW]:
                del self.mix[old]
            changed.add("mix")
        if delta.evals:
            self.evals.extend(delta.evals)
            changed.add("evals")
        if delta.rounds:  # new rounds, and rounds seen running read again: replaced in place
            known = {r["id"]: i for i, r in enumerate(self.rounds)}
            for row in delta.rounds:
                if row["id"] in known:
                    self.rounds[known[row["id"]]] = row
                else:
                    self.rounds.append(row)
            changed.add("rounds")
        if delta.versions is not None:  # whole tables: an old row's status may have changed
            self.versions = delta.versions
            changed.add("versions")
        if delta.events:
            self.events.extend(delta.events)
            changed.add("events")
        if delta.interventions is not None:
            self.interventions = delta.interventions
            changed.add("interventions")
        if delta.skills_changed:
            self.skills_version += 1
            changed.add("skills")
        if delta.max_rollout_id != self.max_rollout_id:
            self.max_rollout_id = delta.max_rollout_id
            changed.add("rollouts")
        acked = self._merge_commands(delta.commands)
        if delta.commands:
            changed.add("commands")
        self.loaded = True
        return changed, acked

    def _merge_commands(self, rows: list[dict]) -> list[dict]:
        acked = []
        for row in rows:
            before = self.commands.get(row["id"])
            if before is not None and before["status"] == "pending" and row["status"] != "pending":
                acked.append(row)
            self.commands[row["id"]] = row
        return acked

    # ------------------------------------------------------------ derived
    @property
    def current_version(self) -> int | None:
        return self.run.get("harness_version")

    def setting(self, section: str, key: str, default=None):
        """A value of the run's stored config (`evolve.every`), or `default`."""
        if self._config is None or self._config[0] != self.run.get("config_json"):
            self._config = (self.run.get("config_json"), loads(self.run.get("config_json"), {}) or {})
        value = (self._config[1].get(section) or {}).get(key)
        return default if value is None else value

    def next_round_step(self) -> int | None:
        """The step after which the next evolution round runs; None when evolution is off."""
        if not self.setting("evolve", "enabled", True):
            return None
        every = max(1, int(self.setting("evolve", "every", 5)))
        return (int(self.run.get("step") or 0) // every + 1) * every

    def next_eval_text(self) -> str:
        """When the next held-out evaluation runs ("at the start", "at step 10")."""
        if not self.steps and not self.evals:
            return "first held-out eval at the start"
        every = max(1, int(self.setting("eval", "every", 10)))
        step = (int(self.run.get("step") or 0) // every + 1) * every
        last = self.run.get("steps_total")
        return f"next held-out eval at step {min(step, last) if last else step}"  # and always at the end

    def waiting_for_round(self, what: str) -> str:
        """Why `what` is empty and when a round fills it (the empty screens say it)."""
        step = self.next_round_step()
        if step is None:
            return f"No {what}: evolution is off in this run (evolve.enabled = false)."
        first = "the first" if not self.rounds else "the next"
        return f"No {what} yet: {first} evolution round runs after step {step}."

    def pending_for(self, verb: str, iid: int | None = None) -> list[dict]:
        """Pending commands of a verb (for one intervention when `iid` is given)."""
        out = []
        for c in self.commands.values():
            if c["verb"] == verb and c["status"] == "pending":
                if iid is None or (loads(c.get("arg_json"), {}) or {}).get("id") == iid:
                    out.append(c)
        return out

    def recent_commands(self, n: int = 4) -> list[dict]:
        return [self.commands[k] for k in sorted(self.commands)[-n:]]

    def series(self, column: str) -> tuple[list[int], list[float]]:
        """(steps, values) of a steps column, skipping missing values. Kept per column and
        extended with new steps only: a 15 000-step run is not walked again on every poll."""
        done, xs, ys = self._series.get(column, (0, [], []))
        if done > len(self.steps):  # the steps were replaced, not extended
            done, xs, ys = 0, [], []
        for row in self.steps[done:]:
            v = row.get(column)
            if v is not None:
                xs.append(row["step"])
                ys.append(float(v))
        self._series[column] = (len(self.steps), xs, ys)
        return list(xs), list(ys)

    def held_out(self, split: str) -> tuple[list[int], list[float]]:
        """(steps, accuracy) of one held-out set: "validation" (the gate reads it) or "test"
        (reported only). Rows without a split predate the two sets: the gate's, so validation."""
        rows = [e for e in self.evals if (e.get("split") or "validation") == split and e.get("accuracy") is not None]
        return [e["step"] for e in rows], [e["accuracy"] for e in rows]

    def mix_shares(self, top: int = 5) -> tuple[list[int], dict[str, list[float]]]:
        """Failure mix as share of labelled rollouts per step, for the most frequent labels."""
        steps = sorted(self.mix)
        totals: dict[str, int] = {}
        for counts in self.mix.values():
            for label, n in counts.items():
                totals[label] = totals.get(label, 0) + n
        labels = sorted(totals, key=lambda k: (-totals[k], k))[:top]
        shares = {}
        for label in labels:
            shares[label] = [self.mix[s].get(label, 0) / max(1, sum(self.mix[s].values())) for s in steps]
        return steps, shares
