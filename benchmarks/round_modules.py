"""Count the modules whose code runs during one evolution round, and how deep its calls nest.

What is counted: the files under `backend/` in which at least one function (or
method, lambda, comprehension, generator) was entered, in this process, while
`run_round` ran. Not counted:

- loading: code that runs while a module body executes (an import inside the
  round, and whatever that module body calls), so a lazy import costs nothing;
- the stand-in policy: the test helper that plays the live policy's part
  (`tests/synthetic_run.make_probe`, which writes and scores fresh rollouts) and
  everything it calls, since in a real run that is the loop's generation, not
  the round. Modules that only the stand-in reached are listed apart;
- the harness worker: a separate process (the sandbox), which a profiler in
  this process does not see.

The round is a real one at tiny sizes: a synthetic run (real migrations, the
real default harness scoring and diagnosing every rollout in the harness
worker, the real math evaluator) of 6 steps of 4 groups x 4 rollouts, then one
round in auto-promote mode whose candidates are replayed and probed and whose
best one is promoted.

    .venv/bin/python benchmarks/round_modules.py           # the list and the count
    .venv/bin/python benchmarks/round_modules.py --json    # the same as JSON

Beside each module it prints its lines and the lines of its top-level functions and
classes that the round entered (a class counts whole when one of its methods ran):
how much code a given number of modules must hold between them.

It also prints the round's call depth inside `backend/evolve`: the most frames of
that package on the stack at once (`run_round` itself is depth 1; frames of other
packages in between, and comprehensions, do not count), and the deepest chain, so a reader sees how
far one step of the round reaches down before it comes back.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BACKEND = str(ROOT / "backend") + "/"
FIXTURES = str(ROOT / "tests") + "/"
EVOLVE = str(ROOT / "backend" / "evolve") + "/"
INLINE = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")
"""Code objects of one expression (Python 3.12 inlines comprehensions): not a call level of their own."""
OLD_FIXTURE = "backend/evolve/synthetic.py"
"""Where the synthetic run lived in early versions (so the script measures old commits too)."""
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


class Tracer:
    """A `sys.setprofile` hook that records backend files whose functions were entered,
    outside module bodies and outside the stand-in policy."""

    def __init__(self) -> None:
        self.round: dict[str, set[str]] = {}
        self.stand_in: dict[str, set[str]] = {}
        self.first_lines: dict[str, set[int]] = {}
        """Per module of `round`: the first line of each code object entered."""
        self._loading = 0
        self._fixture = 0
        self._stack: list[str | None] = []
        """One entry per open Python frame: `module:function` for a counted frame of backend/evolve, else None."""
        self._evolve = 0
        self.depth = 0
        """The most frames of backend/evolve open at once."""
        self.deepest: list[str] = []
        self.by_step: dict[str, tuple[int, list[str]]] = {}
        """For each function `run_round` called (its steps): the deepest chain below it."""

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return  # c_call and friends: C functions have no module file here
        code = frame.f_code
        path = code.co_filename
        module_body = code.co_name == "<module>"
        fixture = path.startswith(FIXTURES) or path.endswith(OLD_FIXTURE)
        step = 1 if event == "call" else -1
        self._depth(event, code, path, module_body or fixture or self._loading > 0 or self._fixture > 0)
        if module_body:
            self._loading += step
        if fixture:
            self._fixture += step
        if event != "call" or module_body or self._loading or not path.startswith(BACKEND):
            return
        where = self.stand_in if self._fixture else self.round
        module = str(Path(path).relative_to(ROOT))
        where.setdefault(module, set()).add(code.co_name)
        if not self._fixture:
            self.first_lines.setdefault(module, set()).add(code.co_firstlineno)


    def _depth(self, event: str, code: Any, path: str, uncounted: bool) -> None:
        if event == "return":
            if self._stack and self._stack.pop() is not None:
                self._evolve -= 1
            return
        counted = not uncounted and path.startswith(EVOLVE) and code.co_name not in INLINE
        self._stack.append(f"{Path(path).stem}.{code.co_name}" if counted else None)
        if counted:
            self._evolve += 1
            chain = [f for f in self._stack if f is not None]
            if self._evolve > self.depth:
                self.depth, self.deepest = self._evolve, chain
            if len(chain) > 1 and self._evolve > self.by_step.get(chain[1], (0, []))[0]:
                self.by_step[chain[1]] = (self._evolve, chain)


def _synthetic() -> Any:
    try:
        import synthetic_run as syn
    except ImportError:  # an early version kept it inside the package
        from backend.evolve import synthetic as syn
    return syn


def run_traced() -> Tracer:
    syn = _synthetic()
    from backend.evolve import run_round

    store = syn.build_run(Path(tempfile.mkdtemp()) / "run.db", steps=6)
    store.set_run(auto_promote=1)
    ctx = syn.context(store, probe=syn.make_probe())
    tracer = Tracer()
    sys.setprofile(tracer)
    try:
        out = run_round(ctx)
    finally:
        sys.setprofile(None)
    summary = getattr(out, "summary", out)
    if summary.get("error") or not summary.get("promoted"):
        raise SystemExit(f"the traced round did not run as intended: {summary}")
    store.close()
    return tracer


def entered_lines(module: str, first_lines: set[int]) -> tuple[int, int]:
    """(the module's lines, the lines of its top-level definitions that hold an entered code object)."""
    source = (ROOT / module).read_text()
    spans = [(node.lineno, node.end_lineno or node.lineno) for node in ast.parse(source).body
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    entered = sum(end - start + 1 for start, end in spans if any(start <= n <= end for n in first_lines))
    return len(source.splitlines()), entered


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()
    t = run_traced()
    only_stand_in = sorted(set(t.stand_in) - set(t.round))
    lines = {m: entered_lines(m, t.first_lines.get(m, set())) for m in t.round}
    if args.json:
        print(json.dumps({"round": {m: sorted(f) for m, f in sorted(t.round.items())},
                          "lines": {m: {"total": a, "entered_definitions": b} for m, (a, b) in sorted(lines.items())},
                          "only_stand_in": only_stand_in, "count": len(t.round),
                          "evolve_call_depth": t.depth, "deepest": t.deepest,
                          "depth_by_step": {k: v[0] for k, v in t.by_step.items()}}, indent=2))
        return
    print(f"{'module':44} {'functions entered':>17} {'lines':>6} {'in entered definitions':>23}")
    for m, funcs in sorted(t.round.items()):
        print(f"{m:44} {len(funcs):17} {lines[m][0]:6} {lines[m][1]:23}")
    total, entered = (sum(v[i] for v in lines.values()) for i in (0, 1))
    print(f"{'all':44} {'':17} {total:6} {entered:23}")
    if only_stand_in:
        print(f"reached only by the stand-in policy (not counted): {', '.join(only_stand_in)}")
    print(f"modules run during one round: {len(t.round)}")
    print(f"call depth inside backend/evolve: {t.depth} ({' -> '.join(t.deepest)})")
    for step, (depth, chain) in t.by_step.items():
        print(f"  below {step}: {depth} ({' -> '.join(chain[2:])})")


if __name__ == "__main__":
    main()
