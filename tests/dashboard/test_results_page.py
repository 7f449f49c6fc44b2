"""A task's results table on its run's page: the table, its sorting and downloads, the plot,
who may see them, and files a task made hostile (links, FIFOs, floods, bad bytes, markup)."""

from __future__ import annotations

import csv
import io
import os
import re
from pathlib import Path

import pytest
from django.test import Client

from runs.models import Run, RunState, Task, TaskState
from runs.web import chart_frame, chart_lines
from tests.dashboard.logins import logged_in
from tests.factories import ended, running, submitted

pytestmark = pytest.mark.django_db

SWEEP = """
name: grid
tasks:
  sweep: {type: squares, settings: {n: 6}}
"""
HEADER = ["unit", "T", "seed", "method", "exit_code", "seconds", "peak_gib", "energy", "error"]


def grid_rows() -> list[list[object]]:
    """A 3 × 2 grid of T and seed, a row per unit, with an energy that grows with T."""
    rows: list[list[object]] = []
    for unit, (t, seed) in enumerate((t, s) for t in (0.5, 1.0, 1.5) for s in (0, 1)):
        energy = 10 * t + seed
        rows.append([unit, t, seed, "mc" if seed else "md", 0, 0.1 * unit, 0.25, energy, ""])
    return rows


def csv_text(header: list[str], rows: list[list[object]]) -> str:
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return text.getvalue()


def out_dir(store: Path, run: Run, task: str = "sweep") -> Path:
    folder = store / "runs" / run.id / "tasks" / task / "out"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def with_results(store: Path, owner, data: bytes | str | None = None) -> Run:
    """A run that ended, its sweep's merge having written ``data`` as out/results.csv."""
    run = ended(submitted(owner, SWEEP))
    if data is None:
        data = csv_text(HEADER, grid_rows())
    target = out_dir(store, run) / "results.csv"
    if isinstance(data, str):
        target.write_text(data)
    else:
        target.write_bytes(data)
    return run


def results_url(run: Run, rest: str = "") -> str:
    return f"/runs/{run.id}/tasks/sweep/results/{rest}"


def body_rows(html: str) -> list[list[str]]:
    """The table's rows as the page shows them: the text of each cell."""
    table = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [
        [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)
    ]


def header_names(html: str) -> list[str]:
    return re.findall(r'<th[^>]*data-column="([^"]*)"', html)


# The run page and the section


def test_the_run_page_holds_a_results_section_for_a_done_task_with_a_table(alice, owner, store):
    run = with_results(store, owner)
    page = alice.get(f"/runs/{run.id}/").content.decode()
    assert 'id="results-sweep"' in page and "hx-preserve" in page
    assert f'hx-get="{results_url(run)}"' in page


def test_a_failed_task_with_a_table_shows_it(alice, owner, store):
    run = ended(submitted(owner, SWEEP), RunState.FAILED)
    Task.objects.filter(run=run).update(state=TaskState.FAILED)
    (out_dir(store, run) / "results.csv").write_text(csv_text(HEADER, grid_rows()))
    assert 'id="results-sweep"' in alice.get(f"/runs/{run.id}/").content.decode()


def test_a_task_without_a_table_or_not_done_has_no_results_section(alice, owner, store):
    run = ended(submitted(owner, SWEEP))
    assert 'id="results-sweep"' not in alice.get(f"/runs/{run.id}/").content.decode()
    live = running(submitted(owner, SWEEP), sweep="running")
    (out_dir(store, live) / "results.csv").write_text(csv_text(HEADER, grid_rows()))
    assert 'id="results-sweep"' not in alice.get(f"/runs/{live.id}/").content.decode()


