"""Re-run: submit a run's spec again (as it was, or edited), the new run linked to the old.

The new run belongs to whoever re-runs it; the link (``Run.rerun_of``) is written in the
transaction that creates the run, so the run is never seen without it.
"""

from __future__ import annotations

import yaml
from django.contrib.auth.models import User

from runs.models import Run
from runs.planning.spec import RunSpec
from runs.planning.submission import create_run


def submit_rerun(*, source: Run, spec: RunSpec, owner: User, text: str | None = None) -> Run:
    """Create a run of ``spec`` as a re-run of ``source``: linked as it is created, and its
    sources learned before any transaction, as every submission's are. ``text`` is the
    spec's text as edited; None: the source's, re-run as it was."""
    if text is None:
        text = source.spec_text
    return create_run(spec=spec, owner=owner, rerun_of=source, text=text)


def spec_text(run: Run) -> str:
    """A run's spec to edit: its text as submitted (comments, layout, block strings), else,
    for a run submitted before the text was kept, its spec as YAML in the order submitted."""
    if run.spec_text:
        return run.spec_text
    return yaml.safe_dump(run.spec, sort_keys=False, allow_unicode=True, width=100)
