"""Where a decode step's time goes (`evotui bench --only gen --profile`, CUDA).

A profile of one `generate` call mixes the prefill with the decode steps, and at short
completions the prefill's attention leads the table. Here the prefill is taken out: the kernels
of a call that makes 1 token are subtracted, by kernel name, from those of a call that makes
1 + `steps` tokens. What is left is the decode steps' GPU time per kernel. The same two calls,
timed under CUDA graphs, give the decode step's wall time. GPU time well under wall time means
the step waits on the host (launches, sampling, Python between steps); GPU time close to it
means the kernels themselves set the pace.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelTime:
    name: str
    us: float
    """Self GPU time, microseconds, summed over the calls."""
    calls: int


def decode_kernels(full: list[KernelTime], prefill: list[KernelTime], steps: int) -> list[KernelTime]:
    """Per decode step: each kernel's time and calls in `full` less those in `prefill`,
    divided by `steps`, largest first; kernels that only the prefill ran are dropped."""
    base = {k.name: k for k in prefill}
    out = []
    for k in full:
        b = base.get(k.name)
        us, calls = k.us - (b.us if b else 0.0), k.calls - (b.calls if b else 0)
        if us > 0 and calls > 0:
            out.append(KernelTime(k.name, us / steps, round(calls / steps)))
    return sorted(out, key=lambda k: -k.us)


def table(kernels: list[KernelTime], wall_ms: float, rows: int = 15) -> str:
    """The decode step's kernels as text: name, us a step, share of the step's GPU time, calls."""
    gpu_us = sum(k.us for k in kernels)
    if gpu_us <= 0:
        return f"decode step: wall {wall_ms:.2f} ms; no kernel times (the profiler saw no GPU)"
    lines = [f"decode step: wall {wall_ms:.2f} ms under graphs; kernels {gpu_us / 1000:.2f} ms "
             f"(GPU busy {gpu_us / 1000 / wall_ms:.0%} of the step); {sum(k.calls for k in kernels)} launches",
             f"{'kernel':<64}  {'us/step':>8}  {'share':>6}  {'calls':>5}"]
    for k in kernels[:rows]:
        lines.append(f"{k.name[:64]:<64}  {k.us:>8.1f}  {k.us / gpu_us:>6.1%}  {k.calls:>5}")
    return "\n".join(lines)


def _kernels(prof) -> list[KernelTime]:
    out = []
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0.0)
        if us:
            out.append(KernelTime(e.key, float(us), int(e.count)))
    return out


def profile_decode(eng, prompts, timed, steps: int = 8, activities=None, after: int = 0) -> str:
    """`eng`: a fast engine; `timed(fn) -> (seconds, result)` synchronises the device around fn;
    `activities`: what the profiler records (default: CUDA kernels); `after`: decode steps made
    before the profiled ones (attention reads a cache that grows with them: 0 profiles the first
    steps, 247 the last 8 of 256)."""
    from torch.profiler import ProfilerActivity, profile

    activities = activities or [ProfilerActivity.CUDA]
    first, last = 1 + after, 1 + after + steps
    eng.generate(prompts, last, 1.0, stop_at_eos=False)  # graphs captured at this shape
    t1, _ = timed(lambda: eng.generate(prompts, first, 1.0, stop_at_eos=False))
    tn, _ = timed(lambda: eng.generate(prompts, last, 1.0, stop_at_eos=False))
    wall_ms = max(tn - t1, 1e-9) * 1000 / steps
    graphs = eng.use_graphs
    eng.use_graphs = False  # eager: kernels named one by one
    try:
        eng.generate(prompts, 2, 1.0, stop_at_eos=False)
        with profile(activities=activities) as p1:
            eng.generate(prompts, first, 1.0, stop_at_eos=False)
        with profile(activities=activities) as pn:
            eng.generate(prompts, last, 1.0, stop_at_eos=False)
    finally:
        eng.use_graphs = graphs
    return table(decode_kernels(_kernels(pn), _kernels(p1), steps), wall_ms)
