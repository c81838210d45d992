"""SWE levels 0 and 1: the edit format, generated one-shot tasks, their split,
the leak canary and the expert SWE harness (backend/envs/swe/levels.py, oneshot.py, edit.py)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from swe_fakes import IM_END, ScriptedPolicy, ToyTokenizer

from backend.config import RunConfig, SweConfig
from backend.envs.swe import SweEnv, levels, repos
from backend.envs.swe.edit import apply_edit, parse_edit
from backend.envs.swe.mutate import Mutation, apply
from backend.harness.loader import RolloutView, load_default
from backend.tools import compare

SRC = "def f(a, b):\n    if a < b:\n        return a\n    return b\n\n\ndef g(a, b):\n    if a < b:\n        return b\n"


@pytest.fixture(scope="module")
def env():
    return SweEnv(SweConfig(levels="0,1", test_timeout_s=10))


def block(search: str, replace: str, path: str = "") -> str:
    head = f"{path}\n" if path else ""
    return f"Fix:\n```edit\n{head}<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```\n"


def fix_of(shot: levels.Shot, path: bool = True) -> str:
    """The reference answer: the mutated line back to its original text."""
    m = shot.mutation
    line = shot.files[m.path].splitlines()[m.line - 1]
    return block(line, line[:m.col] + m.old + line[m.col + len(m.new):], m.path if path else "")


# ------------------------------------------------------------------ the edit format


@pytest.mark.parametrize("text,status,path", [
    (block("    return a", "    return b", "pkg/m.py"), "ok", "pkg/m.py"),
    (block("    return a", "    return b"), "ok", None),
    ("```edit\nFile: `pkg/m.py`\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n```", "ok", "pkg/m.py"),
    ("replace line 3 with:        return b", "ok", None),
    ("Fixed:\n```python\ndef g(a, b):\n    return a\n```", "ok", None),
    ("```python\nprint(1)\n```", "no_edit", None),
    ("<<<<<<< SEARCH\n    return a\n>>>>>>> REPLACE", "malformed", None),
    (block("", "    return b"), "malformed", None),
    ("The bug is in f, change < to <=.", "no_edit", None),
    ("", "no_edit", None),
])
def test_parse_edit(text, status, path):
    e = parse_edit(text)
    assert (e.status, e.path) == (status, path)
    assert (e.error is None) == (status == "ok")


def test_apply_edit_exact_loose_ambiguous_and_wrong_files():
    files = {"pkg/m.py": SRC}
    new, st, _ = apply_edit(files, parse_edit(block("        return a", "        return a + 0")), "pkg/m.py",
                            ["pkg/m.py"])
    assert st == "applied" and "return a + 0" in new["pkg/m.py"] and files["pkg/m.py"] == SRC  # a copy
    new, st, _ = apply_edit(files, parse_edit(block("return a", "return -a")), "pkg/m.py", ["pkg/m.py"])
    assert st == "applied" and "        return -a\n" in new["pkg/m.py"]  # re-indented to the file
    _, st, err = apply_edit(files, parse_edit(block("    if a < b:", "    if a <= b:")), "pkg/m.py", ["pkg/m.py"])
    assert st == "not_applied" and "occurs 2 times" in err
    _, st, err = apply_edit(files, parse_edit(block("    if a > b:", "    if a <= b:")), "pkg/m.py", ["pkg/m.py"])
    assert st == "not_applied" and "not in the file" in err
    new, st, _ = apply_edit(files, parse_edit("replace line 3 with: return b"), "pkg/m.py", ["pkg/m.py"])
    assert st == "applied" and new["pkg/m.py"].splitlines()[2] == "        return b"
    rewrite = parse_edit("```python\n  def g(a, b):\n      if a <= b:\n          return b\n```")
    new, st, _ = apply_edit(files, rewrite, None, ["pkg/m.py"])  # the file is the one defining g
    fixed = SRC.replace("    if a < b:\n        return b", "    if a <= b:\n        return b")
    assert st == "applied" and new["pkg/m.py"] == fixed
    assert apply_edit(files, parse_edit("```python\ndef h(:\n```"), "pkg/m.py", ["pkg/m.py"])[1] == "not_applied"
    assert apply_edit(files, parse_edit(block("x", "y", "pkg/other.py")), "pkg/m.py", ["pkg/m.py"])[1] == "unknown_file"
    assert apply_edit(files, parse_edit(block("x", "y")), None, ["pkg/m.py"])[1] == "no_file"
    assert apply_edit(files, parse_edit(block("def g(a, b):", "def g(a, b):")), "pkg/m.py", ["pkg/m.py"])[1] \
        == "no_change"


# ------------------------------------------------------------------ generation and split


def test_levels_json_is_current_and_tasks_are_deterministic(env):
    data = json.loads(levels.LEVELS_FILE.read_text())
    assert data["data_hash"] == repos.data_hash() and data["generator"] == levels.GENERATOR
    assert len(data["mutants"]) >= 150
    rec = data["mutants"][7]
    for lv, seed in ((0, 0), (0, 1), (1, 2)):
        assert levels.build(rec, lv, seed) == levels.build(rec, lv, seed)
    again = SweEnv(SweConfig(levels="0,1", test_timeout_s=10))
    assert [(t.id, t.question) for t in again.test_tasks()] == [(t.id, t.question) for t in env.test_tasks()]
    for seed, shown in ((0, "hint"), (1, "function"), (2, "failures")):  # level 0 always shows the function
        sliced = levels.build(rec, 0, seed)
        assert sliced.slice_of and sliced.slice_of[0] <= sliced.mutation.line <= sliced.slice_of[1]
        assert levels.variant(sliced) == shown
    assert len(levels.build(rec, 0, 2).failures) == len(rec["failures"]) >= len(levels.build(rec, 0, 1).failures)
    wide = levels.build(rec, 1, 0)
    assert wide.mutation.path in wide.shown and len(wide.shown) == len(repos.source_files(wide.files))


def test_split_sizes_disjoint_by_mutant_and_fixed_mix(env):
    val, test = env.validation_tasks(), env.test_tasks()
    assert len(val) >= 200 and len(test) >= 200
    keys = {side: {env._shots[t.id].key for t in ts} for side, ts in
            (("train", env._train), ("validation", val), ("test", test))}
    assert not keys["train"] & keys["validation"] and not keys["train"] & keys["test"]
    assert not keys["validation"] & keys["test"]
    assert not any(env.is_canary(t.id) for t in val + test)  # canaries only train
    assert Counter(t.meta["level"] for t in env.test_tasks(70)) == {0: 40, 1: 30}  # 0:4, 1:3 of the mix
    full = SweEnv(SweConfig(test_timeout_s=10))
    assert {t.meta["level"] for t in full.test_tasks()} == {0, 1, 2, 3, 4}  # the report can group by level


def test_reference_passes_and_mutant_fails_on_a_sample(env):
    sample = [t for t in env.validation_tasks() if t.meta["level"] == 0][::40][:4]
    batch = []
    for t in sample:
        shot = env._shots[t.id]
        batch.append((apply(repos.repo_files(shot.repo), [shot.mutation]), [repos.HIDDEN_DIR]))
    assert all(r.status == "failed" for r in repos.run_tests_many(batch))
    for t in sample:
        v = env.evaluate(t, fix_of(env._shots[t.id], path=False))
        assert v.correct and v.status == "passed", (t.id, v)
    unknown = Mutation.from_dict(levels.load_mutants()[0]["mutation"])
    assert unknown.kind  # the cache round-trips a Mutation


def test_a_groups_identical_edits_are_tested_once(env, monkeypatch):
    t = [t for t in env.validation_tasks() if t.meta["level"] == 0][0]
    shot = env._shots[t.id]
    right, wrong = fix_of(shot), block(shot.files[shot.mutation.path].splitlines()[shot.mutation.line - 1],
                                       "    pass", shot.mutation.path)
    texts = [right, wrong, right, right, wrong, "no edit here"]
    alone = [env._judge_shots([t], [x])[0] for x in texts]
    sizes, run_many = [], repos.run_tests_many
    monkeypatch.setattr(repos, "run_tests_many",
                        lambda batch, *a, **k: sizes.append(len(batch)) or run_many(batch, *a, **k))
    together = env._judge_shots([t] * len(texts), texts)
    assert sizes == [2]  # two distinct edited repositories; the answer without an edit runs nothing
    assert [v.status for v, _ in together] == ["passed", "failed", "passed", "passed", "failed", "no_edit"]
    assert [(v.correct, v.status, v.detail) for v, _ in together] == [(v.correct, v.status, v.detail) for v, _ in alone]
    together[0][0].detail["passed"] = -1  # each rollout's verdict is its own
    assert together[2][0].detail["passed"] != -1


def test_one_shot_episode_stream_facts_and_statuses(env):
    l1 = [t for t in env.validation_tasks() if t.meta["level"] == 1][:3]
    shots = [env._shots[t.id] for t in l1]
    wrong = next(p for p in shots[1].shown if p != shots[1].mutation.path)
    scripts = {l1[0].id: [fix_of(shots[0])], l1[1].id: [block("zzz", "yyy", wrong)],
               l1[2].id: [fix_of(shots[2], path=False)]}
    tok, harness = ToyTokenizer(), load_default("swe_expert")
    prompts = {t.id: tok.chat_ids(harness.messages(t), True) for t in l1}
    eps = env.run_episodes(l1, ScriptedPolicy(tok, scripts, prompts), tok.chat_ids, harness)
    assert [e.verdict.status for e in eps] == ["passed", "not_applied", "no_file"]
    assert eps[0].obs["right_file"] and eps[0].obs["right_line"] and eps[0].obs["tests"]["status"] == "passed"
    assert eps[1].obs["well_formed"] and not eps[1].obs["right_file"]
    for e in eps:
        # the sampled ids up to its eos are trained; the template's rest of the turn ("\n") is not
        end = e.completion_ids.index(IM_END) + 1
        assert e.loss_mask == [1] * end + [0] * (len(e.completion_ids) - end) and end < len(e.loss_mask)
        assert env.observe(l1[0], e.completion, e.verdict)["level"] == 1


def test_a_failed_batch_is_data_but_a_stopped_run_is_not(env):
    """A generation error leaves error episodes; an error that stops the run (no GPU memory even
    at batch 1) passes through the env, so the run stops and says why instead of training on
    nothing; a training step whose every rollout failed stops the run with the cause."""
    from backend.loop import GenerationFailed, ResourceExhausted, check_generated
    from backend.rollout import from_episode

    tasks = [t for t in env.validation_tasks() if t.meta["level"] == 0][:2]
    tok, harness = ToyTokenizer(), load_default("swe_expert")

    def broken(*_a, **_k):
        raise ValueError("prompt (9000) + max_new_tokens (192) exceeds the model's 8192 positions")

    eps = env.run_episodes(tasks, broken, tok.chat_ids, harness)
    assert [e.finish for e in eps] == ["error", "error"] and "8192 positions" in eps[0].obs["error"]

    def no_memory(*_a, **_k):
        raise ResourceExhausted("GPU out of memory even at batch_size=1")

    with pytest.raises(ResourceExhausted):
        env.run_episodes(tasks, no_memory, tok.chat_ids, harness)
    items = [from_episode(e, t, k, 0, "", []) for k, (t, e) in enumerate(zip(tasks, eps))]
    with pytest.raises(GenerationFailed, match="step 7: all 2 rollouts failed to generate .*8192 positions.*step 6"):
        check_generated(items, "step 7", 6)
    scripts = {tasks[0].id: [fix_of(env._shots[tasks[0].id])]}
    fine = env.run_episodes(tasks[:1], ScriptedPolicy(tok, scripts, {tasks[0].id: tok.chat_ids(
        harness.messages(tasks[0]), True)}), tok.chat_ids, harness)[0]
    check_generated(items + [from_episode(fine, tasks[0], 2, 0, "", [])], "step 7", 6)  # one generated: data


# ------------------------------------------------------------------ leak canary and the expert harness


def view(task, ep) -> RolloutView:
    return RolloutView(question=task.question, answer=None, prompt="", completion=ep.completion, finish=ep.finish,
                       completion_tokens=len(ep.completion_ids), max_new_tokens=160, obs=ep.obs, turns=tuple(ep.turns),
                       domain="swe", meta=task.meta, task_id=task.id)


def play(env, harness, scripts):
    tok = ToyTokenizer()
    tasks = [env.task(k) for k in scripts]
    prompts = {t.id: tok.chat_ids(harness.messages(t), True) for t in tasks}
    return tasks, env.run_episodes(tasks, ScriptedPolicy(tok, scripts, prompts), tok.chat_ids, harness)


def test_leak_canary_is_diagnosed_and_never_paid(env):
    canary = next(k for k in env._tasks if env.is_canary(k))
    shot = env._shots[canary]
    assert levels.HISTORY_FILE in env.task(canary).question and "+" in shot.shown[levels.HISTORY_FILE]
    honest = next(t.id for t in env._train if t.meta["level"] == 0 and not env.is_canary(t.id))
    harness = load_default("swe_expert")
    tasks, eps = play(env, harness, {canary: [fix_of(shot)], honest: [fix_of(env._shots[honest])]})
    assert all(e.verdict.correct for e in eps)  # the evaluator sees a fix either way
    (rc, _), (rh, comps) = harness.score(view(tasks[0], eps[0])), harness.score(view(tasks[1], eps[1]))
    assert eps[0].obs["copies_history"] and rc == 0.0
    assert "copies_history" in {lab for lab, _ in harness.diagnose(view(tasks[0], eps[0]))}
    assert rh == pytest.approx(1.5) and comps["resolved"] == 1.0  # 1 + 0.1 + 0.2 + 0.2


def test_expert_harness_ranks_near_misses_and_is_an_arm(env, tmp_path):
    harness = load_default("swe_expert")
    assert harness.validity >= {"copies_history", "edits_tests"}
    t = next(t for t in env._train if t.meta["level"] == 0 and not env.is_canary(t.id))
    shot = env._shots[t.id]
    line = shot.files[shot.mutation.path].splitlines()[shot.mutation.line - 1]
    tasks, eps = play(env, harness, {t.id: [block(line, line + "  # unchanged logic")]})
    r, comps = harness.score(view(tasks[0], eps[0]))
    assert not eps[0].verdict.correct and comps["localised"] == 1.0 and 0.1 < r < 1.0
    labels = {lab for lab, _ in harness.diagnose(view(tasks[0], eps[0]))}
    assert "unresolved" in labels and "copies_history" not in labels
    _, eps = play(env, harness, {t.id: ["```python\ndef nope():\n    pass\n```"]})  # well-formed, fits nothing
    assert eps[0].obs["edit_status"] == "not_applied" and not eps[0].obs["right_file"]
    assert harness.score(view(tasks[0], eps[0]))[0] == pytest.approx(0.1)  # the format term only
    compare.check_arms(RunConfig(domain="swe"), ["static-expert", "coevolve-expert"], [0], tmp_path)
    assert compare.arm_config({"domain": "swe"}, "static-expert", 0).harness.endswith("swe_expert.py")
