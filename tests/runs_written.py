"""Which runs a function was called for: a test's count of what a cache spared."""

from __future__ import annotations

from typing import Any


def runs_written(monkeypatch: Any, module: Any, name: str) -> list[str]:
    """Wrap ``module.name``, whose second argument is a run, to note that run's id at each
    call; the list of the ids, in the order of the calls."""
    written: list[str] = []
    original = getattr(module, name)

    def counted(request: Any, run: Any, *rest: Any) -> Any:
        written.append(run.pk)
        return original(request, run, *rest)

    monkeypatch.setattr(module, name, counted)
    return written
