"""The latest status of every Workflow of a run, kept from a list and a watch (``informer``).

It is the backend's one watch of Workflows: its subscribers are called on every change it
hears (and after a list that follows a gap, in which changes may have been missed). Only the
parsed status of a Workflow is kept, not the object (whose node map can be large), with its
``resourceVersion``: the version the control loop compares (``ChangeSignal``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runs.backends.argo.ended_pods import EndedPod, ended_pods
from runs.backends.argo.informer import Informer, ListPage, WatchFrom
from runs.backends.base import BackendStatus

log = logging.getLogger(__name__)

PAGE_SIZE = 50
"""Workflows per page of a list: a page is held whole as Python objects while it is read (100
Workflows of 100 split tasks weigh 291 MiB so), and only each one's status is kept."""


@dataclass
class Cached:
    """One Workflow as the cache holds it."""

    version: str
    """Its ``resourceVersion``: another one is another status."""
    status: BackendStatus | None
    """Its status; None when the object cannot say it (its nodes offloaded): read by a GET."""
    ended: tuple[EndedPod, ...] = ()
    """The pods of its attempts that ended (``ended_pods``), whose logs are kept."""
    reasons: BackendStatus | None = None
    """Its status with the reasons of its pods, once read (``ArgoBackend.status``)."""
    reasons_at: float = 0.0


class WorkflowCache(Informer[Cached]):
    """The Workflows of the runs by name, as the last list and the watch since said."""

    def __init__(
        self,
        list_page: ListPage,
        watch_from: WatchFrom,
        parse: Callable[[dict[str, Any]], BackendStatus],
        *,
        backoff_s: float,
    ) -> None:
        self._parse = parse
        super().__init__(list_page, watch_from, self._cached, backoff_s=backoff_s, kind="workflows")

    def versions(self, names: list[str]) -> dict[str, str]:
        """The ``resourceVersion`` of each named Workflow the cache holds; none before its list."""
        if not self.synced:
            return {}
        with self._lock:
            items = self._items
            return {name: items[name].version for name in names if name in items}

    def _cached(self, workflow: dict[str, Any]) -> Cached:
        metadata = workflow["metadata"]
        ended: tuple[EndedPod, ...] = ()
        try:
            status: BackendStatus | None = self._parse(workflow)
            ended = ended_pods(workflow)
        except Exception as error:  # e.g. offloaded nodes: a GET tells it as status() does
            log.debug("the status of %s is not read from the watch: %s", metadata["name"], error)
            status = None
        return Cached(str(metadata["resourceVersion"]), status, ended)
