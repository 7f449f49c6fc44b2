"""How ``wait()`` shows a run: a table redrawn in a notebook's cell, bars on a terminal."""

from __future__ import annotations

import io
import re

from rich.console import Console

from runs.client.progress import notebook_bundle, shown


def polled(state: str, done: int) -> dict:
    task = {"id": "sweep", "state": "done" if done == 10 else "running"}
    task |= {"units_done": done, "units_total": 10}
    return {"id": "r1", "name": "demo", "state": state, "duration_s": 75, "tasks": [task]}


class Handle:
    def __init__(self, shown: list) -> None:
        self.shown = shown

    def update(self, bundle: dict, raw: bool) -> None:
        self.shown.append(bundle)


def test_a_notebook_gets_one_output_replaced_at_every_poll():
    displayed: list[dict] = []

    def display(bundle: dict, raw: bool, display_id: bool) -> Handle:
        assert raw and display_id
        displayed.append(bundle)
        return Handle(displayed)

    with shown(Console(file=io.StringIO()), display=display) as show:
        show(polled("running", 3))
        show(polled("succeeded", 10))
    first, last = displayed
    assert "<progress value='3' max='10'" in first["text/html"]
    assert "<progress value='10' max='10'" in last["text/html"] and "succeeded" in last["text/html"]
    assert last["text/plain"].splitlines()[1].split() == ["sweep", "done", "10/10", "units"]


def test_the_notebook_table_escapes_what_the_run_names():
    bundle = notebook_bundle(polled("running", 1) | {"name": "<script>"})
    assert "<script>" not in bundle["text/html"] and "&lt;script&gt;" in bundle["text/html"]


def test_a_terminal_gets_a_bar_per_task():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with shown(console) as show:
        show(polled("running", 3))
        show(polled("succeeded", 10))
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "sweep" in text and "10/10" in text and "━" in text
