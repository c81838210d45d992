"""Fuzz: hostile and broken harness candidates are refused or contained.

Candidates are generated from the default math harness by seeded mutation in
ten categories (syntax, loops, allocations, imports, dunder tricks, writes,
exceptions, non-finite rewards, wrong types, oversized source): first every
variant of every category once (each template, module, wrong value and
constant, with seeded parameters: target function, sizes, paths), then
seeded random ones up to EVOTUI_FUZZ_N (CI: none; 300 random ones missed
some variants and spent most of their time on repeats of the few that run
into a limit). Each goes through the real intervention path
(`interventions.record`, then the sandboxed `backtest`) on a real run
database, and must end either refused by the static check with a reason, or
failed (or judged) by the backtest with a reason, with no exception in the
caller, nothing written to decoy HOME/TMPDIR folders or the run folder, and
the harness version unchanged. A sample also goes through the engine's own
`propose_edit` command handling.

    EVOTUI_FUZZ_N=2000 EVOTUI_FUZZ_SEED=3 .venv/bin/pytest tests/test_fuzz_harness.py -q -s
"""

from __future__ import annotations

import os
import random
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from backend.config import RunConfig
from backend.evolve import interventions as iv
from backend.evolve.backtest import backtest
from backend.evolve.edit import add_definition, replace_name, top_level
from synthetic_run import build_run, context, make_probe
from backend.harness.loader import MAX_BYTES, Harness, HarnessError, RolloutView, default_harness_path

BASE = default_harness_path("math").read_text()
REWARDS = ("reward_correct", "reward_format")
FUNCS = REWARDS + ("extract_answer", "diagnose_empty", "diagnose_no_answer_tag", "diagnose_truncated",
                   "diagnose_repetition", "diagnose_wrong_value")
LIMIT_S = 0.3
BATCH = 12
CPU = ("CPU time",)
CRASHED = ("reward components crashed",)
BAD_LOAD = ("HarnessError", "does not load", "MemoryError", "CPU time")
NOT_ALLOWED = ("not allowed",)


@dataclass
class Case:
    category: str
    code: str
    expect: str
    """static: refused before it runs; runtime: fails in the backtest; any: refused or contained."""
    reasons: tuple = ()
    """When set, the final reason contains one of these."""


# ---------------------------------------------------------------- generation


def _salt(rng) -> str:
    return f"salt = {rng.randrange(10**6)}\n"  # keeps every candidate distinct


def _in_function(rng, body: str, targets=FUNCS) -> str:
    name = rng.choice(targets)
    return replace_name(BASE, name, f"def {name}(r):\n" + textwrap.indent(_salt(rng) + body, "    "))


def _constant(name: str, source: str) -> str:
    """BASE with `name = source`, spliced as text (the source need not parse)."""
    first, last = top_level(BASE)[name]
    lines = BASE.splitlines()
    return "\n".join(lines[:first - 1] + [f"{name} = {source}"] + lines[last:]) + "\n"


# Each maker takes `v`, the variant to make (0 <= v < VARIANTS[category]), or None for a random
# one; everything else (target function, sizes, positions, paths) is drawn from `rng`.


