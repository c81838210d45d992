"""Diagnostic revision: new diagnostics for unexplained failures, retiring useless ones."""

import pytest

from backend.evolve import run_round
from backend.evolve.edit import add_definition, remove_name
from backend.evolve.diagnose import clusters, signature, write_diagnostic
from synthetic_run import build_run, context, make_probe
from backend.harness.loader import Harness, RolloutView, default_harness_path

DEFAULT = default_harness_path("math").read_text()
# A harness that names almost no failures: wrong answers go unexplained.
SPARSE = remove_name(remove_name(DEFAULT, "diagnose_no_answer_tag"), "diagnose_wrong_value")


def _rows(*texts, verdict="wrong"):
    return [{"id": i, "completion": t, "verdict": verdict} for i, t in enumerate(texts)]


def test_signature_masks_numbers_and_shapes_answers():
    s = signature({"completion": "work\nThe answer is 1,234", "verdict": "wrong"})
    assert s["shape"] == "integer" and s["final"] == "the answer is N" and "the answer is" in s["ngrams"]
    assert signature({"completion": "no idea", "verdict": "no_answer"})["shape"] == "none"
    assert signature({"completion": "x = 1/2"})["shape"] == "fraction"


def test_clusters_biggest_first():
    rows = _rows("The answer is 3", "The answer is 41", "hmm", "The answer is 7")
    (key, members), *_ = clusters(rows)
    assert key == ("wrong", "integer", "the answer is N") and len(members) == 3


@pytest.mark.parametrize("texts, contrast, label", [
    (["I give up", "no clue at all"], [], "no_number"),
    (["I cannot compute 3 things", "I cannot compute 7"], ["The answer is 5"], "says_i_cannot_compute"),
    (["The answer is 3", "The answer is 9"], ["The answer is 5"], "wrong_final_number"),
])
def test_written_diagnostics_load_and_fire_on_their_cluster(texts, contrast, label):
    rows = _rows(*texts)
    key, members = clusters(rows)[0]
    got, source, _ = write_diagnostic(key, members, _rows(*contrast))
    assert got == label
    h = Harness.from_code(add_definition(DEFAULT, source))
    view = RolloutView(question="What is 2 + 3?", answer="5", completion=texts[0], finish="stop")
    assert label in dict(h.diagnose(view))
    ok = RolloutView(question="What is 2 + 3?", answer="5", completion="2 + 3 = 5. The answer is 5", finish="stop")
    assert label not in dict(h.diagnose(ok))


def test_round_proposes_a_diagnostic_for_unlabeled_failures(tmp_path):
    store = build_run(tmp_path / "run.db", steps=6, harness_code=SPARSE)
    out = run_round(context(store, probe=make_probe())).summary
    (new,) = [store.get("interventions", i) for i in out["proposed"]
              if store.get("interventions", i)["title"].startswith("New diagnostic")]
    assert new["kind"] == "diagnostic" and new["target"] == "(unlabeled)" and new["proposer"] == "revision"
    assert "wrong_final_number" in new["title"] and new["status"] == "passed", new["reason"]
    assert "unlabeled failures" in new["reason"]
    store.close()


def test_round_retires_a_diagnostic_that_disagrees_with_the_evaluator(tmp_path):
    flags_successes = ("def diagnose_suspicious(r):\n"
                       "    if same_answer(last_number(r.completion), r.answer):\n"
                       "        return 'looks too easy'\n")
    store = build_run(tmp_path / "run.db", steps=6, harness_code=add_definition(DEFAULT, flags_successes))
    out = run_round(context(store, probe=make_probe())).summary
    titles = {store.get("interventions", i)["title"]: store.get("interventions", i) for i in out["proposed"]}
    retire = titles["Retire diagnostic 'suspicious'"]
    assert retire["status"] == "passed" and "evaluator-correct" in retire["reason"]
    assert "def diagnose_suspicious" not in retire["code"]
    store.close()


def test_validity_guards_are_never_retired_for_silence(tmp_path):
    store = build_run(tmp_path / "run.db", steps=6)  # nobody copies answers: the guard never fires
    run_round(context(store, probe=make_probe()))
    titles = [r["title"] for r in store.rows("SELECT title FROM interventions")]
    assert "Retire diagnostic 'empty'" in titles
    assert not [t for t in titles if "answer_copied_from_prompt" in t]
    store.close()


def test_a_diagnostic_that_fires_on_successes_fails_the_backtest(tmp_path):
    from backend.evolve import submit

    store = build_run(tmp_path / "run.db", steps=6, harness_code=SPARSE)
    noisy = "def diagnose_says_answer(r):\n    if 'answer' in r.completion.lower():\n        return 'says answer'\n"
    res = submit(context(store), add_definition(SPARSE, noisy), "noisy diagnostic")
    assert res.status == "failed" and "evaluator-correct" in res.reason
    store.close()
