"""Keeping the logs of a run's tasks in the store and recording their reports."""

from __future__ import annotations

import logging
from contextlib import ExitStack

from runs.backends.base import Backend, TaskPlan
from runs.common import store
from runs.control import locks, observations
from runs.models import FINAL_TASK_STATES, Run, Task, TaskState

log = logging.getLogger(__name__)


def keep_logs(run: Run, tasks: list[Task], *, backend: Backend) -> bool:
    """Keep the logs of the final tasks' terminated pods and record their reports; of a live
    task, the logs of the pods that ended so far, whatever its state.

    Once every pod of a task terminated its task is marked ``logs_kept`` and not asked
    again. Returns whether nothing is left to keep: every final task kept, no read of an
    ended pod's log failed, or the workflow gone (a workflow which does not exist has no logs).

    One process at a time keeps the logs of a run's final tasks and records their reports (a
    lock per run, ``recording_lock``); another that meets it leaves them owed, to its next
    pass, which reads only what is not marked yet. The settle of a cancelled run and a pass
    met on it, and each read every report the run's tasks wrote (3,000 planted ones twice).
    """
    with ExitStack() as stack:
        return _keep_logs(run, tasks, backend=backend, stack=stack)


def recording_lock(run_id: str) -> str:
    """The lock of the process keeping the logs of a run's final tasks and reading their
    reports."""
    return f"record-{run_id}"


def _keep_logs(run: Run, tasks: list[Task], *, backend: Backend, stack: ExitStack) -> bool:
    """``keep_logs``, the run's recording lock taken in ``stack`` at its first final task."""
    complete = True
    recording: bool | None = None
    for task in tasks:
        if task.state not in FINAL_TASK_STATES or task.logs_kept:
            if task.state in LIVE_POD_STATES and not backend.logs_in_store:
                complete = _keep_ended_pods(run, task, backend=backend) and complete
            if task.state in LIVE_POD_STATES and run.oom_kills:
                plan = TaskPlan.model_validate(task.plan)
                observations.record_kills(task=task, plan=plan, kills=run.oom_kills)
            continue
        if recording is None:
            recording = stack.enter_context(locks.hold(recording_lock(run.id)))
        if not recording:
            return False  # another process records them now: left to the next pass
        folder = store.task_folder(run.id, task.task_id)
        gone = False
        try:
            kept = backend.keep_logs(run.workflow, task.task_id, folder).complete
        except KeyError:
            kept = gone = True  # a workflow that does not exist has no logs
        except Exception:
            log.exception("keeping the logs of %s/%s failed", run.id, task.task_id)
            complete = False
            continue
        plan = TaskPlan.model_validate(task.plan)
        observations.record(task=task, plan=plan, folder=folder, kills=run.oom_kills)
        if kept and not gone:
            Task.objects.filter(pk=task.pk).update(logs_kept=True)
            task.logs_kept = True
        complete = complete and kept
    return complete


LIVE_POD_STATES = (TaskState.QUEUED, TaskState.RUNNING, TaskState.PREEMPTED, TaskState.RETRYING)
"""States of a task that has pods before it is final, whose ended pods a cluster's pod GC may
delete first: every state but waiting (no pod yet) and the final ones. A split task whose
coordinator waits for admission is queued while its extra workers may have ended."""


def _keep_ended_pods(run: Run, task: Task, *, backend: Backend) -> bool:
    """Keep the logs of a live task's pods that ended, before a cluster's pod GC outruns
    them; whether no read of an ended pod failed."""
    folder = store.task_folder(run.id, task.task_id)
    try:
        return not backend.keep_logs(run.workflow, task.task_id, folder).unread
    except KeyError:
        return True
    except Exception:
        log.exception("keeping the logs of %s/%s failed", run.id, task.task_id)
        return False