def _syntax(rng, paths, v=None) -> Case:
    kind = rng.randrange(6) if v is None else v
    if kind == 0:  # truncated mid-file, then an unclosed or stray bracket
        cut = rng.randrange(len(BASE) // 4, len(BASE))
        return Case("syntax", BASE[:cut] + rng.choice(["(", "[", "{", ")", "'''", '"']), "static")
    if kind == 1:  # random garbage characters (some insertions stay valid: then anything but a pass)
        code = list(BASE)
        for _ in range(rng.randint(1, 8)):
            code.insert(rng.randrange(len(code)), rng.choice("()[]{}:;@$?!`\\'\"#=.,"))
        return Case("syntax", "".join(code), "any")
    if kind == 2:
        pos = rng.randrange(len(BASE))
        return Case("syntax", BASE[:pos] + rng.choice(["\x00", "\udc80", "\ufeff\x00"]) + BASE[pos:], "static")
    if kind == 3:
        depth = rng.randint(201, 400)
        return Case("syntax", _constant("VALIDITY", "[" * depth + "'x'" + "]" * depth), "static")
    if kind == 4:  # parses, but too deep to compile or compare
        return Case("syntax", _constant("FILTERS", "{'drop_dead_groups': " + "not " * rng.randint(1000, 2500)
                                        + "True, 'drop_truncated': False, 'drop_invalid': False}"), "any")
    lines = BASE.splitlines()
    i = rng.choice([k for k, ln in enumerate(lines) if ln.startswith(("def ", "REWARD", "FILTERS"))])
    lines[i] = " " * rng.randint(1, 7) + lines[i]
    return Case("syntax", "\n".join(lines) + "\n", "static")


LOOPS = [
    "while True:\n    pass\nreturn 1.0",
    "for _ in iter(int, 1):\n    pass\nreturn 1.0",
    "return sum(iter(int, 1))",  # C code: no signal handler interrupts it
    "return max(x for x in iter(int, 1))",
    "while True:\n    try:\n        while True:\n            pass\n    except:\n        pass",
    "try:\n    while True:\n        pass\nfinally:\n    while True:\n        pass",
    "n = 0\nwhile n >= 0:\n    n += 1\nreturn 0.0",
]


def _loop(rng, paths, v=None) -> Case:
    kind = rng.randrange(10) if v is None else v if v < len(LOOPS) else v + 1  # 7 is LOOPS[0] again
    if kind == 8:  # at load time, in a constant the replay judges
        return Case("loop", _constant("VALIDITY", f"[str(sum(1 for _ in iter(int, {rng.randint(1, 9)})))]"),
                    "runtime", CPU)
    if kind == 9:  # at load time, in a constant only a probe judges (loaded in the engine after the check)
        return Case("loop", _constant("PROMPT", f'{{"system": str(len([0 for _ in iter(int, {rng.randint(1, 9)})])),'
                                                ' "template": "{question}"}'), "runtime", BAD_LOAD)
    return Case("loop", _in_function(rng, LOOPS[kind % len(LOOPS)]), "runtime", CPU)


ALLOCS = [
    "return float(len('x' * 10**{e}))",
    "return float(len([0] * 10**{e}))",
    "return float(len(list(range(10**{e}))))",
    "x = [[0] * 10**6 for _ in range(10**{e})]\nreturn 0.0",
    "return float(len(dict.fromkeys(range(10**{e}))))",
]


def _alloc(rng, paths, v=None) -> Case:
    kind = rng.randrange(len(ALLOCS) + 2) if v is None else v
    e = rng.randint(10, 12)
    if kind == len(ALLOCS):
        return Case("alloc", _constant("FILTERS", f'{{"drop_dead_groups": len("x" * 10**{e}) > 0, '
                                                  '"drop_truncated": False, "drop_invalid": False}'), "runtime",
                    BAD_LOAD)
    if kind == len(ALLOCS) + 1:
        return Case("alloc", _constant("PROMPT", f'{{"system": "x" * 10**{e}, "template": "{{question}}"}}'),
                    "runtime", BAD_LOAD)
    body = ALLOCS[kind].format(e=e if kind < 3 else 4 if kind == 3 else 9)
    return Case("alloc", _in_function(rng, body), "runtime", CRASHED + CPU + BAD_LOAD + ("died",)
                if kind >= 3 else ())


MODULES = ["os", "subprocess", "socket", "ctypes", "importlib", "sys", "shutil", "builtins", "pathlib", "pickle",
           "io", "signal", "multiprocessing", "threading", "urllib.request", "http.client", "os.path", "code",
           "marshal", "gc", "inspect", "types", "rex", "mathx"]


def _import(rng, paths, v=None) -> Case:
    m = rng.choice(MODULES) if v is None else MODULES[v % len(MODULES)]
    forms = [f"import {m}", f"from {m} import *", f"import re, {m}", f"import {m} as re",
             f"from {m} import {rng.choice(['system', 'run', 'Popen', 'x'])}",
             "from . import lib", "from ..harness import loader"]
    if v is None:
        stmt, top = rng.choice(forms), rng.random() < 0.5
    elif v < len(MODULES):  # every module once; over them, each form naming one at the top and in a function
        stmt, top = forms[v % 5], v // 5 % 2 == 0
    else:  # the relative imports (they name no module), at the top and in a function
        stmt, top = forms[5 + (v - len(MODULES)) % 2], v - len(MODULES) < 2
    if top:
        return Case("import", BASE.replace("import re\n", f"import re\n{stmt}\n", 1), "static", NOT_ALLOWED)
    return Case("import", _in_function(rng, f"{stmt}\nreturn 1.0"), "static", NOT_ALLOWED)


DUNDERS_STATIC = [
    "return len(().__class__.__bases__[0].__subclasses__())",
    "return getattr(r, '__globals__')",
    "return getattr(r.from_row, '__func__')",
    "return __builtins__['open']('/etc/passwd').read()",
    "return eval('1 + 1')",
    "exec('import os')\nreturn 1.0",
    "return compile('1', 'x', 'eval')",
    "return open('/etc/passwd').read()",
    "return globals()",
    "return vars(r)",
    "return type(r)",
    "return r.__class__",
    "return (lambda: 0).__code__",
    "return '__class__'",
    "return breakpoint()",
    "return min.__self__",
    "return super()",
    "g = None\ng = (g.gi_frame.f_back.f_back.f_globals for _ in [1])\nreturn next(g)",
    "return Exception.mro()[1]",
    "return [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'Popen'][0]",
    "return r.__slots__",
    "return dir(r)",
]
DUNDERS_RUNTIME = [  # pass the static check; the harness namespace must still not reach them
    "return statistics.sys.modules['os'].getcwd()",
    "import string\nreturn string.Formatter().get_field('0.' + '_' * 2 + 'class' + '_' * 2, [r], {})[0]",
    "import re\nreturn re.enum.sys.modules['os'].getcwd()",
    "import collections\nreturn collections.abc.sys",
    "return '{0.from_row.__func__.__globals__}'.format(r)",
    "return math.sys",
]


def _dunder(rng, paths, v=None) -> Case:
    if v is not None:
        if v < len(DUNDERS_STATIC):
            return Case("dunder", _in_function(rng, DUNDERS_STATIC[v]), "static")
        return Case("dunder", _in_function(rng, DUNDERS_RUNTIME[v - len(DUNDERS_STATIC)], REWARDS), "runtime",
                    CRASHED)
    if rng.random() < 0.75:
        return Case("dunder", _in_function(rng, rng.choice(DUNDERS_STATIC)), "static")
    return Case("dunder", _in_function(rng, rng.choice(DUNDERS_RUNTIME), REWARDS), "runtime", CRASHED)


def _write(rng, paths, v=None) -> Case:
    p = str(rng.choice(paths))
    static = [f"open({p!r}, 'w').write('pwned')\nreturn 1.0",
              f"import pathlib\npathlib.Path({p!r}).write_text('pwned')\nreturn 1.0",
              f"import shutil\nshutil.rmtree({str(Path(p).parent)!r})\nreturn 1.0",
              f"import os\nos.remove({p!r})\nreturn 1.0",
              f"__builtins__['open']({p!r}, 'w').write('x')\nreturn 1.0",
              f"exec(\"open({p!r}, 'w')\")\nreturn 1.0"]
    runtime = [f"statistics.sys.modules['os'].system('touch ' + {p!r})\nreturn 1.0",
               f"import re\nre.functools.sys.modules['builtins'].open({p!r}, 'w')\nreturn 1.0"]
    kind = rng.randrange(10) if v is None else v if v < len(static) else v + 1  # 6 is static[0] again
    if kind < 7:
        return Case("write", _in_function(rng, static[kind % len(static)]), "static")
    if kind == 7:
        return Case("write", _constant("VALIDITY", f"[open({p!r}, 'w').write('x')]"), "static")
    return Case("write", _in_function(rng, runtime[kind - 8], REWARDS), "runtime", CRASHED)


RAISES = [
    "raise ValueError('fuzz')",
    "if len(r.completion) % {k} == 0:\n    raise KeyError(r.task_id)\nreturn 1.0",
    "return 1 / (len(r.completion) % 2)",
    "return [][len(r.completion)]",
    "return {{}}['missing']",
    "assert len(r.completion) < {k}\nreturn 0.5",
    "def f(n):\n    return f(n + 1)\nreturn f(0)",
    "return float(int(r.completion))",
    "return r.nonexistent",
    "r.completion = 'x'\nreturn 1.0",
]


def _raise(rng, paths, v=None) -> Case:
    kind = rng.randrange(len(RAISES)) if v is None else v
    body = RAISES[kind].format(k=rng.randint(2, 40))
    always = kind in (0, 4, 6, 8, 9)
    return Case("raise", _in_function(rng, body, REWARDS if always else FUNCS), "runtime" if always else "any",
                CRASHED if always else ())


NONFINITE_WEIGHTS = ["float('nan')", "float('inf')", "1e999"]
NONFINITE_EPS = ["float('nan')", "float('inf')", "-1.0", "0", "'x'", "True", "None"]


def _nonfinite(rng, paths, v=None) -> Case:
    # variants: 0-6 as the kinds below, then kind 7 with each weight, then kind 8 with each eps
    kind = rng.randrange(9) if v is None else min(v, 7 if v < 7 + len(NONFINITE_WEIGHTS) else 8)
    if kind < 6:
        value = ["float('nan')", "float('inf')", "-float('inf')", "1e308 * 10", "math.inf", "math.nan"][kind]
        return Case("nonfinite", _in_function(rng, f"return {value}", REWARDS), "runtime", CRASHED)
    if kind == 6:
        return Case("nonfinite", _constant("REWARD_WEIGHTS", '{"correct": 1e308, "format": 1e308}'), "any")
    if kind == 7:
        w = rng.choice(NONFINITE_WEIGHTS) if v is None else NONFINITE_WEIGHTS[v - 7]
        return Case("nonfinite", _constant("REWARD_WEIGHTS", f'{{"correct": {w}, "format": 0.1}}'), "runtime",
                    BAD_LOAD)
    eps = rng.choice(NONFINITE_EPS) if v is None else NONFINITE_EPS[v - 7 - len(NONFINITE_WEIGHTS)]
    return Case("nonfinite", _constant("ADVANTAGE", f'{{"rule": "group_std", "eps": {eps}}}'), "runtime",
                BAD_LOAD)


WRONG_VALUES = ["'1.0'", "None", "[1.0]", "{'a': 1}", "1j", "10 ** 400", "(1.0,)", "b'1'", "r", "reward_format",
                "{1.0}", "range(1)", "len", "'{0.__class__}'.format(r)"]
WRONG_CONSTANTS = [
    ("PROMPT", "5"), ("PROMPT", '{"system": 5, "template": "{question}"}'),
    ("PROMPT", '{"system": "", "template": "{question.__class__.__mro__}"}'),
    ("PROMPT", '{"system": "", "template": "{question:>999999999}"}'),
    ("PROMPT", '{"system": "", "template": "{0}"}'), ("PROMPT", '{"system": "", "template": "{"}'),
    ("SAMPLING", '{"temperature": "hot", "top_p": 1.0, "max_new_tokens": 128}'), ("SAMPLING", "[1]"),
    ("CURRICULUM", "None"), ("VALIDITY", "[1, 2]"), ("VALIDITY", '"answer_copied_from_prompt"'),
    ("FILTERS", "[]"), ("FILTERS", "{1: True}"), ("ADVANTAGE", '{"rule": "group_std", "eps": "x"}'),
    ("ADVANTAGE", '{"rule": "magic"}'), ("DOMAIN", "5"), ("REWARD_WEIGHTS", '[["correct", 1.0]]'),
    ("REWARD_WEIGHTS", '{"correct": "1"}'), ("REWARD_WEIGHTS", "{}"), ("REWARD_WEIGHTS", '{"bogus": 1.0}'),
]


def _types(rng, paths, v=None) -> Case:
    if v is not None and v < len(WRONG_VALUES):
        return Case("types", _in_function(rng, f"return {WRONG_VALUES[v]}", REWARDS), "runtime", CRASHED)
    if v is None and rng.random() < 0.5:
        return Case("types", _in_function(rng, f"return {rng.choice(WRONG_VALUES)}", REWARDS), "runtime", CRASHED)
    name, source = rng.choice(WRONG_CONSTANTS) if v is None else WRONG_CONSTANTS[v - len(WRONG_VALUES)]
    return Case("types", _constant(name, source), "runtime", BAD_LOAD)


def _oversize(rng, paths, v=None) -> Case:
    n = MAX_BYTES + rng.randint(1, 200_000)
    kind = rng.randrange(4) if v is None else v
    if kind == 0:
        code = BASE + "\n# " + "x" * n + "\n"
    elif kind == 1:
        code = _in_function(rng, f"return float(len('{'a' * n}'))", REWARDS)
    elif kind == 2:
        code = add_definition(BASE, "def diagnose_fuzz(r):\n" + "    x = 1\n" * (n // 10) + "    return None\n")
    else:
        code = BASE + "\n# " + "é" * (n // 2 + 1) + "\n"  # under the limit in characters, over it in bytes
    return Case("oversize", code, "static", ("limit is",))


CATEGORIES = {"syntax": _syntax, "loop": _loop, "alloc": _alloc, "import": _import, "dunder": _dunder,
              "write": _write, "raise": _raise, "nonfinite": _nonfinite, "types": _types, "oversize": _oversize}
VARIANTS = {"syntax": 6, "loop": len(LOOPS) + 2, "alloc": len(ALLOCS) + 2, "import": len(MODULES) + 4,
            "dunder": len(DUNDERS_STATIC) + len(DUNDERS_RUNTIME), "write": 9, "raise": len(RAISES),
            "nonfinite": 7 + len(NONFINITE_WEIGHTS) + len(NONFINITE_EPS),
            "types": len(WRONG_VALUES) + len(WRONG_CONSTANTS), "oversize": 4}
"""How many variants each maker has (its `v`)."""
EVERY_VARIANT = sum(VARIANTS.values())


def generate(n: int, seed: int, paths: list[Path], every_variant: bool = True) -> list[Case]:
    """`n` distinct candidates: every variant of every category once (while `n` lasts; the
    categories in turn, so a backtest batch mixes them), then random ones, the categories in turn.
    Without `every_variant`, random ones only."""
    rng = random.Random(seed)
    planned = [(c, v) for v in range(max(VARIANTS.values())) for c in CATEGORIES if v < VARIANTS[c]
               if every_variant]
    names = list(CATEGORIES)
    out, seen = [], set()
    while len(out) < n:
        name, v = planned[len(out)] if len(out) < len(planned) else (names[len(out) % len(names)], None)
        case = CATEGORIES[name](rng, paths, v)
        assert v is None or case.code not in seen, f"{name} variant {v} repeats another"
        if case.code not in seen:  # a random repeat is drawn again
            seen.add(case.code)
            out.append(case)
    return out


# ---------------------------------------------------------------- checks


def snapshot(*dirs: Path) -> dict:
    return {str(p): (p.read_bytes() if p.is_file() else None) for d in dirs for p in sorted(d.rglob("*"))}


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A real run database, a sentinel in its folder, and decoy HOME/TMPDIR folders."""
    decoys = []
    for var in ("HOME", "TMPDIR", "XDG_CACHE_HOME", "XDG_DATA_HOME"):
        d = tmp_path / f"decoy-{var.lower()}"
        d.mkdir()
        (d / "keep.txt").write_text("keep me")
        monkeypatch.setenv(var, str(d))
        decoys.append(d)
    store = build_run(tmp_path / "run" / "run.db", steps=3)
    (tmp_path / "run" / "harness.py").write_text(BASE)
    (tmp_path / "run" / "sentinel.txt").write_text("sentinel")
    yield store, tmp_path / "run", decoys
    store.close()


def _ctx(store):
    cfg = RunConfig()
    cfg.evolve.backtest_timeout_s = LIMIT_S
    return context(store, cfg=cfg, probe=make_probe())


def _files_at_rest(run_dir: Path, decoys: list[Path]) -> dict:
    files = snapshot(*decoys)
    files.update({str(p): p.read_bytes() for p in (run_dir / "harness.py", run_dir / "sentinel.txt")})
    files["run-dir listing"] = sorted(p.name for p in run_dir.iterdir() if not p.name.startswith("run.db"))
    return files


RUNTIME_REASONS = ("ran over", "harness worker", "does not load")
"""How the harness worker words a limit or a failed load."""


def _check(case: Case, row: dict, when: str) -> None:
    what = f"{case.category} candidate #{row['id']} ({when}): {row['reason']!r}"
    assert row["status"] in ("failed", "passed") and (row["reason"] or "").strip(), what
    if case.expect == "static":
        assert when == "static", what
    if case.expect == "runtime":  # contained at run time, or refused earlier by the (stricter) static check
        assert row["status"] == "failed", what
    if case.reasons and when == "backtest":
        assert any(r in row["reason"] for r in case.reasons + RUNTIME_REASONS), what
    if case.category not in ("raise", "syntax", "nonfinite"):  # nothing hostile passes as an improvement
        assert row["status"] == "failed", what


def test_fuzzed_candidates_are_refused_or_contained(run):
    store, run_dir, decoys = run
    n = int(os.environ.get("EVOTUI_FUZZ_N", str(EVERY_VARIANT)))  # every variant once (see the module docstring)
    cases = generate(n, int(os.environ.get("EVOTUI_FUZZ_SEED", "0")),
                     [run_dir / "pwned.txt", run_dir / "sentinel.txt"] + [d / "pwned.txt" for d in decoys])
    before, version = _files_at_rest(run_dir, decoys), store.run()["harness_version"]
    ctx = _ctx(store)
    tally: Counter = Counter()
    queued = []
    for k, case in enumerate(cases):
        iid = iv.record(store, None, iv.Candidate(title=f"fuzz {case.category} {k}", code=case.code,
                                                  parent_version=ctx.harness_version, parent_code=ctx.harness.code,
                                                  proposer="fuzz"))
        row = store.get("interventions", iid)
        if row["status"] == "failed":
            _check(case, row, "static")
            tally[case.category, "refused"] += 1
        else:
            queued.append((case, iid))
    for i in range(0, len(queued), BATCH):
        batch = queued[i:i + BATCH]
        results = backtest(ctx, [iid for _, iid in batch])  # must not raise
        assert len(results) == len(batch)
        for case, iid in batch:
            row = store.get("interventions", iid)
            _check(case, row, "backtest")
            tally[case.category, "contained"] += 1
            tally["passed"] += row["status"] == "passed"
    assert store.run()["harness_version"] == version and ctx.harness_version == version
    assert store.count("harness_versions") == 1
    assert _files_at_rest(run_dir, decoys) == before
    assert sum(tally[c, k] for c in CATEGORIES for k in ("refused", "contained")) == n
    print("\nfuzz: " + ", ".join(f"{c} {tally[c, 'refused']}/{tally[c, 'contained']}" for c in CATEGORIES)
          + f" (refused statically/contained in the backtest; {n} candidates, {tally['passed']} of the contained "
          "judged harmless and passed)")


def test_engine_propose_edit_commands_end_failed_with_the_harness_unchanged(run, monkeypatch):
    """The engine's own command path (a hand edit from the TUI) over a sample of the fuzz."""
    from backend import evolve_hooks
    from backend.dispatch import Control
    from backend.loop import Engine

    store, run_dir, decoys = run
    cases = generate(240, 1, [run_dir / "pwned.txt", run_dir / "sentinel.txt"], every_variant=False)
    rng = random.Random(1)
    must_fail = [c for c in cases if c.expect != "any"]
    sample = [c for cat in CATEGORIES for c in rng.sample([c for c in must_fail if c.category == cat], 2)]
    sample += rng.sample([c for c in must_fail if c.expect == "runtime"], 4)
    probe = make_probe()
    monkeypatch.setattr(evolve_hooks.EnginePolicy, "generate", lambda self, h, n: probe(h, n))
    engine = Engine.__new__(Engine)  # the command handling only: no model
    engine.store, engine.run_dir, engine.quiet, engine.control = store, run_dir, True, Control(store)
    engine.lm = SimpleNamespace(device="cpu")  # no model: evolve.trials auto is off on the CPU
    engine.cfg = _ctx(store).cfg
    engine.harness_version = store.run()["harness_version"]
    engine.harness = Harness.from_code(store.get("harness_versions", engine.harness_version)["code"])
    before = _files_at_rest(run_dir, decoys)
    cids = [store.send_command("propose_edit", {"code": c.code, "title": f"fuzz {c.category}"}, source="tui")
            for c in sample]
    engine.handle_commands(store.last_step())
    for c, cid in zip(sample, cids):
        cmd = store.get("commands", cid)
        assert cmd["status"] == "applied" and "backtest failed:" in cmd["result"], (c.category, cmd["result"])
        iid = int(cmd["result"].split("#")[1].split()[0])
        row = store.get("interventions", iid)
        assert row["status"] == "failed" and row["reason"] and row["proposer"] == "operator"
    assert store.pending_commands() == []
    assert store.run()["harness_version"] == engine.harness_version == 1
    assert _files_at_rest(run_dir, decoys) == before


@pytest.mark.parametrize("body", DUNDERS_RUNTIME + [
    "import collections.abc\nreturn 1.0 if collections.abc.Mapping else 0.0",  # still usable
    "from collections import Counter\nreturn float(Counter('aab')['a'])",
    "import string\nreturn 1.0 if string.ascii_letters else 0.0",
])
def test_namespace_escapes_found_by_the_fuzz_stay_closed_in_process(body):
    """What a harness runs in the worker: modules show only their own public functions and
    constants (no `statistics.sys`, no `string.Formatter`); the static check refuses many first."""
    code = replace_name(BASE, "reward_format", "def reward_format(r):\n" + textwrap.indent(body, "    "))
    try:
        h = Harness.from_code(code)
    except HarnessError as e:
        assert not ("else" in body or "Counter" in body), e  # the harmless ones still load
        return
    total, comps = h.score(RolloutView(question="1 + 1", answer="2", completion="<answer>2</answer>", finish="stop"))
    if "else" in body or "Counter" in body:
        assert comps["format"] > 0 and "_errors" not in comps
    else:
        assert "format" in comps["_errors"] and total == 1.0


@pytest.mark.parametrize("body, msg", [
    ("g = None\ng = (g.gi_frame.f_back.f_globals for _ in [1])\nreturn next(g)", "is not allowed in a harness"),
    ("return float(len(Exception.mro()))", "is not allowed in a harness"),
])
def test_frame_and_mro_walks_are_refused(body, msg):
    with pytest.raises(HarnessError, match=msg):
        code = replace_name(BASE, "reward_format", "def reward_format(r):\n" + textwrap.indent(body, "    "))
        Harness.from_code(code)
