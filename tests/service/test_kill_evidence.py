"""A kill for memory is evidence for the next plan from the end of the killed attempt, not
only once its task is final (issue 26)."""

from __future__ import annotations

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


def test_a_kill_of_a_task_still_retrying_is_observed_at_once_and_once(owner):
    run = running(submitted(owner), sweep="retrying")
    Run.objects.filter(pk=run.pk).update(oom_kills={"sweep-w0": [0]})
    run.refresh_from_db()
    tasks = list(run.tasks.all())
    log_keeping.keep_logs(run, tasks, backend=NoLogs())  # type: ignore[arg-type]
    log_keeping.keep_logs(run, tasks, backend=NoLogs())  # type: ignore[arg-type]
    (kill,) = Observation.objects.filter(run_id=run.id)
    assert kill.oom and kill.worker == "sweep-w0" and kill.attempt == 0
    sweep = run.tasks.get(task_id="sweep")
    assert kill.limit_bytes == int(sweep.plan["memory_gb"] * 2**30)
    assert kill.task_type == sweep.type
