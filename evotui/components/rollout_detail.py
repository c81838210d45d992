"""One rollout in full: prompt, completion, rewards, verdict, labels with evidence, group, turns."""

from __future__ import annotations

import json

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from evotui.components.code_view import highlighted, language_for
from evotui.components.status_bar import fmt

TURN_LINES = 12


class RolloutDetail(VerticalScroll):
    """Empty until `show(detail)` gets a `views.rollout_detail` dict."""

    DEFAULT_CSS = """
    RolloutDetail { padding: 0 1; }
    RolloutDetail Static { height: auto; }
    RolloutDetail .section { color: $text-accent; text-style: bold; margin-top: 1; }
    RolloutDetail .body { padding-left: 1; }
    """

    def compose(self) -> ComposeResult:
        yield Static("Select a rollout.", id="d-head")
        for key, title in (("labels", "Labels"), ("prompt", "Prompt"), ("completion", "Completion"),
                           ("turns", "Turns"), ("group", "Group")):
            yield Static(title, id=f"t-{key}", classes="section")
            yield Static("", id=f"d-{key}", classes="body")

    def show_message(self, text: str) -> None:
        self._set("head", Content(text))
        for key in ("labels", "prompt", "completion", "turns", "group"):
            self._set(key, None)

    def show(self, detail: dict | None) -> None:
        if detail is None:
            self.show_message("Rollout not found.")
            return
        r = detail["rollout"]
        lang = language_for(r.get("domain"), r.get("completion") or "")
        self._set("head", head(r, detail["rewards"], detail["verdict"]))
        self._set("labels", labels(detail["diagnoses"]))
        self._set("prompt", Content(r.get("prompt") or ""))
        self._set("completion", highlighted(r.get("completion") or "", lang, line_numbers=False)
                  if (r.get("completion") or "").strip() else Content.styled("(empty)", "$text-muted"))
        self._set("turns", turns(detail["turns"]) if detail["turns"] else None)
        self._set("group", group(detail["group"], r["id"]))
        self.scroll_home(animate=False)

    def _set(self, key: str, content: Content | None) -> None:
        self.query_one(f"#d-{key}", Static).update(content or "")
        for sel in (f"#d-{key}", f"#t-{key}"):
            for w in self.query(sel):
                w.display = content is not None


def head(r: dict, rewards: dict, verdict: dict) -> Content:
    ok = "$text-success" if r.get("correct") else "$text-error"
    comps = " · ".join(f"{k} {fmt(v, '.2f')}" for k, v in rewards.items())
    lines = [
        Content.assemble(Content.styled(f"rollout {r['id']}", "bold"),
                         f"  step {r['step']} · {r.get('domain')} · task {r.get('task_id')} · "
                         f"group {r.get('group_idx')} #{r.get('idx')}"),
        Content(f"harness v{r.get('harness_version')} · policy v{r.get('policy_version')} · finish "
                f"{r.get('finish')} · {r.get('completion_tokens')} tokens · {fmt(r.get('gen_ms'), '.0f')} ms"),
        Content.assemble("verdict ", Content.styled(str(r.get("verdict")), f"bold {ok}"),
                         f" (score {fmt(r.get('verdict_score'), '.2f')})  reward ",
                         Content.styled(fmt(r.get("reward")), "bold"), f"  = {comps}" if comps else ""),
    ]
    detail = verdict.get("detail")
    if detail:
        lines.append(Content.styled("evaluator: " + json.dumps(detail)[:200], "$text-muted"))
    if r.get("status") not in (None, "ok") or r.get("error"):
        lines.append(Content.styled(f"status {r.get('status')}: {r.get('error') or ''}", "$text-error"))
    return Content("\n").join(lines)


def labels(diagnoses: list[dict]) -> Content:
    if not diagnoses:
        return Content.styled("no failure label", "$text-muted")
    rows = []
    for d in diagnoses:
        tag = Content.styled(" invalid", "bold $text-error") if d.get("validity") else Content("")
        rows.append(Content.assemble(Content.styled(f"● {d['label']}", "bold $text-warning"), tag,
                                     Content.styled(f"  {d.get('evidence') or ''}", "$text-muted")))
    return Content("\n").join(rows)


def turns(rows: list[dict]) -> Content:
    out = []
    for t in rows:
        args = t.get("args_json") or ""
        args = "" if args in ("{}", "null") else " " + args
        out.append(Content.assemble(Content.styled(f"#{t['turn']} {t.get('role') or ''} ", "bold"),
                                    Content.styled(f"{t.get('tool') or ''}{args}", "$text-accent"),
                                    Content.styled(f"  {t.get('tokens') or 0} tok · {fmt(t.get('ms'), '.0f')} ms",
                                                   "$text-muted")))
        body = (t.get("content") or "").splitlines()
        more = [f"… {len(body) - TURN_LINES} more lines"] if len(body) > TURN_LINES else []
        out.extend(Content("   " + line) for line in body[:TURN_LINES] + more)
    return Content("\n").join(out)


def group(rows: list[dict], current: int) -> Content:
    out = []
    for g in rows:
        mark = "▶" if g["id"] == current else " "
        style = "bold" if g["id"] == current else ""
        out.append(Content.styled(f"{mark} #{g['idx']} id {g['id']:<6} reward {fmt(g['reward'])}  "
                                  f"{g.get('verdict') or '':<8} {g.get('labels') or ''}", style))
    return Content("\n").join(out)
