"""`evotui doctor` names every fast path and says why the inactive ones are off."""

from backend.tools.doctor import main, report


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


def test_engine_says_which_lora_trainer_it_took(monkeypatch):
    """Where Unsloth cannot train (no CUDA here, or EVOTUI_NO_UNSLOTH), the run loads peft and says why."""
    from backend.config import load_config
    from backend.policy.load import load_fast_policy

    monkeypatch.setenv("EVOTUI_NO_UNSLOTH", "1")
    lm = load_fast_policy(load_config(None, []).model)
    assert lm.trainer == "peft (EVOTUI_NO_UNSLOTH is set)"
    assert hasattr(lm.model, "disable_adapter")  # a peft model


def test_main_prints_each_check_as_it_goes(capsys, monkeypatch):
    """The lines of the checks done are out before a later check ends (or fails): doctor no
    longer prints nothing until every check is done."""
    import backend.policy.load

    def broken(device):
        raise RuntimeError("unsloth check broke")

    monkeypatch.setattr(backend.policy.load, "unsloth_status", broken)
    assert main() == 1
    cap = capsys.readouterr()
    assert "device" in cap.out and "generation" in cap.out and "training" not in cap.out
    assert cap.err.strip() == "evotui doctor: RuntimeError: unsloth check broke"
