"""harness.py is the active version; a hand edit found there is kept as harness.draft.py (run_file)."""

from __future__ import annotations

from backend.harness import run_file

V1 = "REWARD_WEIGHTS = {'correct': 1.0}\n"
V2 = "REWARD_WEIGHTS = {'correct': 1.0, 'format': 0.1}\n"
EDIT = V1 + "FILTERS = {'drop_truncated': True}\n"


def stored(*codes):
    return lambda code: code in codes


def test_the_active_version_is_written(tmp_path):
    assert run_file.write_active(tmp_path, V1, stored(V1)) is None
    assert (tmp_path / "harness.py").read_text() == V1
    assert not (tmp_path / "harness.draft.py").exists()


def test_a_hand_edit_moves_to_the_draft_and_harness_py_is_active_again(tmp_path):
    (tmp_path / "harness.py").write_text(EDIT)
    kept = run_file.write_active(tmp_path, V1, stored(V1))
    assert kept == tmp_path / "harness.draft.py" and kept.read_text() == EDIT
    assert (tmp_path / "harness.py").read_text() == V1
    assert run_file.write_active(tmp_path, V1, stored(V1)) is None  # nothing new: the draft stays
    assert kept.read_text() == EDIT


def test_an_older_stored_version_is_replaced_without_a_draft(tmp_path):
    (tmp_path / "harness.py").write_text(V1)  # e.g. before a promotion to v2
    assert run_file.write_active(tmp_path, V2, stored(V1, V2)) is None
    assert (tmp_path / "harness.py").read_text() == V2 and not (tmp_path / "harness.draft.py").exists()


def test_a_promoted_draft_is_done(tmp_path):
    run_file.save_draft(tmp_path, EDIT)
    (tmp_path / "harness.py").write_text(V1)
    run_file.write_active(tmp_path, EDIT, stored(V1, EDIT))  # the edit became the active version
    assert (tmp_path / "harness.py").read_text() == EDIT and not (tmp_path / "harness.draft.py").exists()


def test_editing_starts_from_the_draft_or_the_active_version(tmp_path):
    (tmp_path / "harness.py").write_text(V1)
    path = run_file.start_draft(tmp_path)
    assert path.read_text() == V1
    path.write_text(EDIT)
    assert run_file.start_draft(tmp_path).read_text() == EDIT  # work in progress is never reset
