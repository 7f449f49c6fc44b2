"""Re-run: submit a run's spec again (as it was, or edited), the new run linked to the old.

The new run belongs to whoever re-runs it; the link (``Run.rerun_of``) is written in the
transaction that creates the run, so the run is never seen without it.
"""

from __future__ import annotations

from typing import Any

import yaml
from django.contrib.auth.models import User

from runs.models import Run
from runs.spec import RunSpec
from runs.submission import create_run


def submit_rerun(*, source: Run, spec: RunSpec, owner: User) -> Run:
    """Create a run of ``spec`` as a re-run of ``source``: linked as it is created, and its
    sources learned before any transaction, as every submission's are."""
    return create_run(spec=spec, owner=owner, rerun_of=source)


def spec_text(spec: dict[str, Any]) -> str:
    """A run's spec as YAML to edit, in the order it was submitted."""
    return yaml.safe_dump(spec, sort_keys=False, allow_unicode=True, width=100)
