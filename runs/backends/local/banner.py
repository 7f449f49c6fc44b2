"""What ``simrun serve``'s banner says of the local backend: what it shares among the tasks,
who the tasks run as and whether their memory is enforced."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runs.backends.local.backend import LocalBackend


def describe(backend: LocalBackend) -> list[str]:
    """The banner's summary of the machine, then the sentence on the tasks' isolation."""
    memory = "enforced" if backend.enforces_memory else "not enforced"
    summary = f"{backend.max_cores} cores, {backend.max_memory_gb:.1f} GiB, memory {memory}"
    return [summary, isolation(backend)]


def isolation(backend: LocalBackend) -> str:
    """What the banner says of who the processes of the runs run as, and their memory."""
    memory = (
        ""
        if backend.enforces_memory
        else "memory is not enforced (no memory cgroups: run as root): a task may use more "
        "than its plan; "
    )
    base = backend.task_uid_base
    if base is not None:
        if problem := backend.isolation_problem():
            return f"{memory}no task can start: {problem}"
        return f"{memory}tasks run as user id {base} + their owner's id, apart from the service"
    return (
        f"{memory}tasks run as this service's own user (not root, --tasks-as-service, --demo "
        "where tasks' users could not reach this Python, or SIMRUN_TASK_UID_BASE=0): they "
        "can read what the service can (docs/team.md)"
    )
