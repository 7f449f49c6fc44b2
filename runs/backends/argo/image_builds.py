"""Images built in the cluster by a Kaniko pod, and asked of the registry.

The pod and its context are made by ``build``; this module runs them: joins a build of the
same image another submission started, waits for its pod, says why it failed or cannot start,
and removes the pod and its context when the last submission waiting for it leaves.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from kubernetes.client import V1DeleteOptions, V1Preconditions
from kubernetes.client.exceptions import ApiException

from runs.backends.argo.build import (
    JOINER_PREFIX,
    build_namespace,
    build_pod,
    build_pod_name,
    context_config_map,
)
from runs.backends.argo.clients import Clients
from runs.backends.argo.registry import has_image, image_digest, registry_credentials
from runs.backends.argo.status import mount_failure, start_failure

log = logging.getLogger(__name__)

BUILD_POLL_S = 5.0
CONFLICT_RETRIES = 10
"""Create-or-mark attempts on a build context that keeps appearing and disappearing."""


class ImageBuilds:
    """Builds of images in the build namespace, and the registry's answer of what it has."""

    def __init__(self, clients: Clients, *, poll_s: float = BUILD_POLL_S) -> None:
        self.clients = clients
        self.poll_s = poll_s

    def build_image(self, context: Path, ref: str) -> None:
        """Build a context (a folder of a few small files) with a Kaniko pod and push it as
        ``ref``; the context goes to the pod as a ConfigMap, in the build namespace.

        Builds of one image are joined by name: each call marks the ConfigMap as its own
        (``JOINER_PREFIX``), waits for the one build pod, and on its way out removes its mark;
        the last one out deletes the pod and the ConfigMap, so another run building the same
        image meanwhile never finds them gone. RuntimeError with the end of its log when the
        build fails.
        """
        name = build_pod_name(ref)
        config_map = context_config_map(context, ref, self.clients.cluster)
        joiner = f"{JOINER_PREFIX}{secrets.token_hex(6)}"
        pod = build_pod(ref=ref, cluster=self.clients.cluster)
        deadline = time.monotonic() + self.clients.cluster.build_timeout_s
        self._join(config_map, joiner)
        try:
            while True:
                phase = self._build_phase(name, pod, config_map, joiner)
                if phase == "Succeeded":
                    return
                if phase == "Failed":
                    tail = self._log_tail(name)
                    log.warning("the build of %s failed; the end of its log:\n%s", ref, tail)
                    raise RuntimeError(f"the build of {ref} failed: {_build_error(tail)}")
                if phase == "Pending" and (why := self._build_cannot_start(name)):
                    raise RuntimeError(f"the build of {ref} cannot start: {why}")
                if time.monotonic() > deadline:
                    timeout_s = self.clients.cluster.build_timeout_s
                    raise RuntimeError(f"the build of {ref} took longer than {timeout_s} s")
                time.sleep(self.poll_s)
        finally:
            self._leave(name, joiner)

    @property
    def build_namespace(self) -> str:
        return build_namespace(self.clients.cluster)

    def _build_phase(
        self, name: str, pod: dict[str, Any], config_map: dict[str, Any], joiner: str
    ) -> str:
        """The phase of the build pod, created (with its context) when it does not exist."""
        try:
            current = self.clients.core.read_namespaced_pod(name, self.build_namespace)
        except ApiException as error:
            if error.status != 404:
                raise
            self._join(config_map, joiner)  # a pod is never made without its context
            self._create(self.clients.core.create_namespaced_pod, pod)
            return "Pending"
        return (current.status.phase if current.status else None) or "Pending"

    def _build_cannot_start(self, name: str) -> str:
        """Why the build pod cannot start ("" while it may): an image it cannot pull, a
        configuration it cannot get, or (its events) a volume it cannot mount, such as the
        registry Secret missing from the build namespace. Its events are its own by uid: an
        earlier pod of the same name (a build before the Secret was fixed) left events that
        live for the events' time to live."""
        response: Any = self.clients.core.read_namespaced_pod(
            name, self.build_namespace, _preload_content=False
        )
        pod = json.loads(response.data)
        why = start_failure(pod)
        if why:
            return why
        events: Any = self.clients.core.list_namespaced_event(
            self.build_namespace,
            field_selector=f"involvedObject.uid={pod['metadata']['uid']}",
            _preload_content=False,
        )
        return mount_failure(json.loads(events.data).get("items") or [])

    def _join(self, config_map: dict[str, Any], joiner: str) -> None:
        """Mark the build's ConfigMap with this build's mark, creating it when it is missing."""
        name = config_map["metadata"]["name"]
        mark = {joiner: f"{time.time():.0f}"}
        body = {
            **config_map,
            "metadata": {**config_map["metadata"], "annotations": mark},
        }
        for _ in range(CONFLICT_RETRIES):
            try:
                self.clients.core.create_namespaced_config_map(
                    self.build_namespace, cast(Any, body)
                )
                return
            except ApiException as error:
                if error.status != 409:
                    raise
            try:
                self.clients.core.patch_namespaced_config_map(
                    name, self.build_namespace, {"metadata": {"annotations": mark}}
                )
                return
            except ApiException as error:
                if error.status != 404:  # deleted by the last one out meanwhile: create it
                    raise
        raise RuntimeError(f"the build context {name} kept appearing and disappearing")

    def _leave(self, name: str, joiner: str) -> None:
        """Remove this build's mark; the last one out (no fresh mark left) deletes the
        ConfigMap, unless a submission joined meanwhile, then the pod. A mark older than twice
        the build timeout is a process that died."""
        try:
            left = self.clients.core.patch_namespaced_config_map(
                name, self.build_namespace, {"metadata": {"annotations": {joiner: None}}}
            )
        except ApiException as error:
            if error.status != 404:
                raise
            left = None
        marks = (left.metadata.annotations if left is not None and left.metadata else None) or {}
        oldest = time.time() - 2 * self.clients.cluster.build_timeout_s
        others = [
            key
            for key, since in marks.items()
            if key.startswith(JOINER_PREFIX) and _number(since) > oldest
        ]
        if others:
            log.info("the build %s goes on for %d other submissions", name, len(others))
            return
        # The context first, and only as this call left it: a submission that joined since
        # marked it (a new resourceVersion), so the build is its own now and stays. Then the
        # pod: one that joins after this finds no context and makes both anew.
        version = left.metadata.resource_version if left is not None and left.metadata else None
        try:
            self.clients.core.delete_namespaced_config_map(
                name,
                self.build_namespace,
                body=V1DeleteOptions(preconditions=V1Preconditions(resource_version=version)),
            )
        except ApiException as error:
            if error.status == 409:
                log.info("the build %s was joined as its last one left: it goes on", name)
                return
            if error.status != 404:
                raise
        self._delete(self.clients.core.delete_namespaced_pod, name)

    def _create(self, create: Callable[..., Any], body: dict[str, Any]) -> None:
        """Create an object of the build; one that exists (made by another submission of the
        same image) is joined."""
        try:
            create(self.build_namespace, body)
        except ApiException as error:
            if error.status != 409:
                raise
            log.info("%s exists already: joined", body["metadata"]["name"])

    def _log_tail(self, name: str) -> str:
        try:
            text: str = self.clients.core.read_namespaced_pod_log(
                name, self.build_namespace, container="main", tail_lines=50
            )
        except ApiException as error:
            return f"(no log: {error.status} {error.reason})"
        return text

    def _delete(self, delete: Callable[..., Any], name: str) -> None:
        try:
            delete(name, self.build_namespace)
        except ApiException as error:
            if error.status != 404:
                raise

    def has_image(self, ref: str) -> bool:
        """Whether the registry has ``ref`` (its HTTP API, with the configured credentials)."""
        return has_image(ref, credentials=self._credentials())

    def image_digest(self, ref: str) -> str | None:
        """The digest the registry has for ``ref``, asked as ``has_image`` asks."""
        return image_digest(ref, credentials=self._credentials())

    def _credentials(self) -> dict[str, tuple[str, str]] | None:
        auth = self.clients.cluster.registry_auth_file
        # The file is an optional secret's: without it the registry is asked anonymously.
        found = bool(auth) and Path(auth).is_file()
        return registry_credentials(auth) if found else None


def _number(text: str) -> float:
    """A mark's time, 0 when it is none."""
    try:
        return float(text)
    except ValueError:
        return 0.0


def _build_error(tail: str) -> str:
    """The line of a build log that says what went wrong: pip's last ``ERROR:``, else the
    last line, so a user reads one line, not a log."""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return (errors or lines or ["its log is empty"])[-1][:300]
