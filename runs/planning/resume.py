"""Resume and the cache: which earlier task each task of a new run reuses (docs/resume.md).

Chosen at submission from the record alone, by key (``runs.planning.keys``): a task whose key
is a succeeded task's of the run resumed is done from that task's outputs; a split task whose
key is that of one which did not finish starts with its done units; a task with ``cache``
that neither chose is done from the outputs of the newest task with its key that succeeded in
any run of its owner. Nothing else is reused, and a task of the run resumed whose key differs
is said (``not_resumed``: its program changed, its settings, a task it reads), never mixed. The
copy itself is the submission's, in a worker (``runs.control.reuse``), which may still refuse
what the store holds. Work is reused only from runs of the new run's owner: what a task left in
the store (the pickled results of its units) is read by the tasks of the run that reuses it,
and one user's code never runs as another's task user.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runs.backends.base import TaskRecord
from runs.models import Reuse, Run, Task, TaskKind, TaskState
from runs.planning.images import IMAGE_KEY, UNRESOLVED
from runs.planning.programs import changed, paths_of
from runs.planning.spec import SpecError


@dataclass(frozen=True)
class Chosen:
    """What a task reuses, and of which earlier task."""

    how: Reuse
    source: Task

    @property
    def reused_from(self) -> str:
        """The source as ``Task.reused_from`` keeps it: ``<run>/<task>``."""
        return f"{self.source.run_id}/{self.source.task_id}"


def check_resumable(source: Run, owner_id: int) -> None:
    """A run may be resumed once it ended (the work of a live one is still being done), and
    only by a run of its own owner (what it left is code to the tasks that read it): a resume
    by staff of another user's run is that user's run (``runs.planning.reruns``), and any
    other owner is refused, never given a silent run in full."""
    if source.owner_id != owner_id:
        raise SpecError(
            {
                "resume_of": [
                    f"run {source.id} is {source.owner.get_username()}'s: its work is reused "
                    "only by a run of theirs (the pickled results of its units are code to the "
                    "tasks that read them); resume it as theirs (Resume on its page, or "
                    "resume_of, which staff may use on any run)"
                ]
            }
        )
    if not source.ended:
        raise SpecError(
            {
                "resume_of": [
                    f"run {source.id} has not ended ({source.state}): cancel it, or wait for "
                    "its end, then resume it"
                ]
            }
        )


def cached(*, keys: Mapping[str, str], owner_id: int) -> dict[str, Chosen]:
    """What each task of ``keys`` (those with ``cache``) reuses of the newest task with its
    key that succeeded among the runs of ``owner_id``; the tasks without one are left out."""
    chosen = {}
    done = Task.objects.filter(state=TaskState.DONE, run__owner_id=owner_id)
    for task_id, key in keys.items():
        newest = done.filter(key=key).order_by("-ended_at", "-pk").first()
        if newest is not None:
            chosen[task_id] = Chosen(Reuse.WHOLE, newest)
    return chosen


def resumed(
    *, keys: Mapping[str, str], kinds: Mapping[str, str], source: Run, owner_id: int
) -> dict[str, Chosen]:
    """What each task of a new run of ``owner_id`` (its ``keys`` and ``kinds`` by id) reuses
    of the run it resumes; the tasks that reuse nothing are left out."""
    check_resumable(source, owner_id)
    done: dict[str, Task] = {}
    unfinished: dict[str, Task] = {}
    for task in source.tasks.exclude(key="").order_by("position"):
        if task.state == TaskState.DONE:
            done.setdefault(task.key, task)
        elif task.kind == TaskKind.SPLIT:
            unfinished.setdefault(task.key, task)
    chosen = {}
    for task_id, key in keys.items():
        if key in done:
            chosen[task_id] = Chosen(Reuse.WHOLE, done[key])
        elif kinds[task_id] == TaskKind.SPLIT and key in unfinished:
            chosen[task_id] = Chosen(Reuse.UNITS, unfinished[key])
    return chosen


def not_resumed(
    *,
    chosen: Mapping[str, Chosen],
    keys: Mapping[str, str],
    records: Mapping[str, TaskRecord],
    files: Mapping[str, Mapping[str, str]],
    source: Run,
) -> dict[str, str]:
    """Why each task of a new run that reuses nothing runs in full though the run it resumes
    has a task of its id whose work was there to reuse (it succeeded, or is a split task):
    its key differs, and the user who resumed is told what changed, by task id."""
    earlier = {task.task_id: task for task in source.tasks.all()}
    why = {}
    for task_id, record in records.items():
        before = earlier.get(task_id)
        if task_id in chosen or before is None or before.key == keys[task_id]:
            continue
        if before.state == TaskState.DONE or before.kind == TaskKind.SPLIT:
            reason = _what_changed(before, record, files.get(task_id, {}), earlier, keys)
            why[task_id] = f"not reused from {source.id}/{task_id}: {reason}"[:300]
    return why


def _what_changed(
    before: Task,
    record: TaskRecord,
    files: Mapping[str, str],
    earlier: Mapping[str, Task],
    keys: Mapping[str, str],
) -> str:
    """What made a task's key differ from that of the task of its id in the run resumed."""
    if not before.key:
        return "it was run before tasks had keys"
    differ = changed(before.named_files, files)
    if moved := [name for name in differ if name.startswith(IMAGE_KEY)]:
        return f"its image changed since, or its digest is not known: {_images(moved, files)}"
    if paths := differ:
        return f"its program or a file its command names changed since: {paths_of(paths)}"
    if (before.settings, before.command, before.image) != (
        record.settings,
        record.command,
        record.image,
    ):
        return "its settings or command changed"
    upstream = [
        source
        for source in record.inputs.values()
        if source not in earlier or earlier[source].key != keys[source]
    ]
    if upstream or before.inputs != record.inputs:
        return f"a task it reads changed: {paths_of(upstream) or 'its inputs'}"
    return "its environment, its sources, simrun's version or what its command names changed"


def _images(names: list[str], files: Mapping[str, str]) -> str:
    """The images of ``names`` for a message, each with what it is now: the start of its
    digest, or ``digest not known``."""

    def now(held: str) -> str:
        return "digest not known" if held.startswith(UNRESOLVED) else held[:19]

    return paths_of(f"{name.removeprefix(IMAGE_KEY)} (now {now(files[name])})" for name in names)