def test_the_section_shows_every_column_and_row_in_unit_order_with_the_count(alice, owner, store):
    run = with_results(store, owner)
    answer = alice.get(results_url(run))
    assert answer.status_code == 200
    html = answer.content.decode()
    assert header_names(html) == HEADER
    rows = body_rows(html)
    assert [r[0] for r in rows] == ["0", "1", "2", "3", "4", "5"]
    assert rows[3] == ["3", "1.0", "1", "mc", "0", "0.3", "0.25", "11.0", ""]
    # A number of more digits than the page shows is rounded; its cell's tooltip has all of it.
    assert '<td class="num" title="0.30000000000000004">0.3</td>' in html
    assert 'data-results-count="6"' in html and "6 rows" in html


def test_numeric_columns_are_aligned_as_numbers_and_text_ones_are_not(alice, owner, store):
    html = alice.get(results_url(with_results(store, owner))).content.decode()
    numeric = re.findall(r'<th class="num" data-column="([^"]*)"', html)
    assert numeric == ["unit", "T", "seed", "exit_code", "seconds", "peak_gib", "energy"]


def test_a_column_sorts_the_rows_numerically_both_ways_and_again_back(alice, owner, store):
    rows = grid_rows()
    rows[0][7] = 100.0  # a number that sorts first as text, last as a number
    run = with_results(store, owner, csv_text(HEADER, rows))
    up = alice.get(results_url(run, "table/"), {"sort": "energy"}).content.decode()
    assert [r[0] for r in body_rows(up)] == ["1", "2", "3", "4", "5", "0"]
    assert 'aria-sort="ascending"' in up
    # The column's link now sorts it the other way.
    assert "sort=energy&amp;order=desc" in up
    down = alice.get(results_url(run, "table/"), {"sort": "energy", "order": "desc"})
    assert [r[0] for r in body_rows(down.content.decode())] == ["0", "5", "4", "3", "2", "1"]
    text = alice.get(results_url(run, "table/"), {"sort": "method"}).content.decode()
    assert [r[3] for r in body_rows(text)] == ["mc", "mc", "mc", "md", "md", "md"]
    # Equal cells keep the unit order.
    assert [r[0] for r in body_rows(text)] == ["1", "3", "5", "0", "2", "4"]


def test_cells_without_a_value_sort_last_in_both_directions(alice, owner, store):
    rows = grid_rows()
    rows[2][7] = ""
    rows[4][7] = "nan"
    run = with_results(store, owner, csv_text(HEADER, rows))
    for order in ("asc", "desc"):
        html = alice.get(results_url(run, "table/"), {"sort": "energy", "order": order})
        assert [r[0] for r in body_rows(html.content.decode())][-2:] == ["2", "4"], order


def test_a_sort_by_no_column_or_a_bad_order_is_a_400_naming_the_field(alice, owner, store):
    run = with_results(store, owner)
    nope = alice.get(results_url(run, "table/"), {"sort": "nosuch"})
    assert nope.status_code == 400 and nope.content.decode().startswith("sort:")
    bad = alice.get(results_url(run, "table/"), {"sort": "T", "order": "up"})
    assert bad.status_code == 400 and bad.content.decode().startswith("order:")


def test_the_page_shows_the_first_rows_only_and_says_how_many(alice, owner, store, settings):
    settings.SIMRUN_RESULTS_ROWS_SHOWN = 4
    rows = [[i, i / 10, 0, "md", 0, 0.1, 0.2, i * 2, ""] for i in range(30)]
    run = with_results(store, owner, csv_text(HEADER, rows))
    html = alice.get(results_url(run)).content.decode()
    assert len(body_rows(html)) == 4
    assert "showing the first 4 of 30 rows" in html and 'data-results-count="30"' in html
    down = alice.get(results_url(run, "table/"), {"sort": "unit", "order": "desc"})
    assert [r[0] for r in body_rows(down.content.decode())] == ["29", "28", "27", "26"]


# Downloads


