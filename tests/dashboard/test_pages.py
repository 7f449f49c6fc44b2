"""The dashboard's pages and fragments: who sees what, what they show, when they poll."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from django.utils import timezone

from runs.models import Attempt, Observation, Run, RunState, Task
from tests.factories import ended, pod, running, submitted
from tests.floods import deep_tree, tmpfs

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def page_urls(run: Run) -> list[str]:
    base = f"/runs/{run.id}/"
    return [
        base,
        base + "live/",
        base + "tasks/sweep/logs/",
        base + "tasks/sweep/logs/sweep-w0-0/",
        base + "tasks/sweep/out/squares.json",
    ]


def write_file(store, run, relative, text, task="sweep"):
    path = store / "runs" / run.id / "tasks" / task / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# Who may see what


@pytest.mark.parametrize(
    "url",
    [
        "/",
        "/runs/table/",
        "/runs/new/",
        "/placements/",
        "/placements/live/",
        "/nodes/",
        "/observations/",
    ],
)
def test_every_page_and_fragment_asks_an_anonymous_visitor_to_log_in(client, url):
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_a_user_logs_in_with_the_form_and_lands_on_the_runs(client, owner):
    page = client.get("/login/")
    assert page.status_code == 200 and b'name="password"' in page.content
    response = client.post("/login/", {"username": "alice", "password": "alice-password"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_another_users_run_is_404_in_every_page_fragment_and_file(mallory, alice, owner, store):
    run = submitted(owner)
    write_file(store, run, "logs/sweep-w0-0.log", "secret\n")
    write_file(store, run, "out/squares.json", "[]")
    Task.objects.filter(run=run, task_id="sweep").update(state="done")
    for url in page_urls(run):
        assert alice.get(url).status_code in {200, 286}, url
        assert mallory.get(url).status_code == 404, url
        assert mallory.get(url, **HTMX).status_code == 404, url
    assert mallory.post(f"/runs/{run.id}/cancel/", **HTMX).status_code == 404
    assert Run.objects.get(pk=run.pk).state == RunState.SUBMITTING


def test_staff_see_every_run(operator, owner, store):
    run = submitted(owner)
    write_file(store, run, "logs/sweep-w0-0.log", "line\n")
    write_file(store, run, "out/squares.json", "[]")
    for url in page_urls(run):
        assert operator.get(url).status_code in {200, 286}, url


def test_the_layout_loads_htmx_from_this_site_and_sends_the_csrf_token(alice):
    page = alice.get("/").content.decode()
    scripts = re.findall(r'<script[^>]*src="([^"]+)"', page)
    assert any("htmx" in s for s in scripts)
    assert all(s.startswith("/static/") for s in scripts)
    assert re.search(r"<body hx-headers='\{\"X-CSRFToken\": \"[A-Za-z0-9]+\"\}'>", page)


def test_the_favicon_is_served_to_anyone_and_the_layout_names_it(client, alice):
    answer = client.get("/favicon.ico", follow=True)
    assert answer.status_code == 200 and answer.redirect_chain[0][1] == 301
    icon = b"".join(answer.streaming_content)
    assert icon[:4] == b"\x00\x00\x01\x00"  # an ICO file
    page = alice.get("/").content.decode()
    assert re.search(r'<link rel="icon" href="/static/runs/favicon\.ico">', page)


# Runs


def test_the_runs_table_shows_state_progress_duration_and_owner(alice, owner, stranger):
    run = running(submitted(owner), sweep="running")
    Task.objects.filter(run=run, task_id="sweep").update(units_done=5)
    submitted(stranger, SWEEP_OTHER)
    page = alice.get("/").content.decode()
    row = re.search(rf'<tr data-run="{run.id}">(.*?)</tr>', page, re.S).group(1)
    assert "badge state-running" in row and "5&thinsp;/&thinsp;21" in row
    assert "alice" in row and "width: 23.8%" in row
    assert "other-sweep" not in page


def test_the_runs_table_polls_while_a_run_shown_is_live_and_stops_after(alice, owner):
    run = running(submitted(owner))
    page = alice.get("/").content.decode()
    assert 'hx-trigger="every 2s"' in page
    live = alice.get("/runs/table/", **HTMX)
    assert live.status_code == 200 and 'hx-trigger="every 2s"' in live.content.decode()
    ended(run)
    quiet = alice.get("/runs/table/", **HTMX)
    assert quiet.status_code == 286 and "hx-trigger" not in quiet.content.decode()
    assert "hx-trigger" not in alice.get("/").content.decode()


def test_the_runs_table_keeps_its_filters_when_it_polls(alice, owner):
    running(submitted(owner))
    page = alice.get("/?state=running&name=dem").content.decode()
    assert 'hx-get="/runs/table/?state=running&amp;name=dem"' in page
    assert alice.get("/?state=failed").content.decode().count("<tr data-run") == 0


def test_the_runs_table_escapes_the_names_users_choose(alice, owner):
    Run.objects.create(owner=owner, name='<img src=x onerror="go()">&', spec={}, backend="fake")
    owner.username = "al<b>ice"
    owner.save()
    body = alice.get("/runs/table/", **HTMX).content.decode()
    assert "<img" not in body and "<b>" not in body
    assert "&lt;img src=x onerror=&quot;go()&quot;&gt;&amp;" in body and "al&lt;b&gt;ice" in body


@pytest.mark.parametrize("runs", [1, 200])
def test_the_runs_page_takes_a_constant_number_of_queries(
    alice, owner, runs, django_assert_max_num_queries
):
    Run.objects.bulk_create(
        Run(owner=owner, name=f"r{i}", spec={}, backend="fake", state=RunState.RUNNING)
        for i in range(runs)
    )
    with django_assert_max_num_queries(4):
        body = alice.get("/runs/table/", **HTMX).content.decode()
    assert body.count("<tr data-run") == min(runs, 25)


# A run


def test_a_run_page_draws_its_dag_with_state_colours_and_arrows(alice, owner):
    run = running(submitted(owner), sweep="done", summary="running")
    page = alice.get(f"/runs/{run.id}/").content.decode()
    svg = re.search(r'<svg class="dag".*?</svg>', page, re.S).group(0)
    assert 'class="node state-done" data-task="sweep"' in svg
    assert 'class="node state-running" data-task="summary"' in svg
    assert svg.count('<path class="edge"') == 1 and "summary reads sweep as table" in svg


def test_a_run_page_shows_plans_why_attempts_and_oom_evidence(alice, owner):
    run = running(submitted(owner), sweep="retrying")
    Attempt.objects.create(
        task=run.tasks.get(task_id="sweep"),
        worker="sweep-w0",
        attempt=0,
        exit_code=137,
        oom_killed=True,
        oom_evidence="OOMKilled by the kernel",
        node_name="node-a",
        evicted=False,
    )
    page = alice.get(f"/runs/{run.id}/").content.decode()
    sweep = run.tasks.get(task_id="sweep")
    assert sweep.plan["why"].split(";")[0] in page
    assert "OOM killed" in page and "OOMKilled by the kernel" in page and "node-a" in page
    assert '<span class="mono bad">137</span>' in page


def test_a_memory_kill_is_named_once_when_its_evidence_says_no_more(alice, owner):
    run = running(submitted(owner), sweep="running")
    Attempt.objects.create(
        task=run.tasks.get(task_id="sweep"), worker="sweep-w0", attempt=0,
        oom_killed=True, oom_evidence="OOMKilled", exit_code=137,
    )  # fmt: skip
    page = alice.get(f"/runs/{run.id}/").content.decode()
    assert "OOM killed" in page and "OOMKilled" not in page


def test_a_run_page_shows_the_message_and_that_memory_is_not_enforced(alice, owner):
    run = ended(submitted(owner), RunState.FAILED, message="task sweep: unit 3 failed")
    Run.objects.filter(pk=run.pk).update(memory_enforced=False)
    page = alice.get(f"/runs/{run.id}/").content.decode()
    assert "task sweep: unit 3 failed" in page and "Memory is not enforced" in page


def test_the_progress_bar_of_a_running_task_moves_with_its_progress_file(alice, owner, store):
    run = running(submitted(owner), sweep="running")
    progress = write_file(store, run, "progress.jsonl", "")

    def sweep_progress():
        body = alice.get(f"/runs/{run.id}/live/", **HTMX).content.decode()
        card = body[body.index('id="task-sweep"') :]
        return re.search(r'aria-valuenow="(\d+)"', card).group(1)

    assert sweep_progress() == "0"
    progress.write_text("".join(f'{{"unit": {i}}}\n' for i in range(7)))
    assert sweep_progress() == "7"


def test_the_run_fragment_polls_while_the_run_is_live_and_stops_with_286(alice, owner):
    run = running(submitted(owner))
    live = alice.get(f"/runs/{run.id}/live/", **HTMX)
    assert live.status_code == 200 and 'hx-trigger="every 2s"' in live.content.decode()
    ended(run)
    done = alice.get(f"/runs/{run.id}/live/", **HTMX)
    assert done.status_code == 286
    assert "hx-trigger" not in done.content.decode() and "badge state-succeeded" in (
        done.content.decode()
    )


def test_outputs_show_images_as_img_and_never_inline_svg_markup(alice, owner, store):
    run = ended(submitted(owner))
    write_file(
        store,
        run,
        "out/plot.svg",
        '<svg xmlns="http://www.w3.org/2000/svg"><script>x()</script></svg>',
    )
    write_file(store, run, "out/curve.png", "png")
    write_file(store, run, "out/squares.json", "[0, 1, 4]")
    write_file(store, run, "out/huge.csv", "x\n" * 40_000)
    page = alice.get(f"/runs/{run.id}/").content.decode()
    base = f"/runs/{run.id}/tasks/sweep/out/"
    assert f'<img src="{base}plot.svg"' in page and f'<img src="{base}curve.png"' in page
    assert "<script>x()</script>" not in page and "x()" not in page
    assert "[0, 1, 4]" in page
    assert f'href="{base}huge.csv"' in page and "x\nx\nx" not in page


def test_output_files_are_served_only_from_inside_out(alice, owner, store, tmp_path):
    run = ended(submitted(owner))
    write_file(store, run, "out/ok.txt", "fine")
    (tmp_path / "secret").write_text("no")
    (store / "runs" / run.id / "tasks/sweep/out/leak").symlink_to(tmp_path / "secret")
    base = f"/runs/{run.id}/tasks/sweep/out/"
    ok = alice.get(base + "ok.txt")
    assert ok.status_code == 200 and ok["Cache-Control"] == "private, max-age=600"
    for path in ["leak", "../task.json", "..%2Ftask.json", "nosuch"]:
        assert alice.get(base + path).status_code == 404, path


def test_an_out_folder_replaced_by_a_link_serves_nothing_on_the_page(alice, owner, store, tmp_path):
    run = ended(submitted(owner))
    write_file(store, run, "out/ok.txt", "fine")
    home = tmp_path / "service-home"
    home.mkdir()
    (home / "secret_key").write_text("the service's key")
    out = store / "runs" / run.id / "tasks/sweep/out"
    out.rename(out.with_name("out.real"))
    out.symlink_to(home)
    base = f"/runs/{run.id}/tasks/sweep/out/"
    assert alice.get(base + "secret_key").status_code == 404
    assert "secret_key" not in alice.get(f"/runs/{run.id}/").content.decode()
    out.unlink()
    out.symlink_to("/proc/self")
    assert alice.get(base + "environ").status_code == 404


def test_outputs_named_with_a_newline_or_bytes_not_utf8_are_shown_escaped(alice, owner, store):
    run = ended(submitted(owner))
    out = store / "runs" / run.id / "tasks" / "sweep" / "out"
    write_file(store, run, "out/two\nlines.txt", "x")
    Path(os.fsdecode(os.fsencode(out) + b"/caf\xe9.csv")).write_text("y")

    for url in (f"/runs/{run.id}/", f"/runs/{run.id}/live/"):
        answer = alice.get(url)
        assert answer.status_code in (200, 286), url  # 286: an ended run's fragment, last poll
        page = answer.content.decode()
        assert "two\\nlines.txt" in page and "caf\\xe9.csv" in page, url


def test_outputs_3000_folders_deep_are_said_too_deep_on_the_page(alice, owner, settings, tmp_path):
    with tmpfs(tmp_path / "fs") as fs:
        settings.SIMRUN_STORE = fs / "store"
        run = ended(submitted(owner))
        write_file(fs / "store", run, "out/result.txt", "x")
        deep_tree(fs / "store" / "runs" / run.id / "tasks" / "sweep" / "out", 3000)
        pages = [alice.get(url) for url in (f"/runs/{run.id}/", f"/runs/{run.id}/live/")]
    for answer in pages:
        assert answer.status_code in (200, 286)
        page = answer.content.decode()
        assert "result.txt" in page and "too deep: folders more than 64 levels down" in page


# Cancel


def test_cancel_from_the_page_writes_the_run_cancelled_and_stops_polling(
    alice, owner, settled, django_capture_on_commit_callbacks
):
    run = running(submitted(owner))
    with django_capture_on_commit_callbacks(execute=True):
        response = alice.post(f"/runs/{run.id}/cancel/", **HTMX)
    assert response.status_code == 286
    body = response.content.decode()
    assert "badge state-cancelled" in body and f"Run {run.id} cancelled." in body
    assert Run.objects.get(pk=run.pk).state == RunState.CANCELLED and settled == [run.id]


def test_cancelling_an_ended_run_says_so_and_a_get_changes_nothing(alice, owner):
    run = ended(submitted(owner))
    response = alice.post(f"/runs/{run.id}/cancel/", **HTMX)
    assert "has ended" in response.content.decode()
    live = running(submitted(owner))
    assert alice.get(f"/runs/{live.id}/cancel/").status_code == 405
    redirect = alice.post(f"/runs/{live.id}/cancel/")
    assert redirect.status_code == 302 and redirect["Location"] == f"/runs/{live.id}/"


# Submit


def test_a_run_is_submitted_from_the_form_and_the_page_opens(alice, owner, queued):
    page = alice.get("/runs/new/").content.decode()
    assert "demo.yaml" in page and "squares (quick)" in page
    response = alice.post("/runs/new/", {"spec": SWEEP_OTHER})
    run = Run.objects.get(owner=owner)
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.id}/"


def test_a_bad_spec_is_shown_by_field_path_and_kept_in_the_form(alice):
    text = "tasks:\n  sweep: {type: squares, settings: {n: 0}}\n"
    response = alice.post("/runs/new/", {"spec": text})
    body = response.content.decode()
    assert response.status_code == 400 and "<code>tasks.sweep.settings.n</code>" in body
    assert "settings: {n: 0}}" in body and not Run.objects.exists()


# Re-run


def test_re_run_submits_the_same_spec_and_both_pages_link_each_other(
    alice, owner, queued, django_capture_on_commit_callbacks
):
    source = ended(submitted(owner, SWEEP_OTHER), RunState.FAILED)
    with django_capture_on_commit_callbacks(execute=True):
        response = alice.post(f"/runs/{source.id}/rerun/")
    again = Run.objects.exclude(pk=source.pk).get()
    assert response.status_code == 302 and response["Location"] == f"/runs/{again.id}/"
    assert again.spec == source.spec and again.rerun_of == source and queued == [again.id]
    new_page = alice.get(f"/runs/{again.id}/").content.decode()
    assert f're-run of <a class="mono" href="/runs/{source.id}/">{source.id}</a>' in new_page
    old_page = alice.get(f"/runs/{source.id}/").content.decode()
    assert f'href="/runs/{again.id}/">{again.id}</a>' in old_page and "data-reruns" in old_page


def test_edit_and_re_run_starts_from_the_spec_and_links_the_edited_run(alice, owner, queued):
    source = ended(submitted(owner, SWEEP_OTHER))
    form = alice.get(f"/runs/new/?rerun={source.id}").content.decode()
    assert f'name="rerun_of" value="{source.id}"' in form and "name: other-sweep" in form
    edited = SWEEP_OTHER.replace("n: 5", "n: 7")
    response = alice.post("/runs/new/", {"spec": edited, "rerun_of": source.id})
    again = Run.objects.exclude(pk=source.pk).get()
    assert response.status_code == 302 and again.rerun_of == source
    assert again.spec["tasks"]["sweep"]["settings"] == {"n": 7}


def test_another_users_run_cannot_be_re_run_nor_its_spec_read(mallory, owner):
    source = submitted(owner)
    assert mallory.post(f"/runs/{source.id}/rerun/").status_code == 404
    assert mallory.get(f"/runs/new/?rerun={source.id}").status_code == 404
    assert (
        mallory.post("/runs/new/", {"spec": SWEEP_OTHER, "rerun_of": source.id}).status_code == 404
    )
    assert Run.objects.count() == 1


def test_staffs_re_run_of_a_users_run_is_that_users_and_the_pages_say_whose_code_runs_as_whom(
    operator, alice, owner
):
    source = ended(submitted(owner, SWEEP_OTHER), RunState.FAILED)
    before = operator.get(f"/runs/{source.id}/").content.decode()
    form = operator.get(f"/runs/new/?rerun={source.id}").content.decode()
    assert "A re-run is alice's run: its code runs as alice's task user, never as yours." in before
    assert "runs as alice's task user, never as yours" in form
    assert "data-rerun-as" not in alice.get(f"/runs/{source.id}/").content.decode()

    operator.post(f"/runs/{source.id}/rerun/")

    again = Run.objects.exclude(pk=source.pk).get()
    assert again.owner == owner and again.submitted_by.get_username() == "operator"
    page = alice.get(f"/runs/{again.id}/").content.decode()
    assert "submitted by operator for alice: its code runs as alice's task user" in page


def test_re_run_is_a_post_only(alice, owner):
    source = submitted(owner)
    assert alice.get(f"/runs/{source.id}/rerun/").status_code == 405
    assert Run.objects.count() == 1


# Logs


def test_the_logs_page_shows_the_tail_of_the_running_attempt_and_follows_it(alice, owner, store):
    run = running(submitted(owner), sweep="running")
    write_file(store, run, "logs/sweep-w0-0.log", "old attempt\n")
    write_file(store, run, "logs/sweep-w0-1.log", "".join(f"unit {i}\n" for i in range(300)))
    write_file(store, run, "logs/sweep-w0-1.pid", "{}")
    page = alice.get(f"/runs/{run.id}/tasks/sweep/logs/").content.decode()
    assert 'data-log="sweep-w0-0"' in page and 'data-log="sweep-w0-1"' in page
    assert "unit 299" in page and "unit 99\n" not in page and "following" in page
    fragment = alice.get(f"/runs/{run.id}/tasks/sweep/logs/sweep-w0-1/?tail=1000", **HTMX)
    assert fragment.status_code == 200 and "unit 0\n" in fragment.content.decode()
    assert 'hx-trigger="every 2s"' in fragment.content.decode()


def test_a_log_is_searchable_and_an_ended_one_stops_polling(alice, owner, store):
    run = running(submitted(owner))
    write_file(store, run, "logs/sweep-w0-0.log", "alpha\nBeta one\ngamma\nbeta two\n")
    response = alice.get(f"/runs/{run.id}/tasks/sweep/logs/sweep-w0-0/?q=BETA", **HTMX)
    assert response.status_code == 286
    text = re.search(r'<pre class="log-text">(.*?)</pre>', response.content.decode(), re.S)
    assert text.group(1) == "Beta one\nbeta two\n"
    assert "2 lines" in response.content.decode()


def test_a_logs_page_opened_before_its_task_starts_polls_and_then_shows_the_live_log(
    alice, owner, store
):
    run = running(submitted(owner), sweep="queued")
    page = alice.get(f"/runs/{run.id}/tasks/sweep/logs/").content.decode()
    live = f"/runs/{run.id}/tasks/sweep/logs/live/"
    assert f'hx-get="{live}" hx-trigger="every 2s"' in page and 'data-waiting="true"' in page
    assert "Reload" not in page
    still = alice.get(live, **HTMX)
    assert still.status_code == 200 and 'data-waiting="true"' in still.content.decode()
    write_file(store, run, "logs/sweep-w0-0.log", "first unit\n")
    write_file(store, run, "logs/sweep-w0-0.pid", "{}")
    started = alice.get(live, **HTMX)
    body = started.content.decode()
    assert started.status_code == 286  # the page stops waiting; the log polls on its own
    assert 'data-waiting="false"' in body and "first unit" in body
    assert f'hx-get="/runs/{run.id}/tasks/sweep/logs/sweep-w0-0/?q=&amp;tail=200"' in body


def test_a_logs_page_of_a_task_that_ended_without_processes_does_not_wait(alice, owner):
    run = ended(running(submitted(owner), sweep="skipped"), RunState.FAILED)
    Task.objects.filter(run=run).update(state="skipped")
    page = alice.get(f"/runs/{run.id}/tasks/sweep/logs/").content.decode()
    assert 'data-waiting="false"' in page and "logs/live/" not in page
    assert "the task ran no process" in page


def test_the_waiting_logs_fragment_is_404_for_another_user(mallory, owner):
    run = submitted(owner)
    assert mallory.get(f"/runs/{run.id}/tasks/sweep/logs/live/", **HTMX).status_code == 404


def test_an_unknown_log_is_404(alice, owner):
    run = submitted(owner)
    assert alice.get(f"/runs/{run.id}/tasks/sweep/logs/?log=nosuch-0").status_code == 404
    assert alice.get(f"/runs/{run.id}/tasks/sweep/logs/nosuch-0/", **HTMX).status_code == 404


# Error pages


def test_a_missing_page_is_the_styled_404_with_the_navigation(alice):
    response = alice.get("/runs/nosuchrun/")
    body = response.content.decode()
    assert response.status_code == 404 and 'data-status="404"' in body
    assert 'class="mainnav"' in body and "simrun.css" in body and "Your runs" in body


def test_a_server_error_is_the_styled_500_without_a_request_context(rf):
    from django.views.defaults import server_error

    response = server_error(rf.get("/"))
    body = response.content.decode()
    assert response.status_code == 500 and 'data-status="500"' in body
    assert "simrun.css" in body and "Something went wrong on the server" in body


# Machines


@pytest.fixture
def machines(backend, owner, stranger):
    backend.add_node("node-a", cores=8, memory_gb=32)
    mine, theirs = running(submitted(owner)), running(submitted(stranger))
    backend.reserve("node-a", theirs.id)
    backend.set_placements(
        [pod(mine, pod="pod-mine", memory_gb=8), pod(theirs, pod="pod-theirs", memory_gb=8)]
    )
    return mine, theirs


def test_placements_group_pods_by_node_with_bars_and_hide_other_users_pods(
    alice, operator, machines
):
    mine, theirs = machines
    page = alice.get("/placements/").content.decode()
    assert 'data-node="node-a"' in page and "4.0 of 8" in page and "16.0 of 32.0 GiB" in page
    assert "width: 50.0%" in page and "pod-mine" in page and "pod-theirs" not in page
    assert "1 pod of other users' runs" in page and theirs.id not in page
    assert "pod-theirs" in operator.get("/placements/").content.decode()
    assert alice.get("/placements/live/", **HTMX).status_code == 200


def test_placements_stop_polling_when_nothing_runs(alice, backend):
    backend.add_node("node-a")
    response = alice.get("/placements/live/", **HTMX)
    assert response.status_code == 286 and "Nothing runs here now" in response.content.decode()


def test_reservations_show_the_holder_to_who_may_see_it_and_release_to_staff(
    alice, operator, machines, settled, django_capture_on_commit_callbacks
):
    _, theirs = machines
    page = alice.get("/nodes/").content.decode()
    assert "another user's run" in page and "Release" not in page
    assert alice.post("/nodes/node-a/release/").status_code == 403
    staff_page = operator.get("/nodes/").content.decode()
    assert theirs.id in staff_page and "Release" in staff_page
    live = operator.post("/nodes/node-a/release/", follow=True).content.decode()
    assert "cancel it, which releases its node" in live
    ended(theirs, RunState.CANCELLED)
    with django_capture_on_commit_callbacks(execute=True):
        done = operator.post("/nodes/node-a/release/", follow=True).content.decode()
    assert f"node-a will be released from run {theirs.id}" in done
    assert Run.objects.get(pk=theirs.pk).pending_release and settled == [theirs.id]


def test_machines_pages_say_when_the_backend_does_not_answer(alice, backend):
    backend.fail_next("nodes", "RuntimeError", "cluster down")
    assert "did not answer: cluster down" in alice.get("/placements/").content.decode()


# Observations


def test_observations_chart_peaks_of_the_users_runs_against_the_planned_figure(
    alice, owner, stranger
):
    mine, theirs = submitted(owner), submitted(stranger)
    for run, workers in ((mine, 4), (theirs, 3)):
        Observation.objects.bulk_create(
            Observation(
                task_type="squares",
                run=run,
                worker=f"w{i}",
                processes=2,
                per_worker_gb=0.1,
                peak_bytes=int(0.1 * 2**30),
                oom=i == 0,
                created_at=timezone.now(),
            )
            for i in range(workers)
        )
    page = alice.get("/observations/?type=squares").content.decode()
    chart = re.search(r'<svg class="chart".*?</svg>', page, re.S).group(0)
    assert chart.count('<circle class="point"') == 3 and chart.count('class="point oom"') == 1
    assert 'class="planned"' in chart and "data-planned" in page
    assert alice.get("/observations/?type=nosuch").status_code == 404


SWEEP_OTHER = "name: other-sweep\ntasks:\n  sweep: {type: squares, settings: {n: 5}}\n"


def test_a_run_none_of_whose_tasks_started_shows_queued_not_running(alice, owner):
    run = running(submitted(owner), sweep="queued")  # summary waits for sweep

    header = re.search(r"<h1>.*?</h1>", alice.get(f"/runs/{run.id}/").content.decode(), re.S)

    assert header and 'class="badge state-queued">queued</span>' in header[0]
    Task.objects.filter(run=run, task_id="sweep").update(state="running")
    header = re.search(r"<h1>.*?</h1>", alice.get(f"/runs/{run.id}/").content.decode(), re.S)
    assert header and ">running</span>" in header[0]


SUBMITTED = """# the example sweep, as I wrote it
name: mine
tasks:
  sweep: {type: squares, settings: {n: 4}}   # four units
  stats:
    type: csv-stats
    inputs: {table: sweep}
