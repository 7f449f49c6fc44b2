"""A settled run's page is kept whole, its layout too (runs/web/run_views.py ``PAGES``), read
in one statement with its owner and re-runs (runs/reads/run_page.py); the layout's links are
rendered once per process (the ``kept`` template tag)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.http import Http404
from django.test import Client

from runs.common.kept import Kept
from runs.models import Run
from runs.reads import run_page
from runs.templatetags import simrun
from runs.web import run_views
from tests.factories import ended, running, submitted
from tests.runs_written import runs_written

pytestmark = pytest.mark.django_db

TOKEN = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def page_of(client: Client, run: Run) -> str:
    answer = client.get(f"/runs/{run.id}/")
    assert answer.status_code == 200
    return answer.content.decode()


def templates_of(client: Client, run: Run) -> list[str]:
    """The templates a view of ``run``'s page rendered, by name."""
    return [t.name for t in client.get(f"/runs/{run.id}/").templates]


def test_a_settled_runs_page_seen_again_reads_its_session_its_user_and_its_run_only(
    alice, owner, django_assert_num_queries
):
    run = ended(submitted(owner))
    page_of(alice, run)
    with django_assert_num_queries(3):  # the session, its user, the run with its re-runs
        page_of(alice, run)


def test_a_settled_runs_page_seen_again_renders_nothing(alice, owner):
    run = ended(submitted(owner))
    assert {"runs/run_detail.html", "base.html"} <= set(templates_of(alice, run))
    assert templates_of(alice, run) == []


def test_a_kept_page_still_shows_the_notice_of_the_action_that_led_to_it(alice, owner):
    run = ended(submitted(owner))
    page_of(alice, run)
    answer = alice.post(f"/runs/{run.id}/cancel/", follow=True)
    notices = answer.content.decode().split('class="messages"', 1)
    assert len(notices) == 2 and "notice" in notices[1].split("</ul>", 1)[0]
    assert 'class="messages"' not in page_of(alice, run), "a notice is shown once"


def test_a_kept_page_names_its_viewer_as_they_are_named_now(operator, owner, staff):
    run = ended(submitted(owner))
    assert '<span>operator</span><span class="tag">staff</span>' in page_of(operator, run)
    User.objects.filter(pk=staff.pk).update(username="op")
    assert '<span>op</span><span class="tag">staff</span>' in page_of(operator, run)


def test_a_live_runs_page_is_written_at_every_view(alice, owner, monkeypatch):
    run = running(submitted(owner), sweep="running")
    bodies = runs_written(monkeypatch, run_views, "_body_context")
    assert "hx-trigger" in page_of(alice, run)
    assert "hx-trigger" in page_of(alice, run)
    assert bodies == [run.pk, run.pk]


def test_each_session_gets_its_own_csrf_token_in_a_kept_page_and_its_forms_post(owner):
    run = ended(submitted(owner))
    browsers = [Client(enforce_csrf_checks=True), Client(enforce_csrf_checks=True)]
    for browser in browsers:
        browser.force_login(owner)
    first, second = (page_of(browser, run) for browser in browsers)
    assert run_views.CSRF_SLOT not in first + second
    for browser, page, tag in zip(browsers, [first, second], ["first", "second"], strict=True):
        tokens = set(TOKEN.findall(page))
        assert len(tokens) == 1, "every form of a page carries the page's one token"
        form = {"tags": tag, "note": "", "csrfmiddlewaretoken": tokens.pop()}
        answer = browser.post(f"/runs/{run.id}/labels/", form)
        assert answer.status_code == 302
        assert Run.objects.get(pk=run.pk).tags == [tag]


def test_a_settled_runs_page_changes_with_a_rerun_and_the_names_it_shows(operator, owner, staff):
    run = ended(submitted(owner))
    Run.objects.filter(pk=run.pk).update(submitted_by=staff)
    assert "submitted by operator for alice" in page_of(operator, run)

    rerun = submitted(owner)
    Run.objects.filter(pk=rerun.pk).update(rerun_of=run)
    User.objects.filter(pk=owner.pk).update(username="alicia")
    User.objects.filter(pk=staff.pk).update(username="op")
    page = page_of(operator, run)
    assert f'href="/runs/{rerun.id}/"' in page.split("data-reruns", 1)[1]
    assert "submitted by op for alicia" in page


def test_the_layout_is_rendered_once_per_page_kind_and_kind_of_user(alice, owner, monkeypatch):
    monkeypatch.setattr(simrun, "PARTS", Kept(256))
    runs = [ended(submitted(owner)) for _ in range(2)]
    rendered = [name for run in runs * 2 for name in templates_of(alice, run)]
    rendered += [t.name for t in alice.get("/runs/").templates]
    assert rendered.count("_layout_head.html") == 1
    assert rendered.count("_layout_nav.html") == 2  # the run's page, the runs list
    User.objects.filter(pk=owner.pk).update(is_staff=True)
    page = page_of(alice, runs[0])
    assert 'href="/admin/"' in page


@pytest.mark.parametrize("who", ["owner", "staff"])
def test_the_pages_one_statement_reads_what_the_orm_reads(who, owner, staff):
    viewer = {"owner": owner, "staff": staff}[who]
    run = ended(submitted(owner))
    Run.objects.filter(pk=run.pk).update(submitted_by=staff, tags=["a", "b"])
    for rerun in [submitted(owner), submitted(staff)]:
        Run.objects.filter(pk=rerun.pk).update(rerun_of=run)
    read, by_orm = run_page.page_run_or_404(viewer, run.id), run_page._read_by_orm(viewer, run.id)
    fields = [f.attname for f in Run._meta.concrete_fields]
    assert [getattr(read.run, f) for f in fields] == [getattr(by_orm.run, f) for f in fields]
    assert read.run.owner == by_orm.run.owner
    assert (read.submitter, read.reruns) == (by_orm.submitter, by_orm.reruns)
    assert len(read.reruns) == {"owner": 1, "staff": 2}[who]


def test_the_pages_read_is_404_for_a_stranger_as_for_an_unknown_run(owner, stranger):
    run = ended(submitted(owner))
    for run_id in [run.id, "nosuchrun"]:
        with pytest.raises(Http404):
            run_page.page_run_or_404(stranger, run_id)
