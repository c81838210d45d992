"""The LLM proposer against a real local HTTP server speaking the chat completions API."""

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from backend.config import RunConfig
from backend.evolve import run_round
from backend.evolve.edit import unified_diff
from backend.evolve.interventions import params as iv_params
from backend.evolve.llm import candidate_from, parse_answer
from synthetic_run import add_steps, build_run, context, make_probe
from backend.harness.loader import default_harness_path
from backend.store import Store
from chat_server import ChatServer, llm_config, prompt_hash
from pathlib import Path

DEFAULT = default_harness_path("math").read_text()
LENIENT = ("def extract_answer(r):\n"  # the evaluator's own reading; nothing when it hedges
           "    return None if is_hedged(r.completion) else final_answer(r.completion)\n")
RECORDED = Path(__file__).parent / "fixtures" / "llm_answers.json"
"""A real model's raw answers to the proposer's real first-round prompt (benchmarks/record_llm_answers.py)."""
RERECORD = ".venv/bin/python benchmarks/record_llm_answers.py"
# Hand-written answers below (GOOD, REPLAY, the Stub's modes): well-formed ones for the success path,
# and one for each named way to fail; the recorded ones above are what a real (small) model says.
GOOD = {"interventions": [
    {"title": "Lenient extraction", "target": "no_answer_tag", "hypothesis": "untagged answers score 0",
     "expected": "dead groups revive", "name": "extract_answer", "definition": LENIENT},
    {"title": "Format weight via diff", "target": "no_answer_tag", "hypothesis": "format matters more",
     "expected": "more tags",
     "diff": unified_diff(DEFAULT, DEFAULT.replace('"format": 0.1', '"format": 0.3'))},
]}
TWO_NAMES = DEFAULT.replace('"format": 0.1', '"format": 0.3').replace('"level": 1', '"level": 0')
FORBIDDEN = "def reward_format(r):\n    return open('/etc/passwd') and 1\n"
REPLAY = [  # what a chat model answers, round after round: prose, a fence, then the JSON
    "Looking at the failure table, most rollouts lack the tag.\n```json\n" + json.dumps({"interventions": [
        {"title": "Read the answer like the evaluator", "target": "no_answer_tag",
         "hypothesis": "correct untagged answers score 0, so their groups tie", "expected": "dead groups revive",
         "name": "extract_answer", "definition": LENIENT},
        {"title": "Show the tag in the prompt", "target": "no_answer_tag", "hypothesis": "an example helps",
         "expected": "more tagged answers", "knob": "PROMPT.system",
         "value": "Give the final answer on its own last line as <answer>NUMBER</answer>. "
                  "Example: What is 2 + 3? <answer>5</answer>"},
        {"title": "Very hot sampling", "target": "dead_groups", "hypothesis": "more spread",
         "expected": "fewer ties", "knob": "SAMPLING.temperature", "value": 3.0}]}) + "\n```",
    json.dumps({"interventions": [
        {"title": "Drop truncated rollouts", "target": "truncated", "hypothesis": "cut-off rollouts carry no answer",
         "expected": "cleaner advantages", "knob": "FILTERS.drop_truncated", "value": True}]}),
]


class Stub:
    """Which hand-written answer the server gives (a test sets `Stub.mode`)."""
    mode = "ok"
    release = threading.Event()


