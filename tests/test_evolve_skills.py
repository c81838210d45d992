"""The skill library: cards from helpful promotions, retrieval, export/import, shell ops."""

import json

import pytest

from backend.config import RunConfig
from backend.evolve import after_eval, offline, promote, run_round, schedule
from backend.evolve import skill_commands
from backend.evolve.skills import SkillError, global_library, retrieve
from synthetic_run import add_eval, build_run, context, make_probe, outcomes
from backend.store import loads


def learn_lenient(path, cfg: RunConfig | None = None):
    """A run that promoted lenient extraction and saw the held-out accuracy rise (so it learns the
    card, and adds it to the global library where `cfg` lets it); returns its store."""
    s = build_run(path, steps=6)
    add_eval(s, 5, outcomes(40, 12))
    ctx = context(s, cfg=cfg, probe=make_probe())
    run_round(ctx)
    promote(ctx, next(r["id"] for r in s.rows("SELECT * FROM interventions") if "Lenient" in r["title"]), "test")
    ctx.step = 10
    add_eval(s, 10, outcomes(40, 20))  # a paired validation gain whose interval is above zero
    after_eval(ctx, 0.5)
    return s


@pytest.fixture
def learned(tmp_path):
    s = learn_lenient(tmp_path / "a" / "run.db")
    yield s
    s.close()


def test_export_import_roundtrip_and_merge(learned, tmp_path):
    lib = tmp_path / "lib.json"
    assert skill_commands.export_skills(learned, lib) == [str(lib)]
    data = json.loads(lib.read_text())
    assert data["evotui_skills"] == 1 and data["skills"][0]["name"] == "lenient_extraction"
    folder = skill_commands.export_skills(learned, tmp_path / "cards")
    assert [p.rsplit("/", 1)[-1] for p in folder] == ["lenient_extraction.json"]

    other = build_run(tmp_path / "b" / "run.db", steps=6)
    assert skill_commands.import_skills(other, lib) == [{"name": "lenient_extraction", "action": "added"}]
    assert skill_commands.import_skills(other, tmp_path / "cards") == \
        [{"name": "lenient_extraction", "action": "merged"}]
    assert other.count("skills") == 1
    card = skill_commands.skills_show(other, "lenient_extraction")
    assert card["helped"] == 2 and len(card["evidence"]["deltas"]) == 2  # evidence accumulates
    assert card["change"]["name"] == "extract_answer"


def test_a_new_run_proposes_from_an_imported_skill(learned, tmp_path):
    lib = tmp_path / "lib.json"
    skill_commands.export_skills(learned, lib)
    other = build_run(tmp_path / "b" / "run.db", steps=6, seed=3)
    skill_commands.import_skills(other, lib)
    assert [c["name"] for c in retrieve(other, [{"label": "no_answer_tag", "share": 0.9}], "math")] == \
        ["lenient_extraction"]
    out = run_round(context(other, probe=make_probe())).summary
    shaped = [other.get("interventions", i) for i in out["proposed"]]
    shaped = [r for r in shaped if loads(r["skills_json"])]
    assert shaped and loads(shaped[0]["skills_json"]) == ["lenient_extraction"]
    assert shaped[0]["status"] == "passed", shaped[0]["reason"]
    assert skill_commands.skills_show(other, "lenient_extraction")["uses"] == 1


def test_ops_read_runs_and_library_files(learned, tmp_path):
    run_dir = learned.path.parent
    rows = skill_commands.skills_list(run_dir)
    assert rows[0]["name"] == "lenient_extraction" and rows[0]["labels"] == ["no_answer_tag"]
    assert rows[0]["change"] == "replace extract_answer" and rows[0]["helped"] == 1
    lib = tmp_path / "lib.json"
    skill_commands.export_skills(run_dir, lib)
    assert skill_commands.skills_list(lib) == rows
    assert skill_commands.skills_show(lib, "lenient_extraction")["change"]["op"] == "replace"
    with pytest.raises(SkillError, match="no skill named 'nope'"):
        skill_commands.skills_show(run_dir, "nope")


@pytest.mark.parametrize("content, match", [
    ("{not json", "not a valid JSON skill file"),
    ('{"name": "x"}', "lacks 'trigger'"),
    ('{"name": "x", "trigger": {}, "change": {"op": "explode", "name": "f"}}', "no valid change"),
    ('{"skills": {"a": 1}}', "must be a list"),
    ('{"skills": [{"name": "ok", "trigger": {"labels": "no_answer_tag"}, "change": {"op": "remove", "name": "f"}}]}',
     "list of strings"),
    ('{"name": "x", "trigger": {}, "change": {"op": "remove", "name": "f"}, "uses": "many"}',
     "uses must be a whole number >= 0"),
    ('{"name": "x", "trigger": {}, "change": {"op": "remove", "name": "f"}, "helped": -1}',
     "helped must be a whole number >= 0"),
])
def test_corrupt_skill_files_give_one_clear_error(learned, tmp_path, content, match):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(SkillError, match=match) as e:
        skill_commands.import_skills(learned, bad)
    assert str(bad) in str(e.value)
    assert learned.count("skills") == 1  # nothing half-imported


