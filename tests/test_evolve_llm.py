"""The LLM proposer against a real local HTTP server speaking the chat completions API."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from backend.config import RunConfig
from backend.evolve import run_round
from backend.evolve.edit import unified_diff
from synthetic_run import build_run, context, make_probe
from backend.harness.loader import default_harness_path

DEFAULT = default_harness_path("math").read_text()
LENIENT = ("def extract_answer(r):\n"  # the evaluator's own reading; nothing when it hedges
           "    return None if is_hedged(r.completion) else final_answer(r.completion)\n")
GOOD = {"interventions": [
    {"title": "Lenient extraction", "target": "no_answer_tag", "hypothesis": "untagged answers score 0",
     "expected": "dead groups revive", "name": "extract_answer", "definition": LENIENT},
    {"title": "Format weight via diff", "target": "no_answer_tag", "hypothesis": "format matters more",
     "expected": "more tags",
     "diff": unified_diff(DEFAULT, DEFAULT.replace('"format": 0.1', '"format": 0.3'))},
]}
TWO_NAMES = DEFAULT.replace('"format": 0.1', '"format": 0.3').replace('"level": 1', '"level": 0')
FORBIDDEN = "def reward_format(r):\n    return open('/etc/passwd') and 1\n"


class Stub(BaseHTTPRequestHandler):
    mode = "ok"
    requests: list = []
    release = threading.Event()

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Stub.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if Stub.mode == "slow":
            Stub.release.wait(10)  # the client gives up long before
            return
        if Stub.mode == "500":
            return self._send(500, json.dumps({"error": {"message": "model crashed"}}))
        if Stub.mode == "garbage_body":
            return self._send(200, "<html>definitely not json")
        content = {"ok": json.dumps(GOOD),
                   "fenced": "```json\n" + json.dumps(GOOD["interventions"][0]) + "\n```",
                   "prose": "I would make the reward more lenient.",
                   "bad_diff": json.dumps({"hypothesis": "h", "diff": "@@ -1,1 +1,1 @@\n-no such line\n+x\n"}),
                   "two_names": json.dumps({"hypothesis": "h", "diff": unified_diff(DEFAULT, TWO_NAMES)}),
                   "forbidden": json.dumps({"hypothesis": "h", "name": "reward_format", "definition": FORBIDDEN}),
                   "no_hypothesis": json.dumps({"name": "extract_answer", "definition": LENIENT}),
                   }[Stub.mode]
        self._send(200, json.dumps({
            "id": "cmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}))

    def _send(self, code, text):
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    Stub.release.set()
    srv.shutdown()
    srv.server_close()


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
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


def _llm_rows(store):
    return store.rows("SELECT * FROM interventions WHERE proposer = 'llm' ORDER BY id")


def test_llm_proposals_are_recorded_and_backtested(server, store, monkeypatch):
    Stub.mode, Stub.requests[:] = "ok", []
    out = run_round(_ctx(store, _url(server), monkeypatch))
    assert out["error"] is None
    req = Stub.requests[-1]
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
    out = run_round(_ctx(store, _url(server), monkeypatch))
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
    out = run_round(_ctx(store, _url(server), monkeypatch, timeout=0.3))
    assert out["error"] is None
    assert "request failed: APITimeoutError" in _llm_rows(store)[-1]["reason"]
    free = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    port = free.server_address[1]
    free.server_close()  # nothing listens there now
    run_round(_ctx(store, f"http://127.0.0.1:{port}/v1", monkeypatch))
    assert "request failed: APIConnectionError" in _llm_rows(store)[-1]["reason"]


def test_missing_endpoint_is_a_failed_proposal(store, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    run_round(_ctx(store, "", monkeypatch))
    assert "no endpoint" in _llm_rows(store)[-1]["reason"]
