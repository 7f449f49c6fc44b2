"""A cluster played by a thread, for the CLI's and the client's tests against a live server.

The live server hands each submitted run to the submission task; here a thread plays that
task and the cluster: it submits the run to the fake backend through the controller, then
moves its pods along (progress written to the store, node phases), ending the run as its
name asks (a name with ``fail`` fails), and reconciles after every step.
"""

from __future__ import annotations

import json
import threading

from django.db import connection

from harness.examples import ising
from harness.results import write_mappings
from runs.backends.fake import FakeBackend
from runs.common import store
from runs.control import reconciling, submitting
from runs.models import Run, TaskKind

STEPS = 4
STEP_S = 0.8
"""Slower than the CLI's polls (1 s), so a follower sees the steps between."""


class FakeCluster(threading.Thread):
    """Submits the runs handed to submission and moves them to their end in ``STEPS`` steps."""

    def __init__(self, fake: FakeBackend, handed: list[str]) -> None:
        super().__init__(daemon=True)
        self.backend, self.handed = fake, handed
        self.steps: dict[str, int] = {}
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.halt.wait(STEP_S):
                for run_id in [r for r in self.handed if r not in self.steps]:
                    submitting.submit(run_id, backend=self.backend)
                    self.steps[run_id] = 0
                for run_id in list(self.steps):
                    self.advance(run_id)
                reconciling.reconcile_pass(backend=self.backend)
        except BaseException as error:  # reported by the fixture, not lost in a thread
            self.error = error
        finally:
            connection.close()

    def advance(self, run_id: str) -> None:
        run = Run.objects.filter(pk=run_id).first()
        if run is None or run.ended or not run.workflow:
            return
        step = self.steps[run_id] = self.steps[run_id] + 1
        nodes = self.backend.dag_nodes(run.workflow)
        if step < STEPS:
            self.backend.set_phase(run.workflow, "Running")
            self.backend.set_nodes(run.workflow, dict.fromkeys(nodes, "Running"))
            for task in run.tasks.filter(kind=TaskKind.SPLIT):
                done = task.units_total * step // STEPS
                lines = "".join(f'{{"unit": {i}}}\n' for i in range(done))
                path = store.task_dir(run.id, task.task_id) / "progress.jsonl"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(lines)
        elif "fail" in run.name:
            first = nodes[0]
            self.backend.fail_attempt(run.workflow, first, attempt=0, exit_code=3)
            self.backend.set_nodes(run.workflow, {first: "Failed"})
            self.backend.set_phase(run.workflow, "Failed", "child failed")
        else:
            self.write_outputs(run)  # before the run can be seen ended: a reader finds them whole
            self.backend.finish(run.workflow, "Succeeded")

    def write_outputs(self, run: Run) -> None:
        """What the run's tasks leave in the store as it succeeds: nothing here."""


class SquaresCluster(FakeCluster):
    """The fake cluster, writing a sweep's ``out/squares.csv`` and ``out/squares.json`` (as
    ``harness.examples.squares`` merges them) and a log, as its run ends; an ``ising`` task's
    results table, its units computed by the type itself (``harness.results`` writes it)."""

    def write_outputs(self, run: Run) -> None:
        for task in run.tasks.filter(kind=TaskKind.SPLIT):
            folder = store.task_dir(run.id, task.task_id)
            if task.type == "ising":
                settings = ising.IsingSettings(**task.settings)
                units = [ising.compute(settings, None, i) for i in range(task.units_total)]
                (folder / "out").mkdir(parents=True, exist_ok=True)
                write_mappings(folder / "out", units, {})
                continue
            (folder / "out").mkdir(parents=True, exist_ok=True)
            (folder / "logs").mkdir(parents=True, exist_ok=True)
            squares = [i * i for i in range(task.units_total)]
            (folder / "out" / "squares.json").write_text(json.dumps(squares))
            rows = "".join(f"{i},{s}\n" for i, s in enumerate(squares))
            (folder / "out" / "squares.csv").write_text("unit,square\n" + rows)
            log = "".join(f"unit {i} done\n" for i in range(task.units_total))
            (folder / "logs" / f"{task.task_id}-0.log").write_text(log)
