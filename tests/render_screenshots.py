"""Render every screen of the app over the frozen fixture run into screenshots/*.svg.

    python tests/render_screenshots.py      # from the repository root (or: make screenshots)
    python tests/render_screenshots.py --out DIR

The scenarios here are the same ones the snapshot tests compare
(tests/test_tui_snapshots.py), rendered the same way, so the SVGs in
screenshots/ are byte-identical to tests/__snapshots__/. It lives in tests/
next to the fixture builder it uses (tui_fixtures.py), so it runs from a source
checkout and the installed package never reaches into tests/.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import tui_fixtures as fx

ROOT = Path(__file__).resolve().parents[1]
SIZE = (100, 32)


@dataclass(frozen=True)
class Scenario:
    """Keys pressed (settling after each) on a fixture run of a kind ('live', 'dead', 'crashed')."""

    keys: tuple[str, ...] = ()
    run: str = "live"
    size: tuple[int, int] = SIZE
    owns_engine: bool = False
    text: str = ""  # typed after the keys (e.g. a veto reason)
    after: tuple[str, ...] = ()


SCENARIOS: dict[str, Scenario] = {
    "dashboard": Scenario(("1",)),
    "dashboard_80x24": Scenario(("1",), size=(80, 24)),
    "rollouts": Scenario(("2", "down", "down")),
    "rollouts_swe_turns": Scenario(("2",), size=(100, 48)),
    "rollouts_filtered": Scenario(("2", "slash"), text="add", after=("enter", "escape", "down")),
    "diagnoses": Scenario(("3",)),
    "interventions": Scenario(("4",)),
    "interventions_diff": Scenario(("4", "d")),
    "veto_modal": Scenario(("4", "v"), text="too risky before the next eval"),
    "harness": Scenario(("5",)),
    "harness_diff": Scenario(("5", "up")),
    "skills": Scenario(("6",)),
    "log": Scenario(("7",)),
    "help": Scenario(("4", "question_mark")),
    "dead_engine": Scenario(("1",), run="dead"),
    "quit_modal": Scenario(("1", "q"), owns_engine=True),
}


def build_fixture(kind: str, run_dir: Path) -> Path:
    if kind == "dead":
        return fx.build_run(run_dir, status="running", pid=424242)
    if kind == "crashed":
        return fx.build_run(run_dir, status="crashed", pid=None, error="RuntimeError: CUDA out of memory")
    return fx.build_run(run_dir)


def make(name: str, tmp: Path):
    """(app, run_before) for a scenario: the app over a fresh fixture, and the pilot script."""
    sc = SCENARIOS[name]
    run_dir = build_fixture(sc.run, tmp / name)
    app = fx.make_app(run_dir, alive=sc.run == "live", owns_engine=sc.owns_engine)

    async def run_before(pilot) -> None:
        await fx.settle(pilot)
        await fx.press(pilot, *sc.keys)
        if sc.text:
            await pilot.press(*sc.text)
            await fx.settle(pilot)
        await fx.press(pilot, *sc.after)

    return app, run_before


def normalize(svg: str) -> str:
    """Drop the random id Rich puts in every SVG (as pytest-textual-snapshot does)."""
    return re.sub(r"\bterminal-\d+-([\w-]+)", r"terminal-\1", svg)


def render(name: str, tmp: Path) -> str:
    from textual._doc import take_svg_screenshot  # what snap_compare uses

    app, run_before = make(name, tmp)
    return normalize(take_svg_screenshot(app=app, terminal_size=SCENARIOS[name].size, run_before=run_before))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python tests/render_screenshots.py", description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "screenshots"), help="folder for the SVGs")
    p.add_argument("names", nargs="*", help=f"scenarios (default all): {', '.join(SCENARIOS)}")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.names or SCENARIOS:
        if name not in SCENARIOS:
            print(f"unknown scenario {name!r}", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory() as tmp:
            (out / f"{name}.svg").write_text(render(name, Path(tmp)))
        print(f"wrote {out / name}.svg")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
