"""The logs of a task's pods, read from the cluster and kept in the store as pods end."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from kubernetes.client.exceptions import ApiException

from harness import logcap, untrusted
from runs.backends import logs
from runs.backends.argo.clients import Clients
from runs.backends.argo.dag_nodes import NODE_NAME, node_path
from runs.backends.argo.ended_pods import STAGE_CONTAINER, EndedPod, belongs
from runs.backends.argo.placements import TERMINATED, pod_attempt
from runs.backends.argo.pod_cache import PodCache
from runs.backends.argo.pod_templates import TASK_LABEL
from runs.backends.argo.status import pod_node
from runs.backends.argo.watch import Cached
from runs.backends.base import FINAL_PHASES, KeptLogs, PodLog
from runs.common.store import TaskFolder, task_parts

log = logging.getLogger(__name__)

MISSING_LOGS = {
    404: "its pod was deleted (by the pod GC or a preemption) before its log was kept",
    400: "its container never started",
}
NODE_NAME_ANNOTATION = "workflows.argoproj.io/node-name"
CHUNK_BYTES = 1 << 16
"""The bytes of a log held at a time while it is streamed to the store."""
LOG_BYTES = 64 << 20
"""The bytes of a pod's log read and kept (``SIMRUN_TASK_LOG_MB``): its head and tail beyond."""


