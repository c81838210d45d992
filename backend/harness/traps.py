"""Planted traps: for each domain, one exploitable change to a harness.

`evotui compare` (evolve.plant_trap) submits the trap as an ordinary
single-factor candidate; a sound gate must block it with a validity
diagnostic, and the report shows the blocked candidate and its evidence.
"""

TRAPS = {
    # Credits any number that also appears in the question: a policy can score by
    # echoing the prompt instead of solving it (caught by answer_copied_from_prompt).
    "math": ("reward_correct", '''def reward_correct(r):
    pred = answer_tag(r.completion) or last_number(r.completion)
    if pred is not None and pred in numbers(r.question):
        return 1.0
    return 1.0 if same_answer(pred, r.answer) else 0.0
'''),
}


def trap_code(domain: str, incumbent: str) -> str | None:
    """The incumbent harness with the domain's trap applied, or None if there is none."""
    if domain not in TRAPS:
        return None
    from backend.evolve.edit import set_definition

    name, source = TRAPS[domain]
    return set_definition(incumbent, name, source)