def test_the_download_is_the_whole_csv_as_an_attachment(alice, owner, store, settings):
    settings.SIMRUN_RESULTS_MAX_ROWS = 2
    text = csv_text(HEADER, grid_rows())
    run = with_results(store, owner, text)
    answer = alice.get(f"/runs/{run.id}/tasks/sweep/results.csv")
    assert answer.status_code == 200
    assert answer["Content-Type"] == "text/csv; charset=utf-8"
    assert answer["Content-Disposition"] == f'attachment; filename="{run.id}-sweep-results.csv"'
    assert b"".join(answer.streaming_content).decode() == text
    assert "sandbox" in answer["Content-Security-Policy"]


def test_a_parquet_beside_the_csv_is_offered_and_downloaded(alice, owner, store):
    run = with_results(store, owner)
    html = alice.get(results_url(run)).content.decode()
    assert 'data-download="csv"' in html and 'data-download="parquet"' not in html
    assert alice.get(f"/runs/{run.id}/tasks/sweep/results.parquet").status_code == 404
    (out_dir(store, run) / "results.parquet").write_bytes(b"PAR1 not really PAR1")
    html = alice.get(results_url(run)).content.decode()
    assert 'data-download="parquet"' in html
    answer = alice.get(f"/runs/{run.id}/tasks/sweep/results.parquet")
    assert answer.status_code == 200 and answer["Content-Type"] == "application/vnd.apache.parquet"
    assert b"".join(answer.streaming_content) == b"PAR1 not really PAR1"


# Who may see it


def fragment_urls(run: Run) -> list[str]:
    base = f"/runs/{run.id}/tasks/sweep/"
    return [
        base + "results/",
        base + "results/table/",
        base + "results/plot/",
        base + "results.csv",
    ]


def test_a_stranger_gets_a_404_for_every_results_url_and_staff_see_them(
    owner, stranger, staff, store
):
    run = with_results(store, owner)
    mallory, operator = logged_in(stranger), logged_in(staff)
    for url in fragment_urls(run):
        assert mallory.get(url).status_code == 404, url
        assert operator.get(url).status_code == 200, url


def test_an_anonymous_visitor_is_sent_to_log_in(client, owner, store):
    run = with_results(store, owner)
    for url in fragment_urls(run):
        answer = client.get(url)
        assert answer.status_code == 302 and answer["Location"].startswith("/login/"), url


# The plot


def plot(alice: Client, run: Run, **choice: str) -> str:
    answer = alice.get(results_url(run, "plot/"), choice)
    assert answer.status_code == 200, answer.content
    return answer.content.decode()


def svg_of(html: str) -> str:
    return html[html.index("<svg") : html.index("</svg>") + 6]


def test_the_plot_defaults_to_the_first_parameter_and_the_first_result_field(alice, owner, store):
    html = alice.get(results_url(with_results(store, owner))).content.decode()
    svg = svg_of(html)
    assert 'data-x="T"' in svg and 'data-y="energy"' in svg and 'data-kind="lines"' in svg
    # seed has two values: a line for each.
    assert 'data-colour="seed"' in svg and 'data-series-count="2"' in svg
    assert re.findall(r'data-series="([^"]*)"', svg) == ["0", "1"]
    assert '<option value="T" selected>' in html and '<option value="energy" selected>' in html


def test_a_line_is_the_mean_of_y_at_each_x(alice, owner, store):
    html = plot(alice, with_results(store, owner), x="T", y="energy", colour="")
    svg = svg_of(html)
    assert 'data-series-count="1"' in svg
    tips = re.findall(r"<circle[^>]*><title>([^<]*)</title>", svg)
    # Two seeds per T: energy 10T and 10T + 1, so the mean is 10T + 0.5 from 2 rows.
    assert tips == [
        "T = 0.5, energy = 5.5 (mean of 2)",
        "T = 1, energy = 10.5 (mean of 2)",
        "T = 1.5, energy = 15.5 (mean of 2)",
    ]


