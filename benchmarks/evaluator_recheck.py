"""Old vs new math evaluator on a run's stored held-out completions .

For the latest evaluation of each split of RUN_DIR: how many completions each
evaluator calls correct, and how many of the correct ones are expression echoes
or hedges (`backend.envs.math_answer`'s probes). The old evaluator is the
earlier one (last `<answer>` tag else the last number, then math-verify,
which evaluates expressions), transcribed here as a yardstick.

    .venv/bin/python benchmarks/evaluator_recheck.py RUN_DIR
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


def old_correct(gold: str, text: str) -> bool:
    from math_verify import parse, verify

    tags = _TAG.findall(text or "")
    pred = tags[-1].strip() if tags else ((_NUMBER.findall(text or "") or [None])[-1] or "").replace(",", "")
    if not pred:
        return False
    if gold.strip() == pred.strip():
        return True
    try:
        return float(gold) == float(pred)
    except ValueError:
        try:
            g, p = parse(gold), parse(pred)
            return bool(g and p and verify(g, p))
        except Exception:
            return False


def main(run_dir: str) -> None:
    from backend.config import load_config
    from backend.envs import make_env
    from backend.envs import math_answer as ma
    from backend.store import Store

    store = Store.open(Path(run_dir), readonly=True)
    cfg = load_config(Path(run_dir) / "config.toml") if (Path(run_dir) / "config.toml").exists() else None
    env = make_env(cfg)
    try:
        from backend.envs import held_out_sets

        sets = held_out_sets(env, cfg.eval.n_val, cfg.eval.n_test)
        gold = {t.id: t.answer for v in sets.values() for t in v}
    except (ImportError, AttributeError):  # before the validation/test split: one held-out set
        gold = {t.id: t.answer for t in env.heldout_tasks()}

    def gold_of(task_id: str) -> str:  # a run's held-out tasks may come from an older rule: ids name them
        if task_id in gold or not hasattr(env, "task_by_id"):
            return gold.get(task_id, "")
        return env.task_by_id(task_id).answer

    has_split = any(c["name"] == "split" for c in store.rows("PRAGMA table_info(evals)"))
    print("| split | step | n | new correct | old correct | old-only correct | echo (old-correct) "
          "| hedged (old-correct) | echo/hedged among new-correct |")
    print("|---|---|---|---|---|---|---|---|---|")
    for split in ("validation", "test") if has_split else ("held-out",):
        where, args = ("WHERE split = ?", (split,)) if has_split else ("", ())
        rows = store.rows(f"SELECT step, results_json FROM evals {where} ORDER BY step DESC, id DESC LIMIT 1", args)
        if not rows:
            continue
        res = json.loads(rows[0]["results_json"])
        old = [old_correct(gold_of(r["task_id"]), r.get("completion") or "") for r in res]
        new = [bool(r["correct"]) for r in res]
        echo = [old[i] and ma.is_expression_echo(r.get("question") or "", ma.final_answer_text(r.get("completion")
                                                                                            or ""))
                for i, r in enumerate(res)]
        hedge = [old[i] and ma.is_hedged(r.get("completion") or "") for i, r in enumerate(res)]
        a = ma.audit(res)
        print(f"| {split} | {rows[0]['step']} | {len(res)} | {sum(new)} | {sum(old)} "
              f"| {sum(o and not n for o, n in zip(old, new))} | {sum(echo)} | {sum(hedge)} "
              f"| {a['echo'] + a['hedged']} of {a['checked']} |")


if __name__ == "__main__":
    main(sys.argv[1])
