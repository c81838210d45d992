"""Pool the card rows of several lanes into one ratio with its 95% interval.

    python3 benchmarks/card_pool.py OUT/card1/rows.json OUT/card2/rows.json ...

Each rows.json is one `evotui bench -- --only card` lane (today against the same `--card-new`
setting, on its own card). Each lane's log ratio is weighted by its inverse variance
(`backend.tools.bench_card.pooled_ratio`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.tools.bench_card import pooled_ratio  # noqa: E402


def main(paths: list[str]) -> int:
    if not paths:
        print("usage: card_pool.py ROWS.json [ROWS.json ...]", file=sys.stderr)
        return 2
    lanes = []
    for path in paths:
        try:
            rows = [r for r in json.loads(Path(path).read_text()) if r.get("section") == "card"]
        except (OSError, ValueError) as e:
            print(f"{path}: cannot read card rows ({e})", file=sys.stderr)
            return 1
        if not rows:
            print(f"{path}: no card row", file=sys.stderr)
            return 1
        lanes.append(rows[0]["data"])
        print(f"{path}: {rows[0]['ratio']} (today {rows[0]['baseline']}, new {rows[0]['ours']})")
    try:
        p = pooled_ratio(lanes)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 1
    print(f"pooled over {p['lanes']} lanes: {p['ratio']:.2f}x [{p['ci'][0]:.2f}, {p['ci'][1]:.2f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