def _stub_answer(srv: ChatServer, body: dict):
    if Stub.mode == "slow":
        Stub.release.wait(10)  # the client gives up long before
        return None
    if Stub.mode == "500":
        return 500, json.dumps({"error": {"message": "model crashed"}})
    if Stub.mode == "garbage_body":
        return 200, "<html>definitely not json"
    return {"ok": json.dumps(GOOD),
            "fenced": "```json\n" + json.dumps(GOOD["interventions"][0]) + "\n```",
            "prose": "I would make the reward more lenient.",
            "bad_diff": json.dumps({"hypothesis": "h", "diff": "@@ -1,1 +1,1 @@\n-no such line\n+x\n"}),
            "two_names": json.dumps({"hypothesis": "h", "diff": unified_diff(DEFAULT, TWO_NAMES)}),
            "forbidden": json.dumps({"hypothesis": "h", "name": "reward_format", "definition": FORBIDDEN}),
            "no_hypothesis": json.dumps({"name": "extract_answer", "definition": LENIENT}),
            "replay": REPLAY[min(len(srv.requests), len(REPLAY)) - 1],
            }[Stub.mode]


@pytest.fixture(scope="module")
def server():
    srv = ChatServer(lambda body: _stub_answer(srv, body))
    with srv:
        yield srv
        Stub.release.set()


@pytest.fixture
def store(tmp_path):
    s = build_run(tmp_path / "run.db", steps=6)
    yield s
    s.close()


def _ctx(store, base_url, monkeypatch, timeout=5.0):
    monkeypatch.setenv("STUB_KEY", "sk-test-123")
    cfg = RunConfig()
    cfg.evolve.proposer = "llm"
    cfg.evolve.llm.base_url = base_url
    cfg.evolve.llm.model = "stub-model"
    cfg.evolve.llm.api_key_env = "STUB_KEY"
    cfg.evolve.llm.timeout_s = timeout
    return context(store, cfg=cfg, probe=make_probe())


def _url(server):
    return server.url


def _llm_rows(store):
    return store.rows("SELECT * FROM interventions WHERE proposer = 'llm' ORDER BY id")


def test_llm_proposals_are_recorded_and_backtested(server, store, monkeypatch):
    Stub.mode = "ok"
    server.requests.clear()
    out = run_round(_ctx(store, _url(server), monkeypatch)).summary
    assert out["error"] is None
    req = server.requests[-1]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sk-test-123"
    assert req["body"]["model"] == "stub-model"
    prompt = req["body"]["messages"][-1]["content"]
    assert "no_answer_tag" in prompt and "def reward_correct" in prompt and "Evidence rollouts" in prompt
    lenient, weight = _llm_rows(store)
    assert lenient["status"] == "passed" and lenient["hypothesis"] == "untagged answers score 0"
    assert weight["kind"] == "reward" and '"format": 0.3' in weight["code"]
    assert weight["status"] in ("passed", "failed") and weight["reason"]


@pytest.mark.parametrize("mode, reason", [
    ("500", "request failed: InternalServerError"),
    ("garbage_body", "request failed"),
    ("prose", "malformed answer: no JSON object"),
    ("bad_diff", "change does not apply: hunk 1 does not apply"),
    ("two_names", "not a single-factor change: touches CURRICULUM, REWARD_WEIGHTS"),
    ("forbidden", "harness check rejected the change"),
    ("no_hypothesis", "malformed answer: answer has no hypothesis"),
])
def test_bad_answers_become_failed_proposals(server, store, monkeypatch, mode, reason):
    Stub.mode = mode
    out = run_round(_ctx(store, _url(server), monkeypatch)).summary
    assert out["error"] is None
    rows = _llm_rows(store)
    assert rows and all(r["status"] == "failed" for r in rows)
    assert reason in rows[0]["reason"], rows[0]["reason"]


def test_fenced_single_object_answer_is_accepted(server, store, monkeypatch):
    Stub.mode = "fenced"
    run_round(_ctx(store, _url(server), monkeypatch))
    (row,) = _llm_rows(store)
    assert row["status"] == "passed" and row["title"] == "Lenient extraction"


def test_timeout_and_unreachable_endpoints(server, store, monkeypatch):
    Stub.mode = "slow"
    out = run_round(_ctx(store, _url(server), monkeypatch, timeout=0.3)).summary
    assert out["error"] is None
    assert "request failed: APITimeoutError" in _llm_rows(store)[-1]["reason"]
    free = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = free.server_address[1]
    free.server_close()  # nothing listens there now
    run_round(_ctx(store, f"http://127.0.0.1:{port}/v1", monkeypatch))
    assert "request failed: APIConnectionError" in _llm_rows(store)[-1]["reason"]


