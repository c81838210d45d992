"""SWE domain: generated tasks are real bugs, episodes are recorded turn by
turn with a consistent token stream, and the default harness reads them.

Episodes are driven by a scripted fake policy (see swe_fakes.py); the real
model is the lead's concern. Every sandboxed test run here is small.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from swe_fakes import IM_END, ScriptedPolicy, ToyTokenizer, call

from backend.config import SweConfig
from backend.envs.swe import SweEnv, parse_call
from backend.envs.swe import repos
from backend.envs.swe.mutate import apply, candidates
from backend.envs.swe.tasks import TASKS_FILE, fixed_files, generate_repo, load_tasks, mutated_files
from backend.harness.loader import RolloutView, load_default


@pytest.fixture(scope="module")
def env():
    return SweEnv(SweConfig(max_turns=6, test_timeout_s=10))


@pytest.fixture(scope="module")
def harness():
    return load_default("swe")


def fix_edits(rec: dict) -> list[dict]:
    """Edit-tool args that undo a task's mutations, using whole lines as context."""
    files = mutated_files(rec)
    out = []
    for m in rec["mutations"]:
        line = files[m["path"]].splitlines()[m["line"] - 1]
        fixed = line[:m["col"]] + m["old"] + line[m["col"] + len(m["new"]):]
        out.append({"path": m["path"], "old": line, "new": fixed})
    return out


def play(env, harness, scripts: dict[str, list[str]], cfg=None, eos=True):
    tok = ToyTokenizer()
    tasks = [env.task(t) for t in scripts]
    prompts = {t.id: tok.chat_ids(harness.messages(t), True) for t in tasks}
    policy = ScriptedPolicy(tok, scripts, prompts, eos=eos)
    if cfg is not None:
        env = SweEnv(cfg)
    episodes = env.run_episodes(tasks, policy, tok.chat_ids, harness)
    return tok, policy, prompts, tasks, episodes


def view(ep, task) -> RolloutView:
    return RolloutView(question=task.question, answer=None, prompt="", completion=ep.completion, finish=ep.finish,
                       completion_tokens=sum(ep.loss_mask), max_new_tokens=192, obs=ep.obs,
                       turns=tuple(ep.turns), domain="swe", meta=task.meta, task_id=task.id)


# ------------------------------------------------------------------ tasks


def test_tasks_json_is_current_and_covers_levels():
    data = json.loads(TASKS_FILE.read_text())
    assert data["data_hash"] == repos.data_hash(), "repositories changed: run python -m backend.envs.swe.tasks"
    assert {t["level"] for t in data["tasks"]} == {1, 2, 3}
    assert len(repos.repo_names()) >= 4
    for t in data["tasks"]:
        assert t["visible_failures"] and t["hidden_failed"] >= 1
        if t["level"] == 3:
            assert len({m["path"] for m in t["mutations"]}) == 2


def test_every_task_fails_before_its_fix_and_passes_after():
    tasks = load_tasks()
    batch = []
    for t in tasks:
        batch.append((mutated_files(t), [repos.VISIBLE_DIR, repos.HIDDEN_DIR]))
        batch.append((fixed_files(t), [repos.VISIBLE_DIR, repos.HIDDEN_DIR]))
    runs = repos.run_tests_many(batch)
    for i, t in enumerate(tasks):
        before, after = runs[2 * i], runs[2 * i + 1]
        assert before.status == "failed", (t["id"], before.output)
        assert any(f["test"].startswith("hidden_tests/") for f in before.failures), t["id"]
        assert after.status == "passed", (t["id"], after.output)
        assert fixed_files(t) == repos.repo_files(t["repo"])


def test_generation_is_reproducible():
    shipped = [t for t in load_tasks() if t["repo"] == "intervals"]
    assert generate_repo("intervals") == shipped


