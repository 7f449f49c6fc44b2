"""A cache of some objects of the cluster kept from a list and a watch (an informer).

As Kubernetes' own controllers do, the cache lists the objects once (in pages), then watches
from the list's ``resourceVersion``: every change comes as an event, so reading them costs no
request. A watch the server ends (its timeout) is started again from the last version seen; a
version too old for the server (410 Gone) makes it list again, and so does a watch that failed
twice in a row (a dropped connection, an error), the cache answering nothing meanwhile:
nothing stale is read while no watch follows the changes. Only what ``keep`` makes of each
object is held, never the object. Each process keeps its own cache, started by its first
``start``: a Celery worker's children fork from a parent, and a thread does not survive a fork.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

HTTP_GONE = 410
CHANGES = frozenset({"ADDED", "MODIFIED", "DELETED"})
"""The events of a watch that are changes (a BOOKMARK only moves the version on)."""

Kept = TypeVar("Kept")
ListPage = Callable[[str | None], dict[str, Any]]
"""Lists a page of the objects from a ``continue`` token (None: the first page)."""
WatchFrom = Callable[[str], Iterator[dict[str, Any]]]
"""Watches the objects from a ``resourceVersion``: its events until the server ends it."""
SYNC_WAIT_S = 10.0
"""How long the first read of the objects in a process waits for the cache's first list."""
WATCH_SLACK_S = 30
"""How much longer than its timeout a watch is waited for before it is cut as silent."""


def watch_arguments(
    selector: str, resource_version: str, timeout_s: int, connect_timeout_s: float
) -> dict[str, Any]:
    """The arguments of a watch of the objects ``selector`` selects since a version, with
    bookmarks: the server ends it after ``timeout_s``, and a silent one is cut a bit later."""
    return {
        "label_selector": selector,
        "timeout_seconds": timeout_s,
        "resource_version": resource_version,
        "allow_watch_bookmarks": True,
        "_request_timeout": (connect_timeout_s, timeout_s + WATCH_SLACK_S),
    }


class Informer(Generic[Kept]):
    """Objects by name, as the last list and the watch since said, each as ``keep`` made it."""

    def __init__(
        self,
        list_page: ListPage,
        watch_from: WatchFrom,
        keep: Callable[[dict[str, Any]], Kept],
        *,
        backoff_s: float,
        kind: str,
    ) -> None:
        self._list_page = list_page
        self._watch_from = watch_from
        self._keep = keep
        self.backoff_s = backoff_s
        self.kind = kind
        """What it holds, as its log names them (``workflows``, ``pods``)."""
        self._items: dict[str, Kept] = {}
        self._synced = False
        self._tried = threading.Event()
        """Set once the first list went through or failed."""
        self._paged = threading.Event()
        """Set once a list showed a second page, or the first list went through or failed."""
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid: int | None = None
        self._lock = threading.Lock()
        self._subscribers: list[Callable[[], None]] = []
        self.version = ""
        """The last ``resourceVersion`` it heard (a list's, an event's, a bookmark's)."""

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the watch's thread) on every change; it must not block for
        long, and what it raises is logged."""
        self._subscribers.append(callback)

    def _notify(self) -> None:
        for callback in list(self._subscribers):
            try:
                callback()
            except Exception:
                log.exception("a subscriber of the %s of the Argo backend failed", self.kind)

    def start(self) -> None:
        """Start listing and watching in this process, unless it does already."""
        if self._pid == os.getpid() or self._closed.is_set():
            return
        # A fork's child: what the parent held is a copy no watch updates any more.
        self._lock = threading.Lock()
        self._items, self._synced, self._pid = {}, False, os.getpid()
        self._tried, self._paged = threading.Event(), threading.Event()
        self._thread = threading.Thread(
            target=self._follow, name=f"simrun-argo-{self.kind}", daemon=True
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

    def wait_synced(self, timeout_s: float) -> bool:
        """Start the cache and wait up to ``timeout_s`` for its first list to go through or
        fail; whether it answers."""
        self.start()
        if not self.synced:
            self._tried.wait(timeout_s)
        return self.synced

    def wait_one_page(self, timeout_s: float) -> bool:
        """As ``wait_synced``, but a list longer than a page is not waited for: a reader that
        has another way to what it needs takes it rather than wait for many pages."""
        self.start()
        if not self.synced:
            self._paged.wait(timeout_s)
        return self.synced

    def get(self, name: str) -> Kept | None:
        """The cached object of a name; None when the cache does not know it (yet)."""
        if not self.synced:
            return None
        with self._lock:
            return self._items.get(name)

    def items(self) -> dict[str, Kept]:
        """Every cached object by name (a copy of the map; {} before the first list)."""
        if not self.synced:
            return {}
        with self._lock:
            return dict(self._items)

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
                    self.version = version
                    failures = 0
                    if event.get("type") in CHANGES:
                        self._notify()
                failures = 0  # the server ended it: watch on from the version
            except ApiException as error:
                if error.status == HTTP_GONE:
                    log.info("the watch of %s is too old (410 Gone): listing again", self.kind)
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
        if version is None:
            self._tried.set()  # a list failed: its readers are not held for the next
            self._paged.set()
        if failures == 0:
            log.info("the watch of %s failed: %s; trying again", self.kind, error)
            return version, 1
        self._synced = False
        log.warning("the watch of %s failed again: %s; listing again", self.kind, error)
        self._closed.wait(self.backoff_s)
        return None, failures + 1

    def _list(self) -> str:
        """List every object, page by page, as the new content; the list's version."""
        items: dict[str, Kept] = {}
        token: str | None = None
        while True:
            page = self._list_page(token)
            for obj in page.get("items") or []:
                items[obj["metadata"]["name"]] = self._keep(obj)
            metadata = page.get("metadata") or {}
            token = metadata.get("continue") or None
            if token is None:
                break
            self._paged.set()
        with self._lock:
            self._items, self._synced = items, True
        self.version = str(metadata["resourceVersion"])
        self._tried.set()
        self._paged.set()
        return self.version

    def _apply(self, event: dict[str, Any]) -> str | None:
        """Apply a watch event; the version it brings."""
        obj = event.get("raw_object") or event.get("object") or {}
        metadata = obj.get("metadata") or {}
        if event.get("type") == "DELETED":
            with self._lock:
                self._items.pop(metadata.get("name", ""), None)
        elif event.get("type") in CHANGES:
            kept = self._keep(obj)
            with self._lock:
                self._items[metadata["name"]] = kept
        return metadata.get("resourceVersion")
