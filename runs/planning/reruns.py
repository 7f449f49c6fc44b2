"""Re-run: submit a run's spec again (as it was, or edited), the new run linked to the old;
Resume: a re-run that reuses what the old one finished (docs/resume.md).

Acting on another user's run never runs their code as you: the new run belongs to the old
one's owner, whoever re-runs it (staff, who see every run), so its tasks, its sources' build
and the learning of their types run as that owner's task user, within that owner's budgets;
``submitted_by`` records the staff member who pressed it (``rerun_owner``; a resume follows the
same rule). The link (``Run.rerun_of``) is written in the transaction that creates the run, so
the run is never seen without it.
"""

from __future__ import annotations

import yaml
from django.contrib.auth.models import User

from runs.models import Run
from runs.planning.spec import RunSpec
from runs.planning.submission import create_run


def rerun_owner(source: Run) -> User:
    """Whose a re-run (or a resume) of ``source`` is, whoever acts on it: its owner's, so that
    its code never runs as the task user of someone else."""
    return source.owner


def submit_rerun(
    *,
    source: Run,
    spec: RunSpec,
    actor: User,
    text: str | None = None,
    resume: bool = False,
) -> Run:
    """Create a run of ``spec`` as a re-run of ``source`` by ``actor``: the source owner's
    (``rerun_owner``), linked as it is created, its sources learned as every submission's
    are. ``text`` is the spec's text as edited; None: the source's, re-run as it was. With
    ``resume`` it reuses what ``source`` finished (``runs.planning.resume``), which must have
    ended (``create_run`` checks)."""
    if text is None:
        text = source.spec_text
    owner = rerun_owner(source)
    by = actor if actor.pk != owner.pk else None
    return create_run(
        spec=spec, owner=owner, rerun_of=source, resume=resume, text=text, submitted_by=by
    )


def spec_text(run: Run) -> str:
    """A run's spec to edit: its text as submitted (comments, layout, block strings), else,
    for a run submitted before the text was kept, its spec as YAML in the order submitted."""
    if run.spec_text:
        return run.spec_text
    return yaml.safe_dump(run.spec, sort_keys=False, allow_unicode=True, width=100)