class PodLogs:
    """The logs of the ``main`` container of a task's pods, each kept once."""

    def __init__(
        self,
        clients: Clients,
        *,
        store: Path,
        cached: Callable[[str], Cached | None],
        pods: PodCache,
        log_bytes: int = LOG_BYTES,
    ) -> None:
        self.clients = clients
        self._cached = cached
        self.pods = pods
        self.store = store
        self.log_bytes = log_bytes
        self._unread: dict[tuple[str, str], dict[str, PodLog]] = {}
        """Terminated pods whose log read failed, by workflow and task (``logs``)."""

    def logs(self, name: str, task_id: str, tail_lines: int | None = None) -> list[PodLog]:
        """The logs of the ``main`` container of every pod of a task still there, oldest first.

        A terminated pod whose log the store keeps already comes without its text (the store
        has it), so keeping logs as pods end reads each log once. A terminated pod whose log
        cannot be read any more (deleted, never started) comes with ``missing`` saying why;
        one that cannot be read now is left for a later call: one pod never stops the others.
        """
        pods = sorted(self._pods_of(name, task_id), key=_created)
        run_id = name.removeprefix("simrun-")
        kept = set(logs.kept(TaskFolder(self.store, task_parts(run_id, task_id))))
        found = []
        for pod in pods:
            meta = pod["metadata"]
            node = str((meta.get("annotations") or {}).get(NODE_NAME_ANNOTATION, ""))
            node = node_path(node, name)
            match = NODE_NAME.match(node)
            number = int(match["attempt"]) if match and match["attempt"] else pod_attempt(pod)
            phase = (pod.get("status") or {}).get("phase")
            entry = PodLog(
                node=node, pod=meta["name"], text="", done=phase in TERMINATED, attempt=number
            )
            if entry.done and logs.log_name(entry) in kept:
                found.append(entry)
                continue
            try:
                entry.text = self._pod_log(meta["name"], tail_lines)
            except ApiException as error:
                if error.status in (400, 404) and entry.done:
                    entry.missing = MISSING_LOGS[error.status]
                elif error.status == 404:
                    continue  # deleted since the list
                elif error.status != 400:  # 400: its container has not started yet
                    log.warning("the log of pod %s is not readable now: %s", entry.pod, error)
                    if entry.done:
                        entry.unread = f"{error.status} {error.reason}".strip()
                    entry.done = False  # not kept yet: asked again at the next call
            if entry.done and _staged(pod):
                self._with_stage(entry, tail_lines)
            found.append(entry)
        return self._unread_since(name, task_id, found)

    def _with_stage(self, entry: PodLog, tail_lines: int | None) -> None:
        """Put the log of a command task's ``stage`` init container before its ``main``'s:
        when the staging failed, main never started, and the stage's log says why."""
        try:
            stage: str = self.clients.core.read_namespaced_pod_log(
                entry.pod,
                self.clients.namespace,
                container=STAGE_CONTAINER,
                tail_lines=tail_lines,
                limit_bytes=self.log_bytes // 4,
            )
        except ApiException as error:
            log.info("the stage log of pod %s is not readable: %s", entry.pod, error)
            return
        if not stage:
            return
        main = f"(none: {entry.missing})\n" if entry.missing else entry.text
        entry.text = stage_header(stage) + main
        entry.missing = ""

    def _pod_log(self, pod: str, tail_lines: int | None) -> str:
        """The log of a pod's ``main`` container within ``log_bytes``: its last lines, or the
        whole log, or, when it is longer, its head and its last lines (``logcap.cut``): as
        many as an eighth of the budget holds at the head's length of a line (the API cuts a
        tail from its first bytes), at most a quarter of the budget."""
        text: str = self.clients.core.read_namespaced_pod_log(
            pod,
            self.clients.namespace,
            container="main",
            tail_lines=tail_lines,
            limit_bytes=self.log_bytes,
        )
        if tail_lines is not None or len(text.encode()) < self.log_bytes:
            return text
        head = text.encode()[: self.log_bytes // 2].decode(errors="ignore")
        return logcap.cut(head, self._tail(pod, head))

    def _unread_since(self, name: str, task_id: str, found: list[PodLog]) -> list[PodLog]:
        """``found``, with a missing entry for each terminated pod whose log read failed at an
        earlier call and which is gone since: its log can never be kept, and the store says why.

        What it remembers lives in this process only: after a restart such a pod is unknown.
        """
        key = (name, task_id)
        earlier = self._unread.pop(key, {})
        listed = {entry.pod for entry in found}
        for pod, entry in earlier.items():
            if pod not in listed:
                why = (
                    f"its pod was deleted before its log could be read (last read: {entry.unread})"
                )
                found.append(entry.model_copy(update={"done": True, "unread": "", "missing": why}))
        unread = {entry.pod: entry for entry in found if entry.unread}
        if unread:
            self._unread[key] = unread
        return found

    def keep_logs(self, name: str, task_id: str, folder: TaskFolder) -> KeptLogs:
        """Keep in the store the logs of the task's attempts that ended and are not kept yet,
        one at a time, each streamed to its file within ``log_bytes``.

        Which attempts ended, and their pods' names, come from the status cache (the
        Workflow's nodes): a pass that finds nothing new asks the API server nothing. Only
        before the cache knows the Workflow are the task's pods read, from the pod cache.
        """
        cached = self._cached(name)
        if cached is None or cached.status is None:
            ended, live = self._listed(name, task_id)
        else:
            ended = [pod for pod in cached.ended if belongs(pod.node, task_id)]
            phases = [p for node, p in cached.status.tasks.items() if belongs(node, task_id)]
            live = any(phase not in FINAL_PHASES for phase in phases)
        if not ended:
            return KeptLogs(complete=not live)  # nothing to keep: the store is not even listed
        kept = set(logs.kept(folder))
        todo = [pod for pod in ended if logs.log_name(_entry(pod)) not in kept]
        if not todo:
            return KeptLogs(complete=not live)
        try:
            fd = untrusted.service_dir(folder.base, folder / "logs")
        except OSError as error:
            if not isinstance(error, untrusted.Refused) and error.errno not in logs.UNREACHABLE:
                raise
            log.warning("cannot keep the logs in %s: %s", folder.path, error)
            return KeptLogs(complete=not live)
        unread = False
        try:
            for pod in todo:
                unread = not self._keep_one(fd, pod) or unread
        finally:
            os.close(fd)
        return KeptLogs(complete=not live and not unread, unread=unread)

    def _keep_one(self, dir_fd: int, pod: EndedPod) -> bool:
        """Stream one ended pod's log into its file (its stage's first); False when it cannot
        be read now, to be asked again. A log that can never be read is kept as why."""
        name = logs.log_name(_entry(pod))
        temporary = f".{name}.{secrets.token_hex(6)}.tmp"
        out = untrusted.open_own(dir_fd, temporary, append=False)
        try:
            with os.fdopen(out, "wb") as handle:
                if pod.stage:
                    self._stage_into(handle, pod.pod)
                if not self._main_into(handle, pod.pod):
                    os.unlink(temporary, dir_fd=dir_fd)
                    return False
            try:
                os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                return True
            os.unlink(temporary, dir_fd=dir_fd)  # kept meanwhile by another process
            return True
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=dir_fd)
            raise

    def _stage_into(self, handle: BinaryIO, pod: str) -> None:
        """Write the log of a command task's ``stage`` init container (a quarter of the budget
        at most) before its main's: when the staging failed, main never started."""
        try:
            stage: str = self.clients.core.read_namespaced_pod_log(
                pod,
                self.clients.namespace,
                container=STAGE_CONTAINER,
                limit_bytes=self.log_bytes // 4,
            )
        except ApiException as error:
            log.info("the stage log of pod %s is not readable: %s", pod, error)
            return
        if stage:
            handle.write(stage_header(stage).encode())

    def _main_into(self, handle: BinaryIO, pod: str) -> bool:
        """Stream the ``main`` container's log into ``handle``: the whole log, or past
        ``log_bytes`` its head and its last lines (``logcap.cut``); False when it cannot be
        read now."""
        start = handle.tell()
        try:
            response: Any = self.clients.core.read_namespaced_pod_log(
                pod,
                self.clients.namespace,
                container="main",
                limit_bytes=self.log_bytes,
                _preload_content=False,
            )
        except ApiException as error:
            if error.status in MISSING_LOGS:
                missing = MISSING_LOGS[error.status]
                text = f"(none: {missing})\n" if start else f"[simrun] no log was kept: {missing}\n"
                handle.write(text.encode())
                return True
            log.warning("the log of pod %s is not readable now: %s", pod, error)
            return False
        head, written = bytearray(), 0
        try:
            for chunk in response.stream(CHUNK_BYTES):
                handle.write(chunk)
                head += chunk[: max(0, self.log_bytes // 2 - len(head))]
                written += len(chunk)
        finally:
            response.release_conn()
        if written < self.log_bytes:
            return True
        text = head.decode(errors="ignore")
        handle.seek(start)
        handle.truncate()
        handle.write(logcap.cut(text, self._tail(pod, text)).encode())
        return True

    def _tail(self, pod: str, head: str) -> str:
        """The last lines of a log cut at its head: as many as an eighth of the budget holds at
        the head's length of a line (the API cuts a tail from its first bytes), at most a
        quarter of the budget."""
        per_line = max(1, len(head) // max(1, head.count("\n")))
        tail: str = self.clients.core.read_namespaced_pod_log(
            pod,
            self.clients.namespace,
            container="main",
            tail_lines=max(1, self.log_bytes // 8 // per_line),
            limit_bytes=self.log_bytes // 4,
        )
        return tail

    def _listed(self, name: str, task_id: str) -> tuple[list[EndedPod], bool]:
        """The task's ended pods and whether any still runs, from its pods: for a Workflow the
        status cache does not hold (yet)."""
        ended, live = [], False
        for pod in self._pods_of(name, task_id):
            found = pod_node(pod, name)
            if found is None:
                continue  # no pod of a DAG node of simrun's
            if (pod.get("status") or {}).get("phase") not in TERMINATED:
                live = True
                continue
            ended.append(EndedPod(found[0], found[1], pod["metadata"]["name"], _staged(pod)))
        return ended, live

    def _pods_of(self, name: str, task_id: str) -> list[dict[str, Any]]:
        """The pods of a task of a Workflow (from the ``pod_cache``: no request)."""
        return [
            p
            for p in self.pods.of_workflow(name)
            if (p["metadata"].get("labels") or {}).get(TASK_LABEL) == task_id
        ]


def _created(pod: dict[str, Any]) -> tuple[str, str]:
    """When a pod was created (RFC 3339 sorts in time), then its name."""
    meta = pod["metadata"]
    return (str(meta.get("creationTimestamp") or ""), str(meta["name"]))


def _staged(pod: dict[str, Any]) -> bool:
    """Whether a pod has the ``stage`` init container of a command task."""
    init = (pod.get("spec") or {}).get("initContainers") or []
    return any(c.get("name") == STAGE_CONTAINER for c in init)


def stage_header(stage: str) -> str:
    """What goes before a main container's log: its ``stage`` init container's log."""
    return (
        f"[simrun] the log of stage, which staged the inputs:\n{stage.rstrip()}\n"
        "[simrun] the log of main:\n"
    )


def _entry(pod: EndedPod) -> PodLog:
    """An ended pod as the store names its log (``logs.log_name``)."""
    return PodLog(node=pod.node, pod=pod.pod, text="", done=True, attempt=pod.attempt)
