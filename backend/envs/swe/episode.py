"""Driving a batch of multi-turn SWE episodes through the policy.

Token stream of one episode (what the trainer sees after the prompt ids):

    [assistant ids as sampled]            mask 1   (never re-tokenized)
    [rest of the end-of-turn tokens]      mask 0   (e.g. "\\n" after <|im_end|>)
    [tool message + next assistant header] mask 0
    ... repeated per turn

The tool message ids are a difference of chat templates over the same
history: chat_ids(history + [assistant, tool], add_generation_prompt=True)
minus chat_ids(history + [assistant], False). The end-of-turn tokens are
chat_ids(history + [empty assistant], False) minus chat_ids(history, True);
whatever of them the policy already produced (its eos) is not added again.
So the ids a later turn is conditioned on are exactly the ids stored here.
When a template rewrites earlier turns (the prefix check fails) the
difference is taken after the common prefix and `obs["template_mismatch"]`
counts it.
"""

from __future__ import annotations

import time

from ...errors import EvoError
from ..base import Episode
from . import repos
from .tools import TOOLS_DOC, Workspace, parse_call


def _overlap(ids: list[int], closing: list[int]) -> int:
    for k in range(min(len(ids), len(closing)), 0, -1):
        if ids[-k:] == closing[:k]:
            return k
    return 0


def _suffix(longer: list[int], prefix: list[int]) -> tuple[list[int], bool]:
    if longer[:len(prefix)] == prefix:
        return longer[len(prefix):], True
    n = 0
    while n < min(len(longer), len(prefix)) and longer[n] == prefix[n]:
        n += 1
    return longer[n:], False


def escape_result(text: str) -> str:
    """Tool output inside the readable transcript cannot forge tool calls."""
    return text.replace("<tool", "<tool\u200b").replace("</tool", "</tool\u200b")


class Run:
    """One episode in progress."""

    def __init__(self, task, ws: Workspace, messages: list[dict], chat_ids, cfg):
        self.task, self.ws, self.msgs, self.chat_ids, self.cfg = task, ws, list(messages), chat_ids, cfg
        self.context = list(chat_ids(self.msgs, True))
        # end-of-turn tokens the template adds after a message: reserved in every budget
        self.closing_len = len(_suffix(chat_ids(self.msgs + [{"role": "assistant", "content": ""}], False),
                                       self.context)[0])
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.turns: list[dict] = []
        self.text: list[str] = []
        self.finish: str | None = None
        self.error: str | None = None
        self.mismatch = 0
        self.pending: tuple[str, dict, list[str]] | None = None
        self.result: tuple[str, str | None, dict, float] | None = None

    @property
    def done(self) -> bool:
        return self.finish is not None

    def budget(self, per_turn: int) -> int:
        return min(per_turn, self.cfg.max_episode_tokens - len(self.ids) - self.closing_len)

    def _extend(self, ids: list[int], m: int) -> None:
        self.ids += ids
        self.mask += [m] * len(ids)
        self.context += ids

    def assistant(self, gen, turn: int, ms: float) -> None:
        """Take the policy's message: store its ids, run its tool call (tests wait)."""
        closing, ok = _suffix(self.chat_ids(self.msgs + [{"role": "assistant", "content": ""}], False),
                              self.chat_ids(self.msgs, True))
        self.mismatch += not ok
        self._extend(list(gen.ids), 1)
        self._extend(closing[_overlap(list(gen.ids), closing):], 0)
        self.msgs.append({"role": "assistant", "content": gen.text})
        self.text.append(gen.text)
        name, args, err = parse_call(gen.text)
        self.ws.note_call(turn, name, args, err, gen.text)
        self.turns.append({"role": "assistant", "content": gen.text, "tokens": len(gen.ids), "ms": round(ms),
                           "finish": gen.finish, "tool": name, "args": args, "error": err})
        t0 = time.monotonic()
        if err:
            hint = " (the message was cut off at the token limit)" if gen.finish == "length" else ""
            self.result = ("invalid", f"Invalid tool call: {err}{hint}.\n{TOOLS_DOC}", {}, t0)
        elif name == "submit":
            self.ws.ev["submitted"] = True
            self.finish = "submitted"
        elif name == "run_tests":
            targets, terr = self.ws.test_targets(args)
            if terr:
                self.result = (name, terr, args, t0)
            else:
                self.pending = (name, args, targets)
        else:
            out = self.ws.edit(args, turn) if name == "edit" else getattr(self.ws, name)(args)
            self.result = (name, out, args, t0)

    def tests_done(self, turn: int, run: repos.SuiteRun, t0: float) -> None:
        name, args, _ = self.pending
        self.pending = None
        self.ws.note_tests(turn, run.summary())
        body = run.output if run.status in ("passed", "failed") else f"test run {run.status}\n{run.output}"
        self.result = (name, self.ws._cut(body.strip()), args, t0)

    def tool_message(self, last_turn: bool) -> None:
        """Append the tool's answer; its ids only if the policy will see them."""
        name, content, args, t0 = self.result
        self.result = None
        role = self.cfg.tool_role
        msg = {"role": role, "content": f"[{name}]\n{content}"}
        rec = {"role": "tool", "tool": None if name == "invalid" else name, "args": args, "content": content,
               "tokens": 0, "ms": round((time.monotonic() - t0) * 1000)}
        self.turns.append(rec)
        self.text.append(f"<tool_result name={name}>\n{escape_result(content)}\n</tool_result>")
        if last_turn:
            self.finish = "turns"
            return
        before = self.chat_ids(self.msgs, False)
        self.msgs.append(msg)
        inter, ok = _suffix(self.chat_ids(self.msgs, True), before)
        self.mismatch += not ok
        if len(self.ids) + len(inter) + self.cfg.min_turn_tokens > self.cfg.max_episode_tokens:
            self.finish = "tokens"
            return
        rec["tokens"] = len(inter)
        self._extend(inter, 0)

    def episode(self) -> Episode:
        obs = dict(self.ws.ev, n_turns=sum(t["role"] == "assistant" for t in self.turns),
                   template_mismatch=self.mismatch, error=self.error)
        return Episode("\n".join(self.text), self.ids, self.mask, self.finish or "error", self.turns, obs)


