"""The informer of one kind of object of the runs' namespace, as the backend keeps them: the
settings every such cache takes, and a close that cuts its watch's stream at once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from kubernetes.watch import Watch

from runs.backends.argo.clients import Clients
from runs.backends.argo.informer import SYNC_WAIT_S, Informer

PAGE_SIZE = 500
"""Objects per page of a list: a large list in one answer weighs on the API server."""


class NamespaceCache(Informer[dict[str, Any]]):
    """Objects of the runs' namespace by name, each as ``keep`` made it; a subclass says how a
    page is listed (``_list_page``) and how a watch is started (``_watch_from``)."""

    def __init__(
        self,
        clients: Clients,
        keep: Callable[[dict[str, Any]], dict[str, Any]],
        *,
        kind: str,
        backoff_s: float,
        watch_timeout_s: int,
        sync_wait_s: float = SYNC_WAIT_S,
    ) -> None:
        super().__init__(self._list_page, self._watch_from, keep, backoff_s=backoff_s, kind=kind)
        self.clients = clients
        self.watch_timeout_s = watch_timeout_s
        self.sync_wait_s = sync_wait_s
        self._watch: Watch | None = None

    def close(self, timeout_s: float = 0.0) -> None:
        """Stop the watch, at once."""
        super().close()
        if self._watch is not None:
            self._watch.stop()  # type: ignore[no-untyped-call]  # kubernetes.watch is unannotated
        super().close(timeout_s)

    def _list_page(self, token: str | None) -> dict[str, Any]:
        raise NotImplementedError

    def _watch_from(self, resource_version: str) -> Iterator[dict[str, Any]]:
        raise NotImplementedError
