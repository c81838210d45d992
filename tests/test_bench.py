"""`evotui bench` end to end at toy sizes (timings are printed, never asserted),
and the memory estimate behind the automatic micro-batch."""

import json

import torch

from backend.tools.bench import Row, main, table
from backend.policy import memory
from backend.policy.shape import Spec


def tiny_model_folder(path):
    """config.json of a tiny Llama and the default model's tokenizer: what --random-init needs."""
    from transformers import AutoTokenizer, LlamaConfig

    from backend.policy.model import embedded_gguf

    folder, gguf = embedded_gguf()
    AutoTokenizer.from_pretrained(folder, gguf_file=gguf).save_pretrained(path)
    LlamaConfig(vocab_size=49152, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, eos_token_id=2, bos_token_id=1, pad_token_id=2).save_pretrained(path)
    return str(path)


def test_bench_runs_and_prints_a_table(tmp_path, capsys):
    model = tiny_model_folder(tmp_path / "model")
    args = ["--only", "gen,train", "--random-init", "--model", model, "--batch", "2", "--new", "3",
            "--train-batch", "2", "--train-len", "12", "--full-vocab-batch", "2", "--micro", "1", "--reps", "1",
            "--out", str(tmp_path)]
    assert main(args, quick=True) == 0
    out = capsys.readouterr().out
    assert "tok/s, fast" in out and "LoRA fwd+bwd" in out and "ours/base" in out
    assert (tmp_path / "rows.json").exists() and (tmp_path / "table.txt").exists()


def step_section(tmp_path, model, *more) -> list[dict]:
    """The step section's rows (rows.json) of a tiny run: 2 tasks x 2 rollouts, 8 new tokens, 2 steps."""
    import json

    args = ["--only", "step", "--model", model, "--tasks", "2", "--group", "2", "--step-new", "8", "--steps", "2",
            "--micro", "2", "--step-variants", "", "--out", str(tmp_path), *more]
    assert main(args, quick=True) == 0
    return json.loads((tmp_path / "rows.json").read_text())


def split_parts_of(row: dict) -> dict:
    ours = row["data"]["ours"]
    assert "generation" in row["note"] and "tools+tests" in row["note"] and "training" in row["note"]
    return {k: ours[k] for k in ("gen_ms", "score_ms", "train_ms", "store_ms", "total_ms")}


def test_step_of_the_code_domain_splits_generation_tests_training(tmp_path, tiny_model):
    rows = step_section(tmp_path, tiny_model, "--step-domain", "code", "--step-variants",
                        "buckets:train.length_buckets=true")
    (row,) = [r for r in rows if r["what"] == "GRPO step, code, 2 tasks x 2 = 4 rollouts, <= 8 new"]
    assert all(v >= 0 for v in split_parts_of(row).values()) and row["data"]["ours"]["domain"] == "code"
    assert any(r["what"] == "  tools+tests" for r in rows)
    (variant,) = [r for r in rows if r["what"] == "GRPO step, code, buckets vs today"]
    assert variant["data"]["ours"]["domain"] == "code" and "tools+tests" in variant["note"]


def test_step_of_the_swe_domain_names_its_levels(tmp_path, tiny_model):
    rows = step_section(tmp_path, tiny_model, "--step-domain", "swe", "--step-swe-levels", "0")
    (row,) = [r for r in rows if r["what"] == "GRPO step, swe levels 0, 2 tasks x 2 = 4 rollouts, <= 8 new"]
    assert all(v >= 0 for v in split_parts_of(row).values())
    assert row["data"]["ours"]["levels"] == {"0": 2} and "tasks by level {0: 2}" in row["note"]
    assert row["data"]["ours"]["tokens"] <= 4 * (8 + 8)  # --step-new caps an episode's turn (plus its closing)


def test_step_of_math_keeps_its_row(tmp_path, tiny_model):
    rows = step_section(tmp_path, tiny_model)
    (row,) = [r for r in rows if r["what"].startswith("GRPO step")]
    ours = row["data"]["ours"]
    assert row["what"] == "GRPO step, 2 tasks x 2 = 4 rollouts, <= 8 new"
    assert row["note"] == f" vs {ours['engine']} engine, micro-batch - vs {ours['micro_batch']}"
    assert not any(r["what"] == "  tools+tests" for r in rows)
    waited = json.loads(ours["metrics_json"]).get("ckpt_wait_ms", 0.0)
    assert waited > 0 and ours["phases"]["checkpoint wait"] == waited  # the commit's wait, given apart


def test_the_commits_wait_for_the_checkpoint_is_given_apart():
    from backend.tools.bench_overhead import WAIT, breakdown, split_wait

    ms = split_wait({"commit": 60.0, "evaluator": 5.0}, 42.0)
    assert ms == {"commit": 18.0, "evaluator": 5.0, WAIT: 42.0}
    line = breakdown(ms, 1000.0)
    assert "commit 18 ms (1.8%)" in line and line.endswith(f"{WAIT} 42 ms (4.2%)")
    assert split_wait({"commit": 10.0}, 0.0) == {"commit": 10.0}  # an overlapped checkpoint: no wait


