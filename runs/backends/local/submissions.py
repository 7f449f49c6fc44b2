"""The runs the local backend keeps in its folder (``<store>/local/``, the service's alone).

Each run is a submission (``runs/<workflow>.json``), a stop file once it was cancelled or
stopped (``runs/<workflow>.stop``) and an ended marker (``ended/<workflow>``) once it ended;
``waiting.json`` says why its ready nodes wait; ``step.lock`` lets one step at a time. A run's
view joins its submission with the files of its attempts (``state.read_attempts``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness import untrusted
from runs.backends.local.state import (
    NodeSpec,
    NodeView,
    RunView,
    Submission,
    outcome,
    read_attempts,
)

ENDED_KEPT = 64
"""The ended runs whose status the backend keeps, the latest; an older one is unknown."""


def submission_file(state: Path, name: str) -> Path:
    return state / "runs" / f"{name}.json"


def stop_file(state: Path, name: str) -> Path:
    return state / "runs" / f"{name}.stop"


def waiting_file(state: Path) -> Path:
    return state / "waiting.json"


def ended_file(state: Path, name: str) -> Path:
    return state / "ended" / name


def make_state(state: Path) -> None:
    """The backend's folder: every run's commands, the service's alone (its group reads)."""
    state.mkdir(mode=0o750, parents=True, exist_ok=True)
    if state.stat().st_mode & 0o007:
        state.chmod(0o750)


@contextlib.contextmanager
def step_lock(state: Path, blocking: bool) -> Iterator[bool]:
    """The lock of the step (a file lock: any process of the service may step); whether it
    was taken (never False when ``blocking``)."""
    make_state(state)
    with open(state / "step.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True


def write_own_json(path: Path, data: Any) -> None:
    """Write JSON atomically in a folder of the service's own (temp file + rename, no link
    followed)."""
    with untrusted.directory(path.parent) as folder:
        untrusted.write_atomic_at(folder, path.name, json.dumps(data))


def read_json(path: Path) -> Any:
    """The JSON of a file, None when it is missing or not (yet) complete."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_submission(state: Path, name: str) -> Submission:
    """The submission of a run; KeyError for an unknown one."""
    try:
        return Submission.model_validate_json(submission_file(state, name).read_text())
    except FileNotFoundError:
        raise KeyError(name) from None


def is_live(state: Path, name: str) -> bool:
    """Whether a run is known and has not ended."""
    return submission_file(state, name).exists() and not ended_file(state, name).exists()


def live(state: Path) -> list[Submission]:
    """The submissions of the runs that have not ended, in the order of their submission."""
    found = []
    for path in (state / "runs").glob("*.json"):
        if is_live(state, path.stem):
            try:
                found.append(Submission.model_validate_json(path.read_text()))
            except (OSError, ValueError):
                continue  # removed meanwhile, as ENDED_KEPT forgets a run
    return sorted(found, key=lambda s: (s.order, s.name))


def view(state: Path, submission: Submission) -> RunView:
    """A run with the attempts of its nodes and what their ends mean, read from the files."""
    stop = read_json(stop_file(state, submission.name))
    cancelled_at = stop["at"] if stop else None
    tasks: dict[str, list[NodeSpec]] = {}
    for spec in submission.nodes:
        tasks.setdefault(spec.task, []).append(spec)
    nodes: dict[str, NodeView] = {}
    for task, specs in tasks.items():
        names = [s.name for s in specs]
        attempts = read_attempts(submission.store, submission.run, task, names)
        for spec in specs:
            found = attempts[spec.name]
            results = [outcome(a.exit, cancelled_at) for a in found if a.exit is not None]
            nodes[spec.name] = NodeView(spec, found, results)
    return RunView(submission, stop, nodes)


def mark_ended(state: Path, name: str) -> None:
    """Remember that a run ended, forgetting the oldest beyond ``ENDED_KEPT``."""
    ended_file(state, name).parent.mkdir(parents=True, exist_ok=True)
    ended_file(state, name).touch()
    forget_ended(state)


def forget_ended(state: Path) -> None:
    """Forget the ended runs beyond the latest ``ENDED_KEPT``."""
    try:
        ended = sorted((state / "ended").iterdir(), key=lambda p: p.stat().st_mtime)
    except FileNotFoundError:
        return
    for marker in ended[: max(0, len(ended) - ENDED_KEPT)]:
        submission_file(state, marker.name).unlink(missing_ok=True)
        stop_file(state, marker.name).unlink(missing_ok=True)
        marker.unlink(missing_ok=True)
