"""How a backend names the runs that hold what a waiting task needs, and how a reader hides
the names it may not see.

A backend writes why a task waits as a sentence ("run a holds 2 of 2 cores"); run ids of other
users are secret, so ``runs.reads.waiting`` leaves them unnamed for a viewer who does not own
them. The sentences and their patterns live here together, so the two cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Callable


def holders(names: list[str], *, others: bool) -> str:
    """Who holds what a node waits for: "run a holds", "runs a and b hold"; with ``others``,
    runs of other users too, not named: "run a and other users' runs hold"."""
    if not names:
        return "other users' runs hold"
    listed = [*names, "other users' runs"] if others else names
    lead = "run" if len(names) == 1 else "runs"
    if len(listed) == 1:
        return f"{lead} {listed[0]} holds"
    return f"{lead} {', '.join(listed[:-1])} and {listed[-1]} hold"


HELD_BY = re.compile(
    r"\b(?:run ([a-z0-9]+) holds|runs ((?:[a-z0-9]+, )*[a-z0-9]+ and [a-z0-9]+) hold)\b"
)
"""The holders as ``holders`` names them (without ``others``)."""
BEHIND = re.compile(r"\bwaits behind \S+ of run ([a-z0-9]+), first in the queue\b")


def named_runs(message: str) -> set[str]:
    """The runs a waiting node's reason names (``shortage``, ``admit``)."""
    found = set(BEHIND.findall(message))
    for one, several in HELD_BY.findall(message):
        found |= {one} if one else set(re.split(r", | and ", several))
    return found


def unnamed(message: str, visible: Callable[[str], bool]) -> str:
    """A waiting node's reason with the runs that ``visible`` refuses left unnamed: "other
    users' runs hold 2 of 2", "waits behind a node of another user's run"."""

    def held(match: re.Match[str]) -> str:
        names = [match[1]] if match[1] else re.split(r", | and ", match[2])
        shown = [name for name in names if visible(name)]
        return holders(shown, others=len(shown) < len(names))

    message = HELD_BY.sub(held, message)
    return BEHIND.sub(
        lambda m: (
            m[0]
            if visible(m[1])
            else "waits behind a node of another user's run, first in the queue"
        ),
        message,
    )


def behind(node: str, run: str) -> str:
    """Why a node that could start waits: the queue's head, which it must not delay."""
    return f"waits behind {node} of run {run}, first in the queue, which starting now could delay"