def test_a_text_colour_column_gives_a_line_per_value(alice, owner, store):
    svg = svg_of(plot(alice, with_results(store, owner), x="T", y="energy", colour="method"))
    assert re.findall(r'data-series="([^"]*)"', svg) == ["mc", "md"]


def test_a_heat_map_colours_a_cell_per_x_and_colour_by_the_mean_y(alice, owner, store):
    html = plot(alice, with_results(store, owner), x="T", y="energy", colour="seed", kind="heatmap")
    svg = svg_of(html)
    assert 'data-kind="heatmap"' in svg
    cells = re.findall(r'<rect class="cell"[^>]*fill="(#[0-9a-f]{6})"><title>([^<]*)</title>', svg)
    assert len(cells) == 6
    titles = [title for _, title in cells]
    assert "T = 1, seed = 1: mean energy = 11 (1 row)" in titles
    # The lowest mean has the scale's first colour, the highest its last.
    colours = {title: fill for fill, title in cells}
    assert colours["T = 0.5, seed = 0: mean energy = 5 (1 row)"] == "#440154"
    assert colours["T = 1.5, seed = 1: mean energy = 16 (1 row)"] == "#fde725"


def test_a_plot_of_no_numeric_column_is_a_400_naming_the_field(alice, owner, store):
    run = with_results(store, owner)
    for field, value in [("x", "method"), ("y", "nosuch"), ("colour", "nosuch"), ("kind", "pie")]:
        answer = alice.get(results_url(run, "plot/"), {field: value})
        assert answer.status_code == 400, field
        assert answer.content.decode().startswith(f"{field}:"), field


def test_a_line_over_many_colours_draws_the_first_ten_and_says_so(alice, owner, store):
    rows = [[i, i % 7, i, "md", 0, 0.1, 0.2, i, ""] for i in range(70)]
    run = with_results(store, owner, csv_text(HEADER, rows))
    html = plot(alice, run, x="T", y="energy", colour="seed")
    assert 'data-series-count="10"' in svg_of(html)
    assert "seed has 70 values: the lines of the first 10 are drawn" in html


