"""A small decode engine for Llama-shaped models (llama, mistral, qwen2).

Plain `generate` on a 135M model at batch 512 is bound by Python and kernel
launches, not by the GPU. This engine keeps the whole decode step on the
device:

1. Weights: its own copy of each layer's projections, fused (q|k|v and
   gate|up), with the policy's LoRA delta merged in. `refresh()` re-merges
   in place after a train step; the training model keeps unmerged adapters.
   q and k rows are permuted per head so RoPE becomes one complex multiply
   (the same permutation on both leaves every q.k unchanged).
2. Prefill: the left-padded prompts go through the model once and fill a
   preallocated KV cache (L, B, Hkv, T, D) for K and for V; a prompt that several
   rows share (a GRPO group's) is computed once and its columns copied to the others.
3. Decode: one step for all sequences: RMSNorm, fused QKV, RoPE, cache write
   at column `col`, GQA attention, residual adds fused into the output
   matmuls (`addmm_`), SwiGLU, LM head, and sampling in-graph (torch kernels:
   Gumbel-max for temperature; Triton: the inverse of the cumulative distribution
   at one uniform draw a row), a sort for top-p, argmax for greedy. Stop handling is an
   EOS mask. `col` and the step index live on the device and advance inside
   the step, so on CUDA each step shape is captured once as a CUDA graph and
   replayed. Two sets of kernels:
   - triton (CUDA default, backend/policy/fastattn.py): RoPE + cache write,
     attention over each row's live span, SwiGLU and RMSNorm are one launch
     each, the split-vocabulary sampler two; one graph per mode. With
     `model.kv_int8` the cache holds int8 values and a scale per vector. A
     kernel that fails to compile on the card moves the engine to the torch
     kernels for good (`fallback` says why; the run's log says it once).
   - torch (CPU, tests, no triton): SDPA over the cache up to a length
     bucket (the G query heads of a KV head fold into its query axis), a
     bias tensor for padding; one graph per (mode, bucket).

Its speed against plain `generate` is a row of `evotui bench` (batch 512 x 256 new
tokens; figures in docs/measurements/speed.md).

Returned per token: its id and its log-prob under the policy at temperature 1
(what the trainer computes as the old log-prob).

    >>> eng = FastGenerator(lm.model, lm.tokenizer, lm.device)
    >>> gens = eng.generate([[1, 2, 3]], max_new_tokens=16, temperature=0.0)
"""

from __future__ import annotations

import math
import os
import warnings
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from backend.policy import kvreuse
from backend.policy.interrupt import GenerationInterrupted
from backend.policy.kvint8 import dequantize, quantize
from backend.policy.shape import Spec, unwrap
from backend.policy.stops import eos_ids, finished_rows
from backend.types import Generation

SUPPORTED = ("llama", "mistral", "qwen2")
BUCKET = 64  # attention spans the cache up to a multiple of this many columns
CHECK_EVERY = 16
"""Decode steps between two reads of which rows are done (each read waits for the card)."""
FINISHED_LAG = CHECK_EVERY - 1
"""Rows found done at a read are handed to `on_finished` this many steps later, once those steps
are launched: the host's work on them (the loop judges them) runs while the card decodes."""


def why_unsupported(model_or_config) -> str | None:
    """None when the fast engine can run this model (or config), else the reason (one line)."""
    m = unwrap(model_or_config)
    cfg = getattr(m, "config", m)
    kind = getattr(cfg, "model_type", None)
    if kind not in SUPPORTED:
        return f"architecture '{kind}' is not one of {', '.join(SUPPORTED)}"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"activation '{cfg.hidden_act}' is not silu"
    if m is cfg:
        return None
    if not hasattr(getattr(m, "model", None), "rotary_emb"):
        return "the model has no rotary embedding module to read frequencies from"
    for mod in m.modules():
        if getattr(mod, "use_dora", {}) and any(mod.use_dora.values()):
            return "DoRA adapters are not merged by the fast engine"
    return None


