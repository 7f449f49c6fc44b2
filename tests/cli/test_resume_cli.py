"""``simrun submit --resume RUN`` and what ``simrun show`` says a resumed run reused."""

from __future__ import annotations

import pytest

from runs.models import Reuse, Run, RunState, Task
from tests.factories import ended, submitted

pytestmark = pytest.mark.django_db(transaction=True)

EDITED = "name: edited\ntasks:\n  sweep: {type: squares, settings: {n: 9}, workers: 2}\n"


def test_submit_resume_submits_a_resume_of_the_run_as_it_was_or_edited(simrun, owner, tmp_path):
    source = ended(submitted(owner), RunState.FAILED)

    result = simrun("submit", "--resume", source.id)

    assert result.code == 0, result.err
    again = Run.objects.exclude(pk=source.pk).get()
    assert f"submitted run {again.id} (demo) resuming {source.id}" in result.out
    assert again.resume and again.rerun_of == source and again.spec == source.spec
    spec = tmp_path / "edited.yaml"
    spec.write_text(EDITED)
    edited = simrun("submit", str(spec), "--resume", source.id)
    assert edited.code == 0, edited.err
    assert Run.objects.get(name="edited").resume
    live = simrun("submit", "--resume", again.id)
    assert live.code == 2 and "has not ended" in live.err
    both = simrun("submit", "--resume", source.id, "--rerun", source.id)
    assert both.code == 2 and "not allowed with argument" in both.err


def test_show_says_what_each_task_reused_from_which_run(simrun, owner):
    source = ended(submitted(owner), RunState.FAILED)
    run = ended(submitted(owner), RunState.SUCCEEDED)
    Run.objects.filter(pk=run.pk).update(rerun_of=source, resume=True)
    Task.objects.filter(run=run, task_id="sweep").update(
        reuse=Reuse.WHOLE, reused_from=f"{source.id}/sweep", units_reused=20, units_done=20
    )
    Task.objects.filter(run=run, task_id="summary").update(
        not_reused=f"not reused from {source.id}/summary: out/x is a link: not followed"
    )

    shown = simrun("show", run.id)

    assert shown.code == 0, shown.err
    assert f"resumes {source.id}: reuses what it finished" in shown.out
    rows = [line for line in shown.out.splitlines() if line.startswith("sweep ")]
    assert f"reused from {source.id}" in rows[0]  # its state in the tasks' table
    assert f"sweep: reused from {source.id} (its task sweep)" in shown.out
    assert f"summary: not reused from {source.id}/summary: out/x is a link" in shown.out
