"""The one retry rule of both backends: the memory each attempt of a pod runs with.

An attempt runs with the retry memory exactly when the attempt right before it exited 137;
every other attempt runs with the plan's memory. 137 is a kill for memory, or a SIGKILL after
the grace period: Argo's ``podSpecPatch`` sees only the attempt before (``lastRetry``), and
its exit code alone, so it cannot tell them apart, and the local backend follows the same
rule so that both agree attempt by attempt. The run fails on the *second proven kill for
memory* of a pod when that kill hit the retry memory (Ruling 35, ``fails_the_run``); a kill
with the plan's memory (after an eviction, say) is retried with the retry memory like the
first, and so is a first proven kill that met the retry memory only because a SIGKILL after
the grace period (137 without evidence) came before it: both backends retry it once more.
"""

from __future__ import annotations

from collections.abc import Mapping

KILLED_EXIT = 137
"""The exit code after which the next attempt gets the retry memory."""
TOLERANCE = 0.01
"""A limit read back from a cgroup or a pod differs from the plan's by rounding: 1% is equal."""


def gets_retry_memory(previous_exit: int | None) -> bool:
    """Whether an attempt runs with the retry memory, by the exit code of the one before."""
    return previous_exit == KILLED_EXIT


def next_memory_gb(*, memory_gb: float, retry_memory_gb: float, previous_exit: int | None) -> float:
    """The memory of an attempt, by the exit code of the one before (None for the first)."""
    return retry_memory_gb if gets_retry_memory(previous_exit) else memory_gb


def rendered_memory_gb(
    *, memory_gb: float, retry_memory_gb: float, exits: Mapping[int, int | None], attempt: int
) -> float:
    """The memory the rule gave an attempt, from the exit codes of the earlier ones by number.

    The fallback where neither the backend nor the attempt's report says what it had.
    """
    previous = exits.get(attempt - 1) if attempt > 0 else None
    return next_memory_gb(
        memory_gb=memory_gb, retry_memory_gb=retry_memory_gb, previous_exit=previous
    )


def fails_the_run(*, proven_kills: int, with_retry_memory: bool) -> bool:
    """Whether a proven kill for memory ends its pod's retries: the second one, with the retry
    memory (Ruling 35). ``proven_kills`` counts this kill and the pod's earlier proven ones."""
    return with_retry_memory and proven_kills >= 2


def ran_with_retry_memory(attempt_gb: float, *, memory_gb: float, retry_memory_gb: float) -> bool:
    """Whether an attempt's memory was the retry memory (more than the plan's, to rounding)."""
    if retry_memory_gb <= memory_gb * (1 + TOLERANCE):
        return False
    return attempt_gb >= retry_memory_gb * (1 - TOLERANCE)
