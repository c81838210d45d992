"""A multi-turn episode's KV cache kept across turns (`model.kv_reuse`, backend/policy/kvreuse.py):
the fast engine with reuse samples what it samples without, on the CPU in fp32, while computing
only each turn's new tokens; a prompt that extends no cached row, a row that left, new weights
and a teacher-forced call in between all fall back to a whole prefill."""

from __future__ import annotations

import random

import torch
from test_fastgen import Tok, tiny

from backend.policy import kvreuse
from backend.policy.fastgen import FastGenerator

NEW = 6


def engines(model):
    reuse, plain = FastGenerator(model, Tok(), "cpu"), FastGenerator(model, Tok(), "cpu")
    reuse.kv_reuse = True
    return reuse, plain


def same(a, b):
    assert [g.ids for g in a] == [g.ids for g in b]
    for x, y in zip(a, b):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4), (x.logprobs, y.logprobs)


def next_turn(prompts, gens, rng):
    """Each episode's next prompt: its last one, what was sampled, then a tool's answer (no EOS)."""
    return [p + g.ids + [rng.randrange(3, 90) for _ in range(rng.randrange(1, 9))] for p, g in zip(prompts, gens)]


def test_turns_sample_what_a_whole_prefill_samples_and_compute_only_new_tokens():
    rng = random.Random(0)
    reuse, plain = engines(tiny())
    prompts = [[rng.randrange(3, 90) for _ in range(n)] for n in (18, 25, 31, 20)]
    cached = 0
    for _turn in range(3):
        got, want = reuse.generate(prompts, NEW, 0.0), plain.generate(prompts, NEW, 0.0)
        same(got, want)
        assert reuse.reused_tokens == cached  # every token of the last call but its last sample
        cached = sum(len(p) + len(g.ids) - 1 for p, g in zip(prompts, got))
        prompts = next_turn(prompts, got, rng)


def test_a_row_that_left_a_reordered_batch_and_a_new_prompt():
    rng = random.Random(1)
    reuse, plain = engines(tiny(seed=1))
    prompts = [[rng.randrange(3, 90) for _ in range(n)] for n in (22, 17, 30)]
    first = reuse.generate(prompts, NEW, 0.0)
    nxt = next_turn(prompts, first, rng)
    fresh = [rng.randrange(3, 90) for _ in range(40)]
    batch = [nxt[2], fresh, nxt[0]]  # episode 1 ended; a new episode joined
    same(reuse.generate(batch, NEW, 0.0), plain.generate(batch, NEW, 0.0))
    assert reuse.reused_tokens == len(prompts[2]) + len(first[2].ids) - 1 + len(prompts[0]) + len(first[0].ids) - 1


def test_new_weights_and_teacher_forcing_drop_the_cache():
    rng = random.Random(2)
    model = tiny(seed=2)
    reuse, plain = engines(model)
    prompts = [[rng.randrange(3, 90) for _ in range(n)] for n in (20, 26)]
    nxt = next_turn(prompts, reuse.generate(prompts, NEW, 0.0), rng)
    reuse.teacher_forced_logprobs([[5, 6, 7]], [[8, 9]])
    same(reuse.generate(nxt, NEW, 0.0), plain.generate(nxt, NEW, 0.0))
    assert reuse.reused_tokens == 0
    later = next_turn(nxt, reuse.generate(nxt, NEW, 0.0), rng)
    with torch.no_grad():  # an optimizer step: the cached keys were computed with the old adapter
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.add_(0.3)
    same(reuse.generate(later, NEW, 0.0), plain.generate(later, NEW, 0.0))
    assert reuse.reused_tokens == 0


def test_match_takes_the_longest_cached_row_that_starts_a_prompt():
    carry = kvreuse.Carry(None, [list(range(3, 23)), list(range(3, 30)), list(range(50, 70))], [5, 0, 4])
    prompt = list(range(3, 40))
    assert kvreuse.match(carry, [prompt, list(range(90, 120)), list(range(3, 30))]) == [(0, 1, 27), (2, 1, 26)]
    assert kvreuse.first_column([0, 3, 10], [(0, 1, 27), (2, 1, 26)]) == 3
    assert kvreuse.match(None, [prompt]) == []
