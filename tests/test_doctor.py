"""`evotui doctor` names every fast path and says why the inactive ones are off."""

from backend.doctor import main, report


def test_report_covers_each_fast_path():
    lines = [line for _, line in report()]
    text = "\n".join(lines)
    for name in ("vllm", "fast", "hf", "unsloth"):
        assert name in text
    picked = [line for line in lines if "picks this" in line]
    assert len(picked) == 1
    # every engine that is off says why
    assert all(": " in line for line in lines if line.split()[1:2] == ["no:"])


def test_main_prints_and_exits_zero(capsys):
    assert main() == 0
    out = capsys.readouterr().out
    assert "generation" in out and "training" in out and "device" in out
