"""SVG snapshots of every screen over the frozen fixture run and population (pytest-textual-snapshot).

Update after an intended change with `pytest tests/test_tui_snapshots.py --snapshot-update`;
`python tests/render_screenshots.py` writes the same SVGs into screenshots/.
"""

from __future__ import annotations

import pytest

from render_screenshots import SCENARIOS, make


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_screen(name, snap_compare, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # restored after the test: a population scenario opens a relative path
    app, run_before = make(name, tmp_path)
    assert snap_compare(app, terminal_size=SCENARIOS[name].size, run_before=run_before)