def test_memory_plan_reads_the_domains_prompts(tmp_path, tiny_model):
    """The step's memory plan (CUDA) sizes a pass for the longest prompt of the domain's tasks."""
    from dead_group_runs import engine

    from backend.tools.bench_common import bench_harness
    from backend.tools.bench_step import MATH_PROMPT_TOKENS, domain_sets, plan_length

    eng = engine(tmp_path / "swe", tiny_model, bench_harness("swe"), domain_sets("swe", "0"))
    try:
        assert 250 < plan_length(eng, "swe", 8, 16) - 8 < 700  # level 0 prompts: ~270-660 tokens
    finally:
        eng.store.close()
    assert plan_length(None, "math", 8, 16) == MATH_PROMPT_TOKENS + 8


def test_trainer_prompt_default_follows_the_step_domain():
    from backend.tools.bench import parse

    assert parse([], quick=True).trainer_prompt == "80,130"
    assert parse(["--step-domain", "swe"], quick=True).trainer_prompt == "270,1100"
    assert parse(["--step-domain", "swe", "--trainer-prompt", "300,650"], quick=True).trainer_prompt == "300,650"


def test_unknown_section_is_a_user_error(capsys):
    assert main(["--only", "nope"], quick=True) == 2


def test_cli_passes_options_through(monkeypatch):
    seen = {}
    monkeypatch.setattr("backend.tools.bench.main", lambda rest, quick: seen.update(rest=rest, quick=quick) or 0)
    from evotui.cli import main as cli

    assert cli(["bench", "--quick", "--", "--only", "gen"]) == 0
    assert seen["quick"] and seen["rest"][-2:] == ["--only", "gen"]
    # without `--`, in the order given (argparse once delivered `ddp --gpus 2 --only`)
    assert cli(["bench", "--only", "ddp", "--gpus", "2", "--out", "/tmp/b"]) == 0
    assert not seen["quick"] and seen["rest"] == ["--only", "ddp", "--gpus", "2", "--out", "/tmp/b"]
    from backend.tools.bench import parse

    assert parse(["--only", "gen"], quick=True).only == "gen"


def test_table_aligns_columns():
    text = table([Row("gen", "tok/s", "1", "10", "10.0x", "note")])
    head, rule, row = text.splitlines()
    assert head.index("baseline") == row.index("1 ") and rule.startswith("---")


def test_activation_estimate_matches_saved_tensors():
    """The fitted bytes per token per layer against autograd's saved tensors on a small LoRA Llama."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from backend.policy.grpo import token_logprobs

    cfg = LlamaConfig(vocab_size=128, hidden_size=192, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=3, num_key_value_heads=1, head_dim=64)
    model = get_peft_model(LlamaForCausalLM(cfg).to(torch.bfloat16), LoraConfig(r=8, target_modules=[
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def saved(T):
        seen = {}

        def pack(t):
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        ids = torch.randint(0, 128, (2, T))
        att = torch.ones_like(ids)
        att[1, T // 2:] = 0  # padding, as in training batches
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            token_logprobs(model, ids, att, chunk=64)
        return sum(v for k, v in seen.items() if k not in params)

    per_token_layer = (saved(128) - saved(64)) / (2 * 64) / 2
    est = memory.act_bytes_per_token_layer(Spec.of(cfg))
    assert 0.8 < est / per_token_layer < 1.25


def test_micro_batch_fits_and_balances():
    spec = Spec(30, 576, 9, 3, 64, 1536, 49152, 1e-5)
    per = memory.train_bytes_per_sequence(spec, 384)
    mb = memory.pick_micro_batch(spec, 384, 40 << 30)
    assert mb * per <= (40 << 30) * memory.MARGIN and mb >= 32
    assert memory.pick_micro_batch(spec, 384, 1 << 20) == 1  # never zero
    assert memory.balance(256, 85) == 64 and memory.balance(5, 8) == 5


def test_fast_logprobs_match_chunked_values_and_gradients():
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from backend.policy.grpo import checkpointed_token_logprobs as token_logprobs
    from backend.policy.grpo import token_logprobs as fast_token_logprobs

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    model = get_peft_model(LlamaForCausalLM(cfg), LoraConfig(r=4, target_modules=["q_proj", "v_proj", "down_proj"]))
    for n, p in model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.1)
    ids = torch.randint(0, 300, (3, 11))
    att = torch.ones_like(ids)
    att[2, 8:] = 0
    w = torch.randn(3, 10)
    grads = []
    for fn in (token_logprobs, fast_token_logprobs):
        model.zero_grad()
        lp, _ = fn(model, ids, att, chunk=4)
        (lp * w).sum().backward()
        grads.append((lp.detach(), [p.grad.clone() for p in model.parameters() if p.requires_grad]))
    assert torch.allclose(grads[0][0], grads[1][0], atol=1e-5)
    for a, b in zip(grads[0][1], grads[1][1]):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)
    _, ent = fast_token_logprobs(model, ids, att, chunk=4, want_entropy=True)  # with grad on: one pass
    with torch.no_grad():
        _, ref = token_logprobs(model, ids, att, chunk=4, want_entropy=True)
    assert torch.allclose(ent, ref, atol=1e-4) and not ent.requires_grad
