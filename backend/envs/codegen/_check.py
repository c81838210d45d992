"""The hidden-test runner of a generated code task: the head of every task's test.py.

Not imported by the engine: `build.py` reads this file as text and appends
`check = make_check([...cases...])`, and the task's driver runs it in the
sandbox after the solution. Everything the check relies on lives in its own
closure, so a solution that rebinds module globals (the case list, a helper)
changes nothing; values compare by exact type, so an object whose `__eq__`
always says yes does not pass. The driver, not this file, notices a solution
that patched builtins.
"""

import copy as _copy


def make_check(cases):
    cases = _copy.deepcopy(cases)
    deepcopy, kinds = _copy.deepcopy, (list, tuple)

    def same(got, want):
        if type(got) is not type(want):
            return False
        if isinstance(want, kinds):
            return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
        if isinstance(want, dict):
            return got.keys() == want.keys() and all(same(got[k], want[k]) for k in want)
        return got == want

    def check(candidate):
        """Run every case; return {"passed", "total", "first_failure"} (never raises for a wrong answer)."""
        passed, first = 0, None
        for call, args, want in cases:
            try:
                got = candidate(*deepcopy(args))
                ok = same(got, want)
                why = None if ok else f"{call} returned {got!r:.80}, expected {want!r:.80}"
            except Exception as e:  # a case that raises is a failed case, not the end of the run
                ok, why = False, f"{call} raised {type(e).__name__}: {str(e)[:80]}"
            passed += ok
            if first is None and not ok:
                first = why
        return {"passed": passed, "total": len(cases), "first_failure": first}

    return check