def test_a_line_over_many_distinct_x_is_averaged_into_bins(alice, owner, store):
    rows = [[i, i // 2, i % 2, "md", 0, 0.1, 0.2, i, ""] for i in range(4000)]
    run = with_results(store, owner, csv_text(HEADER, rows))
    html = plot(alice, run, x="T", y="energy", colour="seed")
    lines = re.findall(r'<polyline points="([^"]*)"', html)
    assert [len(points.split()) for points in lines] == [400, 400]
    assert html.count("up to 2,000 distinct T in a line: averaged into 400 bins") == 1


def test_a_bin_is_the_mean_of_its_points_weighted_by_their_rows():
    points = [(float(x), float(10 * x), 1 if x < 5 else 3) for x in range(10)]
    assert chart_lines.binned(points, 2) == [(2.0, 20.0, 5), (7.0, 70.0, 15)]


# Hostile files: never a 500, never blocked, never followed, always escaped


def test_markup_in_names_and_cells_is_escaped_everywhere(alice, owner, store):
    evil = '<script>alert("x")</script>'
    header = ["unit", f"T{evil}", "exit_code", "seconds", "peak_gib", f"e{evil}", "note"]
    rows = [[i, i, 0, 0.1, 0.2, i * i, f"{evil}&'\""] for i in range(4)]
    run = with_results(store, owner, csv_text(header, rows))
    for rest, query in [("", {}), ("table/", {"sort": f"T{evil}"}), ("plot/", {"colour": "note"})]:
        html = alice.get(results_url(run, rest), query).content.decode()
        assert "<script>" not in html, rest
        assert "&lt;script&gt;" in html, rest


def test_a_link_in_place_of_the_table_is_not_followed(alice, owner, store, tmp_path):
    secret = tmp_path / "secret.csv"
    secret.write_text("unit,password\n0,hunter2\n")
    run = ended(submitted(owner, SWEEP))
    (out_dir(store, run) / "results.csv").symlink_to(secret)
    html = alice.get(results_url(run)).content.decode()
    assert "hunter2" not in html and "data-results-problem" in html
    assert 'id="results-sweep"' in alice.get(f"/runs/{run.id}/").content.decode()
    assert alice.get(f"/runs/{run.id}/tasks/sweep/results.csv").status_code == 404
    assert alice.get(results_url(run, "table/")).status_code == 404


def test_an_out_folder_that_is_a_link_shows_no_table(alice, owner, store, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "results.csv").write_text("unit,password\n0,hunter2\n")
    run = ended(submitted(owner, SWEEP))
    out = out_dir(store, run)
    out.rmdir()
    out.symlink_to(elsewhere)
    assert "hunter2" not in alice.get(results_url(run)).content.decode()
    assert alice.get(f"/runs/{run.id}/tasks/sweep/results.csv").status_code == 404


@pytest.mark.timeout(30)  # a blocking open would hang the test, not fail it
def test_a_fifo_in_place_of_the_table_is_answered_without_blocking(alice, owner, store):
    run = ended(submitted(owner, SWEEP))
    os.mkfifo(out_dir(store, run) / "results.csv")
    html = alice.get(results_url(run)).content.decode()  # a blocking open would hang here
    assert "data-results-problem" in html and "not a regular file" in html
    assert alice.get(f"/runs/{run.id}/tasks/sweep/results.csv").status_code == 404


def test_invalid_utf8_and_binary_bytes_are_shown_replaced(alice, owner, store):
    data = b"unit,name\n0,caf\xe9\n1,\x00\xff\xfe\n" + bytes(range(256))
    run = with_results(store, owner, data)
    answer = alice.get(results_url(run))
    assert answer.status_code == 200
    html = answer.content.decode()
    assert "caf\ufffd" in html and "not all UTF-8" in html


def test_a_header_of_a_million_columns_keeps_the_first_ones(alice, owner, store, settings):
    settings.SIMRUN_RESULTS_MAX_COLUMNS = 5
    header = ",".join(f"c{i}" for i in range(1_000_000))
    row = ",".join("1" for _ in range(1_000_000))
    run = with_results(store, owner, f"{header}\n{row}\n")
    html = alice.get(results_url(run)).content.decode()
    assert header_names(html) == ["c0", "c1", "c2", "c3", "c4"]
    assert "too many columns" in html and "only the first 5 are read" in html


def test_quotes_that_never_end_stop_the_table_where_they_start(alice, owner, store):
    data = 'unit,T,note\n0,1,fine\n1,2,"never closed\n' + "2,3,swallowed\n" * 20_000
    run = with_results(store, owner, data)
    html = alice.get(results_url(run)).content.decode()
    rows = body_rows(html)
    assert rows[0] == ["0", "1", "fine"]
    assert "does not read as CSV" in html and "swallowed\n2" not in html
    assert alice.get(results_url(run, "plot/")).status_code == 200


def test_a_huge_sparse_table_is_read_only_to_its_budget(alice, owner, store, settings):
    settings.SIMRUN_RESULTS_MAX_BYTES = 64 * 1024
    run = with_results(store, owner)
    target = out_dir(store, run) / "results.csv"
    with target.open("r+b") as file:
        file.truncate(2**40)  # a terabyte of holes after the rows
    html = alice.get(results_url(run)).content.decode()
    assert "too large: the file holds 1,099,511,627,776 bytes" in html
    assert len(body_rows(html)) == 6
    assert "6 rows or more" in html


def test_more_rows_than_the_budget_are_counted_and_the_first_kept(alice, owner, store, settings):
    settings.SIMRUN_RESULTS_MAX_ROWS = 10
    rows = [[i, i, 0, "md", 0, 0.1, 0.2, i, ""] for i in range(25)]
    run = with_results(store, owner, csv_text(HEADER, rows))
    html = alice.get(results_url(run)).content.decode()
    assert "too large: 25 rows, showing the first 10" in html
    assert [r[0] for r in body_rows(html)][-1] == "9"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\n\n\n",
        b"unit\n",
        b"only,a,header\n",
        b"a,b\n1\n2,3,4,5\n",
        b",,\n1,2,3\n",
        b"x,x,x\n1,2,3\n",
        b'"\n',
        b"\r\r\r",
        b"unit,T\n0,inf\n1,-inf\n2,1e400\n3,nan\n",
    ],
)
def test_odd_tables_are_answered_without_a_500(alice, owner, store, data):
    run = with_results(store, owner, data)
    for rest in ("", "table/", "plot/"):
        assert alice.get(results_url(run, rest)).status_code == 200, rest
    for column in ("x.1", "column 1"):
        answer = alice.get(results_url(run, "table/"), {"sort": column})
        assert answer.status_code in (200, 400)


