"""CPU starting math harness: the default recipe, sized for a first run on a CPU.

The reward, extraction, format term, advantage rule, filters and diagnostics are the default
harness's (`math.py`): correctness is paid only on the content of an <answer> tag, plus a small
format reward. Three settings differ, so that SmolLM2-135M on a CPU produces some answers the
evaluator calls correct within a few steps (without them no group can come alive, whatever the
harness pays):

- the easiest curriculum level (two one-digit terms); the held-out sets stay at level 1;
- a short-working prompt that asks for only the number (one of the PROMPT.system knob's choices)
  and repeats the request after the question;
- temperature 0.7 and 48 new tokens: at 1.0 the model rambles past the budget.

Measured on training-seed tasks (never the held-out sets), base model, 12 tasks x 8 samples:
the default prompt at temperature 1.0 and 64 tokens 1 of 96 correct by the evaluator; this
harness's settings 8 of 96, 4 of 12 groups with both verdicts, and 5 of 96 closed a tag. The
tag-only reward still sees almost none of them (`no_answer_tag`), which is the failure the first
evolution round diagnoses (docs/results/cpu-first-run/).
"""

import re

DOMAIN = "math"

PROMPT = {
    "system": (
        "Compute the result. Keep the working short, then write only the number inside "
        "<answer></answer>, for example <answer>-7</answer>."
    ),
    "template": "{question}\nWrite only the number inside <answer></answer>.",
}

SAMPLING = {"temperature": 0.7, "top_p": 1.0, "max_new_tokens": 48}

REWARD_WEIGHTS = {"correct": 1.0, "format": 0.1}

ADVANTAGE = {"rule": "group_std", "eps": 1e-6}

FILTERS = {"drop_dead_groups": False, "drop_truncated": False, "drop_invalid": False}

CURRICULUM = {"datasets": {"basic_arithmetic": 1.0, "chain_sum": 1.0}, "level": 0}

VALIDITY = ["answer_copied_from_prompt", "expression_echo", "hedged_answer"]


def extract_answer(r):
    return answer_tag(r.completion)


def reward_correct(r):
    return 1.0 if same_answer(extract_answer(r), r.answer) else 0.0


def reward_format(r):
    return 1.0 if re.search(r"<answer>.*?</answer>", r.completion, re.S) else 0.0


def diagnose_empty(r):
    if not r.completion.strip():
        return "empty completion"


def diagnose_no_answer_tag(r):
    if r.completion.strip() and "<answer>" not in r.completion.lower():
        return "no <answer> tag; ends with: " + tail(r.completion, 60)


def diagnose_truncated(r):
    if r.finish == "length":
        return f"stopped at max_new_tokens ({r.completion_tokens} tokens)"


def diagnose_repetition(r):
    share = repeated_ngram_share(r.completion, 4)
    if share > 0.3:
        return f"{share:.0%} of 4-grams repeat"


def diagnose_wrong_value(r):
    pred = extract_answer(r)
    if pred is not None and not same_answer(pred, r.answer):
        return f"answered {pred!r}, expected {r.answer!r}"


def diagnose_answer_copied_from_prompt(r):
    pred = extract_answer(r) or last_number(r.completion)
    if pred is not None and pred in numbers(r.question) and not same_answer(pred, r.answer):
        return f"answer {pred!r} is copied from the prompt"


def diagnose_expression_echo(r):
    text = extract_answer(r) or final_answer(r.completion)
    if is_expression_echo(r.question, text):
        return f"answer {text.strip()[:60]!r} is the question's expression, not its value"


def diagnose_hedged_answer(r):
    if is_hedged(r.completion):
        return "several candidate answers; final answer: " + (final_answer(r.completion) or "")[:60]
