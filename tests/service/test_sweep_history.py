"""A command sweep's memory history is its script's file, not its script's name (issue 47):
the kills of one project's ``run.sh`` never move the plans of another's."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.control import log_keeping
from runs.models import Observation, Run
from tests.factories import running, submitted

pytestmark = pytest.mark.django_db


class NoLogs:
    """A backend whose pods have no logs to keep (the live path asks for them)."""

    logs_in_store = False

    def keep_logs(self, workflow: str, task_id: str, folder):
        raise KeyError(task_id)


def sweep_of(folder: Path) -> str:
    """A run of the ``run.sh`` in ``folder``, started by a shell line after ``cd``."""
    return (
        "tasks:\n"
        f'  sweep: {{command: [sh, -c, \'cd {folder} && ./run.sh "$1"\', sh, "{{x}}"],\n'
        "          sweep: {x: [1, 2]}}\n"
    )


def memory_of(run: Run) -> float:
    return run.tasks.get(task_id="sweep").plan["per_worker_gb"]


def test_the_kills_of_one_run_sh_move_its_own_plans_only(owner, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for folder, need in ((one, "8G"), (two, "10M")):
        folder.mkdir()
        (folder / "run.sh").write_text(f'#!/bin/sh\nexec simulate --memory {need} "$1"\n')
    first = running(submitted(owner, sweep_of(one)), sweep="retrying")
    untouched = memory_of(submitted(owner, sweep_of(two)))
    Run.objects.filter(pk=first.pk).update(oom_kills={"sweep-w0": [0]})
    first.refresh_from_db()
    log_keeping.keep_logs(first, list(first.tasks.all()), backend=NoLogs())  # type: ignore[arg-type]
    assert Observation.objects.filter(run_id=first.id, oom=True).count() == 1

    assert memory_of(submitted(owner, sweep_of(two))) == untouched
    assert memory_of(submitted(owner, sweep_of(one))) > memory_of(first)
