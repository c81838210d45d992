"""The TUI's modules import in one direction, counting imports made only for type checking."""

from __future__ import annotations

import grimp


def cycles(package: str) -> list[list[str]]:
    """The strongly connected sets of more than one module in `package`, `TYPE_CHECKING` imports included."""
    graph = grimp.build_graph(package, exclude_type_checking_imports=False, cache_dir=None)
    reach = {m: graph.find_downstream_modules(m) for m in graph.modules}  # modules m imports, transitively
    found = {frozenset({m} | {o for o in reach[m] if m in reach.get(o, ())}) for m in graph.modules}
    return sorted(sorted(c) for c in found if len(c) > 1)


def test_evotui_has_no_import_cycle_even_through_type_checking_imports():
    assert cycles("evotui") == []
