"""How Argo retries a node's failed attempt: the retry strategy's expression, read by Argo
(and, for its patterns, by ``status``), and the ``podSpecPatch`` that gives the attempt right
after a kill for memory the retry memory. A part of the Workflow ``manifest`` makes."""

from __future__ import annotations

import math
from typing import Any

from harness.lifecycle import AFTER_MEMORY_KILL

RETRY_BACKOFF = "15s"
"""How long Argo waits before it starts a node's next attempt."""
MEMORY_KILL_EXIT = "137"
"""The exit code of a container (or of the harness) killed for memory; also of a pod killed
after its grace period, which then gets the retry memory too: Argo cannot tell them apart."""
STORAGE_ERROR_EXIT = "75"
"""The harness's ``EXIT_STORAGE``: a transient error of the store (a full disk, NFS); retried."""
EVICTION_PATTERN = (
    "(?i)evict|preempt|low on resource|had condition|node shutdown|terminated in response"
    "|pod deleted"
)
"""Messages of a pod that was evicted, preempted, drained or deleted;
matched by Argo (RE2) in the retry expression and by simrun in the status."""
NEVER_FIXED_PATTERN = (
    "(?i)error applying podspecpatch|is invalid|is forbidden|violates podsecurity"
    "|denied the request|createcontainerconfigerror|invalidimagename"
)
"""Messages of an attempt the cluster refused or cannot start as it is (a PodSpecPatch Argo
cannot apply, a pod the API server or an admission webhook refuses, a missing Secret or
ConfigMap, a malformed image name): another attempt meets the same refusal."""
SCRATCH_OVERFLOW_PATTERN = "Usage of EmptyDir volume .* exceeds the limit"
"""The kubelet's message of a pod it evicted because it wrote more to its scratch directory
(an ``emptyDir``) than its ``sizeLimit``: the task's own doing, which another attempt repeats,
so it is a failure, not an eviction (KK ``pkg/kubelet/eviction``, ``emptyDirLimitEviction``)."""
SECOND_MEMORY_KILL_PATTERN = "OOMKilled.*the retry memory after a kill for memory"
"""The message of an attempt killed for memory while it ran with the retry memory after a
kill for memory: the harness says so in its termination message (``note_retry_memory``)."""
RETRY_EXPRESSION = (
    f"((lastRetry.status == 'Error' and not (lastRetry.message matches '{NEVER_FIXED_PATTERN}'))"
    f" or lastRetry.exitCode in ['{MEMORY_KILL_EXIT}', '143', '{STORAGE_ERROR_EXIT}']"
    f" or lastRetry.message matches '{EVICTION_PATTERN}')"
    f" and not (lastRetry.message matches '{SECOND_MEMORY_KILL_PATTERN}')"
    f" and not (lastRetry.message matches '{SCRATCH_OVERFLOW_PATTERN}')"
)
"""Retry a pod deleted or failed by the infrastructure (Error, unless a retry cannot fix it),
killed (137: for memory, or after its grace period), stopped by SIGTERM (143: evicted),
failed on the store (75) or evicted; not a genuine failure, nor the second kill for memory
(Ruling 35: the service fails the run, Argo is not to start another pod meanwhile), nor a
scratch directory written past its size (the kubelet's eviction of its own pod)."""


def memory_quantity(gb: float) -> str:
    """GiB as a Kubernetes quantity in whole MiB, rounded up."""
    return f"{math.ceil(gb * 1024 - 1e-9)}Mi"


def retry_memory_patch(
    *, memory: str, retry_memory: str, memory_gb: str, retry_memory_gb: str
) -> dict[str, Any]:
    """The ``main`` container's part of a ``podSpecPatch`` that holds simrun's one retry rule:
    an attempt runs with the retry memory exactly when the attempt right before it exited
    137, every other one with the plan's. The arguments are expr-lang operands (a task's
    parameters, ``inputs.parameters.memory``): quantities for the resources, GiB for
    ``SIMRUN_MEMORY_LIMIT_GB``.

    137 is a proven kill for memory or a SIGKILL after the grace period: ``podSpecPatch`` sees
    only ``lastRetry``, so it cannot tell them apart, nor look further back. Argo substitutes
    the expressions per attempt; ``lastRetry`` is the attempt before (its exit code is ``"0"``
    on the first). ``SIMRUN_AFTER_MEMORY_KILL`` is 1 when that 137 was a proven kill for
    memory (OOMKilled): the harness then says so in its termination message, which the retry
    expression reads to leave a second kill unretried. The expressions avoid ``&``, ``<`` and
    ``>``, which Go's JSON encoding of the template would escape.
    """
    killed = f"lastRetry.exitCode == '{MEMORY_KILL_EXIT}'"
    proven = "lastRetry.message matches 'OOMKilled'"

    def pick(retry: str, first: str) -> str:
        return f"{{{{={killed} ? {retry} : {first}}}}}"

    quantity = pick(retry_memory, memory)
    return {
        "resources": {"requests": {"memory": quantity}, "limits": {"memory": quantity}},
        "env": [
            {"name": "SIMRUN_MEMORY_LIMIT_GB", "value": pick(retry_memory_gb, memory_gb)},
            {"name": AFTER_MEMORY_KILL, "value": f"{{{{={killed} and {proven} ? '1' : '0'}}}}"},
        ],
    }