def drive(runs: list[Run], generate, sampling: dict, cfg, test_timeout_s: float, memory_mb: int) -> None:
    """Run every episode to its end: batched generation per turn, batched tests."""
    per_turn = max(1, min(int(sampling.get("max_new_tokens", cfg.max_tokens_per_turn)), cfg.max_tokens_per_turn))
    temperature, top_p = float(sampling.get("temperature", 1.0)), float(sampling.get("top_p", 1.0))
    for turn in range(cfg.max_turns):
        active = [r for r in runs if not r.done]
        groups: dict[int, list[Run]] = {}
        for r in active:
            b = r.budget(per_turn)
            if b < cfg.min_turn_tokens:
                r.finish = "tokens"
            else:
                groups.setdefault(b, []).append(r)
        for budget, group in groups.items():
            t0 = time.monotonic()
            try:
                gens = generate([r.context for r in group], budget, temperature, top_p)
                if len(gens) != len(group):
                    raise ValueError(f"{len(gens)} generations for {len(group)} prompts")
            except EvoError:  # the run stops (no GPU memory left even at batch 1): not an episode's fault
                raise
            except Exception as e:  # the batch is lost, the episodes are data
                for r in group:
                    r.finish, r.error = "error", f"generate failed: {type(e).__name__}: {e}"[:300]
                continue
            ms = (time.monotonic() - t0) * 1000
            for r, g in zip(group, gens):
                try:
                    r.assistant(g, turn, ms)
                except Exception as e:
                    r.finish, r.error = "error", f"{type(e).__name__}: {e}"[:300]
        waiting = [r for r in runs if not r.done and r.pending]
        t0 = time.monotonic()
        batch = [(r.ws.files, r.pending[2]) for r in waiting]
        for r, res in zip(waiting, repos.run_tests_many(batch, test_timeout_s, memory_mb)):
            r.tests_done(turn, res, t0)
        for r in runs:
            if not r.done and r.result is not None:
                try:
                    r.tool_message(last_turn=turn == cfg.max_turns - 1)
                except Exception as e:
                    r.finish, r.error = "error", f"{type(e).__name__}: {e}"[:300]
    for r in runs:
        if not r.done:
            r.finish = "turns"
