"""What a user files a run under: its tags and its note (``POST /api/runs/RUN/labels/``).

Tags are words to find a run by (``Client.runs(tag=...)``, ``simrun runs --tag``); the note
says what the run is for. Only a run's owner (or staff) sets them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runs.client.errors import no_run
from runs.client.run import Run
from runs.client.session import Session


class Labels(Session):
    """The labels of runs, for ``Client``."""

    def labels(
        self, run: str | Run, *, tags: Sequence[str] | None = None, note: str | None = None
    ) -> dict[str, Any]:
        """Set a run's tags (replacing them) and its note; a field not given stays as it is.
        Its tags and note as they now are. A tag the server refuses raises
        ``InvalidRequest`` naming it (``fields["tags"]``)."""
        run_id = run.id if isinstance(run, Run) else run
        body: dict[str, Any] = {"tags": list(tags)} if tags is not None else {}
        if note is not None:
            body["note"] = note
        response = self.post(f"/api/runs/{run_id}/labels/", json=body, missing=no_run(run_id))
        return dict(response.json())

    def tag(self, run: str | Run, *tags: str, remove: bool = False) -> list[str]:
        """Add ``tags`` to a run's (``remove=True``: take them off); its tags now."""
        run_id = run.id if isinstance(run, Run) else run
        now = list(self.get(f"/api/runs/{run_id}/", missing=no_run(run_id))["tags"])
        wanted = [t for t in now if t not in tags] if remove else [*now, *tags]
        return list(self.labels(run_id, tags=list(dict.fromkeys(wanted)))["tags"])
