"""Render the app's screens over frozen fixture runs into SVGs: the README's screenshots, or any scenario.

    python tests/render_screenshots.py                  # screenshots/*.svg of the README (or: make screenshots)
    python tests/render_screenshots.py --out DIR NAME   # any scenario below, e.g. veto_modal_80x24

The scenarios here are the ones the snapshot tests compare
(tests/test_tui_snapshots.py): every screen at 80x24 and at 160x50, over a run
with data and over a run that has just started, plus the modals and a few
states. They are rendered the same way, so each SVG in screenshots/ is
byte-identical to its snapshot in tests/__snapshots__/. It lives in tests/
next to the fixture builders it uses (tui_fixtures.py, population_fixtures.py),
so it runs from a source checkout and the installed package never reaches into
tests/.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import population_fixtures as pf
import tui_fixtures as fx

ROOT = Path(__file__).resolve().parents[1]
NARROW, WIDE = (80, 24), (160, 50)  # the two layouts the screens are designed for
POPULATION_PATH = Path("runs") / "population"
"""Where a population scenario opens its fixture, relative to the scenario's folder: the screen shows
the path it was opened with (as `evotui open runs/population` would), the same in every render."""


@dataclass(frozen=True)
class Scenario:
    """A screen (`mode`) of a fixture run of a kind ('live', 'empty', 'dead', 'crashed') at a size,
    then keys pressed (settling after each), text typed, more keys. Kind 'population' opens the
    population screen (`evotui open POP`) over the frozen population instead; `mode` is unused."""

    mode: str = "dashboard"
    run: str = "live"
    size: tuple[int, int] = NARROW
    keys: tuple[str, ...] = ()
    owns_engine: bool = False
    text: str = ""  # typed after the keys (e.g. a veto reason)
    after: tuple[str, ...] = ()


SCREENS = ("dashboard", "rollouts", "diagnoses", "interventions", "harness", "skills", "log")
SCENARIOS: dict[str, Scenario] = {
    f"{mode}{'_empty' if run == 'empty' else ''}_{w}x{h}": Scenario(mode, run, (w, h))
    for mode in SCREENS for run in ("live", "empty") for w, h in (NARROW, WIDE)
}
SCENARIOS |= {
    "dashboard_scrolled_80x24": Scenario("dashboard", keys=("pagedown", "pagedown")),
    "rollouts_filtered_80x24": Scenario("rollouts", keys=("slash",), text="add", after=("enter", "escape", "down")),
    "rollouts_swe_turns_160x50": Scenario("rollouts", size=WIDE, keys=("down", "down")),
    "interventions_diff_160x50": Scenario("interventions", size=WIDE, keys=("d",)),
    "veto_modal_80x24": Scenario("interventions", keys=("v",), text="too risky before the next eval"),
    "harness_diff_160x50": Scenario("harness", size=WIDE, keys=("d",)),
    "help_160x50": Scenario("interventions", size=WIDE, keys=("question_mark",)),
    "dead_engine_80x24": Scenario("dashboard", run="dead"),
    "quit_modal_80x24": Scenario("dashboard", keys=("q",), owns_engine=True),
    "auto_promote_pending_80x24": Scenario("interventions", keys=("p", "tab", "enter")),
    "confirm_modal_80x24": Scenario("interventions", keys=("p",)),
}
SCENARIOS |= {  # the lineage cursor on the move waiting for the operator (#4)
    f"population_{w}x{h}": Scenario("population", run="population", size=(w, h), keys=("down",) * 3)
    for w, h in (NARROW, WIDE)
}
README_SHOTS = {  # screenshots/NAME.svg shown in the README: the wide layout
    "dashboard": "dashboard_160x50", "rollouts": "rollouts_160x50", "interventions_diff": "interventions_diff_160x50",
    "harness_diff": "harness_diff_160x50", "diagnoses": "diagnoses_160x50", "skills": "skills_160x50",
    "dashboard_80x24": "dashboard_80x24", "population": "population_160x50",
}

_BUILT: dict[str, Path] = {}  # one fixture run of each kind per process, copied for each scenario


def build_fixture(kind: str, run_dir: Path) -> Path:
    if kind not in _BUILT:
        src = Path(tempfile.mkdtemp(prefix=f"evotui-fixture-{kind}-")) / "run"
        if kind == "dead":
            fx.build_run(src, status="running", pid=424242)
        elif kind == "crashed":
            fx.build_run(src, status="crashed", pid=None, error="RuntimeError: CUDA out of memory")
        elif kind == "empty":
            fx.build_empty_run(src)
        elif kind == "population":
            pf.build_population_demo(src)
        else:
            fx.build_run(src)
        _BUILT[kind] = src
    shutil.copytree(_BUILT[kind], run_dir)
    return run_dir


def make(name: str, tmp: Path):
    """(app, run_before) for a scenario: the app over a fresh copy of its fixture, and the pilot script.
    A population scenario changes the working directory to its folder under `tmp` (POPULATION_PATH
    is relative to it); the caller restores it (`render`, or pytest's `monkeypatch.chdir`)."""
    sc = SCENARIOS[name]
    if sc.run == "population":
        app = make_population_app(tmp / name)
    else:
        run_dir = build_fixture(sc.run, tmp / name)
        app = fx.make_app(run_dir, alive=sc.run != "dead", owns_engine=sc.owns_engine, mode=sc.mode)

    async def run_before(pilot) -> None:
        await fx.settle(pilot)
        await fx.press(pilot, *sc.keys)
        if sc.text:
            await pilot.press(*sc.text)
            await fx.settle(pilot)
        await fx.press(pilot, *sc.after)

    return app, run_before


def make_population_app(folder: Path):
    """The population app over a fresh copy of the frozen population, opened as POPULATION_PATH
    from `folder` (the working directory from now on), without its polling timer."""
    from evotui.components.population_app import PopulationApp

    build_fixture("population", folder / POPULATION_PATH)
    os.chdir(folder)
    return PopulationApp(POPULATION_PATH, watch=False)


def normalize(svg: str) -> str:
    """Drop the random id Rich puts in every SVG (as pytest-textual-snapshot does)."""
    return re.sub(r"\bterminal-\d+-([\w-]+)", r"terminal-\1", svg)


def render(name: str, tmp: Path) -> str:
    from textual._doc import take_svg_screenshot  # what snap_compare uses

    cwd = Path.cwd()
    try:
        app, run_before = make(name, tmp)
        return normalize(take_svg_screenshot(app=app, terminal_size=SCENARIOS[name].size, run_before=run_before))
    finally:
        os.chdir(cwd)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python tests/render_screenshots.py", description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "screenshots"), help="folder for the SVGs")
    p.add_argument("names", nargs="*", help=f"scenarios (default: the README's: {', '.join(README_SHOTS)})")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = {n: n for n in args.names} if args.names else README_SHOTS
    for file_name, name in wanted.items():
        if name not in SCENARIOS:
            print(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory() as tmp:
            (out / f"{file_name}.svg").write_text(render(name, Path(tmp)))
        print(f"wrote {out / file_name}.svg")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
