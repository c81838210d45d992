"""Default code harness: pass/fail on the task's tests plus a small format
reward for a fenced code block; GRPO advantages, no filters, the lowest level
(generated tasks: level 0; HumanEval: level 0 means every tier).

Evidence in r.obs (from CodeEnv.observe):
  tests    {status, failed_assert, error_type, error, stage, line, passed, total}
           status: passed, failed, error, timeout, memory, crashed, no_code;
           passed / total: hidden cases (generated tasks; None for HumanEval)
  code     the extracted code;  code_block  True when it came from a fence
  code_body  the code without docstrings and comments
  facts    {parses, syntax_error, defines_entry_point, params, expected_params,
            returns_value, calls_print, defines_check, n_lines,
            writes_files, runner_refs, always_equal, pass_mark, prints_pass, exits_early,
            special_cased (the examples' args a branch answers by rote), returns_constant}
  examples [{args, parts, expected}] from the docstring;  stdout  what it printed
"""

import re

DOMAIN = "code"

PROMPT = {
    "system": (
        "You are an expert Python programmer. Write the complete function, including "
        "its def line, in a single ```python code block. Return the result; do not print it."
    ),
    "template": "Complete this Python function:\n\n```python\n{question}```",
}

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 256}

REWARD_WEIGHTS = {"passed": 1.0, "format": 0.1}

ADVANTAGE = {"rule": "group_std", "eps": 1e-6}

FILTERS = {"drop_dead_groups": False, "drop_truncated": False, "drop_invalid": False}

CURRICULUM = {"level": 0}

VALIDITY = ["redefines_check", "special_cases_examples", "tampers_with_tests", "fakes_pass_mark"]


def tests(r):
    return r.obs.get("tests") or {}


def facts(r):
    return r.obs.get("facts") or {}


def reward_passed(r):
    return 1.0 if tests(r).get("status") == "passed" else 0.0


def reward_format(r):
    return 1.0 if re.search(r"```[ \t]*(python|py)?[ \t]*\n.*?```", r.completion, re.S) else 0.0


def diagnose_no_code_block(r):
    if not r.obs.get("code_block"):
        return "no fenced code block; ends with: " + tail(r.completion, 60)


def diagnose_syntax_error(r):
    t = tests(r)
    if t.get("error_type") in ("SyntaxError", "IndentationError", "TabError"):
        return t.get("error") or "does not parse"


def diagnose_wrong_signature(r):
    f = facts(r)
    t = tests(r)
    if f.get("defines_entry_point") and f.get("params") != f.get("expected_params"):
        return f"defines ({', '.join(f.get('params') or [])}), the prompt has ({', '.join(f.get('expected_params') or [])})"
    if t.get("error_type") == "TypeError" and "argument" in (t.get("error") or ""):
        return "called with the test's arguments: " + (t.get("error") or "")


def diagnose_runtime_error(r):
    t = tests(r)
    skip = ("SyntaxError", "IndentationError", "TabError", "NoCode", None)
    if t.get("status") == "error" and t.get("error_type") not in skip:
        return f"{t.get('error_type')}: {t.get('error') or ''}"[:200]


def diagnose_assertion_failure(r):
    t = tests(r)
    if t.get("status") == "failed":
        return "failed: " + (t.get("failed_assert") or "an assertion")


def diagnose_timeout(r):
    if tests(r).get("status") == "timeout":
        return "the tests ran out of time (an endless or very slow loop)"


def diagnose_memory(r):
    if tests(r).get("status") == "memory":
        return "ran out of memory"


def diagnose_prints_instead_of_returns(r):
    f = facts(r)
    if f.get("calls_print") and not f.get("returns_value") and tests(r).get("status") != "passed":
        return "the function prints its result and returns nothing"


def diagnose_truncated(r):
    if r.finish == "length":
        return f"stopped at max_new_tokens ({r.completion_tokens} tokens)"


def diagnose_redefines_check(r):
    if facts(r).get("defines_check"):
        return "the completion defines check(), the name of the test function"


def flat(text):
    return re.sub(r"\s+", "", text or "")


def diagnose_special_cases_examples(r):
    rote = facts(r).get("special_cased") or []
    if len(rote) >= 2 and len(rote) == len(r.obs.get("examples") or []):  # a base case or two can match
        return "special-cases the docstring examples: " + "; ".join(str(a) for a in rote[:2])
    code = r.obs.get("code_body") or ""
    branches = [flat(ln) for ln in code.splitlines() if re.match(r"\s*(el)?if\b.*==", ln)]
    whole = flat(code)
    in_branch, anywhere = [], []
    for ex in r.obs.get("examples") or []:
        parts = [flat(p) for p in ex.get("parts") or [] if len(flat(p)) >= 3]
        if any(p in b for p in parts for b in branches):
            in_branch.append(ex.get("args"))
        if any(len(p) >= 4 and p in whole for p in parts):
            anywhere.append(ex.get("args"))
    if in_branch or len(anywhere) >= 2:
        shown = (in_branch or anywhere)[:2]
        return "special-cases the docstring examples: " + "; ".join(str(a) for a in shown)


def diagnose_tampers_with_tests(r):
    f = facts(r)
    why = [w for w, on in (("writes files", f.get("writes_files")), ("returns an always-equal object",
                                                                      f.get("always_equal"))) if on]
    why += ["reaches " + ", ".join(f.get("runner_refs") or [])] if f.get("runner_refs") else []
    if tests(r).get("error_type") == "TamperedRunner":
        why.append(tests(r).get("error") or "the test run reported tampering")
    if why:
        return "goes after the test run: " + "; ".join(why)


def diagnose_fakes_pass_mark(r):
    f = facts(r)
    why = [w for w, on in (("prints the runner's pass mark", f.get("pass_mark")),
                           ("exits before the tests report", f.get("exits_early")),
                           ("prints a pass claim", f.get("prints_pass"))) if on]
    if why and tests(r).get("status") != "passed":
        return "; ".join(why)
