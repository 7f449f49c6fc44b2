"""The plot of a task's results table, drawn by the server as SVG like the page's other charts.

Two kinds: **lines**, the mean of y at each x, a line per value of the colour column (one line
without one); and a **heat map** over x and the colour column, each cell coloured by the mean
y of its rows. What to plot is read from the table and the query (``chart_choice``), each kind
drawn by its module (``chart_lines``, ``chart_heat_map``) in the same frame (``chart_frame``).
Work is bounded whatever the table: at most ``MAX_SERIES`` lines of at most ``MAX_POINTS``
points (more distinct x are averaged into equal bins), at most ``HEAT_CELLS`` cells a side.
Every value placed into the markup is a number or escaped text.
"""

from __future__ import annotations

from runs.reads.results import Results
from runs.web.chart_choice import Choice
from runs.web.chart_frame import Plot
from runs.web.chart_heat_map import heat_map
from runs.web.chart_lines import lines


def draw(results: Results, choice: Choice) -> Plot:
    """The plot a choice asks for."""
    if choice.kind == "heatmap":
        return heat_map(results, choice)
    return lines(results, choice)
