"""Resume on the run page: the button where a run failed or was cancelled, in Edit and re-run,
and what each task reused on its badge and in the timeline."""

from __future__ import annotations

import pytest
from django.test import Client

from runs.common import store
from runs.control import submitting
from runs.models import Reuse, Run, RunState, Task
from runs.web.timeline import timeline
from tests.factories import ended, running, submitted

pytestmark = pytest.mark.django_db

SWEEP = "tasks:\n  sweep: {type: squares, settings: {n: 5}}\n"


@pytest.mark.parametrize(
    ("state", "offered"),
    [
        (RunState.FAILED, True),
        (RunState.CANCELLED, True),
        (RunState.SUCCEEDED, False),
        (RunState.RUNNING, False),
    ],
)
def test_resume_is_offered_beside_re_run_where_the_run_failed_or_was_cancelled(
    alice, owner, state, offered
):
    run = submitted(owner, SWEEP)
    run = running(run) if state == RunState.RUNNING else ended(run, state)
    page = alice.get(f"/runs/{run.id}/").content.decode()
    assert ("data-resume" in page) == offered and "Re-run" in page


def test_resume_submits_a_resume_of_the_run_and_shows_its_page(
    alice, owner, queued, django_capture_on_commit_callbacks
):
    source = ended(submitted(owner, SWEEP), RunState.CANCELLED)
    with django_capture_on_commit_callbacks(execute=True):
        response = alice.post(f"/runs/{source.id}/resume/")
    again = Run.objects.exclude(pk=source.pk).get()
    assert response.status_code == 302 and response["Location"] == f"/runs/{again.id}/"
    assert again.resume and again.rerun_of == source and queued == [again.id]
    page = alice.get(f"/runs/{again.id}/").content.decode()
    assert f'resumes <a class="mono" href="/runs/{source.id}/">{source.id}</a>' in page


def test_resume_of_a_live_run_is_refused_with_the_reason(alice, owner):
    source = running(submitted(owner, SWEEP))
    response = alice.post(f"/runs/{source.id}/resume/", follow=True)
    assert "was not resumed" in response.content.decode() and Run.objects.count() == 1


def test_edit_and_re_run_offers_resume_for_the_edited_spec(alice, owner, queued):
    source = ended(submitted(owner, SWEEP), RunState.FAILED)
    form = alice.get(f"/runs/new/?rerun={source.id}").content.decode()
    assert 'name="resume" value="1"' in form
    edited = SWEEP.replace("n: 5", "n: 6")
    response = alice.post("/runs/new/", {"spec": edited, "rerun_of": source.id, "resume": "1"})
    again = Run.objects.exclude(pk=source.pk).get()
    assert response.status_code == 302 and again.resume and again.rerun_of == source
    assert again.spec["tasks"]["sweep"]["settings"] == {"n": 6}


def test_another_users_run_cannot_be_resumed(owner, stranger):
    source = ended(submitted(owner, SWEEP), RunState.FAILED)
    mallory = Client()
    mallory.force_login(stranger)
    assert mallory.post(f"/runs/{source.id}/resume/").status_code == 404
    assert Run.objects.count() == 1


def test_a_reused_task_reads_reused_from_its_run_and_the_timeline_marks_its_units(
    alice, owner, backend
):
    source = submitted(owner, SWEEP)
    out = store.task_dir(source.id, "sweep") / "out"
    out.mkdir(parents=True)
    (out / "squares.json").write_text("[0, 1, 4, 9, 16]")
    source = ended(source, RunState.SUCCEEDED)
    alice.post(f"/runs/{source.id}/resume/")
    run = Run.objects.exclude(pk=source.pk).get()
    assert submitting.submit(run.id, backend=backend)

    page = alice.get(f"/runs/{run.id}/").content.decode()

    assert f"reused from {source.id}</span>" in page and "state-reused" in page
    assert "squares.json" in page  # its outputs are shown as a done task's
    rows = {bar.kind: bar for bar in timeline(run, list(run.tasks.all())).bars}
    assert rows["reused"].title.startswith(f"5 of 5 units reused from {source.id}")
    assert 'data-kind="reused"' in page


def test_a_task_that_reused_some_units_says_how_many(alice, owner):
    source = ended(submitted(owner, SWEEP), RunState.FAILED)
    run = running(submitted(owner, SWEEP))
    Task.objects.filter(run=run).update(
        reuse=Reuse.UNITS, reused_from=f"{source.id}/sweep", units_reused=3, units_done=3
    )
    page = alice.get(f"/runs/{run.id}/").content.decode()
    assert f"3 of 5 units reused from {source.id}" in page
