"""The latest status of every Workflow of a run, kept from a list and a watch (an informer).

As Kubernetes' own controllers do, the cache lists the Workflows once (in pages), then
watches from the list's ``resourceVersion``: every change comes as an event, so reading a
status costs no request. A watch the server ends (its timeout) is started again from the
last version seen; a version too old for the server (410 Gone) makes it list again, and so
does a watch that failed twice in a row (a dropped connection, an error), the cache
answering nothing meanwhile: nothing stale is read while no watch follows the changes.
It is the backend's one watch of Workflows: its subscribers are called on every change it
hears (and after a list that follows a gap, in which changes may have been missed). Only the
parsed status of a Workflow is kept, not the object (whose node map can be large),
with its ``resourceVersion``: the version the control loop compares (``ChangeSignal``). Each
process keeps its own cache, started by its first ``start``: a Celery worker's children fork
from a parent, and a thread does not survive a fork.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from runs.backends.argo.ended_pods import EndedPod, ended_pods
from runs.backends.base import BackendStatus

log = logging.getLogger(__name__)

HTTP_GONE = 410
CHANGES = frozenset({"ADDED", "MODIFIED", "DELETED"})
"""The events of a watch that are changes (a BOOKMARK only moves the version on)."""
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


ListPage = Callable[[str | None], dict[str, Any]]
"""Lists a page of the Workflows from a ``continue`` token (None: the first page)."""
WatchFrom = Callable[[str], Iterator[dict[str, Any]]]
"""Watches the Workflows from a ``resourceVersion``: its events until the server ends it."""


class WorkflowCache:
    """The Workflows of the runs by name, as the last list and the watch since said."""

    def __init__(
        self,
        list_page: ListPage,
        watch_from: WatchFrom,
        parse: Callable[[dict[str, Any]], BackendStatus],
        *,
        backoff_s: float,
    ) -> None:
        self._list_page = list_page
        self._watch_from = watch_from
        self._parse = parse
        self.backoff_s = backoff_s
        self._items: dict[str, Cached] = {}
        self._synced = False
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid: int | None = None
        self._lock = threading.Lock()
        self._subscribers: list[Callable[[], None]] = []

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the watch's thread) on every change of a Workflow; it must
        not block for long, and what it raises is logged."""
        self._subscribers.append(callback)

    def _notify(self) -> None:
        for callback in list(self._subscribers):
            try:
                callback()
            except Exception:
                log.exception("a subscriber of the Argo backend failed")

    def start(self) -> None:
        """Start listing and watching in this process, unless it does already."""
        if self._pid == os.getpid() or self._closed.is_set():
            return
        # A fork's child: what the parent held is a copy no watch updates any more.
        self._lock = threading.Lock()
        self._items, self._synced, self._pid = {}, False, os.getpid()
        self._thread = threading.Thread(
            target=self._follow, name="simrun-argo-informer", daemon=True
        )
        self._thread.start()

    def close(self, timeout_s: float = 0.0) -> None:
        """Stop the watch: its thread ends at its next event or timeout, waited for up to
        ``timeout_s`` (the caller stops the stream itself to end it sooner)."""
        self._closed.set()
        if self._thread is not None and timeout_s:
            self._thread.join(timeout=timeout_s)

    @property
    def alive(self) -> bool:
        """Whether the watch's thread still runs."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def synced(self) -> bool:
        """Whether a list went through: from then on, the cache answers."""
        return self._synced and self._pid == os.getpid()

    def get(self, name: str) -> Cached | None:
        """The cached Workflow of a name; None when the cache does not know it (yet)."""
        if not self.synced:
            return None
        with self._lock:
            return self._items.get(name)

    def versions(self, names: list[str]) -> dict[str, str]:
        """The ``resourceVersion`` of each named Workflow the cache holds; none before its list."""
        if not self.synced:
            return {}
        with self._lock:
            items = self._items
            return {name: items[name].version for name in names if name in items}

    def _follow(self) -> None:
        version: str | None = None
        failures, lists = 0, 0
        while not self._closed.is_set():
            try:
                if version is None:
                    version = self._list()
                    lists += 1
                    if lists > 1:
                        self._notify()  # what changed in the gap came with the list
                for event in self._watch_from(version):
                    if self._closed.is_set():
                        return
                    version = self._apply(event) or version
                    failures = 0
                    if event.get("type") in CHANGES:
                        self._notify()
                failures = 0  # the server ended it: watch on from the version
            except ApiException as error:
                if error.status == HTTP_GONE:
                    log.info("the watch of workflows is too old (410 Gone): listing them again")
                    version = None
                    continue
                version, failures = self._failed(version, failures, error)
            except Exception as error:
                version, failures = self._failed(version, failures, error)

    def _failed(
        self, version: str | None, failures: int, error: Exception
    ) -> tuple[str | None, int]:
        """After a failed list or watch: once, try again at once from the same version (a
        connection the server closed meanwhile); then answer nothing, wait and list again."""
        if self._closed.is_set():
            return version, failures
        if failures == 0:
            log.info("the watch of workflows failed: %s; trying again", error)
            return version, 1
        self._synced = False
        log.warning("the watch of workflows failed again: %s; listing them again", error)
        self._closed.wait(self.backoff_s)
        return None, failures + 1

    def _list(self) -> str:
        """List every Workflow, page by page, as the new content; the list's version."""
        items: dict[str, Cached] = {}
        token: str | None = None
        while True:
            page = self._list_page(token)
            for workflow in page.get("items") or []:
                self._put(items, workflow)
            metadata = page.get("metadata") or {}
            token = metadata.get("continue") or None
            if token is None:
                break
        with self._lock:
            self._items, self._synced = items, True
        return str(metadata["resourceVersion"])

    def _apply(self, event: dict[str, Any]) -> str | None:
        """Apply a watch event; the version it brings."""
        workflow = event.get("raw_object") or event.get("object") or {}
        metadata = workflow.get("metadata") or {}
        with self._lock:
            if event.get("type") == "DELETED":
                self._items.pop(metadata.get("name", ""), None)
            elif event.get("type") in CHANGES:
                self._put(self._items, workflow)
        return metadata.get("resourceVersion")

    def _put(self, items: dict[str, Cached], workflow: dict[str, Any]) -> None:
        metadata = workflow["metadata"]
        ended: tuple[EndedPod, ...] = ()
        try:
            status: BackendStatus | None = self._parse(workflow)
            ended = ended_pods(workflow)
        except Exception as error:  # e.g. offloaded nodes: a GET tells it as status() does
            log.debug("the status of %s is not read from the watch: %s", metadata["name"], error)
            status = None
        items[metadata["name"]] = Cached(str(metadata["resourceVersion"]), status, ended)
