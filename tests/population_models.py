"""Tiny real populations whose members differ for sure: a model that answers "1" and a member that
breaks its own policy.

`save_answer_one_llama` writes a 1-layer Llama whose attention and MLP outputs are all but zero, so
each next token depends on the current token alone (a bigram table in the embeddings and the
head): after any prompt it says "1", then ends. On the reasoning-gym `gcd` dataset about a
quarter of the answers are 1, so a member with this policy scores well above 0 on validation,
and one whose policy a huge learning rate scrambled scores 0: clearly behind, every time.
Sampling at temperature 1 still spreads (the head's margin is small), so steps train.
"""

from __future__ import annotations

from pathlib import Path

import pytest

NOISE = 1e-3
"""Scale of the random attention and MLP weights: too small to change a greedy answer."""
MARGIN = 2.0
"""Head weight of the bigram's next token: greedy always picks it, sampling often does not."""


def save_answer_one_llama(path: Path) -> str:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from tiny_llama import save_tiny_llama

    save_tiny_llama(path)  # the default model's tokenizer, written beside a throwaway model
    tok = AutoTokenizer.from_pretrained(path)
    one = tok.convert_tokens_to_ids("1")
    eos = tok.eos_token_id if tok.eos_token_id is not None else 2
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, eos_token_id=eos, bos_token_id=1,
                      pad_token_id=eos)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():  # small, not zero: a zero layer passes no gradient to its LoRA
            p.mul_(NOISE)
        for layer in model.model.layers:
            layer.input_layernorm.weight.fill_(1.0)
            layer.post_attention_layernorm.weight.fill_(1.0)
        model.model.norm.weight.fill_(1.0)
        emb = model.model.embed_tokens.weight
        emb[:, 0] = 1.0  # every token: "say 1 next"
        emb[one, 0], emb[one, 1] = 0.0, 1.0  # after "1": end
        model.lm_head.weight[one, 0] = MARGIN
        model.lm_head.weight[eos, 1] = MARGIN
    model.save_pretrained(path)
    return str(path)


def gcd_harness(path: Path, spread: str) -> str:
    """The spread harness (a reward that never ties) training on gcd problems."""
    code = Path(spread).read_text()
    start = code.index("CURRICULUM = ")
    end = code.index("\n", start)
    code = code[:start] + 'CURRICULUM = {"datasets": {"gcd": 1.0}, "level": 1}' + code[end:]
    path.write_text(code)
    return str(path)


EVERY, STEPS, TASKS, GROUP = 2, 4, 2, 2
SETS = [f"train.tasks_per_step={TASKS}", f"train.group_size={GROUP}", "train.max_new_tokens_cap=8",
        "train.micro_batch=4", "train.keep_checkpoints=0", "eval.n_val=32", "eval.n_test=8",
        "eval.max_new_tokens=4", "math.datasets=['gcd']", f"population.every={EVERY}", f"steps={STEPS}"]


@pytest.fixture(scope="module")
def model_and_harness(tmp_path_factory):
    """The answer-one model and a gcd harness whose reward never ties (import it into a test module)."""
    from tiny_llama import write_spread_harness

    d = tmp_path_factory.mktemp("population-model")
    spread = write_spread_harness(d / "spread.py")
    return save_answer_one_llama(d / "one"), gcd_harness(d / "gcd.py", spread)


def make_population(pop: Path, model_and_harness, mode: str, auto_promote: bool = True) -> None:
    """A new population whose member 1 trains with a learning rate of 1 (its own run config)."""
    from backend.config import load_config
    from backend.population import coordinator
    from backend.population.members import member_config
    from backend.runs import create_run, harness_code

    model, harness = model_and_harness
    cfg = load_config(None, [*SETS, f"model.name='{model}'", f"harness='{harness}'", "population.size=2",
                             f"population.mode='{mode}'", f"evolve.auto_promote={str(auto_promote).lower()}"])
    ps = coordinator.create(cfg, pop)
    m1 = member_config(ps.population().config(), 1, EVERY)
    ps.close()
    m1.train.lr = 1.0
    create_run(pop / "m1", m1, harness_code(m1)).close()


