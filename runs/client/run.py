"""A run as the client last read it from the server, with the calls that concern it.

Never imports Django.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runs.client.errors import RunFailed
from runs.client.progress import duration_text
from runs.client.specs import Spec

if TYPE_CHECKING:
    from runs.client.api import Client

ENDED = frozenset({"succeeded", "failed", "cancelled"})


class Run:
    """A run as last read from the server, with the calls that concern it.

    ``run["state"]`` reads any field of the API's answer; ``refresh()`` reads it again.
    """

    def __init__(self, client: Client, data: Mapping[str, Any]) -> None:
        self.client = client
        self.data = dict(data)

    def __getitem__(self, field: str) -> Any:
        if field == "tasks" and "tasks" not in self.data:
            self.refresh()
        return self.data[field]

    def __repr__(self) -> str:
        name = f" {self.name!r}" if self.name else ""
        return f"<Run {self.id}{name} {self.state}>"

    @property
    def id(self) -> str:
        return str(self.data["id"])

    @property
    def name(self) -> str:
        return str(self.data.get("name") or "")

    @property
    def state(self) -> str:
        return str(self.data["state"])

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def succeeded(self) -> bool:
        return self.state == "succeeded"

    @property
    def message(self) -> str:
        return str(self.data.get("message") or "")

    @property
    def tags(self) -> list[str]:
        """The words the run is filed under (``tag`` adds them)."""
        return list(self.data.get("tags") or [])

    @property
    def note(self) -> str:
        return str(self.data.get("note") or "")

    def tag(self, *tags: str, remove: bool = False) -> Run:
        """Add ``tags`` to the run's (``remove=True``: take them off)."""
        self.data["tags"] = self.client.tag(self.id, *tags, remove=remove)
        return self

    @property
    def tasks(self) -> list[dict[str, Any]]:
        return list(self["tasks"])

    @property
    def url(self) -> str:
        """The run's page in the dashboard."""
        return f"{self.client.config.url}/runs/{self.id}/"

    def summary(self) -> str:
        """``run <id> <state> after <duration>[: <message>]``."""
        line = f"run {self.id} {self.state} after {duration_text(self.data.get('duration_s') or 0)}"
        return f"{line}: {self.message}" if self.message else line

    def refresh(self) -> Run:
        self.data = self.client.run(self.id).data
        return self

    def wait(self, **options: Any) -> Run:
        """Wait for the run's end (see ``Client.wait``); this run, as it ended."""
        try:
            ended = self.client.wait(self.id, **options)
        except RunFailed as failure:
            self.data = failure.run.data
            failure.run = self
            raise
        self.data = ended.data
        return self

    def cancel(self) -> Run:
        self.data.update(self.client.cancel(self.id).data)
        return self

    def rerun(self, spec: Spec | None = None, *, follow: bool = False) -> Run:
        """Submit this run's spec again (or ``spec``, an edit of it), linked to this run."""
        if spec is None:
            return Run(self.client, self.client.submit_text(None, base=Path.cwd(), rerun=self.id))
        return self.client.submit(spec, follow=follow, rerun=self.id)

    def resume(self, spec: Spec | None = None, *, follow: bool = False) -> Run:
        """Resume this ended run: its spec again (or ``spec``, an edit of it), reusing every
        task and unit it finished that the spec has unchanged (docs/resume.md)."""
        if spec is None:
            run = Run(self.client, self.client.submit_text(None, base=Path.cwd(), resume=self.id))
            return run.wait() if follow else run
        return self.client.submit(spec, follow=follow, resume=self.id)

    def logs(self, task: str, **options: Any) -> str:
        return self.client.logs(self.id, task, **options)

    def outputs(self, task: str) -> list[dict[str, Any]]:
        return self.client.outputs(self.id, task)

    def output(self, task: str, path: str) -> str | bytes:
        return self.client.output(self.id, task, path)

    def download(self, task: str, path: str, to: str | os.PathLike[str] | None = None) -> Path:
        return self.client.download(self.id, task, path, to)

    def frame(self, task: str, path: str, **read: Any) -> Any:
        return self.client.frame(self.id, task, path, **read)

    def results(self, task: str | None = None) -> Any:
        return self.client.results(self, task)

    def results_csv(self, task: str | None = None) -> str:
        return self.client.results_csv(self, task)
