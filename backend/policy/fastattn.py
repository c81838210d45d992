"""Triton kernels for the fast engine's decode step (CUDA; CPU via TRITON_INTERPRET=1 in tests).

A decode step at batch 512 on a 135M model is a few hundred small kernels;
these three replace the ones that cost most:

- `rope_store`: RoPE on q and k (pairs interleaved, see fastgen), q out, k and
  v written into the KV cache at column `col`: one launch instead of five.
- `decode_attention`: one program per (row, KV head) streams that row's live
  cache span [pad, col] in blocks with an online softmax; the G query heads
  of the KV head are the rows of its small matrix product. No mask tensor,
  no padding read, one launch. SDPA's kernels pad 3 query rows to a 64-row
  tile and need a bias tensor built each step. Opt-in variants (`variant=`),
  for timing against it (`evotui bench`, benchmarks/decode_attention.py):
  `kv_first` loads a block's V beside its K (the same operations on the
  same values: the same bits); `splitS` is flash-decoding: S programs per
  (row, KV head) each take a contiguous chunk of the span, and a second
  kernel combines their partial softmaxes. Built for sm_90 by Triton 3.6,
  the block loop is software-pipelined at the default num_stages (3): K and
  V blocks are copied ahead asynchronously in every variant, so kv_first
  builds to the same loads and arithmetic as base (`stages=` sets the depth).
- `silu_mul`: SwiGLU's silu(gate) * up in one pass.

Tiles and warps are fixed per call site (no `triton.autotune`): a configuration chosen by
timing would depend on what else runs on the card, and with it the order of the sums.

The kernels are built on first use (triton is imported lazily), so
TRITON_INTERPRET set before that runs them on the CPU.
"""

from __future__ import annotations

import importlib.util

import torch

_K: dict = {}


def available() -> bool:
    return importlib.util.find_spec("triton") is not None


