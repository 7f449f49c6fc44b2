"""What the server draws: the DAG's layout, the observations chart, the page's figures."""

from __future__ import annotations

from runs.models import Observation, Task
from runs.templatetags.simrun import duration, filesize, gib, percent
from runs.web.charts import observation_chart
from runs.web.dag import BOX_WIDTH, COLUMN_GAP, layout


def task(task_id: str, *inputs: str, done: int = 0, total: int = 1) -> Task:
    return Task(
        task_id=task_id,
        inputs={f"in{i}": source for i, source in enumerate(inputs)},
        units_done=done,
        units_total=total,
        plan={},
    )


def test_a_task_sits_one_column_right_of_its_deepest_input():
    drawn = layout([task("a"), task("b", "a"), task("c", "a", "b"), task("d")])
    x = {box.task.task_id: box.x for box in drawn.boxes}
    step = BOX_WIDTH + COLUMN_GAP
    assert x["b"] - x["a"] == step and x["c"] - x["a"] == 2 * step and x["d"] == x["a"]
    assert sorted((a.source, a.target) for a in drawn.arrows) == [
        ("a", "b"),
        ("a", "c"),
        ("b", "c"),
    ]
    assert drawn.width >= x["c"] + BOX_WIDTH


def test_tasks_of_one_column_stack_and_the_progress_bar_follows_units():
    drawn = layout([task("a", done=5, total=10), task("b")], {"a": 10})
    a, b = drawn.boxes
    assert a.y < b.y and a.x == b.x
    assert a.progress_width == BOX_WIDTH - 20 and b.progress_width == 0


def test_an_input_cycle_or_unknown_source_does_not_break_the_drawing():
    drawn = layout([task("a", "b"), task("b", "a"), task("c", "nosuch")])
    assert len(drawn.boxes) == 3 and {a.target for a in drawn.arrows} <= {"a", "b"}


def observation(worker: str, peak_gb: float | None, *, oom=False, report=True) -> Observation:
    return Observation(
        task_type="squares",
        worker=worker,
        attempt=0,
        processes=1,
        per_worker_gb=0.5,
        peak_bytes=None if peak_gb is None else int(peak_gb * 2**30),
        limit_bytes=int(0.5 * 2**30),
        oom=oom,
        from_report=report,
    )


def test_the_chart_marks_peaks_kills_and_kills_at_the_limit_and_escapes_names():
    chart = observation_chart(
        [
            observation("<script>alert(1)</script>", 0.3),
            observation("w1", 0.6, oom=True),
            observation("w2", None, oom=True, report=False),
        ],
        planned_gb=0.4,
    )
    assert chart.count('<circle class="point"') == 1
    assert chart.count('<path class="point oom"') == 1
    assert chart.count('<circle class="point oom limit"') == 1
    assert chart.count('class="sized"') == 3 and 'class="planned"' in chart
    assert "<script>" not in chart and "&lt;script&gt;" in chart


def test_figures_read_well():
    assert duration(42) == "42s" and duration(185) == "3m 05s" and duration(7440) == "2h 04m"
    assert duration(None) == "–" and filesize(512) == "512 B" and filesize(3500) == "3.4 KiB"
    assert percent(1, 3) == 33.3 and percent(5, 0) == 0.0 and gib(1.5) == "1.5 GiB"