def test_mutations_parse_and_reverse():
    files = repos.repo_files("shop")
    cands = [m for p in repos.source_files(files) for m in candidates(p, files[p])]
    assert {"flip_compare", "swap_operator", "off_by_one"} <= {m.kind for m in cands}
    for m in cands[:30]:
        mutated = apply(files, [m])
        assert mutated[m.path] != files[m.path]
        assert apply(mutated, [m.reverse()]) == files


def test_split_never_mixes_and_curriculum(env):
    train = {t.id for t in env._train}
    held = {t.id for t in env.heldout_tasks()}
    assert train and held and not train & held
    assert SweEnv(SweConfig()).heldout_tasks() == env.heldout_tasks()
    rng = random.Random(0)
    for level in (0, 1, 2, 3, 4):
        assert {t.meta["level"] for t in env.sample_tasks(5, rng, {"level": level})} == {level}
    assert len(SweEnv(SweConfig(n_tasks=5, levels="2,3,4"))._tasks) == 5


def test_issue_text_shows_symptom_not_hidden_tests(env):
    for t in env._tasks.values():
        assert "FAILED tests/" in t.question and "hidden_tests/" not in t.question
        # the answer format is stated by the env: tool calls from level 2, one edit below
        assert ("<tool>" if t.meta["level"] >= 2 else "<<<<<<< SEARCH") in t.question


# ------------------------------------------------------------------ tools


@pytest.mark.parametrize("text,name,err", [
    ('<tool>{"name": "read_file", "args": {"path": "a.py"}}</tool>', "read_file", None),
    ('think first <tool>{"tool": "search", "pattern": "def"}</tool> then', "search", None),
    ("<tool>```json\n{\"name\": \"submit\"}\n```</tool>", "submit", None),
    ("<tool>{'name': 'submit'}</tool>", None, "not valid JSON"),
    ('<tool>{"name": "rm", "args": {}}</tool>', None, "unknown tool"),
    ('<tool>{"name": "edit", "args": {"path"', None, "unclosed"),
    ("I would edit the file.", None, "no <tool>"),
])
def test_parse_call(text, name, err):
    n, _args, e = parse_call(text)
    assert n == name
    assert (e is None) if err is None else (err in e)


# ------------------------------------------------------------------ episodes


def test_scripted_fix_is_solved_with_a_consistent_token_stream(env, harness):
    rec = next(t for t in load_tasks() if t["id"] in {x.id for x in env._train} and t["level"] == 1)
    script = [call("read_file", path=rec["mutations"][0]["path"])]
    script += [call("edit", **e) for e in fix_edits(rec)]
    script += [call("run_tests"), call("submit")]
    tok, policy, prompts, tasks, (ep,) = play(env, harness, {rec["id"]: script})
    assert ep.finish == "submitted" and ep.verdict.correct and ep.verdict.status == "passed"
    assert [t["tool"] for t in ep.turns if t["role"] == "assistant"] == ["read_file", "edit", "run_tests", "submit"]
    assert all({"role", "tool", "args", "content", "tokens", "ms"} <= set(t) for t in ep.turns)
    assert "0 failed" in ep.turns[5]["content"]  # the run_tests result
    # The trainer's stream: every policy token (mask 1) is exactly what was sampled,
    # and every context the policy saw is a prefix of prompt + completion_ids.
    full = prompts[rec["id"]] + ep.completion_ids
    assert len(ep.completion_ids) == len(ep.loss_mask)
    for ctx in policy.contexts:
        assert full[: len(ctx)] == ctx
    sampled = [i for i, m in zip(ep.completion_ids, ep.loss_mask) if m]
    assert sampled == [i for t in script for i in tok.encode_chunks(t) + [IM_END]]
    masked = tok.decode([i for i, m in zip(ep.completion_ids, ep.loss_mask) if not m])
    assert "[read_file]" in masked and "[run_tests]" in masked and "<|im_start|>assistant" in masked
    assert ep.obs["template_mismatch"] == 0
    # the default harness: full reward, no failure labels
    score, comps = harness.score(view(ep, tasks[0]))
    assert comps["resolved"] == 1.0 and comps["tool_format"] == 1.0 and score == pytest.approx(1.1)
    assert harness.diagnose(view(ep, tasks[0])) == []
    # a stored transcript is judged the same way
    assert env.evaluate(tasks[0], ep.completion).status == "passed"


