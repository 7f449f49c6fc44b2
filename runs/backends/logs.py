"""Pod logs kept in the store, ``tasks/<task>/logs/<node>-<attempt>.log``.

The logs of terminated pods are copied from the backend into the store as the pods end
(a cluster's pod GC deletes succeeded pods soon), so they outlive the pods (and the workflow,
deleted by its time to live). The local
backend writes the same files live; a log file that exists is left as it is.

A task's user can write its folder, so ``logs/`` is a folder of the service's own
(``harness.untrusted.service_dir``: one a task planted is moved aside) and each log is created
in it by descriptor, once: a link planted as a log is never written through.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from collections.abc import Iterable

from harness import untrusted
from runs.backends.base import PodLog
from runs.common.store import TaskFolder

log = logging.getLogger(__name__)

RETRY_SUFFIX = re.compile(r"\((\d+)\)$")
"""Argo's suffix of the attempt of a retried node, ``squares-w0(1)``."""
UNSAFE = re.compile(r"[/\x00]")
UNREACHABLE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})
"""Errors of a task folder that is gone or replaced (a link, a file): no log can be kept."""


def log_name(log: PodLog) -> str:
    """The file of a pod's log: its DAG node without the retry suffix, then its attempt."""
    node, attempt = log.node, log.attempt
    suffix = RETRY_SUFFIX.search(node)
    if suffix is not None:
        node = node[: suffix.start()]
        attempt = int(suffix[1]) if attempt is None else attempt
    return f"{UNSAFE.sub('_', node)}-{attempt or 0}.log"


def keep(folder: TaskFolder, logs: Iterable[PodLog]) -> bool:
    """Write the logs of the pods that terminated (a line saying why for a log that cannot be
    read any more) into the task's ``logs/``, each once; whether every pod had terminated."""
    pods = list(logs)
    ended = [pod for pod in pods if pod.done]
    if not ended:
        return not pods
    try:
        fd = untrusted.service_dir(folder.base, folder / "logs")
    except OSError as error:
        if not isinstance(error, untrusted.Refused) and error.errno not in UNREACHABLE:
            raise
        # A task folder that is gone, or a link or a file in its place: nothing to keep there.
        log.warning("cannot keep the logs in %s: %s", folder.path, error)
        return len(ended) == len(pods)
    try:
        for pod in ended:
            text = f"[simrun] no log was kept: {pod.missing}\n" if pod.missing else pod.text
            untrusted.create_once_at(fd, log_name(pod), text.encode())
    finally:
        os.close(fd)
    return len(ended) == len(pods)


def kept(folder: TaskFolder) -> list[str]:
    """The logs kept for a task (regular files of ``logs/``), by name."""
    return sorted(
        e.name
        for e in untrusted.list_dir(folder.base, folder / "logs")
        if e.is_file and e.name.endswith(".log") and not e.name.startswith(".")
    )
