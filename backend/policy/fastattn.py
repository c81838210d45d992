"""Triton kernels for the fast engine's decode step (CUDA; CPU via TRITON_INTERPRET=1 in tests).

A decode step at batch 512 on a 135M model is a few hundred small kernels;
these replace the ones that cost most:

- `attend`: one program per (row, KV head): RoPE on the head's G query vectors
  and its key (pairs interleaved, see fastgen), the key and value written into
  the KV cache at column `col`, then the row's live cache span [pad, col)
  streamed in blocks with an online softmax that starts from the new column;
  the G query heads are the rows of its small matrix product. No mask tensor,
  no padding read, one launch a layer. SDPA's kernels pad 3 query rows to a
  64-row tile and need a bias tensor built each step.
- `silu_mul`: SwiGLU's silu(gate) * up in one pass; `rmsnorm`: a row's RMSNorm.
- `sample_and_record`: the next token of every row (one uniform draw a row against its
  cumulative distribution, summed in vocabulary slices), its log-prob and the EOS mask.

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
    def attend(QKV, COS, SIN, KC, VC, KS, VS, O, PAD, COL, DONE, s_row, s_ob, s_kb, s_kh, s_kt, s_sb, s_sh, scale,
               HQ: tl.constexpr, HKV: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
               BLOCK: tl.constexpr, INT8: tl.constexpr, SKIP: tl.constexpr):
        b = tl.program_id(0)
        h = tl.program_id(1)
        start = tl.load(PAD + b)
        col = tl.load(COL)
        g = tl.arange(0, GP)[:, None]
        d = tl.arange(0, D)[None, :]
        dd = tl.arange(0, D)
        # RoPE on interleaved pairs: y[2j] = x[2j] c_j - x[2j+1] s_j, y[2j+1] = x[2j+1] c_j + x[2j] s_j,
        # with x's partner x[i ^ 1] loaded beside it
        pos = col - start
        c = tl.load(COS + pos * (D // 2) + dd // 2)
        sn = tl.load(SIN + pos * (D // 2) + dd // 2) * tl.where(dd % 2 == 0, -1.0, 1.0)
        row = QKV + b * s_row
        qm = g < G
        qx = tl.load(row + (h * G + g) * D + d, mask=qm, other=0.0).to(tl.float32)
        qp = tl.load(row + (h * G + g) * D + (d ^ 1), mask=qm, other=0.0).to(tl.float32)
        q = (qx * c[None, :] + qp * sn[None, :]).to(O.dtype.element_ty)  # (GP, D), in the model's dtype
        kx = tl.load(row + (HQ + h) * D + dd).to(tl.float32)
        kp = tl.load(row + (HQ + h) * D + (dd ^ 1)).to(tl.float32)
        kn = (kx * c + kp * sn).to(O.dtype.element_ty).to(tl.float32)  # the key as the model's dtype holds it
        vn = tl.load(row + (HQ + HKV + h) * D + dd).to(tl.float32)
        base = b * s_kb + h * s_kh
        sbase = b * s_sb + h * s_sh
        if INT8:  # backend/policy/kvint8.quantize's arithmetic
            kpeak = tl.max(tl.abs(kn), 0)
            k8 = tl.minimum(tl.maximum(tl.floor(kn * tl.where(kpeak > 0, 127.0 / tl.where(kpeak > 0, kpeak, 1.0), 0.0)
                                                + 0.5), -127.0), 127.0)
            vpeak = tl.max(tl.abs(vn), 0)
            v8 = tl.minimum(tl.maximum(tl.floor(vn * tl.where(vpeak > 0, 127.0 / tl.where(vpeak > 0, vpeak, 1.0), 0.0)
                                                + 0.5), -127.0), 127.0)
            tl.store(KC + base + col * s_kt + dd, k8.to(tl.int8))
            tl.store(VC + base + col * s_kt + dd, v8.to(tl.int8))
            tl.store(KS + sbase + col, kpeak / 127.0)
            tl.store(VS + sbase + col, vpeak / 127.0)
            kn = k8 * (kpeak / 127.0)  # the new column as the next steps will read it
            vn = v8 * (vpeak / 127.0)
        else:
            tl.store(KC + base + col * s_kt + dd, kn.to(KC.dtype.element_ty))
            tl.store(VC + base + col * s_kt + dd, vn.to(VC.dtype.element_ty))
        # The new column first, from registers (softmax max = its score, weight 1), then the cached
        # columns [pad, col) in blocks with an online softmax.
        m = tl.sum(q.to(tl.float32) * kn[None, :], 1) * scale
        l = tl.full([GP], 1.0, tl.float32)
        acc = tl.zeros([GP, D], tl.float32) + vn[None, :]
        end = col
        if SKIP:  # a row that stopped reads no cache; its output is unused
            end = tl.where(tl.load(DONE + b) != 0, start // BLOCK * BLOCK, end)
        for t0 in range(start // BLOCK * BLOCK, end, BLOCK):
            t = t0 + tl.arange(0, BLOCK)
            ok = (t >= start) & (t < end)
            k = tl.load(KC + base + t[:, None] * s_kt + d, mask=ok[:, None], other=0)  # (BLOCK, D)
            if INT8:  # int8 values are exact in bf16: the dot is of the stored integers, then scaled
                sc = tl.dot(q, tl.trans(k.to(q.dtype))) * (tl.load(KS + sbase + t, mask=ok, other=0.0) * scale)[None, :]
            else:
                sc = tl.dot(q, tl.trans(k)) * scale  # (GP, BLOCK)
            sc = tl.where(ok[None, :], sc, float("-inf"))
            m_new = tl.maximum(m, tl.max(sc, 1))
            p = tl.exp(sc - m_new[:, None])
            alpha = tl.exp(m - m_new)
            l = l * alpha + tl.sum(p, 1)
            v = tl.load(VC + base + t[:, None] * s_kt + d, mask=ok[:, None], other=0)
            if INT8:  # each column's weight carries its value scale
                pv = p * tl.load(VS + sbase + t, mask=ok, other=0.0)[None, :]
                acc = acc * alpha[:, None] + tl.dot(pv.to(q.dtype), v.to(q.dtype))
            else:
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        out = acc / l[:, None]
        tl.store(O + b * s_ob + (h * G + g) * D + d, out.to(O.dtype.element_ty), mask=qm)

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
    def sample_partial(L, s_l, V, CHUNK, TEMP, DONE, GM, GA, MM, LL, LT,
                       S: tl.constexpr, BLOCK: tl.constexpr, GREEDY: tl.constexpr):
        # One slice of one row's logits: its log-sum-exp parts at temperature 1 (max, sum of
        # exp below it: for the token's log-prob) and the sum of exp at the sampling temperature
        # below the same max; greedy: the slice's largest logit and its index. A row that
        # stopped reads nothing (its token is the pad token whatever is sampled).
        b = tl.program_id(0)
        sp = tl.program_id(1)
        lo = sp * CHUNK
        hi = tl.where(tl.load(DONE + b) != 0, lo, tl.minimum(lo + CHUNK, V))
        inv_t = 1.0 / tl.load(TEMP)
        best = tl.full([BLOCK], float("-inf"), tl.float32)
        idx = tl.zeros([BLOCK], tl.int32)
        m = tl.full([BLOCK], -1e30, tl.float32)
        for c0 in range(lo, hi, BLOCK):  # the slice's max first: both sums are taken below it
            i = c0 + tl.arange(0, BLOCK)
            x = tl.load(L + b * s_l + i, mask=i < hi, other=float("-inf")).to(tl.float32)
            m = tl.maximum(m, x)
            if GREEDY:
                better = x > best
                best = tl.where(better, x, best)
                idx = tl.where(better, i.to(tl.int32), idx)
        mm = tl.max(m, 0)
        l = tl.zeros([BLOCK], tl.float32)
        lt = tl.zeros([BLOCK], tl.float32)
        for c0 in range(lo, hi, BLOCK):
            i = c0 + tl.arange(0, BLOCK)
            x = tl.load(L + b * s_l + i, mask=i < hi, other=float("-inf")).to(tl.float32)
            if GREEDY:
                l += tl.exp(x - mm)
            else:
                l += tl.exp(x - mm)
                lt += tl.exp((x - mm) * inv_t)
        if GREEDY:
            k = tl.argmax(best, 0)
            j = tl.arange(0, BLOCK)
            tl.store(GM + b * S + sp, tl.max(best, 0))
            tl.store(GA + b * S + sp, tl.sum(tl.where(j == k, idx, 0), 0))
        tl.store(MM + b * S + sp, mm)
        tl.store(LL + b * S + sp, tl.sum(l, 0))
        tl.store(LT + b * S + sp, tl.sum(lt, 0))

    @triton.jit
    def sample_finish(GM, GA, MM, LL, LT, L, s_l, V, CHUNK, TEMP, SEED, TOK, DONE, OUT_TOK, OUT_LP, s_out, CI,
                      EOS, n_eos, STOP, pad_id, S: tl.constexpr, NE: tl.constexpr, BLOCK: tl.constexpr,
                      GREEDY: tl.constexpr):
        # Combine a row's slices into its token and log-prob, then record it (the EOS mask included).
        # Sampling inverts the row's cumulative distribution at one uniform draw: the slice where the
        # cumulative mass passes it (from the slices' sums), then the token inside that slice.
        b = tl.program_id(0)
        s = tl.arange(0, S)
        mm = tl.load(MM + b * S + s)
        m = tl.max(mm, 0)
        lse = m + tl.log(tl.sum(tl.load(LL + b * S + s) * tl.exp(mm - m), 0))
        if GREEDY:
            k = tl.argmax(tl.load(GM + b * S + s), 0)
            tok = tl.sum(tl.where(s == k, tl.load(GA + b * S + s), 0), 0).to(tl.int64)
        else:
            inv_t = 1.0 / tl.load(TEMP)
            mass = tl.load(LT + b * S + s) * tl.exp((mm - m) * inv_t)  # each slice's, below exp(m / T)
            u = tl.rand(tl.load(SEED) + tl.load(CI + 1) * 7919, b)
            target = u * tl.sum(mass, 0)
            upto = tl.cumsum(mass, 0)
            k = tl.minimum(tl.sum(tl.where(upto <= target, 1, 0), 0), S - 1)  # the first slice past target
            left = target - tl.sum(tl.where(s < k, mass, 0.0), 0)  # mass still to pass inside slice k
            lo = k * CHUNK
            hi = tl.where(tl.load(DONE + b) != 0, lo, tl.minimum(lo + CHUNK, V))
            # loop-carried scalars start as tensors of their loop types
            run = tl.sum(tl.zeros([BLOCK], tl.float32), 0)  # mass of the slice's tokens before this block
            found = tl.sum(tl.zeros([BLOCK], tl.int32), 0)
            tok = (hi - 1).to(tl.int64)
            last = lo  # rounding can leave `left` unpassed: then the slice's last token with mass
            for c0 in range(0, CHUNK, BLOCK):
                i = lo + c0 + tl.arange(0, BLOCK)
                x = tl.load(L + b * s_l + i, mask=i < hi, other=float("-inf")).to(tl.float32)
                p = tl.exp((x - m) * inv_t)
                cum = run + tl.cumsum(p, 0)
                past = (cum > left) & (i < hi) & (p > 0)
                first = tl.min(tl.where(past, i, 2147483647), 0)
                tok = tl.where((found == 0) & (first < 2147483647), first.to(tl.int64), tok)
                found = found | (first < 2147483647).to(tl.int32)
                last = tl.maximum(last, tl.max(tl.where((i < hi) & (p > 0), i, lo), 0))
                run = run + tl.sum(p, 0)
            tok = tl.where(found != 0, tok, last.to(tl.int64))
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

    _K.update(attend=attend, silu_mul=silu_mul, rmsnorm=rmsnorm,
              sample_partial=sample_partial, sample_finish=sample_finish, next_pow2=triton.next_power_of_2,
              cdiv=triton.cdiv)
    return _K


def rope_attend(qkv, cos, sin, pad, col, kc, vc, out, hq: int, hkv: int, d: int, block: int = 64, warps: int = 4,
                scales=None, done=None) -> None:
    """One decode step's attention from its projections: qkv (B, (Hq+2Hkv)*D) -> out (B, Hq, D).

    RoPE on q and k (at each row's position col - pad), k and v written into the cache kc, vc
    (B, Hkv, T, D) at column `col`, and each row's q against its span [pad, col].
    `scales`: (k scales, v scales) (B, Hkv, T) of an int8 cache (backend/policy/kvint8.py), else
    None. `done` (B,) bool: rows that stopped, which read no cache (their output is unused)."""
    k = _kernels()
    B = qkv.shape[0]
    ks, vs, s_sb, s_sh = (kc, kc, 0, 0) if scales is None else (*scales, scales[0].stride(0), scales[0].stride(1))
    k["attend"][(B, hkv)](qkv, cos, sin, kc, vc, ks, vs, out, pad, col, pad if done is None else done,
                          qkv.stride(0), out.stride(0), kc.stride(0), kc.stride(1), kc.stride(2), s_sb, s_sh,
                          d ** -0.5, HQ=hq, HKV=hkv, G=hq // hkv, GP=max(16, k["next_pow2"](hq // hkv)), D=d,
                          BLOCK=block, INT8=scales is not None, SKIP=done is not None, num_warps=warps)


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

    The vocabulary in `splits` slices, each summed by its own program (its max and sum of exp
    at temperature 1 and at the sampling temperature); then one program a row draws one
    uniform number, finds the slice where the row's cumulative distribution passes it and the
    token inside that slice (greedy: the largest logit), and records the token, its log-prob at
    temperature 1 and the EOS mask at the workspace's step index. Every sum runs in a fixed order:
    the same seed samples the same tokens. The caller advances the step (`ws.ci += 1`).
    """
    k = _kernels()
    B, V = logits.shape
    chunk = k["cdiv"](k["cdiv"](V, splits), block) * block
    gm, mm, ll, lt = (torch.empty((B, splits), dtype=torch.float32, device=logits.device) for _ in range(4))
    ga = torch.empty((B, splits), dtype=torch.int32, device=logits.device)
    k["sample_partial"][(B, splits)](logits, logits.stride(0), V, chunk, ws.temp, ws.done, gm, ga, mm, ll, lt,
                                     S=splits, BLOCK=block, GREEDY=greedy)
    k["sample_finish"][(B,)](gm, ga, mm, ll, lt, logits, logits.stride(0), V, chunk, ws.temp, ws.seed, ws.tok,
                             ws.done, ws.out_tok, ws.out_lp, ws.out_tok.stride(0), ws.ci, eos, eos.numel(), ws.stop,
                             pad_id, S=splits, NE=max(2, k["next_pow2"](eos.numel())), BLOCK=block, GREEDY=greedy)