def _permute_rope_rows(w: torch.Tensor, n_heads: int, d: int) -> torch.Tensor:
    """Reorder each head's rows (j, j + d/2) -> (2j, 2j + 1): rotate_half becomes complex pairs."""
    shape = w.shape
    w = w.reshape(n_heads, 2, d // 2, *shape[1:]).transpose(1, 2)
    return w.reshape(shape)


def _effective_weight(mod) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight, bias) of a Linear, with active LoRA deltas added (float32)."""
    base = getattr(mod, "base_layer", None)
    if base is None:
        return mod.weight.float(), mod.bias
    w = base.weight.float()
    if not getattr(mod, "merged", False) and not getattr(mod, "disable_adapters", False):
        for name in mod.active_adapters:
            if name in mod.lora_A:
                w = w + mod.get_delta_weight(name).float()
    return w, base.bias


def _round_to(w: torch.Tensor, dtype: torch.dtype, gen: torch.Generator | None) -> torch.Tensor:
    """Cast with stochastic rounding for bf16/fp16.

    The base weights sit exactly on the bf16 grid, so a small LoRA delta
    rounded to nearest would vanish and the engine would sample from the base
    model. Rounding up or down with probability by distance keeps the
    merged weight right on average.
    """
    if dtype == torch.float32:
        return w
    lo = w.to(dtype)
    lo_f = lo.float()
    step = torch.where(w >= lo_f, torch.nextafter(lo, torch.full_like(lo, math.inf)),
                       torch.nextafter(lo, torch.full_like(lo, -math.inf))).float()
    gap = (step - lo_f)
    frac = torch.where(gap != 0, (w - lo_f) / gap, torch.zeros_like(w))
    u = torch.rand(w.shape, generator=gen, device=w.device)
    return torch.where(u < frac, step, lo_f).to(dtype)


class Workspace:
    """Everything one batch size needs on the device: KV cache, step state, graphs."""

    def __init__(self, spec: Spec, B: int, T: int, dtype, device, int8: bool = False):
        s = spec
        self.B, self.T, self.dtype = B, T, dtype
        self.k = torch.zeros(s.layers, B, s.kv_heads, T, s.head_dim, dtype=torch.int8 if int8 else dtype,
                             device=device)
        self.v = torch.zeros_like(self.k)
        # int8: one float32 scale per (layer, row, head, column) of k and of v (backend/policy/kvint8.py)
        self.ks = torch.zeros(self.k.shape[:-1], dtype=torch.float32, device=device) if int8 else None
        self.vs = torch.zeros_like(self.ks) if int8 else None
        z = dict(device=device)
        self.tok = torch.zeros(B, dtype=torch.long, **z)  # token fed to the next step
        self.pad = torch.zeros(B, dtype=torch.long, **z)  # left padding per row
        self.ci = torch.zeros(2, dtype=torch.long, **z)  # both advance together, in one launch
        self.col = self.ci[0:1]  # cache column of the next step
        self.i = self.ci[1:2]  # output index of the next step
        self.seed = torch.zeros(1, dtype=torch.long, **z)  # Triton sampler: per call, from torch's generator
        self.done = torch.zeros(B, dtype=torch.bool, **z)
        self.stop = torch.ones((), dtype=torch.bool, **z)  # False: ignore EOS (benchmarks)
        self.temp = torch.ones((), dtype=torch.float32, **z)
        self.top_p = torch.ones((), dtype=torch.float32, **z)
        self.out_tok = torch.zeros(B, T, dtype=torch.long, **z)
        self.out_lp = torch.zeros(B, T, dtype=torch.float32, **z)
        self.graphs: dict = {}
        self.pool = torch.cuda.graph_pool_handle() if torch.device(device).type == "cuda" else None

    def state(self):
        return [self.tok, self.ci, self.done]

    def caches(self) -> list[torch.Tensor]:
        """Every tensor indexed (layer, row, head, column, ...): what a copy of cache columns moves."""
        return [c for c in (self.k, self.v, self.ks, self.vs) if c is not None]

    def put(self, li: int, rows, cols, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write keys and values (rows, Hkv, cols, D) into layer `li`'s cache (`rows`, `cols`: indices)."""
        sc = self.scales(li)
        if sc is None:
            self.k[li, rows, :, cols], self.v[li, rows, :, cols] = k, v
            return
        for cache, scales, x in ((self.k[li], sc[0], k), (self.v[li], sc[1], v)):
            cache[rows, :, cols], scales[rows, :, cols] = quantize(x)

    def put_column(self, li: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write every row's keys and values (B, Hkv, D) at the device-side column `col`."""
        sc = self.scales(li)
        if sc is None:
            self.k[li].index_copy_(2, self.col, k[:, :, None])
            self.v[li].index_copy_(2, self.col, v[:, :, None])
            return
        for cache, scales, x in ((self.k[li], sc[0], k), (self.v[li], sc[1], v)):
            values, scale = quantize(x)
            cache.index_copy_(2, self.col, values[:, :, None])
            scales.index_copy_(2, self.col, scale[:, :, None])

    def scales(self, li: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Layer `li`'s (k scales, v scales) (B, Hkv, T) of an int8 cache, else None."""
        return None if self.ks is None or self.vs is None else (self.ks[li], self.vs[li])

    def read(self, li: int, rows, upto: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer `li`'s keys and values of `rows`, columns [0, upto), in the model's dtype."""
        k, v = self.k[li, rows, :, :upto], self.v[li, rows, :, :upto]
        sc = self.scales(li)
        if sc is None:
            return k, v
        return dequantize(k, sc[0][rows, :, :upto], self.dtype), dequantize(v, sc[1][rows, :, :upto], self.dtype)


def sample(logits, temp, top_p, mode: str):
    """(token, log-prob at temperature 1) per row. Shapes: logits (B, V) -> (B,), (B,)."""
    lf = logits.float()
    lse = torch.logsumexp(lf, -1)
    if mode == "greedy":
        tok = lf.argmax(-1)
    else:
        s = lf / temp
        if mode == "top_p":
            sv, si = s.sort(-1, descending=True)
            p = sv.softmax(-1)
            drop = _mass_before(p) > top_p  # keep the smallest head whose mass reaches top_p
            s = torch.full_like(s, -math.inf).scatter(-1, si, sv.masked_fill(drop, -math.inf))
        # Gumbel-max: argmax(s - log E), E ~ Exp(1), is a sample of softmax(s).
        tok = (s - torch.empty_like(s).exponential_().log()).argmax(-1)
    lp = lf.gather(-1, tok[:, None])[:, 0] - lse
    return tok, lp


def _mass_before(p):
    """Exclusive cumulative sum of probabilities along the last axis, in 2^-40 fixed point: an
    integer cumsum adds in any order to the same bits, where a float cumsum on CUDA does not
    (torch's deterministic mode refuses it), so top-p keeps the same head on every run."""
    q = (p.double() * 2.0**40).to(torch.int64)
    return (q.cumsum(-1) - q).double() * 2.0**-40


def _rope(x, rot):
    """x (..., N, D) with interleaved pairs; rot (..., 1, D/2) complex (broadcast over N)."""
    xc = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))
    return torch.view_as_real(xc * rot).flatten(-2).to(x.dtype)


def _silu_mul(gu, inter: int):
    return F.silu(gu[..., :inter]) * gu[..., inter:]


class FastGenerator:
    """Prefill + CUDA-graph decode for Llama-shaped models; same interface as HFGenerator."""

    name = "fast"
    interruptible = True
    """`generate(..., interrupt=)` is asked between prefill chunks and between decode steps."""
    reports_finished = True
    """`generate(..., on_finished=)` hands over rows that stopped while the rest decode."""
    fallback: str | None = None
    """Why this engine left its Triton kernels for the torch ones (one failed to compile), else None."""

    def __init__(self, model, tokenizer, device, max_batch: int = 0, use_graphs: bool | None = None,
                 compile: bool = False, kernels: str = "auto", sampler: str = "auto",
                 attn_tile: tuple[int, int] = (64, 4), seed: int = 0, kv_int8: bool = False):
        why = why_unsupported(model)
        if why:
            raise ValueError(f"fast engine: {why}")
        self.model, self.tok, self.device = model, tokenizer, torch.device(device)
        base = unwrap(model)
        self.cfg = base.config
        self.spec = Spec.of(self.cfg)
        self.dtype = base.model.embed_tokens.weight.dtype
        self.cuda = self.device.type == "cuda"
        self.use_graphs = self.cuda if use_graphs is None else use_graphs and self.cuda
        self.max_batch = max_batch
        self._last_cap = 64 if not self.cuda else 0  # auto: the last batch planned from the card's size
        # Triton attention: (cache columns per block, warps), fixed for the run: a tile chosen by
        # timing at run time would change the reduction order with the card's load
        # (`evotui bench` times other tiles; a run never does).
        self.attn_tile = attn_tile
        from backend.policy import fastattn

        kernels = os.environ.get("EVOTUI_FAST_KERNELS") or kernels  # torch | triton: for debugging
        if kernels == "auto":
            kernels = "triton" if self.cuda and fastattn.available() else "torch"
        self.kernels = kernels  # triton: RoPE + cache write + attention, SwiGLU, RMSNorm (backend/policy/fastattn.py)
        self.sampler = kernels if sampler == "auto" else sampler  # triton: split-vocabulary inverse CDF
        self.seed = seed
        self.eos_ids = self._eos_ids()
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        self._eos = torch.tensor(self.eos_ids, device=self.device)
        self._ws: dict[int, Workspace] = {}
        self._kv_int8 = bool(kv_int8)
        self.kv_reuse = False
        """Keep each row's cache for the next call whose prompt extends it (`model.kv_reuse`;
        backend/policy/kvreuse.py): a multi-turn episode's turn prefills only its new tokens."""
        self._carry: kvreuse.Carry | None = None
        self.reused_tokens = 0
        """Token positions the last call took from the cache instead of computing them."""
        self.prefilled_tokens = 0
        """Positions the last call's prefill computed, its rows' padding inside the window included."""
        # Attention here is global; a sliding window only matters past its length.
        win = getattr(self.cfg, "sliding_window", None) if getattr(self.cfg, "use_sliding_window", True) else None
        self.window = int(win) if win else 0
        self._fp = None
        self._build_static(base)
        self.refresh()
        # The decode step's glue, optionally fused by torch.compile (its shapes never change per batch);
        # a benchmark option only: runs keep it off, since Inductor may pick kernels by timing.
        self._rope, self._silu_mul, self._sample = _rope, _silu_mul, sample
        if compile and self.cuda:
            self._rope = torch.compile(_rope, dynamic=False)
            self._silu_mul = torch.compile(_silu_mul, dynamic=False)
            self._sample = torch.compile(sample, dynamic=False)

    # ------------------------------------------------------------ weights
    def _eos_ids(self) -> list[int]:
        return eos_ids(self.model, self.tok)

    def _build_static(self, base):
        s, dev = self.spec, self.device
        inner = base.model
        self.embed = inner.embed_tokens.weight
        self.norm = inner.norm.weight
        self.head = base.lm_head.weight  # shared with embed when tied
        rot = inner.rotary_emb
        inv = rot.inv_freq.float().to(dev)
        scale = float(getattr(rot, "attention_scaling", 1.0) or 1.0)
        n = int(getattr(self.cfg, "max_position_embeddings", 8192) or 8192)
        ang = torch.arange(n, device=dev, dtype=torch.float32)[:, None] * inv[None]
        self.freqs = torch.polar(torch.full_like(ang, scale), ang)  # (n, D/2) complex64
        self.cos, self.sin = self.freqs.real.contiguous(), self.freqs.imag.contiguous()
        self.ar = torch.arange(n + BUCKET, device=dev)
        self.layers = []
        for lay in inner.layers:
            a, m = lay.self_attn, lay.mlp
            nq, nk = s.heads * s.head_dim, s.kv_heads * s.head_dim
            has_b = _effective_weight(a.q_proj)[1] is not None
            self.layers.append({
                "ln1": lay.input_layernorm.weight, "ln2": lay.post_attention_layernorm.weight,
                "qkv": torch.empty(nq + 2 * nk, s.hidden, dtype=self.dtype, device=dev),
                "qkv_b": torch.empty(nq + 2 * nk, dtype=self.dtype, device=dev) if has_b else None,
                "o": torch.empty(s.hidden, nq, dtype=self.dtype, device=dev),
                "gu": torch.empty(2 * s.inter, s.hidden, dtype=self.dtype, device=dev),
                "down": torch.empty(s.hidden, s.inter, dtype=self.dtype, device=dev),
                "mods": (a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj),
            })

    def _fingerprint(self):
        return tuple((p.data_ptr(), p._version) for n, p in self.model.named_parameters() if "lora_" in n)

    @torch.no_grad()
    def refresh(self) -> None:
        """Re-merge the policy's current LoRA weights into the engine's copy (in place)."""
        s = self.spec
        gen = torch.Generator(device=self.device).manual_seed(self.seed)
        for L in self.layers:
            (q, qb), (k, kb), (v, vb), (o, _), (g, _), (u, _), (d, _) = (_effective_weight(m) for m in L["mods"])
            q = _permute_rope_rows(q, s.heads, s.head_dim)
            k = _permute_rope_rows(k, s.kv_heads, s.head_dim)
            L["qkv"].copy_(_round_to(torch.cat([q, k, v]), self.dtype, gen))
            if L["qkv_b"] is not None:
                qb = _permute_rope_rows(qb.float(), s.heads, s.head_dim)
                kb = _permute_rope_rows(kb.float(), s.kv_heads, s.head_dim)
                L["qkv_b"].copy_(torch.cat([qb, kb, vb.float()]).to(self.dtype))
            L["o"].copy_(_round_to(o, self.dtype, gen))
            L["gu"].copy_(_round_to(torch.cat([g, u]), self.dtype, gen))
            L["down"].copy_(_round_to(d, self.dtype, gen))
        self._fp = self._fingerprint()
        self._carry = None  # computed with the old weights

    def sleep(self) -> None:
        """Free the KV caches and graphs (before training); they come back on the next call."""
        self._ws.clear()
        self._carry = None
        if self.cuda:
            torch.cuda.empty_cache()

    @contextmanager
    def scratch_shapes(self):
        """Batch shapes first made inside the block are freed when it ends. An evolution round's
        probes decode other batch shapes than training does; kept, their KV caches and graphs
        would stay on the card after the round, and with several runs sharing a card the evolving
        runs (not their static twins) would meet out-of-memory errors in training."""
        before = set(self._ws)
        try:
            yield
        finally:
            self._carry = None
            for rows in [b for b in self._ws if b not in before]:
                del self._ws[rows]
            if self.cuda:
                torch.cuda.empty_cache()

    # ------------------------------------------------------------ the model
    def _layer_qkv(self, L, x):
        h = F.rms_norm(x, (self.spec.hidden,), L["ln1"], self.spec.eps)
        return F.linear(h, L["qkv"], L["qkv_b"])

    def _mlp(self, L, x):
        h = F.rms_norm(x, (self.spec.hidden,), L["ln2"], self.spec.eps)
        if x.dim() == 2:  # decode: residual add fused into the matmul
            return x.addmm_(self._silu_mul(F.linear(h, L["gu"]), self.spec.inter), L["down"].t())
        return x + F.linear(_silu_mul(F.linear(h, L["gu"]), self.spec.inter), L["down"])

    def _qkv_roped(self, L, x, rot, rope=_rope):
        """q|k with RoPE applied in one pass, and v. x (..., H) -> (..., Hq+Hkv, D), (..., Hkv, D)."""
        s = self.spec
        nqk = (s.heads + s.kv_heads) * s.head_dim
        qkv = self._layer_qkv(L, x)
        qk = rope(qkv[..., :nqk].unflatten(-1, (s.heads + s.kv_heads, s.head_dim)), rot)
        return qk, qkv[..., nqk:].unflatten(-1, (s.kv_heads, s.head_dim))

    @torch.no_grad()
    def _prefill(self, ws: Workspace, ids, pad, rows: slice, start: int = 0):
        """Fill cache columns [start, P) for `rows` from `ids` (b, P - start), attending over the
        cache from column 0 (columns before `start` hold a reused prefix: backend/policy/kvreuse.py);
        returns last-position logits (b, V)."""
        s = self.spec
        b, W = ids.shape
        P = start + W
        x = F.embedding(ids, self.embed)  # (b, W, H)
        cols = torch.arange(start, P, device=self.device)
        pos = (cols[None] - pad[:, None]).clamp(min=0)
        rot = self.freqs[pos][:, :, None]  # (b, W, 1, D/2)
        j = torch.arange(P, device=self.device)
        allowed = (j[None, None] <= cols[None, :, None]) & (j[None, None] >= pad[:, None, None])
        allowed |= j[None, None] == cols[None, :, None]  # pad rows see themselves: no NaN
        mask = allowed[:, None]  # (b, 1, W, P)
        G = s.heads // s.kv_heads
        for li, L in enumerate(self.layers):
            qk, v = self._qkv_roped(L, x, rot)  # (b, W, Hq+Hkv, D), (b, W, Hkv, D)
            qk, v = qk.transpose(1, 2), v.transpose(1, 2)  # heads first
            q, k = qk[:, :s.heads], qk[:, s.heads:]
            ws.put(li, rows, slice(start, P), k, v)
            if start:
                k, v = ws.read(li, rows, P)
            a = F.scaled_dot_product_attention(q, k.repeat_interleave(G, 1), v.repeat_interleave(G, 1),
                                               attn_mask=mask)  # (b, Hq, W, D)
            x = x + F.linear(a.transpose(1, 2).flatten(2), L["o"])
            x = self._mlp(L, x)
        h = F.rms_norm(x[:, -1], (s.hidden,), self.norm, s.eps)
        return F.linear(h, self.head)

    def _logits_triton(self, ws: Workspace):
        """Next-token logits (B, V) for `ws.tok` at cache column `ws.col`, with the fused Triton kernels:
        no mask, no buckets (each row reads [pad, col])."""
        from backend.policy import fastattn as fa

        s = self.spec
        B = ws.B
        x = F.embedding(ws.tok, self.embed)  # (B, H)
        for li, L in enumerate(self.layers):
            qkv = F.linear(fa.rmsnorm(x, L["ln1"], s.eps), L["qkv"], L["qkv_b"])
            a = torch.empty(B, s.heads, s.head_dim, dtype=self.dtype, device=self.device)
            fa.rope_attend(qkv, self.cos, self.sin, ws.pad, ws.col, ws.k[li], ws.v[li], a, s.heads, s.kv_heads,
                           s.head_dim, *self.attn_tile, scales=ws.scales(li), done=ws.done)
            x.addmm_(a.view(B, -1), L["o"].t())
            act = torch.empty(B, s.inter, dtype=self.dtype, device=self.device)
            fa.silu_mul(F.linear(fa.rmsnorm(x, L["ln2"], s.eps), L["gu"]), act, s.inter)
            x.addmm_(act, L["down"].t())
        return F.linear(fa.rmsnorm(x, self.norm, s.eps), self.head)  # (B, V)

    def _step_triton(self, ws: Workspace, mode: str):
        """The decode step with the Triton kernels: logits, then sampling and recording."""
        from backend.policy import fastattn as fa

        logits = self._logits_triton(ws)
        if self.sampler == "triton" and mode != "top_p":
            fa.sample_and_record(logits, ws, self._eos, self.pad_id, greedy=mode == "greedy")
            ws.ci += 1
        else:
            self._record(ws, *self._sample(logits, ws.temp, ws.top_p, mode))

    def _step(self, ws: Workspace, bucket: int, mode: str):
        """One decode step for every row of `ws`; all state stays on the device."""
        if self.kernels == "triton":
            return self._step_triton(ws, mode)
        tok, lp = self._sample(self._logits_torch(ws, bucket), ws.temp, ws.top_p, mode)
        self._record(ws, tok, lp)

    def _decode_logits(self, ws: Workspace, bucket: int):
        """Next-token logits (B, V) of one decode step with this engine's kernels (nothing sampled)."""
        return self._with_fallback(
            lambda: self._logits_triton(ws) if self.kernels == "triton" else self._logits_torch(ws, bucket))

    def _logits_torch(self, ws: Workspace, bucket: int):
        """Next-token logits (B, V) for `ws.tok` at cache column `ws.col`, with torch kernels
        (SDPA over the cache up to `bucket` columns)."""
        s = self.spec
        B, G = ws.B, s.heads // s.kv_heads
        x = F.embedding(ws.tok, self.embed)  # (B, H)
        rot = self.freqs[ws.col - ws.pad][:, None]  # (B, 1, D/2)
        j = self.ar[:bucket]
        valid = (j[None] >= ws.pad[:, None]) & (j[None] <= ws.col)
        bias = torch.zeros(B, bucket, dtype=self.dtype, device=self.device).masked_fill_(~valid, -math.inf)
        bias = bias[:, None, None]  # (B, 1, 1, S)
        for li, L in enumerate(self.layers):
            qk, v = self._qkv_roped(L, x, rot, self._rope)  # (B, Hq+Hkv, D), (B, Hkv, D)
            ws.put_column(li, qk[:, s.heads:], v)
            q = qk[:, :s.heads].view(B, s.kv_heads, G, s.head_dim)  # a KV head's G query heads side by side
            a = F.scaled_dot_product_attention(q, *ws.read(li, slice(None), bucket),
                                               attn_mask=bias)  # (B, Hkv, G, D)
            x.addmm_(a.reshape(B, -1), L["o"].t())
            x = self._mlp(L, x)
        return F.linear(F.rms_norm(x, (s.hidden,), self.norm, s.eps), self.head)

    def _record(self, ws: Workspace, tok, lp):
        tok = torch.where(ws.done, self.pad_id, tok)
        lp = torch.where(ws.done, 0.0, lp)
        ws.out_tok.index_copy_(1, ws.i, tok[:, None])
        ws.out_lp.index_copy_(1, ws.i, lp[:, None])
        ws.done |= (tok[:, None] == self._eos).any(-1) & ws.stop
        ws.tok.copy_(tok)
        ws.ci += 1

    def _with_fallback(self, fn):
        """`fn()`; if a Triton kernel fails to compile in it, this engine takes the torch kernels
        from then on (`fallback` says why) and runs `fn()` again. A compile error comes before any
        launch, so the workspace is as it was; any other error propagates."""
        try:
            return fn()
        except Exception as e:
            if self.kernels != "triton" or not type(e).__module__.startswith("triton"):
                raise
            first = (str(e).strip().splitlines() or [""])[0][:200]
            self.fallback = f"a Triton kernel failed to compile ({type(e).__name__}: {first})"
            warnings.warn(f"fast engine: {self.fallback}; decoding with the torch kernels from now on", stacklevel=2)
            self.kernels = self.sampler = "torch"
            for ws in self._ws.values():
                ws.graphs.clear()  # captured with the Triton kernels
            return fn()

    def _run_step(self, ws: Workspace, bucket: int, mode: str):
        self._with_fallback(lambda: self._replay_step(ws, bucket, mode))

    def _replay_step(self, ws: Workspace, bucket: int, mode: str):
        """One decode step: run, or (CUDA) captured once per (mode, bucket) and replayed."""
        if not self.use_graphs:
            return self._step(ws, bucket, mode)
        key = (mode, bucket)
        g = ws.graphs.get(key)
        if g is None:
            saved = [t.clone() for t in ws.state()]
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up: compiles, cuBLAS handles; its writes are undone below
                self._step(ws, bucket, mode)
            torch.cuda.current_stream().wait_stream(side)
            for t, v in zip(ws.state(), saved):
                t.copy_(v)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=ws.pool):
                self._step(ws, bucket, mode)
            ws.graphs[key] = g
        g.replay()

    # ------------------------------------------------------------ generate
    def _workspace(self, B: int, T: int) -> Workspace:
        ws = self._ws.pop(B, None)  # re-inserted below: the dict is in order of last use
        if ws is None or ws.T < T:
            ws = None  # free the old cache before the new one is allocated
            while len(self._ws) >= 4:  # keep a few batch shapes, not every one ever seen
                self._ws.pop(next(iter(self._ws)))
            cap = min(len(self.freqs), -(-T // BUCKET) * BUCKET)
            ws = Workspace(self.spec, B, cap, self.dtype, self.device, int8=self.kv_int8)
        self._ws[B] = ws
        return ws

    @property
    def kv_int8(self) -> bool:
        """Keys and values cached as int8 with a scale per vector (`model.kv_int8`; backend/policy/kvint8.py)."""
        return self._kv_int8

    @kv_int8.setter
    def kv_int8(self, on: bool) -> None:
        if bool(on) != self._kv_int8:
            self._kv_int8 = bool(on)
            self.sleep()  # the caches of the other layout go, with the graphs that read them

    @property
    def batch_size(self) -> int:
        """Rows decoded at once: `max_batch` when fixed, else the size last planned from the card's size
        (`memory.generation_batch`).
        The loop halves it after an out-of-memory error (`Engine.with_oom_retry`), which fixes it."""
        return self.max_batch or self._last_cap

    @batch_size.setter
    def batch_size(self, rows: int) -> None:
        self.max_batch = int(rows)

    def _batch_cap(self, width: int, max_new: int) -> int:
        if self.max_batch:
            return self.max_batch
        if not self.cuda:
            return 64
        from backend.policy.memory import generation_batch

        self._last_cap = generation_batch(self.spec, width + max_new, self.device, int8=self.kv_int8)
        return self._last_cap

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, stop_at_eos: bool = True, interrupt=None, on_finished=None) -> list[Generation]:
        """Sample continuations; `stop_at_eos=False` decodes every row to the end (benchmarks).
        `interrupt`: a cheap callable; once it says yes the batch is dropped and
        `GenerationInterrupted` raised (the loop honours a pause or a stop, then draws it again).
        `on_finished(rows, generations)`: called during decoding with rows (indices into `prompts`)
        that stopped at EOS and their generations, the ones this call returns for them, while the
        card decodes the rest (`FINISHED_LAG`); rows finished in the last steps are only returned."""
        if not prompts:
            return []
        if self._fingerprint() != self._fp:  # an optimizer step or adapter load since the last merge
            self.refresh()
        width = max(len(p) for p in prompts)
        cap = self._batch_cap(width, max_new_tokens)
        out: list[Generation] = []
        for i in range(0, len(prompts), cap):
            report = None if on_finished is None else (
                lambda rows, gens, i=i: on_finished([i + r for r in rows], gens))
            out.extend(self._generate(prompts[i:i + cap], max_new_tokens, temperature, top_p, stop_at_eos,
                                      interrupt or _never, report))
        return out

    def _load_prompts(self, prompts, max_new: int) -> tuple[Workspace, torch.Tensor, torch.Tensor]:
        """A workspace for `prompts` + `max_new` tokens, and the left-padded (ids (B, P), pad (B,))."""
        n, P = len(prompts), max(len(p) for p in prompts)
        B = _round_batch(n)
        if P + max_new > len(self.freqs):
            raise ValueError(f"prompt ({P}) + max_new_tokens ({max_new}) exceeds the model's "
                             f"{len(self.freqs)} positions")
        if self.window and P + max_new > self.window:
            raise ValueError(f"fast engine: {P + max_new} tokens exceed the sliding window ({self.window})")
        ws = self._workspace(B, P + max_new)
        ids = torch.full((B, P), self.pad_id, dtype=torch.long)
        pad = torch.full((B,), P - 1, dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, P - len(p):] = torch.tensor(p, dtype=torch.long)
            pad[r] = P - len(p)
        ids, pad = ids.to(self.device), pad.to(self.device)
        ws.pad.copy_(pad)
        ws.i.zero_()
        return ws, ids, pad

    def _prefill_rows(self, ws: Workspace, ids, pad, start: int = 0, at=None):
        """Prefill every row of `ids` from column `start`, in row chunks (bounds the (b, 1, W, P)
        mask and the (b, W, I) activations); yields (rows of `ids`, last-position logits (b, V)) per
        chunk. `at`: the workspace row of each row of `ids` (default: the same row)."""
        B, P = ids.shape
        W = P - start
        chunk = max(1, min((1 << 15) // W, (1 << 26) // (W * P)))
        for r0 in range(0, B, chunk):
            rows = slice(r0, min(B, r0 + chunk))
            yield rows, self._prefill(ws, ids[rows, start:], pad[rows], rows if at is None else at[rows], start)

    def _prefill_distinct(self, ws: Workspace, prompts, ids, pad, interrupt):
        """Prefill each distinct prompt once and copy its cache columns to the rows that repeat it
        (a GRPO group's rollouts share their prompt: at 8 a group, an eighth of the prefill);
        returns every row's last-position logits (B, V)."""
        first, index = distinct_rows(prompts, ws.B)
        at = torch.tensor(first, device=self.device)
        logits = []
        for _rows, chunk_logits in self._prefill_rows(ws, ids[at], pad[at], 0, at):
            _cut_if(interrupt)
            logits.append(chunk_logits)
        copies = [(r, first[k]) for r, k in enumerate(index) if first[k] != r]
        if copies:
            dst = torch.tensor([r for r, _ in copies], device=self.device)
            src = torch.tensor([f for _, f in copies], device=self.device)
            P = ids.shape[1]
            for cache in ws.caches():
                for layer in cache:  # a layer at a time: the gather's copy stays one layer's size
                    layer[dst, :, :P] = layer[src, :, :P]
        return torch.cat(logits)[torch.tensor(index, device=self.device)]

    def _generate(self, prompts, max_new, temperature, top_p, stop_at_eos, interrupt,
                  on_finished=None) -> list[Generation]:
        n, P = len(prompts), max(len(p) for p in prompts)
        carry, self._carry = self._carry, None
        ws, ids, pad = self._load_prompts(prompts, max_new)
        B = ws.B
        mode = "greedy" if temperature <= 0 else ("top_p" if top_p < 1.0 else "sample")
        pads = [P - len(p) for p in prompts]
        start = self._reuse(carry, ws, prompts, pads) if self.kv_reuse else 0
        self.prefilled_tokens = n * (P - start)
        ws.done.zero_()
        ws.done[n:] = True  # padding rows
        ws.stop.fill_(bool(stop_at_eos))
        ws.seed.fill_(int(torch.randint(0, 2**31 - 1, (1,))))
        ws.temp.fill_(max(temperature, 1e-6))
        ws.top_p.fill_(top_p)
        if start:  # a reused prefix: columns from `start` on, every row
            tok0 = torch.empty(B, dtype=torch.long, device=self.device)
            lp0 = torch.empty(B, dtype=torch.float32, device=self.device)
            for rows, logits in self._prefill_rows(ws, ids, pad, start):
                _cut_if(interrupt)
                tok0[rows], lp0[rows] = sample(logits, ws.temp, ws.top_p, mode)
        else:
            tok0, lp0 = sample(self._prefill_distinct(ws, prompts, ids, pad, interrupt), ws.temp, ws.top_p, mode)
        ws.col.fill_(P - 1)  # _record advances it to P, the first decode column
        self._record(ws, tok0, lp0)
        steps = 1
        early: dict[int, Generation] = {}  # rows handed to `on_finished`, by row
        pending = None
        for k in range(max_new - 1):
            _cut_if(interrupt)
            bucket = self._bucket(ws, P + k)
            self._run_step(ws, bucket, mode)
            steps += 1
            if pending is not None and steps % CHECK_EVERY == FINISHED_LAG:
                self._hand_over(pending, early, on_finished)  # host work while the steps since the check decode
                pending = None
            if stop_at_eos and steps % CHECK_EVERY == 0:
                all_done, pending = self._check_done(ws, n, steps, early if on_finished else None)
                if all_done:
                    break
        if pending is not None:
            self._hand_over(pending, early, on_finished)
        gens = self._collect(ws, n, steps, stop_at_eos, early)
        if self.kv_reuse:
            self._carry = kvreuse.Carry(ws, [kvreuse.cached_tokens(p, g.ids) for p, g in zip(prompts, gens)], pads)
        return gens

    def _check_done(self, ws: Workspace, n: int, steps: int, early: dict[int, Generation] | None):
        """At a check (it waits for the card): whether every row is done, and, where `early` is
        given, the rows newly done (not in `early`) with their tokens and log-probs read off the
        card (None: none new). Their generations are made at the hand-over (`_hand_over`), before
        the next check: the text decode is host work, done while the steps launched after the
        check run."""
        if early is None:
            return bool(ws.done[:n].all()), None
        done = ws.done[:n].tolist()
        rows = [r for r, d in enumerate(done) if d and r not in early]
        if not rows:
            return all(done), None
        return all(done), (rows, self._read_rows(ws, rows, steps))

    def _hand_over(self, pending, early: dict[int, Generation], on_finished) -> None:
        """Make the generations of rows a check found done, keep them in `early`, pass them on."""
        rows, (toks, lps) = pending
        gens = self._make_generations(toks, lps, stop_at_eos=True)
        early.update(zip(rows, gens))
        on_finished(rows, gens)

    def _reuse(self, carry: kvreuse.Carry | None, ws: Workspace, prompts, pads: list[int]) -> int:
        """Copy the last call's cached prefixes of `prompts` into `ws`; the first column to compute."""
        matches = kvreuse.match(carry, prompts)
        self.reused_tokens = kvreuse.copy_rows(carry, ws, matches, pads)
        return kvreuse.first_column(pads, matches)

    def _bucket(self, ws: Workspace, col: int) -> int:
        """Cache columns the torch kernels attend over at decode column `col` (Triton reads all)."""
        return ws.T if self.kernels == "triton" else min(ws.T, (col // BUCKET + 1) * BUCKET)

    @torch.no_grad()
    def teacher_forced_logprobs(self, prompts: list[list[int]], continuations: list[list[int]]) -> torch.Tensor:
        """(n, T, V) float32 log-softmax of this engine's next-token logits along given sequences.

        Position t is the distribution the engine samples the continuation's token t from (at
        temperature 1), with the continuation's earlier tokens fed in rather than sampled: the same
        prefill and decode kernels as `generate`, run eagerly (a CUDA graph replays these kernels).
        backend/policy/distcheck.py compares it with the policy's HF forward. All continuations
        have one length T.
        """
        T = len(continuations[0])
        if T == 0 or any(len(c) != T for c in continuations) or len(continuations) != len(prompts):
            raise ValueError("teacher forcing needs one non-empty continuation of one length per prompt")
        if self._fingerprint() != self._fp:
            self.refresh()
        self._carry = None  # this call writes a workspace the carry may point at
        n, P = len(prompts), max(len(p) for p in prompts)
        ws, ids, pad = self._load_prompts(prompts, T)
        ws.done.zero_()  # every row decodes (the Triton kernels skip rows marked done)
        feed = torch.full((ws.B, T), self.pad_id, dtype=torch.long)
        feed[:n] = torch.tensor(continuations, dtype=torch.long)
        feed = feed.to(self.device)
        out = torch.empty(n, T, self.head.shape[0], dtype=torch.float32, device=self.device)
        for rows, logits in self._prefill_rows(ws, ids, pad):
            keep = slice(rows.start, min(rows.stop, n))
            if keep.start < n:
                out[keep, 0] = logits[:keep.stop - keep.start].float().log_softmax(-1)
        ws.col.fill_(P)
        for t in range(1, T):
            ws.tok.copy_(feed[:, t - 1])  # the token at column P + t - 1, fed instead of sampled
            out[:, t] = self._decode_logits(ws, self._bucket(ws, P + t - 1))[:n].float().log_softmax(-1)
            ws.col += 1
        return out

    def _collect(self, ws: Workspace, n: int, steps: int, stop_at_eos: bool,
                 early: dict[int, Generation] | None = None) -> list[Generation]:
        """Every row's generation; `early` holds rows' generations made before (`_generations`)."""
        early = early or {}
        rest = [r for r in range(n) if r not in early]
        made = dict(zip(rest, self._generations(ws, rest, steps, stop_at_eos))) if rest else {}
        return [early[r] if r in early else made[r] for r in range(n)]

    def _generations(self, ws: Workspace, rows: list[int], steps: int, stop_at_eos: bool) -> list[Generation]:
        """`rows`' generations from their first `steps` columns, cut after EOS. A row's columns do not
        change once it is done, so a done row's generation is the same whenever it is made."""
        return self._make_generations(*self._read_rows(ws, rows, steps), stop_at_eos)

    def _read_rows(self, ws: Workspace, rows: list[int], steps: int) -> tuple[list, list]:
        """`rows`' first `steps` token ids and log-probs, off the card."""
        at = torch.tensor(rows, device=self.device)
        return ws.out_tok[at, :steps].tolist(), ws.out_lp[at, :steps].tolist()

    def _make_generations(self, toks: list[list[int]], lps: list[list[float]], stop_at_eos: bool) -> list[Generation]:
        """Generations from rows' token ids and log-probs (host work only)."""
        return [Generation(ids=ids, text=text, finish=finish, logprobs=lrow[:len(ids)])
                for (ids, finish, text), lrow in zip(finished_rows(self.tok, toks, self.eos_ids, stop_at_eos), lps)]


def _never() -> bool:
    return False


def _cut_if(interrupt) -> None:
    """Drop the batch in flight when `interrupt()` says yes (a pause or a stop waits)."""
    if interrupt():
        raise GenerationInterrupted()


def distinct_rows(prompts: list[list[int]], rows: int) -> tuple[list[int], list[int]]:
    """(the first row of each distinct prompt, each row's index into those) for a batch of `rows`
    rows whose first `len(prompts)` hold `prompts`; the padding rows after them share one.

    >>> distinct_rows([[1, 2], [3], [1, 2]], 4)
    ([0, 1, 3], [0, 1, 0, 2])
    """
    first: list[int] = []
    index: list[int] = []
    seen: dict = {}
    for r in range(rows):
        k = seen.setdefault(tuple(prompts[r]) if r < len(prompts) else None, len(first))
        if k == len(first):
            first.append(r)
        index.append(k)
    return first, index


def _round_batch(n: int) -> int:
    """Batch sizes come in few shapes so graphs are reused across calls."""
    if n <= 8:
        return 8
    if n <= 64:
        return 1 << (n - 1).bit_length()
    return -(-n // 64) * 64
