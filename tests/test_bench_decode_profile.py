"""The decode-only kernel profile of `evotui bench --only gen --profile`
(backend/tools/bench_decode_profile.py): the prefill's kernels are taken out by name."""

from __future__ import annotations

import time

from backend.tools.bench_decode_profile import KernelTime, decode_kernels, profile_decode, table


def test_the_prefill_is_subtracted_by_kernel_and_the_rest_split_over_the_steps():
    prefill = [KernelTime("flash_fprop", 900.0, 30), KernelTime("gemm", 300.0, 90), KernelTime("sample", 10.0, 1)]
    full = [KernelTime("flash_fprop", 900.0, 30), KernelTime("gemm", 1100.0, 810), KernelTime("sample", 90.0, 9),
            KernelTime("decode_attention", 400.0, 240)]
    got = decode_kernels(full, prefill, steps=8)
    assert [k.name for k in got] == ["gemm", "decode_attention", "sample"]  # the prefill-only kernel is gone
    assert got[0] == KernelTime("gemm", 100.0, 90)
    assert got[1] == KernelTime("decode_attention", 50.0, 30)
    assert got[2] == KernelTime("sample", 10.0, 1)


def test_the_table_gives_each_kernels_share_and_how_busy_the_gpu_was():
    text = table([KernelTime("gemm", 300.0, 90), KernelTime("attention", 100.0, 30)], wall_ms=0.8)
    assert "wall 0.80 ms" in text and "kernels 0.40 ms" in text and "GPU busy 50%" in text
    assert "120 launches" in text
    gemm = next(line for line in text.splitlines() if line.startswith("gemm"))
    assert "300.0" in gemm and "75.0%" in gemm


class SlowEngine:
    """A stand-in engine: 2 ms a token, no GPU."""

    use_graphs = True

    def __init__(self):
        self.calls = []

    def generate(self, prompts, new, temperature, stop_at_eos=True):
        self.calls.append((new, self.use_graphs))
        time.sleep(0.002 * new)
        return [[0] * new for _ in prompts]


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def test_with_no_gpu_kernels_it_times_the_step_says_so_and_leaves_graphs_as_they_were():
    from torch.profiler import ProfilerActivity

    eng = SlowEngine()
    text = profile_decode(eng, ["a", "b"], _timed, steps=4, activities=[ProfilerActivity.CPU])
    assert "no kernel times" in text
    wall = float(text.split("wall ")[1].split(" ms")[0])
    assert 1.5 <= wall <= 6.0  # about 2 ms a decode step, the one-token call subtracted
    assert eng.use_graphs is True
    assert (1, False) in eng.calls and (5, False) in eng.calls  # the profiled calls ran eager


def test_after_profiles_the_steps_that_follow_that_many_made():
    from torch.profiler import ProfilerActivity

    eng = SlowEngine()
    profile_decode(eng, ["a", "b"], _timed, steps=4, activities=[ProfilerActivity.CPU], after=10)
    assert (11, False) in eng.calls and (15, False) in eng.calls  # 1 + 10 made, then 4 more profiled
    assert (1, False) not in eng.calls
