"""GRPO for this loop: group-relative advantages, clipped ratio, optional KL.

For every sampled sequence the trainer gets prompt ids, completion ids, a
loss mask over the completion (0 on tool output in multi-turn episodes) and a
scalar advantage. The loss per token is the PPO clipped surrogate

    -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A) + beta * k3_kl

summed over the completion tokens of the step and divided by a token count
(token-level, so long answers are not down-weighted per token: TRL's `dapo`).
That count is the trained tokens by default ("live"); `step(samples,
denom_tokens=...)` divides by another count instead, e.g. the tokens of every
rollout of the batch, as TRL does ("batch"; `train.loss_denominator`). The
two differ by the live fraction, which a dead group lowers: tests/test_grpo_parity.py.
Log-probs are computed in chunks
of positions through the LM head, each chunk's gradient formed in forward,
so the batch x length x vocab logits are never held at once. A step reads the
device back once per epoch (its statistics stay on the device until then, and
micro-batches reach CUDA from pinned memory), so the host queues a micro-batch's
kernels while the device runs them instead of waiting three times per micro-batch
(transformers still reads the padding mask at each forward's start)
(tests/test_distributed_passes.py). With `train.length_buckets` the passes hold rows of
like length (backend/policy/buckets.py), so little of a pass is padding; with
`train.compile` the transformer body runs compiled; with `train.causal_only` attention
runs without the padding mask (the rows are right-padded: `_hidden`); with `train.shared_prefix`
a pass computes each prompt its rows share once (backend/policy/prefix.py).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from backend.policy import buckets, determinism, lora_dtype, prefix
from backend.policy import checkpoint as ckpt
from backend.policy.lmhead import backbone_and_head, checkpointed_chunks, head_logprobs, pad_right, padded_length
from backend.policy.lmhead import to_device as _to_device

COMPILED_LENGTH_MULTIPLE = 8
"""Under `train.compile`, a training pass's length in tokens is a multiple of this
(`GRPOTrainer._length_multiple`)."""


@dataclass
class Sample:
    prompt_ids: list[int]
    completion_ids: list[int]
    mask: list[int]  # per completion token, 1 = trained on
    advantage: float


def checkpointed_token_logprobs(model, input_ids, attention_mask, chunk: int = 64, want_entropy: bool = False,
                                body=None, right_padded: bool = False):
    """Log-prob of each next token: (B, T-1), plus entropy (B, T-1) if asked.

    Chunks of `chunk` positions go through the LM head one at a time; with
    grad enabled each chunk is checkpointed, so backward recomputes its logits
    (three head matmuls per chunk). Used where the head itself trains; see
    `token_logprobs` for the usual frozen-head case. `body`, `right_padded`: as `token_logprobs`'s.
    """
    own, head = backbone_and_head(model)
    body = own if body is None else body
    hidden, targets = _hidden(body, input_ids, attention_mask, right_padded)
    return checkpointed_chunks(head, hidden, targets, chunk, want_entropy)


def _hidden(body, input_ids, attention_mask, right_padded: bool = False):
    """Last hidden states (B, T-1, H) that predict input_ids[:, 1:], and those targets.

    `right_padded`: every row's tokens come first and its padding after them (`collate`), so the
    causal mask alone keeps a real token from seeing padding, and the padding mask is left out:
    no mask to build or read, and attention runs its causal kernel. Positions count from 0 in
    every row (a real token's are then the masked pass's); padding positions keep counting, so
    transformers does not take the rows for packed sequences. No KV cache: a training pass never
    reads one back, and under `train.compile` a cache object in a layer's arguments recompiles it
    for every layer."""
    if right_padded:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)[None]  # (1, T)
        hidden = body(input_ids=input_ids, position_ids=pos, use_cache=False).last_hidden_state
        return hidden[:, :-1], input_ids[:, 1:]
    pos = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    hidden = body(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos,
                  use_cache=False).last_hidden_state
    return hidden[:, :-1], input_ids[:, 1:]


def token_logprobs(model, input_ids, attention_mask, chunk: int = 64, want_entropy: bool = False, body=None,
                   right_padded: bool = False):
    """Log-prob of each next token: (B, T-1), plus entropy (B, T-1, no gradient) if asked.

    The trainer's path. With grad enabled and a frozen LM head (LoRA), each
    chunk's gradient with respect to the hidden state is formed in forward,
    so the batch x length x vocab logits are never held and never recomputed.
    Otherwise (no grad, or a trainable head) it is `checkpointed_token_logprobs`.
    Values and gradients match the checkpointed path (tests/test_bench.py). `body`: the
    transformer body to run in place of the model's own (a compiled one, `GRPOTrainer`).
    `right_padded`: the rows are right-padded, so attention needs no padding mask (`_hidden`);
    the values at padding positions are then meaningless, and callers mask them out.
    """
    own, head = backbone_and_head(model)
    if not torch.is_grad_enabled() or head.weight.requires_grad:
        return checkpointed_token_logprobs(model, input_ids, attention_mask, chunk, want_entropy, body, right_padded)
    body = own if body is None else body
    hidden, targets = _hidden(body, input_ids, attention_mask, right_padded)
    return head_logprobs(head, hidden, targets, chunk, want_entropy)


def collate(samples: list[Sample], pad_id: int, device, multiple: int = 1):
    """Right-padded (B, T) ids, attention mask, loss mask aligned to targets, advantages; T a
    multiple of `multiple`."""
    ids, att = pad_right([s.prompt_ids + s.completion_ids for s in samples], pad_id, multiple)
    loss_mask = torch.zeros((len(samples), ids.shape[1] - 1), dtype=torch.float32)
    for i, s in enumerate(samples):
        p = len(s.prompt_ids)
        # target position j predicts token j+1; completion token k sits at p+k
        loss_mask[i, p - 1 : p - 1 + len(s.completion_ids)] = torch.tensor(s.mask, dtype=torch.float32)
    adv = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    return tuple(_to_device(t, device) for t in (ids, att, loss_mask, adv))


def grpo_loss(new_lp, old_lp, adv, mask, clip_eps: float, ref_lp=None, kl_coef: float = 0.0,
              denom: float | None = None):
    """Clipped surrogate summed over masked tokens and divided by `denom`.

    Shapes: new_lp, old_lp, ref_lp, mask (B, T); adv (B,).
    Returns (loss, stats) where stats has kl and clip_frac (detached floats).
    """
    loss, kl, clip_frac = grpo_terms(new_lp, old_lp, adv, mask, clip_eps, ref_lp, kl_coef, denom)
    return loss, {"kl": float(kl), "clip_frac": float(clip_frac)}


def grpo_terms(new_lp, old_lp, adv, mask, clip_eps: float, ref_lp=None, kl_coef: float = 0.0,
               denom: float | None = None):
    """`grpo_loss` with its kl and clip_frac left on the device (detached 0-d tensors): reading
    them back waits for the device, so the trainer reads a step's statistics once, at its end."""
    denom = denom or mask.sum().clamp(min=1.0)
    ratio = torch.exp(new_lp - old_lp)
    a = adv.unsqueeze(1)
    surr = torch.minimum(ratio * a, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * a)
    loss = -(surr * mask).sum() / denom
    kl = torch.zeros((), device=new_lp.device)
    if ref_lp is not None and kl_coef > 0:
        d = ref_lp - new_lp
        k3 = torch.exp(d) - d - 1  # unbiased, always >= 0
        kl = (k3 * mask).sum() / denom
        loss = loss + kl_coef * kl
    clipped = ((ratio - 1).abs() > clip_eps).float()
    return loss, kl.detach(), ((clipped * mask).sum() / mask.sum().clamp(min=1)).detach()


