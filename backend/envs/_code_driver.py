"""The test driver of the code domain: runs inside the sandbox, never imported.

`backend/envs/code.py` sends this file's text as the sandbox's main program,
with `solution.py` and `test.py` beside it and the entry point's name as its
argument. It executes the solution, then the test file in the same namespace,
then `check(candidate)`, and prints one result line stamped with the per-run
secret it reads from stdin, so `sys.exit(0)` or a printed fake result cannot
pass. A generated task's check returns how many cases passed; HumanEval's
raises on the first failing assert. A solution that rebinds a builtin (the
names the check itself calls) is reported as tampering, whatever the check said.
"""
import builtins
import json
import sys
import traceback

FILES = ("solution.py", "test.py")


_set, _sorted = set, sorted  # bound before any solution runs


def _restore(before):
    """Put builtins back as they were; return the names the solution changed."""
    now = vars(builtins)
    changed = _sorted(k for k in _set(before) | _set(now) if before.get(k) is not now.get(k))[:5]
    now.clear()
    now.update(before)
    return changed


def _failure(res, e):
    frames = traceback.extract_tb(e.__traceback__)
    where = [f for f in frames if f.filename in FILES]
    last = where[-1] if where else None
    in_test = last is not None and last.filename == "test.py"
    status = ("failed" if isinstance(e, AssertionError) and in_test else
              "memory" if isinstance(e, MemoryError) else "error")
    return dict(res, status=status, error_type=type(e).__name__, error=str(e)[:300],
                failed_assert=last.line if status == "failed" else None,
                line=(last.filename + ":" + str(last.lineno)) if last else None)


def _counted(res, out):
    """The result of a check that counts its cases."""
    passed, total = out.get("passed"), out.get("total")
    res.update(passed=passed, total=total)
    if passed == total:
        return dict(res, status="passed")
    return dict(res, status="failed", error_type="AssertionError", failed_assert=out.get("first_failure"),
                error=f"{total - passed} of {total} hidden tests failed")


def _attempt(entry, src, test):
    ns = {"__name__": "solution"}
    res = {"stage": "load"}
    try:
        exec(compile(src, "solution.py", "exec"), ns)
        res["stage"] = "test"
        exec(compile(test, "test.py", "exec"), ns)
        cand, check = ns.get(entry), ns.get("check")
        if not callable(cand):
            return dict(res, status="error", error_type="NameError", error=f"{entry} is not defined"), None
        res["stage"] = "check"
        out = check(cand)
        return res, out
    except BaseException as e:
        return _failure(res, e), None


def _run(entry):
    src, test = (open(f).read() for f in FILES)  # read before the solution can touch them
    before = dict(vars(builtins))
    try:
        res, out = _attempt(entry, src, test)
    finally:
        changed = _restore(before)
    if changed:
        return dict(res, status="error", error_type="TamperedRunner",
                    error="the solution rebound builtins: " + ", ".join(changed))
    if "status" in res:
        return res
    return _counted(res, out) if type(out) is dict else dict(res, status="passed")


def _main():
    tok = sys.stdin.readline().strip()  # a local, never a module global the solution can import
    res = _run(sys.argv.pop(1))
    sys.stdout.flush()
    print("\n" + "@@evotui-result@@" + tok + json.dumps(res), flush=True)


if __name__ == "__main__":
    _main()
