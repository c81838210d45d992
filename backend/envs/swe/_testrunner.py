"""A tiny pytest-like runner that runs inside the sandbox (stdlib only).

    python main.py tests [tests/test_x.py ...]      (a secret line on stdin)

Imports every test_*.py under the given paths, calls each top-level test_*
function, and prints one line per failure plus a summary. A failing bare
`assert a == b` is explained with both sides' values. The last line is a
result marker stamped with the secret read from stdin, so code under test
that exits early or prints fake results cannot pass.
"""

import ast
import importlib.util
import json
import os
import sys
import traceback

MARK = "@@evotui-tests@@"


def explain(exc, frame_info):
    """Message for a failed assertion: its own message, or the compared values."""
    if str(exc):
        return str(exc)
    frame, line = frame_info
    if frame is None or not line:
        return "assertion failed"
    try:
        node = ast.parse(line.strip()).body[0]
    except (SyntaxError, IndexError):
        return line.strip()
    if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1:
        try:
            env = dict(frame.f_globals, **frame.f_locals)
            left = eval(compile(ast.Expression(node.test.left), "<assert>", "eval"), env)
            right = eval(compile(ast.Expression(node.test.comparators[0]), "<assert>", "eval"), env)
            return f"{line.strip()}  (left: {left!r:.200}, right: {right!r:.200})"
        except BaseException:
            pass
    return line.strip()


def run_test(name, fn, path):
    try:
        fn()
        return {"test": name, "status": "passed"}
    except AssertionError as e:
        tb = e.__traceback__
        last = (None, None)
        while tb is not None:
            if os.path.abspath(tb.tb_frame.f_code.co_filename) == path:
                last = (tb.tb_frame, _line(path, tb.tb_lineno))
            tb = tb.tb_next
        return {"test": name, "status": "failed", "message": explain(e, last)[:400]}
    except BaseException as e:  # SystemExit and KeyboardInterrupt count as errors too
        where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        at = f" (at {os.path.relpath(where.filename)}:{where.lineno})" if where else ""
        return {"test": name, "status": "error", "message": f"{type(e).__name__}: {e}"[:300] + at}


def _line(path, lineno):
    try:
        with open(path) as f:
            return f.read().splitlines()[lineno - 1]
    except (OSError, IndexError):
        return ""


def collect(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            for root, _dirs, names in sorted(os.walk(p)):
                files += [os.path.join(root, n) for n in sorted(names) if n.startswith("test") and n.endswith(".py")]
        elif os.path.isfile(p):
            files.append(p)
    return files


def main():
    tok = sys.stdin.readline().strip()
    paths = sys.argv[1:] or ["tests"]
    sys.path.insert(0, os.getcwd())
    results = []
    for path in collect(paths):
        rel = os.path.relpath(path)
        spec = importlib.util.spec_from_file_location("t_" + rel.replace("/", "_")[:-3], path)
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
        except BaseException as e:
            results.append({"test": rel, "status": "error", "message": f"import failed: {type(e).__name__}: {e}"[:300]})
            continue
        for name, fn in list(vars(mod).items()):
            if name.startswith("test") and callable(fn) and getattr(fn, "__module__", "") == mod.__name__:
                results.append(run_test(f"{rel}::{name}", fn, os.path.abspath(path)))
    counts = {s: sum(r["status"] == s for r in results) for s in ("passed", "failed", "error")}
    for r in results:
        if r["status"] != "passed":
            print(f"{r['status'].upper()} {r['test']}: {r.get('message', '')}")
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['error']} errors")
    sys.stdout.flush()
    print(MARK + tok + json.dumps({"results": results, **counts}), flush=True)


if __name__ == "__main__":
    main()
