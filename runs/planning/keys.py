"""Task keys: what "the same task" means when finished work is reused (docs/resume.md).

A task's key is a digest of what decides its outputs: its kind and type (or command), its
settings (a command sweep's normalised sweep), the content of the programs and files its
command names on the service's machine (``runs.planning.programs``), the environment it runs in
(the run's image and packages, simrun's version), the digests of the run's source snapshots,
and the keys of the tasks it reads by port, so a change upstream changes the key of everything
downstream. Its plan (cores, memory, workers) is not part of it. A unit's key is its task's
key and its index: unit ``i`` of a task is unit ``i`` of any task with the same key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import harness
from runs.backends.base import TaskRecord
from runs.planning.spec import RunSpec

KEY_SCHEME = "simrun-task-key-2"
"""Changes when what a key covers changes, so no key of before matches one of after."""


@dataclass(frozen=True)
class Environment:
    """What a run's tasks share that decides their outputs: the image they run in (empty:
    the service's harness image), the packages installed there and the source snapshots."""

    image: str
    packages: tuple[str, ...]
    sources: tuple[str, ...]

    @classmethod
    def of(cls, spec: RunSpec) -> Environment:
        """A spec's environment; its packages in any order are the same packages."""
        return cls(
            image=spec.environment.image or "",
            packages=tuple(sorted(set(spec.environment.packages))),
            sources=tuple(spec.sources),
        )


def task_keys(
    records: Mapping[str, TaskRecord],
    environment: Environment,
    files: Mapping[str, Mapping[str, str]],
) -> dict[str, str]:
    """The key of every task of a run (``records`` as ``task_records`` makes them, a DAG;
    ``files`` what the paths each one's command names hold, as ``named_files`` reads them)."""
    keys: dict[str, str] = {}
    for task_id in _upstream_first(records):
        record = records[task_id]
        inputs = {port: keys[source] for port, source in record.inputs.items()}
        keys[task_id] = _digest(_what_decides(record, environment, inputs, files.get(task_id, {})))
    return keys


def _what_decides(
    record: TaskRecord,
    environment: Environment,
    inputs: Mapping[str, str],
    files: Mapping[str, str],
) -> dict[str, Any]:
    """Everything a task's key covers, as JSON."""
    return {
        "files": dict(files),
        "scheme": KEY_SCHEME,
        "simrun": harness.__version__,
        "kind": record.kind,
        "type": record.type,
        "settings": record.settings,
        "command": record.command,
        "image": record.image,
        "environment": {"image": environment.image, "packages": list(environment.packages)},
        "sources": list(environment.sources),
        "inputs": dict(inputs),
    }


def _digest(content: Mapping[str, Any]) -> str:
    """The sha256 of canonical JSON: the same content gives the same key everywhere."""
    text = json.dumps(
        content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _upstream_first(records: Mapping[str, TaskRecord]) -> list[str]:
    """The task ids with every task after the tasks it reads (a validated spec has no cycle)."""
    order: list[str] = []
    placed: set[str] = set()
    for start in records:
        stack = [(start, False)]
        while stack:
            task_id, ready = stack.pop()
            if task_id in placed:
                continue
            if ready:
                placed.add(task_id)
                order.append(task_id)
                continue
            stack.append((task_id, True))
            stack += [(s, False) for s in records[task_id].inputs.values() if s not in placed]
    return order