def test_missing_paths(learned, tmp_path):
    with pytest.raises(SkillError, match="no such skill file"):
        skill_commands.import_skills(learned, tmp_path / "missing.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SkillError, match="no .json skill files"):
        skill_commands.import_skills(learned, tmp_path / "empty")
    with pytest.raises(SkillError, match="no such run or skill library"):
        skill_commands.skills_list(tmp_path / "nowhere")


def test_global_library_under_evotui_home(tmp_path, monkeypatch):
    monkeypatch.setenv("EVOTUI_HOME", str(tmp_path / "home"))
    learn_lenient(tmp_path / "a" / "run.db").close()
    assert global_library() == tmp_path / "home" / "skills.json"
    assert [c["name"] for c in skill_commands.skills_list(global_library())] == ["lenient_extraction"]
    # a fresh run retrieves from the global library without importing anything
    other = build_run(tmp_path / "b" / "run.db", steps=6)
    assert [c["name"] for c in retrieve(other, [{"label": "no_answer_tag", "share": 0.9}], "math")] == \
        ["lenient_extraction"]


def test_a_run_scoped_library_neither_reads_nor_adds_to_the_global_one(tmp_path, monkeypatch):
    """`evolve.skill_library = "run"` (what compare's arms use): runs sharing $EVOTUI_HOME stay
    independent samples: otherwise one arm's runs promote skills another arm's runs learned
    minutes before, in the same compare call."""
    monkeypatch.setenv("EVOTUI_HOME", str(tmp_path / "home"))
    global_library().parent.mkdir(parents=True)
    cfg = RunConfig()
    cfg.evolve.skill_library = "run"
    s = learn_lenient(tmp_path / "a" / "run.db", cfg)
    assert [c["name"] for c in skill_commands.skills_list(s.path.parent)] == ["lenient_extraction"]  # its own
    assert not global_library().exists()  # nothing written for other runs
    skill_commands.export_skills(s, global_library())  # another run's card is there now
    other = build_run(tmp_path / "b" / "run.db", steps=6)
    table = [{"label": "no_answer_tag", "share": 0.9}]
    assert [c["name"] for c in retrieve(other, table, "math")] == ["lenient_extraction"]
    assert retrieve(other, table, "math", shared=False) == []
    ctx = context(other, cfg=cfg)
    keys = [key for _, key, _ in offline.options(ctx, table, {}, schedule.judgeable_by_trial(ctx))]
    assert not [k for k in keys if k.startswith("skill:")]


def test_a_card_two_runs_learned_is_retrieved_and_its_rounds_still_propose(tmp_path, monkeypatch):
    """The global library adds up `helped` when two runs learn the same change, while `uses`
    stays 0: the card's prior divided by zero, and every round of every other run that read
    the library raised and proposed nothing."""
    from backend.evolve.skills import track_record, write_library

    monkeypatch.setenv("EVOTUI_HOME", str(tmp_path / "home"))
    global_library().parent.mkdir(parents=True)
    learn_lenient(tmp_path / "a" / "run.db").close()  # the first run learns the card
    (card,) = json.loads(global_library().read_text())["skills"]
    write_library(global_library(), [dict(card, helped=2, uses=0)])  # and a second run learned it too
    assert track_record({"helped": 2, "uses": 0}) == 3 / 2 and track_record({"helped": 1, "uses": 3}) == 2 / 4
    other = build_run(tmp_path / "b" / "run.db", steps=6, seed=3)
    assert [c["name"] for c in retrieve(other, [{"label": "no_answer_tag", "share": 0.9}], "math")] == \
        ["lenient_extraction"]
    out = run_round(context(other, probe=make_probe())).summary
    assert out["error"] is None and len(out["proposed"]) >= 3
    other.close()


def test_a_skill_library_that_cannot_be_read_costs_the_round_its_skills_only(tmp_path, monkeypatch):
    from backend.evolve import skills

    def broken(*a, **k):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(skills, "retrieve", broken)
    s = build_run(tmp_path / "a" / "run.db", steps=6)
    out = run_round(context(s, probe=make_probe())).summary
    assert out["error"] is None and len(out["proposed"]) >= 3  # snippets and knobs still come
    logged = [r["message"] for r in s.rows("SELECT message FROM events WHERE level = 'warning'")]
    assert "skill cards left out of this round: ZeroDivisionError: division by zero" in logged
    s.close()
