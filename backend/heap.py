"""Keep the garbage collector's full passes out of a run's steps.

Python's cyclic collector now and then walks every object the process holds (a
generation-2 pass). A process with the policy loaded holds about 415,000 of
them (the model's modules and parameters' Python side, torch, transformers),
and a full pass took 193 ms on a 2-core CPU, 0 ms once they were frozen
(`benchmarks/gc_pass.py`: `gc.collect()`, median of 5, both in one run; 255 ms
in an earlier run). Such a pass lands at a random point of a step;
on the GPU the data-parallel bench's step times varied that way. `gc.freeze()`
moves the objects alive now out of every later pass; objects made later are
collected as before.

Only for a process that lives for one run (`evotui run --headless`, a
data-parallel rank): frozen objects in a reference cycle are never freed, so a
process that builds engine after engine (tests, compare's in-process arms) must
not freeze.
"""

from __future__ import annotations

import gc


def freeze_long_lived() -> int:
    """Leave every object alive now out of future collections; returns how many are frozen in all."""
    gc.freeze()
    return gc.get_freeze_count()
