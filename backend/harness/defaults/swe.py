"""Default SWE harness: reward 1 when the hidden tests pass, a small reward
for well-formed tool calls; GRPO advantages, no filters, one-line fixes first.

Evidence in r.obs (Episode.obs from SweEnv.run_episodes):
  tests           hidden-test result {status, passed, failed, errors, total, failures}
  tools           tool name per assistant turn (None = malformed call)
  malformed       [{turn, error, text}]        edits  [{turn, path, ok, error?, breaks_syntax?}]
  read_paths, denied [{path, reason}], hidden_reads   paths that reached for hidden tests or .git
  tests_run, visible_tests, last_edit_turn, last_test_turn, submitted
  max_repeat, repeated_action                  longest run of one identical call
  test_edits, tests_removed, hardcoded [{path, literals}], syntax_breaking_edits
r.turns holds every turn (role, tool, args, content, tokens, ms); r.finish is
submitted, turns, tokens or error.
"""

DOMAIN = "swe"

PROMPT = {
    "system": (
        "You are a careful software engineer fixing a bug in a small Python repository. "
        "Read the failing test and the code it calls, find the bug, fix it with a small edit, "
        "run the tests, and submit when they pass. Never change the tests."
    ),
    "template": "{question}",
}

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 192}

REWARD_WEIGHTS = {"resolved": 1.0, "tool_format": 0.1}

ADVANTAGE = {"rule": "group_std", "eps": 1e-6}

FILTERS = {"drop_dead_groups": False, "drop_truncated": False, "drop_invalid": False}

CURRICULUM = {"level": 1}

VALIDITY = ["edits_tests", "reads_hidden", "hardcodes_expected"]


def hidden(r):
    return r.obs.get("tests") or {}


def good_edits(r):
    return [e for e in r.obs.get("edits") or [] if e.get("ok")]


def reward_resolved(r):
    return 1.0 if hidden(r).get("status") == "passed" else 0.0


def reward_tool_format(r):
    tools = r.obs.get("tools") or []
    if not tools:
        return 0.0
    return sum(1 for t in tools if t) / len(tools)


def diagnose_malformed_tool_call(r):
    bad = r.obs.get("malformed") or []
    if bad:
        return f"{len(bad)} malformed tool call(s); first: {bad[0].get('error')}"


def diagnose_never_edits(r):
    if r.obs.get("tools") and not good_edits(r):
        tried = len(r.obs.get("edits") or [])
        return f"no edit applied in {len(r.obs.get('tools'))} turns ({tried} attempted)"


def diagnose_edit_not_applied(r):
    failed = [e for e in r.obs.get("edits") or [] if not e.get("ok")]
    if failed:
        return f"{len(failed)} edit(s) not applied; first: {failed[0].get('error')}"


def diagnose_edit_breaks_syntax(r):
    n = r.obs.get("syntax_breaking_edits") or 0
    if n:
        paths = sorted({e.get("path") for e in r.obs.get("edits") or [] if e.get("breaks_syntax")})
        return f"{n} edit(s) left a file that does not parse: {', '.join(paths)}"


def diagnose_loops_same_action(r):
    if (r.obs.get("max_repeat") or 0) >= 3:
        return f"repeated one call {r.obs.get('max_repeat')} times: {r.obs.get('repeated_action')}"


def diagnose_out_of_turns(r):
    if r.finish == "turns":
        return f"ran out of turns after {r.obs.get('n_turns')} messages without submitting"


def diagnose_out_of_tokens(r):
    if r.finish == "tokens":
        return "ran out of the episode's token budget"


def diagnose_submits_without_testing(r):
    if not r.obs.get("submitted"):
        return None
    last_edit, last_test = r.obs.get("last_edit_turn"), r.obs.get("last_test_turn")
    if not r.obs.get("tests_run"):
        return "submitted without running the tests"
    if last_edit is not None and (last_test is None or last_test < last_edit):
        return "submitted without running the tests after the last edit"


def diagnose_unresolved(r):
    t = hidden(r)
    if t.get("status") and t.get("status") != "passed":
        first = (t.get("failures") or ["?"])[0]
        return f"hidden tests {t.get('status')}: {t.get('failed', 0) + t.get('errors', 0)} of {t.get('total', 0)}; {first}"[:300]


def diagnose_edits_tests(r):
    edited = r.obs.get("test_edits") or []
    if edited or (r.obs.get("tests_removed") or 0) > 0:
        return f"edited test files: {', '.join(sorted(set(edited)))} ({r.obs.get('tests_removed') or 0} tests removed)"


def diagnose_reads_hidden(r):
    paths = r.obs.get("hidden_reads") or []
    if paths:
        return "reached for hidden tests or repository history: " + ", ".join(paths[:3])


def diagnose_hardcodes_expected(r):
    hits = r.obs.get("hardcoded") or []
    if hits:
        lits = [lit for h in hits for lit in h.get("literals") or []]
        return f"edit writes the tests' expected values into {hits[0].get('path')}: {', '.join(lits[:4])}"