def _kernels() -> dict:
    if _K:
        return _K
    import triton
    import triton.language as tl

    @triton.jit
    def rope_store(QKV, COS, SIN, PAD, COL, QO, KC, VC, s_row, s_qb, s_kb, s_kh, s_kt,
                   HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, NH: tl.constexpr, NV: tl.constexpr):
        b = tl.program_id(0)
        col = tl.load(COL)
        pos = col - tl.load(PAD + b)
        h = tl.arange(0, NH)[:, None]  # q heads, then k heads
        j = tl.arange(0, D // 2)[None, :]
        row = QKV + b * s_row
        live = h < HQ + HKV
        x0 = tl.load(row + h * D + 2 * j, mask=live, other=0.0).to(tl.float32)
        x1 = tl.load(row + h * D + 2 * j + 1, mask=live, other=0.0).to(tl.float32)
        c = tl.load(COS + pos * (D // 2) + j)
        s = tl.load(SIN + pos * (D // 2) + j)
        y0 = (x0 * c - x1 * s).to(QO.dtype.element_ty)
        y1 = (x0 * s + x1 * c).to(QO.dtype.element_ty)
        isq = h < HQ
        qp = QO + b * s_qb + h * D + 2 * j
        tl.store(qp, y0, mask=isq)
        tl.store(qp + 1, y1, mask=isq)
        isk = live & (h >= HQ)
        kp = KC + b * s_kb + (h - HQ) * s_kh + col * s_kt + 2 * j
        tl.store(kp, y0, mask=isk)
        tl.store(kp + 1, y1, mask=isk)
        hv = tl.arange(0, NV)[:, None]
        d = tl.arange(0, D)[None, :]
        v = tl.load(row + (HQ + HKV + hv) * D + d, mask=hv < HKV, other=0.0)
        tl.store(VC + b * s_kb + hv * s_kh + col * s_kt + d, v, mask=hv < HKV)

    @triton.jit
    def attention(Q, KC, VC, O, PAD, COL, s_qb, s_kb, s_kh, s_kt, scale,
                  G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr):
        b = tl.program_id(0)
        h = tl.program_id(1)
        start = tl.load(PAD + b)
        end = tl.load(COL) + 1  # keys [start, end)
        g = tl.arange(0, GP)[:, None]
        d = tl.arange(0, D)[None, :]
        q = tl.load(Q + b * s_qb + (h * G + g) * D + d, mask=g < G, other=0.0)  # (GP, D)
        m = tl.full([GP], float("-inf"), tl.float32)
        l = tl.zeros([GP], tl.float32)
        acc = tl.zeros([GP, D], tl.float32)
        base = b * s_kb + h * s_kh
        for t0 in range(start // BLOCK * BLOCK, end, BLOCK):
            t = t0 + tl.arange(0, BLOCK)
            ok = (t >= start) & (t < end)
            k = tl.load(KC + base + t[:, None] * s_kt + d, mask=ok[:, None], other=0.0)  # (BLOCK, D)
            sc = tl.dot(q, tl.trans(k)) * scale  # (GP, BLOCK)
            sc = tl.where(ok[None, :], sc, float("-inf"))
            m_new = tl.maximum(m, tl.max(sc, 1))
            p = tl.exp(sc - m_new[:, None])
            alpha = tl.exp(m - m_new)
            l = l * alpha + tl.sum(p, 1)
            v = tl.load(VC + base + t[:, None] * s_kt + d, mask=ok[:, None], other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        out = acc / l[:, None]
        tl.store(O + b * s_qb + (h * G + g) * D + d, out.to(O.dtype.element_ty), mask=g < G)

    @triton.jit
    def attention_split(Q, KC, VC, O, PM, PL, PA, PAD, COL, s_qb, s_kb, s_kh, s_kt, scale, HKV,
                        S: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr):
        # `attention`'s loop with V's load issued beside K's at the top of the block (the two reads
        # overlap instead of V's waiting behind the scores; the operations on the values are the
        # same), over chunk c of S of the span: the blocks `attention` walks, cut into S runs of
        # `per` columns (a multiple of BLOCK) by a function of (pad, col, S) alone, so a row's sums
        # are the same on every call. S == 1: the whole span, the output stored (`kv_first`); else
        # the chunk's max, sum and unnormalised accumulator go to the partials for
        # `attention_combine` (a chunk past the span stores max -inf, sum 0).
        b = tl.program_id(0)
        h = tl.program_id(1)
        c = tl.program_id(2)
        start = tl.load(PAD + b)
        end = tl.load(COL) + 1  # keys [start, end)
        first = start // BLOCK * BLOCK
        per = tl.cdiv(tl.cdiv(end - first, BLOCK), S) * BLOCK
        lo = first + c * per
        hi = tl.minimum(lo + per, end)
        g = tl.arange(0, GP)[:, None]
        d = tl.arange(0, D)[None, :]
        q = tl.load(Q + b * s_qb + (h * G + g) * D + d, mask=g < G, other=0.0)  # (GP, D)
        m = tl.full([GP], float("-inf"), tl.float32)
        l = tl.zeros([GP], tl.float32)
        acc = tl.zeros([GP, D], tl.float32)
        base = b * s_kb + h * s_kh
        for t0 in range(lo, hi, BLOCK):
            t = t0 + tl.arange(0, BLOCK)
            ok = (t >= start) & (t < hi)
            k = tl.load(KC + base + t[:, None] * s_kt + d, mask=ok[:, None], other=0.0)  # (BLOCK, D)
            v = tl.load(VC + base + t[:, None] * s_kt + d, mask=ok[:, None], other=0.0)
            sc = tl.dot(q, tl.trans(k)) * scale  # (GP, BLOCK)
            sc = tl.where(ok[None, :], sc, float("-inf"))
            m_new = tl.maximum(m, tl.max(sc, 1))
            p = tl.exp(sc - m_new[:, None])
            alpha = tl.exp(m - m_new)
            l = l * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        if S == 1:
            out = acc / l[:, None]
            tl.store(O + b * s_qb + (h * G + g) * D + d, out.to(O.dtype.element_ty), mask=g < G)
        else:
            gi = tl.arange(0, GP)
            w = ((b * HKV + h) * S + c) * G + gi  # partials: (B, Hkv, S, G) for m and l, (B, Hkv, S, G, D) for acc
            tl.store(PM + w, m, mask=gi < G)
            tl.store(PL + w, l, mask=gi < G)
            tl.store(PA + w[:, None] * D + d, acc, mask=g < G)

    @triton.jit
    def attention_combine(PM, PL, PA, O, s_ob, HKV, S: tl.constexpr, SP: tl.constexpr, G: tl.constexpr,
                          GP: tl.constexpr, D: tl.constexpr):
        # One (row, KV head): its S partial softmaxes rescaled to their common max and summed,
        # chunk by chunk in a fixed order (a tree over S, fixed at compile time).
        b = tl.program_id(0)
        h = tl.program_id(1)
        s = tl.arange(0, SP)[:, None]
        g = tl.arange(0, GP)[None, :]
        live = (s < S) & (g < G)
        w = ((b * HKV + h) * S + s) * G + g  # (SP, GP)
        m = tl.load(PM + w, mask=live, other=float("-inf"))
        l = tl.load(PL + w, mask=live, other=0.0)
        mx = tl.max(m, 0)
        mx = tl.where(mx == float("-inf"), 0.0, mx)  # padding rows: no -inf - -inf
        a = tl.exp(m - mx[None, :])  # 0 for empty chunks
        total = tl.sum(l * a, 0)  # (GP,)
        total = tl.where(tl.arange(0, GP) < G, total, 1.0)  # padding rows: no 0 / 0
        acc = tl.load(PA + w[:, :, None] * D + tl.arange(0, D)[None, None, :], mask=live[:, :, None],
                      other=0.0)  # (SP, GP, D)
        out = tl.sum(acc * a[:, :, None], 0) / total[:, None]  # (GP, D)
        go = tl.arange(0, GP)[:, None]
        d = tl.arange(0, D)[None, :]
        tl.store(O + b * s_ob + (h * G + go) * D + d, out.to(O.dtype.element_ty), mask=go < G)

    @triton.jit
    def silu_mul(GU, OUT, s_gu, s_out, INTER, BLOCK: tl.constexpr):
        b = tl.program_id(0)
        i = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = i < INTER
        g = tl.load(GU + b * s_gu + i, mask=ok, other=0.0).to(tl.float32)
        u = tl.load(GU + b * s_gu + INTER + i, mask=ok, other=0.0).to(tl.float32)
        tl.store(OUT + b * s_out + i, (g / (1.0 + tl.exp(-g)) * u).to(OUT.dtype.element_ty), mask=ok)

    @triton.jit
    def rmsnorm(X, W, Y, s_x, s_y, N, eps, BLOCK: tl.constexpr):
        r = tl.program_id(0)
        i = tl.arange(0, BLOCK)
        ok = i < N
        x = tl.load(X + r * s_x + i, mask=ok, other=0.0).to(tl.float32)
        y = x * tl.rsqrt(tl.sum(x * x, 0) / N + eps)
        w = tl.load(W + i, mask=ok, other=0.0).to(tl.float32)
        tl.store(Y + r * s_y + i, (y * w).to(Y.dtype.element_ty), mask=ok)

    @triton.jit
    def sample_partial(L, s_l, V, CHUNK, TEMP, SEED, CI, GM, GA, MM, LL,
                       S: tl.constexpr, BLOCK: tl.constexpr, GREEDY: tl.constexpr):
        # One slice of one row's logits: the best Gumbel-perturbed score and its index, and
        # the slice's log-sum-exp parts at temperature 1 (for the token's log-prob).
        b = tl.program_id(0)
        sp = tl.program_id(1)
        lo = sp * CHUNK
        hi = tl.minimum(lo + CHUNK, V)
        inv_t = 1.0 / tl.load(TEMP)
        seed = tl.load(SEED) + tl.load(CI + 1) * 7919
        best = tl.full([BLOCK], float("-inf"), tl.float32)
        idx = tl.zeros([BLOCK], tl.int32)
        m = tl.full([BLOCK], -1e30, tl.float32)
        l = tl.zeros([BLOCK], tl.float32)
        for c0 in range(lo, hi, BLOCK):
            i = c0 + tl.arange(0, BLOCK)
            ok = i < hi
            x = tl.load(L + b * s_l + i, mask=ok, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, x)
            l = l * tl.exp(m - m_new) + tl.exp(x - m_new)
            m = m_new
            if GREEDY:
                z = x
            else:
                u = tl.rand(seed, (b * V + i).to(tl.int32))
                u = tl.minimum(tl.maximum(u, 1e-30), 0.99999994)  # float32 u can round to 1: Gumbel tail cut at ~16.6
                z = x * inv_t - tl.log(-tl.log(u))
            z = tl.where(ok, z, float("-inf"))
            better = z > best
            best = tl.where(better, z, best)
            idx = tl.where(better, i.to(tl.int32), idx)
        k = tl.argmax(best, 0)
        j = tl.arange(0, BLOCK)
        mm = tl.max(m, 0)
        tl.store(GM + b * S + sp, tl.max(best, 0))
        tl.store(GA + b * S + sp, tl.sum(tl.where(j == k, idx, 0), 0))
        tl.store(MM + b * S + sp, mm)
        tl.store(LL + b * S + sp, tl.sum(l * tl.exp(m - mm), 0))

    @triton.jit
    def sample_finish(GM, GA, MM, LL, L, s_l, TOK, DONE, OUT_TOK, OUT_LP, s_out, CI, EOS, n_eos, STOP, pad_id,
                      S: tl.constexpr, NE: tl.constexpr):
        # Combine a row's slices into its token and log-prob, then record it (the EOS mask included).
        b = tl.program_id(0)
        s = tl.arange(0, S)
        gm = tl.load(GM + b * S + s)
        k = tl.argmax(gm, 0)
        tok = tl.sum(tl.where(s == k, tl.load(GA + b * S + s), 0), 0).to(tl.int64)
        mm = tl.load(MM + b * S + s)
        m = tl.max(mm, 0)
        lse = m + tl.log(tl.sum(tl.load(LL + b * S + s) * tl.exp(mm - m), 0))
        lp = tl.load(L + b * s_l + tok).to(tl.float32) - lse
        done = tl.load(DONE + b) != 0
        tok = tl.where(done, pad_id, tok)
        lp = tl.where(done, 0.0, lp)
        i = tl.load(CI + 1)
        tl.store(OUT_TOK + b * s_out + i, tok)
        tl.store(OUT_LP + b * s_out + i, lp)
        e = tl.arange(0, NE)
        eos = tl.load(EOS + e, mask=e < n_eos, other=-1)
        hit = tl.sum(tl.where(eos == tok, 1, 0), 0) > 0
        stop = tl.load(STOP) != 0
        tl.store(DONE + b, done | (hit & stop))
        tl.store(TOK + b, tok)

    _K.update(rope_store=rope_store, attention=attention, attention_split=attention_split,
              attention_combine=attention_combine, silu_mul=silu_mul, rmsnorm=rmsnorm,
              sample_partial=sample_partial, sample_finish=sample_finish, next_pow2=triton.next_power_of_2,
              cdiv=triton.cdiv)
    return _K


def rope_store(qkv, cos, sin, pad, col, q_out, kc, vc, hq: int, hkv: int, d: int) -> None:
    """qkv (B, (Hq+2Hkv)*D) -> q_out (B, Hq, D) roped; k roped and v into kc, vc (B, Hkv, T, D) at col."""
    k = _kernels()
    B = qkv.shape[0]
    k["rope_store"][(B,)](qkv, cos, sin, pad, col, q_out, kc, vc, qkv.stride(0), q_out.stride(0),
                          kc.stride(0), kc.stride(1), kc.stride(2), HQ=hq, HKV=hkv, D=d,
                          NH=k["next_pow2"](hq + hkv), NV=k["next_pow2"](hkv))


VARIANTS = ("base", "kv_first", "split2", "split4", "split8")
"""`decode_attention`'s variants (benchmarks/decode_attention.py times these); any `split<S>`, S >= 2, is accepted."""


def splits_of(variant: str) -> int:
    """Chunks per (row, KV head) of an attention variant: 1 for base and kv_first, S for `split<S>`;
    ValueError for anything else."""
    if variant in ("base", "kv_first"):
        return 1
    n = variant[len("split"):] if variant.startswith("split") else ""
    if not n.isdigit() or int(n) < 2:
        raise ValueError(f"attention variant {variant!r}: expected base, kv_first or split<S> with S >= 2")
    return int(n)


def decode_attention(q, kc, vc, pad, col, out, hkv: int, block: int = 64, warps: int = 4, variant: str = "base",
                     stages: int | None = None) -> None:
    """q (B, Hq, D) against each row's cache span [pad, col] -> out (B, Hq, D).

    variant: base (one program per (row, KV head)); kv_first (base with V loaded beside K: the
    same bits); split<S> (S programs per (row, KV head) on contiguous chunks of block-multiple
    length, then a combine kernel; the grid is (B, Hkv, S) whatever pad and col are, so a CUDA
    graph captures it). stages: Triton's num_stages, the software-pipelining depth of the block
    loop, the kernel's only loop (None: Triton's default, 3; 1: no pipelining), for timing only.

    split's partials (fp32, B x Hkv x S x G x (D + 2) values) are allocated here with torch.empty,
    as the engine allocates its other per-layer tensors: under CUDA-graph capture they come from
    the graph's private pool at addresses fixed for its replays.
    """
    k = _kernels()
    B, hq, d = q.shape
    G = hq // hkv
    S = splits_of(variant)
    opt = dict(num_warps=warps) | ({"num_stages": stages} if stages else {})
    args = (q.stride(0), kc.stride(0), kc.stride(1), kc.stride(2), d ** -0.5)
    GP = max(16, k["next_pow2"](G))  # tl.dot's smallest tile
    if variant == "base":
        k["attention"][(B, hkv)](q, kc, vc, out, pad, col, *args, G=G, GP=GP, D=d, BLOCK=block, **opt)
        return
    if S == 1:  # kv_first: the split kernel over one chunk, storing the output itself
        k["attention_split"][(B, hkv, 1)](q, kc, vc, out, out, out, out, pad, col, *args, hkv, S=1, G=G, GP=GP, D=d,
                                          BLOCK=block, **opt)
        return
    pm, pl = (torch.empty((B, hkv, S, G), dtype=torch.float32, device=q.device) for _ in range(2))
    pa = torch.empty((B, hkv, S, G, d), dtype=torch.float32, device=q.device)
    k["attention_split"][(B, hkv, S)](q, kc, vc, out, pm, pl, pa, pad, col, *args, hkv, S=S, G=G, GP=GP, D=d,
                                      BLOCK=block, **opt)
    k["attention_combine"][(B, hkv)](pm, pl, pa, out, out.stride(0), hkv, S=S, SP=k["next_pow2"](S), G=G,
                                     GP=max(2, k["next_pow2"](G)), D=d)


def silu_mul(gu, out, inter: int, block: int = 512) -> None:
    """gu (B, 2I) -> out (B, I) = silu(gate) * up."""
    k = _kernels()
    B = gu.shape[0]
    k["silu_mul"][(B, k["cdiv"](inter, block))](gu, out, gu.stride(0), out.stride(0), inter, BLOCK=block)


def rmsnorm(x, w, eps: float):
    """RMSNorm of each row of x (B, N) with weight w, in one pass."""
    k = _kernels()
    y = x.new_empty(x.shape)
    n = x.shape[-1]
    k["rmsnorm"][(x.shape[0],)](x, w, y, x.stride(0), y.stride(0), n, eps, BLOCK=k["next_pow2"](n))
    return y


def sample_and_record(logits, ws, eos, pad_id: int, greedy: bool, splits: int = 16, block: int = 1024) -> None:
    """Sample one token per row of logits (B, V) and record it in the workspace, all on the device.

    Gumbel-max over `splits` slices of the vocabulary (then a per-row combine),
    the log-prob at temperature 1, the EOS mask, and the output columns at the
    workspace's step index. The caller advances the step (`ws.ci += 1`).
    """
    k = _kernels()
    B, V = logits.shape
    chunk = k["cdiv"](k["cdiv"](V, splits), block) * block
    gm, mm, ll = (torch.empty((B, splits), dtype=torch.float32, device=logits.device) for _ in range(3))
    ga = torch.empty((B, splits), dtype=torch.int32, device=logits.device)
    k["sample_partial"][(B, splits)](logits, logits.stride(0), V, chunk, ws.temp, ws.seed, ws.ci, gm, ga, mm, ll,
                                     S=splits, BLOCK=block, GREEDY=greedy)
    k["sample_finish"][(B,)](gm, ga, mm, ll, logits, logits.stride(0), ws.tok, ws.done, ws.out_tok, ws.out_lp,
                             ws.out_tok.stride(0), ws.ci, eos, eos.numel(), ws.stop, pad_id,
                             S=splits, NE=max(2, k["next_pow2"](eos.numel())))
