"""The one retry rule of every backend: the memory each attempt of a pod runs with, and when
a kill for memory ends its retries (Ruling 35).

An attempt is **the retry** exactly when the attempt right before it exited 137 (a proven kill
for memory counts as 137 wherever its exit code was lost); it runs with the retry memory, every
other attempt with the plan's. 137 is a kill for memory, or a SIGKILL after the grace period:
Argo's ``podSpecPatch`` sees only the attempt before (``lastRetry``), and its exit code alone,
so it cannot tell them apart, and the other backends follow the same rule so that all agree
attempt by attempt. The run fails on the *second proven kill for memory* of a pod when that
kill hit the retry, whatever its memory (``fails_the_run``): a plan at the machine's or the
node's limit has a retry memory equal to its own, and its second kill fails as any other. A
kill of an attempt that was not the retry (after an eviction, say) is retried like the first,
and so is a first proven kill that was the retry only because a SIGKILL after the grace period
(137 without evidence) came before it.
"""

from __future__ import annotations

from collections.abc import Mapping

KILLED_EXIT = 137
"""The exit code after which the next attempt gets the retry memory."""


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


def fails_the_run(*, proven_kills: int, is_retry: bool) -> bool:
    """Whether a proven kill for memory ends its pod's retries: the second one, of the retry
    (Ruling 35). ``proven_kills`` counts this kill and the pod's earlier proven ones;
    ``is_retry``: the attempt before this one exited 137 or was a proven kill."""
    return is_retry and proven_kills >= 2
