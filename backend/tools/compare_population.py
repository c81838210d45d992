"""The compare arms with several runs a seed: a population of runs, and best-of-N static.

- population:       one population (`evotui run` with `population.size = N`, explore mode) per
                    seed, under OUT/population-sSEED: its members are subprocesses of the
                    population's coordinator, which packs them on the cards it is given
- population-copy:  the same in copy mode: a member behind copies a better one and never moves
                    its harness (selection alone)
- best-of-n:        N static runs per seed under OUT/best-of-n-sSEED/rI, seeded as the
                    population's members are; the one best on validation at the end is
                    reported on test (the honest baseline at equal rollouts)

N is `population.size` of compare's base config (`evotui compare --population N`, default 4);
the five single-run arms always train with `population.size = 0`.

Each arm x seed is one or more `Unit`s: the processes compare launches. A single-run arm is one
unit; best-of-n is N units (each packed on a card like any run); a population is one unit that
holds `min(N, jobs)` job slots, as its members train at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from backend.config import RunConfig, apply_overrides, config_from_dict

GROUP_ARMS = ("population", "population-copy", "best-of-n")
"""The arms with several runs a seed, after compare's five (`compare.ALL_ARMS`)."""
MODES = {"population": "explore", "population-copy": "copy"}
"""The population mode of each population arm."""
SIZE = 4
"""Members of a population arm, and runs of best-of-n, when compare is not told (`--population`)."""


@dataclass(frozen=True)
class Unit:
    """One process compare launches for an arm and seed: a run, or a population."""

    arm: str
    seed: int
    label: str
    """Its name in printed lines and logs: `static-s0`, `best-of-n-s0-r1`, `population-s0`."""
    run_dir: Path
    """A run directory, or a population directory (POP) for the population arms."""
    slots: int = 1
    """Job slots it holds while it runs: a population's members train at once."""
    member: int = 0
    """best-of-n: which of its N runs."""

    @property
    def log(self) -> Path:
        """Where its output goes: beside its directory (OUT/static-s0.log, OUT/best-of-n-s0/r1.log)."""
        return self.run_dir.parent / f"{self.run_dir.name}.log"

    @property
    def population(self) -> bool:
        return self.arm in MODES


def size_of(base: RunConfig | dict) -> int:
    """N: members of a population arm and runs of best-of-n."""
    size = base.population.size if isinstance(base, RunConfig) else (base.get("population") or {}).get("size", 0)
    return size or SIZE


def member_seeds(seed: int, n: int) -> list[int]:
    """The seeds of best-of-n's runs for compare seed `seed`: the population's member seeds,
    so best-of-n's runs start as the population's members do."""
    from backend.population.members import member_seed

    return [member_seed(seed, i) for i in range(n)]


def units(arm: str, seed: int, out: Path, size: int, jobs: int = 1) -> list[Unit]:
    """The processes of one arm and seed under OUT."""
    label = f"{arm}-s{seed}"
    if arm == "best-of-n":
        return [Unit(arm, seed, f"{label}-r{i}", out / label / f"r{i}", member=i) for i in range(size)]
    if arm in MODES:
        return [Unit(arm, seed, label, out / label, slots=max(1, min(size, jobs)))]
    return [Unit(arm, seed, label, out / label)]


def group_config(base: dict, arm: str, seed: int, member: int = 0) -> RunConfig:
    """The config of best-of-n's run `member`, or of a population arm's population."""
    data = json.loads(json.dumps(base))
    size = size_of(data)
    sets = [f"name={arm}", "evolve.enabled=false"]
    if arm == "best-of-n":
        sets += [f"seed={member_seeds(seed, size)[member]}", "population.size=0"]
    else:
        # explore moves come from the offline proposer, promoted without an operator; each member
        # keeps its own skill library, as the evolving single-run arms do
        sets += [f"seed={seed}", f"population.size={size}", f"population.mode='{MODES[arm]}'",
                 "evolve.auto_promote=true", "evolve.proposer='offline'", "evolve.skill_library='run'"]
    return config_from_dict(apply_overrides(data, sets))


def started(u: Unit) -> bool:
    """Its directory holds a run or a population (a rerun resumes it)."""
    from backend.population.store import PopulationStore

    return PopulationStore.exists(u.run_dir) if u.population else (u.run_dir / "run.db").exists()
