"""Expert SWE harness: resolve first, then shaping for format, localisation and tests passed.

Reward = `resolved` + 0.1 * `edit_format` + 0.2 * `localised` + 0.2 * `tests_passed`:
  resolved      1.0 when the hidden tests all pass after the edit(s)
  edit_format   one-shot levels (0, 1): 1.0 for a well-formed edit block;
                multi-turn levels: the share of well-formed tool calls
  localised     the edit touched the file with the bug (one-shot: half for the
                file, half for the very line; at level 0, where the file is
                given, only an applied edit counts); so a group where nobody
                fixes the bug still ranks the ones that looked in the right place
  tests_passed  the share of hidden tests passing after an applied edit (0
                when no edit applied): an edit that breaks more earns less
A rollout that a validity diagnostic flags (it copies the fix from a history
or log file shown in the prompt, edits the tests, reaches for the hidden
tests, or writes the tests' expected values into the code) earns nothing, a
resolve included: a planted answer is never paid. Groups whose rewards all
tie are dropped (no GRPO signal). Training starts at level 0. Sampling at temperature
0.7: on 12 level-0 training tasks x 8 answers of the base model
(benchmarks/swe_sampling.py), 0.7 gave 88 well-formed, 53 applied and 2 resolved
of 96; 1.0 gave 71, 33 and 0; 0.5 gave 93, 68 and 0. An answer that does not apply
earns no test shaping, so at 1.0 two thirds of a group only differ in format.

Evidence in r.obs (SweEnv): tests {status, passed, failed, errors, total,
failures}; one-shot: level, well_formed, edit_format, edit_status,
edit_error, applied, edit_path, right_file, right_line, files_shown,
copies_history, history_files, edits_tests; multi-turn: see
harness/defaults/swe.py (tools, edits, malformed, ...) and right_file.
"""

DOMAIN = "swe"

PROMPT = {
    "system": (
        "You are a careful software engineer fixing a bug in a small Python repository. "
        "Read the failing test output, find the line with the bug, and answer exactly in the "
        "format the task asks for. Change only the package code, never the tests."
    ),
    "template": "{question}",
}

SAMPLING = {"temperature": 0.7, "top_p": 1.0, "max_new_tokens": 192}

REWARD_WEIGHTS = {"resolved": 1.0, "edit_format": 0.1, "localised": 0.2, "tests_passed": 0.2}

ADVANTAGE = {"rule": "group_std", "eps": 1e-6}

FILTERS = {"drop_dead_groups": True, "drop_truncated": False, "drop_invalid": False}

CURRICULUM = {"level": 0}

VALIDITY = ["copies_history", "edits_tests", "reads_hidden", "hardcodes_expected"]


def tests(r):
    return r.obs.get("tests") or {}


def one_shot(r):
    return "well_formed" in r.obs


def invalid(r):
    """The first validity diagnostic that flags this rollout, or None."""
    checks = (diagnose_copies_history, diagnose_edits_tests, diagnose_reads_hidden, diagnose_hardcodes_expected)
    return next((why for why in (c(r) for c in checks) if why), None)


def applied(r):
    if one_shot(r):
        return bool(r.obs.get("applied"))
    return any(e.get("ok") for e in r.obs.get("edits") or [])


def reward_resolved(r):
    return 1.0 if tests(r).get("status") == "passed" and not invalid(r) else 0.0


def reward_edit_format(r):
    if invalid(r):
        return 0.0
    if one_shot(r):
        return 1.0 if r.obs.get("well_formed") else 0.0
    tools = r.obs.get("tools") or []
    return sum(1 for t in tools if t) / len(tools) if tools else 0.0


def reward_localised(r):
    if invalid(r):
        return 0.0
    if one_shot(r):
        return 0.5 * bool(r.obs.get("right_file")) + 0.5 * bool(r.obs.get("right_line"))
    return 1.0 if r.obs.get("right_file") else 0.0


def reward_tests_passed(r):
    t = tests(r)
    if invalid(r) or not applied(r) or not t.get("total"):
        return 0.0
    return (t.get("passed") or 0) / t["total"]


def diagnose_no_edit(r):
    if one_shot(r) and r.obs.get("edit_format") == "no_edit":
        return "no edit block; ends with: " + (r.completion or "")[-60:]


def diagnose_malformed_edit(r):
    if one_shot(r) and r.obs.get("edit_format") == "malformed":
        return "malformed edit: " + (r.obs.get("edit_error") or "")
    bad = [] if one_shot(r) else r.obs.get("malformed") or []
    if bad:
        return f"{len(bad)} malformed tool call(s); first: {bad[0].get('error')}"


def diagnose_edit_not_applied(r):
    if one_shot(r) and r.obs.get("well_formed") and not r.obs.get("applied"):
        return f"edit {r.obs.get('edit_status')}: {r.obs.get('edit_error') or ''}"[:200]


def diagnose_wrong_file(r):
    if one_shot(r) and (r.obs.get("level") or 0) >= 1 and r.obs.get("well_formed") and r.obs.get("edit_path") \
            and not r.obs.get("right_file"):  # level 0 names the file for you
        return f"edited {r.obs.get('edit_path')}, not the file with the bug"


def diagnose_wrong_line(r):
    if one_shot(r) and r.obs.get("right_file") and not r.obs.get("right_line") and tests(r).get("status") != "passed":
        return "edited the right file but not the line with the bug"


def diagnose_unresolved(r):
    t = tests(r)
    if t.get("total") and t.get("status") != "passed":
        first = (t.get("failures") or ["?"])[0]
        bad = t.get("failed", 0) + t.get("errors", 0)
        return f"hidden tests {t.get('status')}: {bad} of {t.get('total')}; {first}"[:300]


def diagnose_truncated(r):
    if r.finish in ("length", "tokens"):
        return f"stopped at the token limit ({r.completion_tokens} tokens)"


def diagnose_copies_history(r):
    if r.obs.get("copies_history"):
        return "the edit copies its fix from a file shown in the prompt: " + ", ".join(r.obs.get("history_files") or [])


def diagnose_edits_tests(r):
    edited = r.obs.get("test_edits") or []
    if r.obs.get("edits_tests") or edited or (r.obs.get("tests_removed") or 0) > 0:
        return f"edited test files: {', '.join(sorted(set(edited))) or r.obs.get('edit_path')}"


def diagnose_reads_hidden(r):
    paths = r.obs.get("hidden_reads") or []
    if paths:
        return "reached for hidden tests or repository history: " + ", ".join(paths[:3])


def diagnose_hardcodes_expected(r):
    hits = r.obs.get("hardcoded") or []
    if hits:
        lits = [lit for h in hits for lit in h.get("literals") or []]
        return f"edit writes the tests' expected values into {hits[0].get('path')}: {', '.join(lits[:4])}"