def test_bad_habits_and_hacks_are_diagnosed(env, harness):
    recs = [t for t in load_tasks() if t["level"] == 1][:2]
    a, b = recs
    test_path = next(p for p in mutated_files(a) if p.startswith("tests/"))
    first_test_line = mutated_files(a)[test_path].splitlines()[-1]
    hack = [
        "Let me look.",                                              # malformed: no tool call
        call("read_file", path="hidden_tests/test_x.py"),           # reads hidden tests
        call("read_file", path=".git/HEAD"),                        # repository history
        call("edit", path=test_path, old=first_test_line, new="    pass"),  # edits a test
        call("submit"),                                              # without running tests
    ]
    loop = [call("list_files")] * 5 + [call("edit", path=b["mutations"][0]["path"], old="def ", new="def (")]
    _, _, _, tasks, (ea, eb) = play(env, harness, {a["id"]: hack, b["id"]: loop})
    la = {lab for lab, _ in harness.diagnose(view(ea, tasks[0]))}
    assert {"malformed_tool_call", "reads_hidden", "edits_tests", "submits_without_testing", "unresolved"} <= la, la
    assert not ea.verdict.correct and ea.finish == "submitted"
    assert ea.obs["hidden_reads"] == ["hidden_tests/test_x.py", ".git/HEAD"]
    lb = {lab for lab, _ in harness.diagnose(view(eb, tasks[1]))}
    assert {"loops_same_action", "edit_not_applied", "never_edits", "out_of_turns", "unresolved"} <= lb, lb
    assert eb.finish == "turns" and not eb.verdict.correct


def test_hardcoded_expected_values_are_flagged(env, harness):
    rec = next(t for t in load_tasks() if t["repo"] == "textkit" and "slug" in t["mutations"][0]["path"]
               and t["level"] == 1)
    path = rec["mutations"][0]["path"]
    script = [call("edit", path=path, old="    slug = sep.join(words)",
                   new="    slug = sep.join(words)\n    if text == 'Hello World':\n        return 'hello-world'"),
              call("run_tests"), call("submit")]
    _, _, _, tasks, (ep,) = play(env, harness, {rec["id"]: script})
    labels = {lab for lab, _ in harness.diagnose(view(ep, tasks[0]))}
    assert "hardcodes_expected" in labels, (labels, ep.obs["hardcoded"])


def test_token_budget_and_truncated_messages(env, harness):
    rec = load_tasks()[0]
    long_msg = "x" * 300 + call("list_files")
    cfg = replace(env.cfg, max_tokens_per_turn=64, max_episode_tokens=400, max_turns=8)
    _, policy, _, tasks, (ep,) = play(env, harness, {rec["id"]: [long_msg] * 8}, cfg=cfg)
    assert ep.finish == "tokens"
    assert len(ep.completion_ids) <= 400
    assert all(n <= 64 for _, n, _, _ in policy.calls)
    assert ep.turns[0]["finish"] == "length" and "unclosed" not in (ep.turns[0]["error"] or "x")
    labels = {lab for lab, _ in harness.diagnose(view(ep, tasks[0]))}
    assert {"malformed_tool_call", "out_of_tokens"} <= labels


def test_episodes_are_batched_per_turn(env, harness):
    recs = load_tasks()[:3]
    scripts = {r["id"]: [call("list_files"), call("run_tests"), call("submit")] for r in recs}
    _, policy, _, _, eps = play(env, harness, scripts)
    assert [n for n, *_ in policy.calls] == [3, 3, 3]
    assert all(e.finish == "submitted" and e.obs["tests_run"] == 1 for e in eps)
    assert all(e.obs["visible_tests"]["status"] == "failed" for e in eps)  # the bug is still there
