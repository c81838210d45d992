"""A DataTable whose columns are sized to their content and the table: proportional where text is long,
dropped where it cannot fit, and never narrower than a number in them.

Each column has a least width and a share (`grow`) of the room left over; a
fixed column (grow 0: ids, steps, rewards) is as wide as its widest cell, so a
number is never cut; a growing one ends long text with an ellipsis. When even
the least widths do not fit, the columns with the lowest priority are left
out. The table keeps its rows as data and redraws them when its width changes
or a wider number arrives, so an 80-column terminal shows the columns that
matter and a 160-column one shows whole titles.

    >>> fit([Col("id", "id", 4), Col("title", "title", 10, grow=1)], 40)
    {'id': 4, 'title': 32}
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rich.text import Text
from textual.widgets import DataTable

PAD = 1  # DataTable's cell padding on each side of a column


@dataclass(frozen=True)
class Col:
    key: str
    label: str
    width: int
    """Least width in cells."""
    grow: int = 0
    """Share of the spare width (0: fixed)."""
    priority: int = 0
    """Columns with the highest priority number are left out first when the table is too narrow."""


def fit(cols: list[Col], total: int) -> dict[str, int]:
    """{column key: width} for the columns that fit in `total` cells, in their order."""
    shown = list(cols)
    while len(shown) > 1 and sum(c.width + 2 * PAD for c in shown) > total:
        shown.remove(max(shown, key=lambda c: (c.priority, shown.index(c))))
    spare = max(0, total - sum(c.width + 2 * PAD for c in shown))
    growers = [c for c in shown if c.grow]
    shares = sum(c.grow for c in growers)
    widths = {c.key: c.width for c in shown}
    given = 0
    for c in growers:
        extra = spare * c.grow // shares if shares else 0
        widths[c.key] += extra
        given += extra
    if growers:
        widths[growers[-1].key] += spare - given  # the rounding remainder
    return widths


def cell_width(cell) -> int:
    """Cells a value takes on screen."""
    return cell.cell_len if isinstance(cell, Text) else len(str(cell))


def content_widths(cols: list[Col], rows: list[tuple[str, dict]]) -> dict[str, int]:
    """{column key: widest cell or label} of the fixed columns (the ones whose cells must not be cut).

    >>> content_widths([Col("id", "id", 4), Col("t", "title", 8, grow=1)], [("1", {"id": 1000016, "t": "x"})])
    {'id': 7}
    """
    out = {}
    for c in cols:
        if not c.grow:
            out[c.key] = max([len(c.label)] + [cell_width(r.get(c.key, "")) for _, r in rows])
    return out


class FittedTable(DataTable):
    """`set_rows` / `append_rows` take (key, {column key: cell}); the columns follow the width."""

    # the scrollbar's room is always kept, so rows arriving later never push the last column out
    DEFAULT_CSS = "FittedTable { scrollbar-gutter: stable; }"

    def __init__(self, columns: list[Col], **kwargs) -> None:
        kwargs.setdefault("cursor_type", "row")
        kwargs.setdefault("zebra_stripes", True)
        super().__init__(**kwargs)
        self.specs = columns
        self.widths: dict[str, int] = {}
        self.data: list[tuple[str, dict]] = []
        self._content: dict[str, int] = {}  # widest cell of each fixed column so far

    def on_resize(self) -> None:
        self._refit()

    def on_mount(self) -> None:
        self._refit()

    def _refit(self) -> None:
        width = self.scrollable_content_region.width or self.size.width
        if width <= 0:
            return
        specs = [replace(c, width=max(c.width, self._content.get(c.key, 0))) for c in self.specs]
        widths = fit(specs, width)
        if widths == self.widths:
            return
        self.widths = widths
        key = self._cursor_key()
        self.clear(columns=True)
        for c in self.specs:
            if c.key in widths:
                self.add_column(c.label, width=widths[c.key], key=c.key)
        self._add(self.data)
        self._restore(key)

    def set_rows(self, rows: list[tuple[str, dict]], keep_cursor: bool = True) -> None:
        """Replace every row; the cursor stays on the row with the same key when it is still there
        (`keep_cursor`), else goes to the top."""
        key = self._cursor_key() if keep_cursor else None
        self.data = list(rows)
        self._content = content_widths(self.specs, self.data)
        self.clear()
        if not self._widen():
            self._add(self.data)
        self._restore(key)

    def append_rows(self, rows: list[tuple[str, dict]]) -> None:
        new = [(k, r) for k, r in rows if k not in self.rows]
        self.data += new
        wider = content_widths(self.specs, new)
        self._content = {k: max(w, self._content.get(k, 0)) for k, w in wider.items()}
        if not self._widen():
            self._add(new)

    def _widen(self) -> bool:
        """Lay the columns out again when a fixed column's content outgrew it; True when it did
        (the rows are redrawn then)."""
        if all(self.widths.get(k, w) >= w for k, w in self._content.items() if k in self.widths):
            return False
        self.widths = {}
        self._refit()
        return True

    def _add(self, rows: list[tuple[str, dict]]) -> None:
        keys = [c.key for c in self.specs if c.key in self.widths]
        for key, cells in rows:
            if key not in self.rows:
                self.add_row(*(cells.get(k, "") for k in keys), key=key)

    def _cursor_key(self) -> str | None:
        rows = self.ordered_rows
        return rows[self.cursor_row].key.value if 0 <= self.cursor_row < len(rows) else None

    def _restore(self, key: str | None) -> None:
        if key is not None and key in self.rows:
            self.move_cursor(row=self.get_row_index(key), animate=False)