"""


def test_the_run_page_shows_the_spec_as_submitted_and_its_normalised_form_as_such(
    alice, owner_client
):
    """The text sent (YAML, comments and layout kept) is what "as submitted" shows; the JSON
    the service validated and keeps is shown beside it under its own name."""
    response = owner_client.post("/api/runs/", data=SUBMITTED, content_type="application/yaml")
    assert response.status_code == 201, response.json()
    page = alice.get(f"/runs/{response.json()['id']}/").content.decode()

    submitted = re.search(
        r"<summary><strong>Specification</strong> <span class=\"muted\">as submitted</span>"
        r"</summary>\s*<pre class=\"preview\" data-spec-text>(.*?)</pre>",
        page,
        re.S,
    )
    assert submitted is not None, page
    assert submitted[1] == SUBMITTED.replace("<", "&lt;").replace(">", "&gt;")
    normalised = re.search(
        r"<summary><strong>Specification</strong> <span class=\"muted\">normalised: as "
        r"validated and kept \(JSON\)</span></summary>\s*<pre class=\"preview\" data-spec>"
        r"(.*?)</pre>",
        page,
        re.S,
    )
    assert normalised is not None and "&quot;type&quot;: &quot;csv-stats&quot;" in normalised[1]


def test_a_run_whose_text_was_not_kept_shows_only_the_normalised_spec_named_so(alice, owner):
    run = submitted(owner)
    assert run.spec_text == ""

    page = alice.get(f"/runs/{run.id}/").content.decode()

    assert '<span class="muted">as submitted</span>' not in page and "data-spec-text" not in page
    assert "normalised: as validated and kept (JSON)" in page
    assert "its text as submitted was not kept" in page