class PassShape:
    """What one epoch of `GRPOTrainer.step` ran: the micro-batch size and count, the tokens it
    computed (rows x padded length) against the sequences' own, and where the time went.

    `pass_ms`: each micro-batch's time from its start to its backward queued (on the CPU, computed);
    `issue_ms`: their sum with the collating between them; `wait_ms`: the wait at the epoch's end
    for the device to finish what was queued. On CUDA the host runs ahead of the device until the
    launch queue is full and then waits inside the launches, so a large wait says the device is the
    bottleneck, a small one says nothing more.
    Data-parallel ranks report it beside one process's (backend/tools/bench_ddp.py)."""

    def __init__(self, micro_batch: int, samples: list[Sample]):
        self.out = {"micro_batch": int(micro_batch), "micro_batches": 0, "rows": len(samples), "padded_tokens": 0,
                    "seq_tokens": sum(len(s.prompt_ids) + len(s.completion_ids) for s in samples),
                    "max_len": 0, "pass_ms": [], "issue_ms": 0.0, "wait_ms": 0.0}
        self._t = self._pass_t = time.perf_counter()

    def start(self, ids: torch.Tensor) -> None:
        """A micro-batch of `ids` (rows x padded length), collated, begins."""
        self._lap("issue_ms")
        self._pass_t = self._t
        self.out["micro_batches"] += 1
        self.out["padded_tokens"] += int(ids.numel())
        self.out["max_len"] = max(self.out["max_len"], int(ids.shape[1]))

    def queued(self) -> None:
        """The micro-batch's forward and backward are queued (on the CPU: done)."""
        self._lap("issue_ms")
        self.out["pass_ms"].append(round((self._t - self._pass_t) * 1000, 2))

    def finished(self) -> dict:
        """The device finished the epoch's passes (their statistics were read back)."""
        self._lap("wait_ms")
        return self.out

    def _lap(self, kind: str) -> None:
        now = time.perf_counter()
        self.out[kind] = round(self.out[kind] + (now - self._t) * 1000, 2)
        self._t = now