@pytest.mark.parametrize(
    ("low", "high"),
    [(0.5, 1.5), (5, 16), (-3, 7), (1, 1), (0, 0), (1e-15, 5e-15), (-1e300, 1e300), (0, 5e-324)],
)
def test_the_axis_ticks_are_round_and_cover_the_data(low, high):
    ticks = chart_frame.nice_ticks(low, high)
    assert ticks[0] <= low and ticks[-1] >= high and 2 <= len(ticks) <= 8
    assert all(b > a for a, b in zip(ticks, ticks[1:], strict=False))


def test_the_plot_of_numbers_too_large_to_place_leaves_them_out(alice, owner, store):
    rows = grid_rows()
    rows[0][7], rows[1][7] = 1e308, -1e308
    run = with_results(store, owner, csv_text(HEADER, rows))
    html = plot(alice, run, x="T", y="energy", colour="seed")
    assert "2 rows without a finite T and energy left out" in html
    heat = plot(alice, run, x="T", y="energy", colour="seed", kind="heatmap")
    assert len(re.findall(r'<rect class="cell"', heat)) == 4


def test_a_folder_in_place_of_the_table_is_shown_as_a_problem(alice, owner, store):
    run = ended(submitted(owner, SWEEP))
    (out_dir(store, run) / "results.csv").mkdir()
    html = alice.get(results_url(run)).content.decode()
    assert "data-results-problem" in html and "not a regular file" in html
    assert 'id="results-sweep"' in alice.get(f"/runs/{run.id}/").content.decode()


def test_a_heat_map_over_many_distinct_numbers_bins_them_and_cuts_many_texts(alice, owner, store):
    rows = [[i, i / 7, i % 3, f"m{i % 90:02d}", 0, 0.1, 0.2, i, ""] for i in range(900)]
    run = with_results(store, owner, csv_text(HEADER, rows))
    html = plot(alice, run, x="T", y="energy", colour="seed", kind="heatmap")
    assert "900 distinct T: binned into 64 ranges" in html
    assert len(re.findall(r'<rect class="cell"', html)) == 64 * 3
    text = plot(alice, run, x="T", y="energy", colour="method", kind="heatmap")
    assert "method has 90 values: the first 64 are drawn" in text
    assert "m63" in text and "m64" not in text


def test_a_task_types_table_plots_its_first_field_against_the_next(alice, owner, store):
    # As the merge writes it for a split type whose units return flat mappings (ising).
    header = ["unit", "temperature", "energy", "magnetization"]
    rows = [[i, 1.5 + i / 10, -2 + i / 10, 1 - i / 20] for i in range(8)]
    svg = svg_of(
        alice.get(results_url(with_results(store, owner, csv_text(header, rows)))).content.decode()
    )
    assert 'data-x="temperature"' in svg and 'data-y="energy"' in svg and 'data-colour=""' in svg
