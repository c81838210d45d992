"""A local OpenAI-compatible chat completions server for the LLM proposer's tests.

`ChatServer(answer)` listens on 127.0.0.1 (a free port) and answers every
`POST .../chat/completions` with `answer(body)`: the assistant's content (a
str), or `(status, raw_body)` to send something other than a completion. Every
request is kept in `.requests` (path, Authorization header, JSON body), so a
test can read exactly what the proposer sent.

    >>> with ChatServer(lambda body: '{"interventions": []}') as srv:   # doctest: +SKIP
    ...     cfg.evolve.llm.base_url = srv.url

Used by tests/test_evolve_llm.py (replaying answers) and by
benchmarks/record_llm_answers.py (capturing the proposer's real request).
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from backend.config import RunConfig


def prompt_hash(messages: list[dict]) -> str:
    """The identity of a prompt: sha256 of its messages as canonical JSON."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def completion(model: str, content: str) -> str:
    """A chat.completion response body carrying `content`."""
    return json.dumps({
        "id": "cmpl-local", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})


class ChatServer:
    def __init__(self, answer: Callable[[dict], Any]) -> None:
        self.answer = answer
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                got = server.answer(body)
                if got is None:  # the answer function chose to hang up (a client timeout test)
                    return
                status, text = got if isinstance(got, tuple) else (200, completion(body.get("model", ""), got))
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def llm_config(base_url: str) -> RunConfig:
    """The run configuration of the LLM proposer's replay test and of its recording
    (benchmarks/record_llm_answers.py): defaults, the proposer = llm at `base_url`."""
    cfg = RunConfig()
    cfg.evolve.proposer = "llm"
    cfg.evolve.llm.base_url = base_url
    cfg.evolve.llm.model = "replay"
    cfg.evolve.llm.api_key = "EMPTY"
    return cfg