class GRPOTrainer:
    """One optimizer over the LoRA parameters; `step(samples)` does one update."""

    def __init__(self, model, tokenizer, cfg, device):
        self.model = model
        self.tok = tokenizer
        self.cfg = cfg
        self.device = device
        params = [p for p in model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
        self.last_shape: dict = {}  # the last step's micro-batches (`PassShape`): benchmarks compare ranks with it
        self.plan = MemoryPlan()
        self.rows = int(cfg.micro_batch)  # rows per pass this step (`_pick_micro_batch`): the most of any pass
        self.passes: list[list[int]] = []  # row indices of each pass this step (`_pick_micro_batch`)
        self._compiled = None  # the compiled transformer body (`train.compile`), made at first use
        self.lora_modules_in_base_dtype = lora_dtype.use(model, bool(getattr(cfg, "lora_base_dtype", False)))
        """LoRA modules whose matmuls run in the base's dtype (`train.lora_base_dtype`); 0 when off."""
        self.deterministic = bool(getattr(cfg, "deterministic", True))
        """Passes under deterministic algorithms (`train.deterministic`, backend/policy/determinism.py)."""
        determinism.configure()

    def resume(self, checkpoint: Path) -> bool:
        """The optimizer, the random states and the memory plan saved with `checkpoint`. False when
        a saved plan could not be kept (another share of the card): micro-batches are then planned
        afresh, and the run's arithmetic may differ from an uninterrupted one's."""
        from backend.policy import memory

        saved = ckpt.load_trainer_state(checkpoint, self.opt).get("memory_plan")
        card = memory.card_bytes(self.device) if self._cuda() else None
        self.plan = MemoryPlan.resumed(saved, card)
        return not saved or saved.get("budget") is None or self.plan.budget is not None

    def saved_state(self) -> dict:
        """What `checkpoint.save` keeps of this trainer besides the optimizer (plain data)."""
        return {"memory_plan": self.plan.saved()}

    @property
    def micro_batch(self) -> int:
        """Rows per forward + backward on CUDA: planned from memory at each step (`auto_micro_batch`).
        The loop halves it after an out-of-memory error (`Engine.with_oom_retry`), which caps every
        later plan of the run: a cap only the failed attempt saw would be planned away again
        by the retry, which then fails the same way."""
        return int(self.cfg.micro_batch)

    @micro_batch.setter
    def micro_batch(self, rows: int) -> None:
        self.cfg.micro_batch = self.plan.cap = self.rows = int(rows)

    def _batches(self, samples):
        """Each pass's samples and their `collate`d tensors."""
        for rows in self.passes:
            batch = [samples[i] for i in rows]
            yield batch, collate(batch, self.tok.pad_token_id, self.device, self._length_multiple())

    def _logprobs(self, batch: list[Sample], ids, att, want_entropy: bool = False):
        """`token_logprobs` of the trainer's passes (right-padded by `collate`), through the compiled
        body under `train.compile`, without the padding mask under `train.causal_only`. Under
        `train.shared_prefix` a pass whose rows share prompts computes each prompt once (the same
        values, laid out alike: backend/policy/prefix.py)."""
        if getattr(self.cfg, "shared_prefix", False) and prefix.applies(self.model, batch):
            return prefix.token_logprobs(self.model, batch, ids.shape[1], self.cfg.logprob_chunk, want_entropy)
        return token_logprobs(self.model, ids, att, self.cfg.logprob_chunk, want_entropy, self._body(),
                              bool(getattr(self.cfg, "causal_only", False)))

    def _length_multiple(self) -> int:
        """A pass's length is rounded up to this many tokens. Under `train.compile` a layer compiled
        for dynamic shapes guards on whether the length is a multiple of 8 (Inductor's alignment
        check), so a step whose passes mix both kinds compiles every layer again (about 17 s on
        an H100); right padding is masked from the loss and, being after every real token, changes
        no real position's value."""
        return COMPILED_LENGTH_MULTIPLE if getattr(self.cfg, "compile", False) else 1

    def _body(self):
        """The transformer body with its decoder layers compiled (`train.compile`), else None (the
        model's own, eager).

        Each layer is compiled, not the body as one graph: the layers share their code, so one
        layer's graph serves all of them, and compiling takes one layer's time, not thirty's
        (`benchmarks/train_compile.py` times both). Dynamic shapes: passes differ in rows and
        length from step to step (and pass to pass with `train.length_buckets`), and a graph per
        shape would recompile at every step."""
        if not getattr(self.cfg, "compile", False):
            return None
        if self._compiled is None:
            body = backbone_and_head(self.model)[0]
            for layer in body.layers:
                layer.compile(dynamic=True)
            self._compiled = body
        return self._compiled

    def release_compiled(self) -> None:
        """Back to the eager layers. `nn.Module.compile` compiles a layer in place, so a model shared
        with a later trainer (`evotui bench` times variants on one model) would run compiled there
        too; torch has no public inverse, and `_compiled_call_impl` is the attribute it sets."""
        if self._compiled is not None:
            for layer in self._compiled.layers:
                layer._compiled_call_impl = None
            self._compiled = None

    @torch.no_grad()
    def _reference(self, samples, with_ref: bool):
        """Old log-probs (and reference log-probs) per micro-batch, plus entropy."""
        olds, refs = [], []
        ent = torch.zeros(2, dtype=torch.float64, device=self.device)  # entropy sum, tokens: read once
        self.model.eval()
        for batch, (ids, att, m, _) in self._batches(samples):
            lp, e = self._logprobs(batch, ids, att, want_entropy=True)
            olds.append(lp)
            ent += torch.stack([(e * m).sum(), m.sum()]).double()
            if with_ref:
                with self.model.disable_adapter():
                    refs.append(self._logprobs(batch, ids, att)[0])
        ent_sum, ent_n = ent.tolist()
        return olds, refs, ent_sum / max(ent_n, 1.0)

    def step(self, samples: list[Sample], denom_tokens: float | None = None, sync_grads=None) -> dict:
        """One GRPO update over `samples`; returns metrics.

        The loss is divided by `denom_tokens` when given (the "batch" convention: the
        loop passes the completion tokens of every rollout of the step, trained or not),
        else by the trained tokens of `samples` ("live"). A zero-advantage row adds
        nothing to the sum (with kl_coef 0), so the "batch" gradient is the "live" one
        times live / batch tokens, and equals TRL's `dapo` over the whole batch.

        `sync_grads(params)`, when given, runs once per epoch after the backward passes and
        before clipping: data-parallel training sums every rank's gradients there
        (backend/ddp/comm.py), each rank's loss divided by the whole batch's `denom_tokens`.
        A rank with no samples then still takes the (synchronised) optimizer step.
        """
        self._fix_budget()
        if not samples and sync_grads is None:
            return {"loss": 0.0, "kl": 0.0, "clip_frac": 0.0, "grad_norm": 0.0, "entropy": float("nan"), "tokens": 0}
        self._pick_micro_batch(samples)
        with determinism.training(self.deterministic):
            return self._update(samples, denom_tokens, sync_grads)

    def _update(self, samples: list[Sample], denom_tokens: float | None, sync_grads) -> dict:
        """The passes and the optimizer step of `step` (micro-batch already planned)."""
        with_ref = self.cfg.kl_coef > 0
        # One epoch and no KL: the old log-probs equal the new ones at the only update
        # (ratio 1), so the separate no-grad pass is skipped, as TRL does.
        one_pass = self.cfg.ppo_epochs == 1 and not with_ref
        olds, refs, entropy = ([], [], None) if one_pass else self._reference(samples, with_ref)
        total_tokens = float(sum(sum(s.mask) for s in samples)) or 1.0
        denom = float(denom_tokens) if denom_tokens else total_tokens
        stats = {"loss": 0.0, "kl": 0.0, "clip_frac": 0.0}
        ent_sum = ent_n = 0.0
        n_mb = 0
        shape = PassShape(self.rows, samples)
        self.model.train()
        for epoch in range(self.cfg.ppo_epochs):
            self.opt.zero_grad(set_to_none=True)
            # Sums of (loss, kl, clip_frac, entropy, entropy tokens) stay on the device and are
            # read once per epoch: a read per micro-batch would wait for its forward and backward
            # before the next one is queued, so the host's work (collating, queueing kernels)
            # would add to the device's instead of overlapping it.
            sums = torch.zeros(5, dtype=torch.float64, device=self.device)
            timed = shape if epoch == 0 else None
            for k, (batch, (ids, att, m, adv)) in enumerate(self._batches(samples)):
                if timed is not None:
                    timed.start(ids)
                new_lp, ent = self._logprobs(batch, ids, att, want_entropy=one_pass)
                old = new_lp.detach() if one_pass else olds[k]
                loss, kl, clip_frac = grpo_terms(new_lp, old, adv, m, self.cfg.clip_eps,
                                                 refs[k] if with_ref else None, self.cfg.kl_coef, denom=denom)
                loss.backward()
                ent_terms = [(ent.detach() * m).sum(), m.sum()] if one_pass else [kl.new_zeros(()), kl.new_zeros(())]
                sums += torch.stack([loss.detach(), kl, clip_frac, *ent_terms]).double()
                n_mb += 1
                if timed is not None:
                    timed.queued()
            loss_sum, kl_sum, clip_sum, e_sum, e_n = sums.tolist()  # waits for the epoch's passes
            if timed is not None:
                self.last_shape = timed.finished()
            stats["loss"] += loss_sum
            stats["kl"] += kl_sum
            stats["clip_frac"] += clip_sum
            ent_sum += e_sum
            ent_n += e_n
            params = [p for p in self.model.parameters() if p.requires_grad]
            if sync_grads is not None:
                sync_grads(params)
            gn = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
            self.opt.step()
        self.model.eval()
        if one_pass:
            entropy = ent_sum / max(ent_n, 1.0)
        epochs = self.cfg.ppo_epochs
        return {"loss": stats["loss"] / epochs, "kl": stats["kl"] / max(n_mb, 1),
                "clip_frac": stats["clip_frac"] / max(n_mb, 1),
                "grad_norm": float(gn) if math.isfinite(float(gn)) else float("nan"),
                "entropy": entropy, "tokens": int(total_tokens)}

    def _auto(self) -> bool:
        return bool(getattr(self.cfg, "auto_micro_batch", False))

    def _pass_tokens(self) -> int:
        from backend.policy import memory

        return int(getattr(self.cfg, "pass_tokens", memory.MAX_TOKENS))

    def _cuda(self) -> bool:
        return torch.device(self.device).type == "cuda"

    def _fix_budget(self) -> None:
        """On CUDA, fix the run's training budget at its first step, trained or not
        (`memory.plan_budget`): up to there every run of a config has done the same work."""
        if self._cuda() and self._auto() and self.plan.budget is None:
            from backend.policy import memory

            self.plan = MemoryPlan(memory.plan_budget(self.device), memory.card_bytes(self.device), self.plan.cap)

    def _pick_micro_batch(self, samples: list[Sample]) -> None:
        """The step's passes (`self.passes`) and their most rows (`self.rows`)."""
        self._plan_rows(samples)
        if samples and getattr(self.cfg, "length_buckets", False):
            self._plan_by_length(samples)
        else:
            self.passes = buckets.in_order(len(samples), self.rows)
        if getattr(self.cfg, "compile", False):  # a pass of one row would compile every layer again
            self.passes = buckets.no_single_row_pass(self.passes)
            self.rows = max((len(p) for p in self.passes), default=self.rows)

    def _plan_rows(self, samples: list[Sample]) -> None:
        """Rows per pass, from a memory estimate (not by trial and out-of-memory): on CUDA the most
        that fit the run's budget; on the CPU `train.micro_batch` at most, fewer where long
        sequences would pass `memory.CPU_TRAIN_BYTES`."""
        from backend.policy import memory

        self.rows = int(self.cfg.micro_batch)
        if not samples or not self._auto():
            return
        if not self._cuda():
            self.rows = memory.cpu_micro_batch(self.model, samples, self.rows, self.cfg.logprob_chunk)
            return
        self._fix_budget()
        mb = memory.auto_micro_batch(self.model, samples, self.device, self.cfg.logprob_chunk,
                                     fallback=self.cfg.micro_batch, budget=self.plan.budget,
                                     max_tokens=self._pass_tokens())
        self.cfg.micro_batch = self.rows = min(mb, self.plan.cap) if self.plan.cap else mb

    def _plan_by_length(self, samples: list[Sample]) -> None:
        """`train.length_buckets`: rows sorted by length, each pass as many as the memory plan
        allows at its own longest row (backend/policy/buckets.py). Off CUDA, or on CUDA with
        `auto_micro_batch` off, `train.micro_batch` stays the ceiling; on CUDA the ceiling is
        the cap an out-of-memory error left (the loop halves `micro_batch`, the largest pass)."""
        from backend.policy import memory

        on_cuda = self._cuda() and self._auto()
        ceiling = self.plan.cap if on_cuda else int(self.cfg.micro_batch)
        rows_at = memory.rows_at_length(self.model, self.device, ceiling, self.cfg.logprob_chunk,
                                        self.plan.budget, auto=self._auto(), max_tokens=self._pass_tokens())
        m = self._length_multiple()  # the memory plan sizes the passes as they will be padded
        self.passes = buckets.by_length([padded_length(len(s.prompt_ids) + len(s.completion_ids), m) for s in samples],
                                        rows_at)
        self.rows = max(len(p) for p in self.passes)
        if on_cuda:
            self.cfg.micro_batch = self.rows


@dataclass
class MemoryPlan:
    """What a run's micro-batches are planned from, fixed for the run and saved with its checkpoints,
    so a resumed run plans what the original would have (`backend/policy/memory.plan_budget`).

    A saved plan is reused only under the same share of the same size of card: elsewhere its
    budget means nothing, and the run plans afresh at its next step."""

    budget: int | None = None
    """Bytes a micro-batch may plan for; None: not fixed yet."""
    share: int | None = None
    """The bytes the run planned for when the budget was fixed (`memory.card_bytes`: its share,
    else the card's size)."""
    cap: int | None = None
    """Rows at most, after an out-of-memory error."""

    def saved(self) -> dict:
        return {"budget": self.budget, "share": self.share, "cap": self.cap}

    @classmethod
    def resumed(cls, saved: dict | None, share: int | None) -> MemoryPlan:
        saved = saved or {}
        if saved.get("share") != share:
            return cls()
        return cls(saved.get("budget"), share, saved.get("cap"))
