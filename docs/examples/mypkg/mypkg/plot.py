"""``python -m mypkg.plot --in FOLDER``: the ``stats.json`` that ``csv-stats`` wrote into
FOLDER drawn as ``plot.svg`` in ``SIMRUN_OUT``, one bar a column (its mean, a line from its
min to its max, on a log scale: a column of squares spans many decades)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

WIDTH, HEIGHT, BAR = 480, 240, 60


def svg(columns: dict[str, dict[str, float]]) -> str:
    """The chart of ``columns`` (name to count, mean, min and max) as an SVG document."""
    names = sorted(columns)
    top = np.log10(max(max(c["max"] for c in columns.values()), 1.0) + 1)
    scale = (HEIGHT - 40) / top if top > 0 else 1.0

    def y(value: float) -> float:
        return float(HEIGHT - 20 - np.log10(max(value, 0.0) + 1) * scale)

    shapes = []
    for i, name in enumerate(names):
        column, x = columns[name], 40 + i * (BAR + 20)
        shapes.append(
            f'<rect class="mean" data-column="{name}" x="{x}" y="{y(column["mean"]):.1f}" '
            f'width="{BAR}" height="{HEIGHT - 20 - y(column["mean"]):.1f}"/>'
            f'<line x1="{x + BAR / 2}" x2="{x + BAR / 2}" y1="{y(column["min"]):.1f}" '
            f'y2="{y(column["max"]):.1f}" stroke="black"/>'
            f'<text x="{x}" y="{HEIGHT - 4}">{name}</text>'
        )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}">'
        + "".join(shapes)
        + "</svg>\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="mypkg.plot")
    parser.add_argument("--in", dest="folder", type=Path, required=True)
    args = parser.parse_args()
    columns = json.loads((args.folder / "stats.json").read_text())["columns"]
    out = Path(os.environ.get("SIMRUN_OUT", "."))
    (out / "plot.svg").write_text(svg(columns))
    print(f"plotted {len(columns)} columns: {', '.join(sorted(columns))}")


if __name__ == "__main__":
    main()