def test_missing_endpoint_is_a_failed_proposal(store, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    run_round(_ctx(store, "", monkeypatch))
    assert "no endpoint" in _llm_rows(store)[-1]["reason"]


def test_agent_round_end_to_end_with_evidence_and_history(server, store, monkeypatch):
    """Two rounds against the real HTTP server replaying a model's answers: HTTP -> parse ->
    static check -> backtest (replay and probe) -> gate (auto-promote); the second request
    carries the first round's proposals with their verdicts and reasons."""
    Stub.mode = "replay"
    server.requests.clear()
    store.set_run(auto_promote=1)
    out = run_round(_ctx(store, _url(server), monkeypatch)).summary
    assert out["error"] is None
    lenient, prompt, hot = _llm_rows(store)
    assert lenient["status"] == "promoted" and out["promoted"] == lenient["id"]
    assert store.run()["harness_version"] == out["harness_version"] >= 2  # and the next passed one, in turn
    active = out["harness_version"]
    assert prompt["kind"] == "prompt" and iv_params(prompt)["knob"] == "PROMPT.system"
    assert store.rows("SELECT mode FROM backtests WHERE intervention_id = ?", (prompt["id"],))[0]["mode"] == "probe"
    assert hot["status"] == "failed" and "must be a number in [0.1, 1.5], got 3.0" in hot["reason"]
    first = server.requests[0]["body"]["messages"][-1]["content"]
    assert "no <answer> tag; ends with" in first  # the sampled rollouts come with their diagnoses
    assert '"knob": "REWARD_WEIGHTS.format"' in first and '"range": [0.0, 4.0]' in first
    # auto-promote without trials: knobs only a trial could judge are not offered (the offline rule)
    assert '"knob": "SAMPLING.temperature"' not in first and '"knob": "CURRICULUM.level"' not in first
    assert '"knob": "ADVANTAGE.eps"' not in first

    add_steps(store, 7, 11)
    ctx = _ctx(store, _url(server), monkeypatch)
    ctx.step = 11
    out = run_round(ctx).summary
    assert out["error"] is None
    second = server.requests[1]["body"]["messages"][-1]["content"]
    history = second[second.index("Earlier proposals"):second.index("Skills that")]
    assert "Read the answer like the evaluator" in history and '"status": "promoted"' in history
    assert "must be a number in [0.1, 1.5]" in history  # the reasons come back to the agent
    assert f"version {active}" in second and "final_answer(r.completion)" in second  # the promoted harness
    (drop,) = [r for r in _llm_rows(store) if r["title"] == "Drop truncated rollouts"]
    assert drop["parent_version"] == active and drop["kind"] == "filter" and drop["status"] != "proposed"
    assert store.move_history()["FILTERS.drop_truncated"][0]["to"] is True


@pytest.mark.parametrize("item, reason", [
    ({"knob": "SAMPLING.banana", "value": 1}, "no knob 'SAMPLING.banana' in this harness's search space"),
    ({"knob": "SAMPLING.temperature", "value": 9}, "SAMPLING.temperature must be a number in [0.1, 1.5], got 9"),
    ({"knob": "SAMPLING.max_new_tokens", "value": 100.5}, "must be an integer in [32, 512]"),
    ({"knob": "FILTERS.drop_truncated", "value": "yes"}, "FILTERS.drop_truncated takes true or false"),
    ({"knob": "ADVANTAGE.rule", "value": "median"}, "ADVANTAGE.rule must be one of group_std, group_mean, rank"),
    ({"knob": "FILTERS.drop_truncated", "value": False}, "FILTERS.drop_truncated is already False"),
])
def test_knob_answers_outside_the_space_are_failed_proposals(store, item, reason):
    c = candidate_from(parse_answer(json.dumps(dict(item, hypothesis="h")))[0], context(store), [])
    assert c.error == f"llm: malformed answer: {reason}" or reason in c.error and not c.code


def test_a_knob_answer_is_one_move_of_the_space(store):
    ctx = context(store)
    c = candidate_from(parse_answer('{"hypothesis": "h", "knob": "SAMPLING.max_new_tokens", "value": 192}')[0], ctx, [])
    assert c.error is None and c.names() == ["SAMPLING"] and '"max_new_tokens": 192' in c.code
    assert c.params["knob"] == "SAMPLING.max_new_tokens" and (c.params["from"], c.params["to"]) == (128, 192)


def _json_objects(text: str) -> list:
    """Every JSON object anywhere in `text` (decoded from each '{'), found independently of
    the proposer's own parser, so a parser that accepts garbage cannot pass the test below."""
    dec, out = json.JSONDecoder(), []
    for i, ch in enumerate(text):
        if ch == "{":
            try:
                out.append(dec.raw_decode(text, i)[0])
            except ValueError:
                pass
    return out


def _strings(objects: list) -> set[str]:
    return {v for o in objects if isinstance(o, dict) for v in o.values() if isinstance(v, str)} | \
        {s for o in objects if isinstance(o, dict) for v in o.values() if isinstance(v, list)
         for s in _strings(v)}


def test_recorded_answers_of_a_real_model_take_the_real_path(tmp_path):
    """Every answer a real model gave to the proposer's real prompt goes HTTP -> parse -> static
    check -> backtest -> gate in a round of its own (the same first round it was recorded in):
    garbage becomes one failed proposal with its reason; anything accepted came from the answer,
    was backtested and gated."""
    rec = json.loads(RECORDED.read_text())
    assert rec["answers"], f"{RECORDED.name} holds no answers: re-record with {RERECORD}"
    build_run(tmp_path / "base.db", steps=6).close()
    garbage = 0
    for k, answer in enumerate(rec["answers"]):
        shutil.copy(tmp_path / "base.db", tmp_path / f"run{k}.db")
        store = Store.open(tmp_path / f"run{k}.db")
        with ChatServer(lambda body, text=answer["content"]: text) as srv:
            out = run_round(context(store, cfg=llm_config(srv.url), probe=make_probe())).summary
        (req,) = srv.requests
        assert prompt_hash(req["body"]["messages"]) == rec["prompt_hash"], (
            f"the LLM proposer's prompt changed since {RECORDED.name} was recorded ({rec['recorded_at']}), "
            f"so its answers are stale: re-record with {RERECORD}")
        assert out["error"] is None
        rows = _llm_rows(store)
        assert rows, f"answer {k} left no proposal"
        objects = _json_objects(answer["content"])
        if not any(isinstance(o, dict) for o in objects):
            garbage += 1
            (row,) = rows
            assert row["status"] == "failed" and row["reason"].startswith("llm: malformed answer: "), row["reason"]
            assert not row["hypothesis"] and "no hypothesis" not in row["reason"]  # refused at the parse
        said = _strings(objects)
        for r in rows:
            tested = store.rows("SELECT verdict FROM backtests WHERE intervention_id = ?", (r["id"],))
            assert r["status"] != "proposed" and "request failed" not in (r["reason"] or "")
            if r["status"] == "failed" and not tested:  # stopped before the backtest: it says why
                assert r["reason"].startswith("llm: ") or "single-factor" in r["reason"], r["reason"]
            else:  # accepted: a real change, taken from the answer, backtested, then gated
                assert r["hypothesis"] in said and r["code"] != DEFAULT and tested
        store.close()
    print(f"{len(rec['answers'])} recorded answers of {rec['model']}, {garbage} without any JSON object")
