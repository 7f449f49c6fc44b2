"""Backends by name; ``SIMRUN_BACKEND`` picks the one the service uses.

A backend runs the workflows of planned runs on a cluster (Argo) or this machine (local). The
protocol (``base``) holds what is exchanged with it, the plan of a task (``TaskPlan``) among
it, with the rule both apply to retries and the names of the pod logs they keep. A backend may
import ``runs.common`` and nothing else of ``runs``: not the planner, the control loop, the
models, the pages, the API, the command line or the Celery tasks.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module
from pathlib import Path

from django.conf import settings

from runs.backends.base import Backend, ClusterConfig

BACKENDS = {
    "local": "runs.backends.local.backend:LocalBackend",
    "argo": "runs.backends.argo.backend:ArgoBackend",
    "slurm": "runs.backends.slurm.backend:SlurmBackend",
    "fake": "runs.backends.fake:FakeBackend",
}


def backend_class(name: str) -> type[Backend]:
    """The class of a backend by name; KeyError for an unknown one."""
    module, _, attribute = BACKENDS[name].partition(":")
    cls: type[Backend] = getattr(import_module(module), attribute)
    return cls


@cache
def get_backend(name: str | None = None) -> Backend:
    """The backend of the settings (or of a name), one instance per process."""
    cls = backend_class(name or settings.SIMRUN_BACKEND)
    return cls.from_settings()


def task_users_problem(*roots: Path) -> str | None:
    """Why the users of their own a root service runs tasks (and learnings) as cannot reach
    these roots, with the fixes; None when they can. ``simrun serve`` asks it before starting."""
    from runs.backends.local.user import unreachable

    return unreachable(*roots)


def cluster_config() -> ClusterConfig:
    """The cluster configuration of the settings."""
    return ClusterConfig(**settings.SIMRUN_CLUSTER)
