"""A task's detail, logs and outputs through the API, for every persona."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest

from runs.backends.base import PodLog
from runs.models import Attempt
from runs.planning.records import run_record
from tests.factories import ended, running, submitted
from tests.floods import deep_tree, tmpfs

pytestmark = pytest.mark.django_db


def task_url(run, task="sweep", rest=""):
    return f"/api/runs/{run.id}/tasks/{task}/{rest}"


def write_log(store, run, name, text, *, task="sweep", running=False):
    folder = store / "runs" / run.id / "tasks" / task / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.log").write_text(text)
    if running:
        (folder / f"{name}.pid").write_text("{}")
    return folder / f"{name}.log"


def out_dir(store, run, task="sweep"):
    folder = store / "runs" / run.id / "tasks" / task / "out"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# The task


def test_an_owner_reads_a_task_with_its_plan_and_attempts(owner_client, owner):
    run = submitted(owner)
    Attempt.objects.create(task=run.tasks.get(task_id="sweep"), worker="sweep-w0", attempt=0)
    body = owner_client.get(task_url(run)).json()
    assert body["id"] == "sweep" and body["kind"] == "split" and body["units_total"] == 20
    assert body["plan"]["why"] and body["attempts"][0]["worker"] == "sweep-w0"
    # what was known of it when it was planned: its numeric settings, units and cores
    assert body["plan"]["features"] == {"cores": 2.0, "n": 20.0, "units": 20.0}


@pytest.mark.parametrize(
    "rest", ["", "logs/", "logs/sweep-w0-0/", "outputs/", "outputs/squares.json"]
)
def test_another_users_task_is_404_everywhere_and_anonymous_is_401(
    stranger_client, anonymous_client, owner, store, rest
):
    run = submitted(owner)
    write_log(store, run, "sweep-w0-0", "secret\n")
    (out_dir(store, run) / "squares.json").write_text("[]")
    assert stranger_client.get(task_url(run, rest=rest)).status_code == 404
    assert anonymous_client.get(task_url(run, rest=rest)).status_code == 401


@pytest.mark.parametrize("rest", ["", "logs/", "outputs/"])
def test_staff_reach_every_task(staff_client, owner, rest):
    run = submitted(owner)
    assert staff_client.get(task_url(run, rest=rest)).status_code == 200


def test_an_unknown_task_is_404(owner_client, owner):
    assert owner_client.get(task_url(submitted(owner), "nosuch")).status_code == 404


# Logs


def test_the_logs_of_a_task_are_listed_per_node_and_attempt(owner_client, owner, store):
    run = submitted(owner)
    write_log(store, run, "sweep-w0-1", "b\n", running=True)
    write_log(store, run, "sweep-w0-0", "a\n")
    write_log(store, run, "sweep-w1-0", "c\n")
    (store / "runs" / run.id / "tasks/sweep/logs/notes.txt").write_text("not a log")
    body = owner_client.get(task_url(run, rest="logs/")).json()
    assert [(log["node"], log["attempt"], log["running"]) for log in body] == [
        ("sweep-w0", 0, False),
        ("sweep-w0", 1, True),
        ("sweep-w1", 0, False),
    ]
    assert body[0]["name"] == "sweep-w0-0" and body[0]["size"] == 2


def test_a_log_is_read_by_its_tail(owner_client, owner, store):
    run = submitted(owner)
    write_log(store, run, "sweep-w0-0", "".join(f"line {i}\n" for i in range(500)))
    body = owner_client.get(task_url(run, rest="logs/sweep-w0-0/?tail=3")).json()
    assert body["text"] == "line 497\nline 498\nline 499\n"
    assert body["offset"] == os.path.getsize(
        store / "runs" / run.id / "tasks/sweep/logs/sweep-w0-0.log"
    )
    default = owner_client.get(task_url(run, rest="logs/sweep-w0-0/")).json()
    assert default["text"].count("\n") == 200


def test_a_running_log_is_followed_from_an_offset_by_whole_lines(owner_client, owner, store):
    run = submitted(owner)
    path = write_log(store, run, "sweep-w0-0", "first\n", running=True)
    first = owner_client.get(task_url(run, rest="logs/sweep-w0-0/?tail=10")).json()
    assert first["text"] == "first\n" and first["running"] is True
    with path.open("a") as log:
        log.write("second\nthird, not yet end")
    after = owner_client.get(task_url(run, rest=f"logs/sweep-w0-0/?offset={first['offset']}"))
    assert after.json()["text"] == "second\n"
    with path.open("a") as log:
        log.write("ed\n")
    (path.parent / "sweep-w0-0.pid").unlink()
    last = owner_client.get(task_url(run, rest=f"logs/sweep-w0-0/?offset={after.json()['offset']}"))
    assert last.json()["text"] == "third, not yet ended\n" and last.json()["running"] is False


def test_a_cluster_pods_log_comes_from_the_backend_until_it_is_kept(
    owner_client, owner, store, backend
):
    run = running(submitted(owner), sweep="running")
    backend.submit(run_record(run), {}, {}, None)
    backend.set_logs(
        run.workflow,
        "sweep",
        [PodLog(node="sweep-w1", pod="p-1", text="x\ny\nz\n", done=False, attempt=0)],
    )
    write_log(store, run, "sweep-w0-0", "kept\n")
    logs = owner_client.get(task_url(run, rest="logs/")).json()
    assert [(log["name"], log["source"], log["running"]) for log in logs] == [
        ("sweep-w0-0", "store", False),
        ("sweep-w1-0", "backend", True),
    ]
    tail = owner_client.get(task_url(run, rest="logs/sweep-w1-0/?tail=2")).json()
    assert tail["text"] == "y\nz\n"
    rest = owner_client.get(task_url(run, rest="logs/sweep-w1-0/?offset=2")).json()
    assert rest["text"] == "y\nz\n" and rest["offset"] == 6


def test_a_kept_log_of_a_retried_pod_and_the_backends_copy_are_one_attempt(
    owner_client, owner, store, backend
):
    run = running(submitted(owner), sweep="running")
    backend.submit(run_record(run), {}, {}, None)
    backend.set_logs(
        run.workflow,
        "sweep",
        [PodLog(node="sweep-w0(1)", pod="p-2", text="retried\n", done=True)],
    )
    write_log(store, run, "sweep-w0-1", "kept\n")
    logs = owner_client.get(task_url(run, rest="logs/")).json()
    assert [(log["name"], log["source"]) for log in logs] == [("sweep-w0-1", "store")]


def test_an_ended_run_does_not_ask_the_backend_for_logs(owner_client, owner, backend):
    run = ended(running(submitted(owner)))
    assert owner_client.get(task_url(run, rest="logs/")).json() == []
    assert backend.called("logs") == []


def test_a_backend_that_fails_leaves_the_stored_logs(owner_client, owner, store, backend):
    run = running(submitted(owner))
    backend.fail_next("logs", "RuntimeError", "cluster unreachable")
    write_log(store, run, "sweep-w0-0", "kept\n")
    assert [log["name"] for log in owner_client.get(task_url(run, rest="logs/")).json()] == [
        "sweep-w0-0"
    ]


def test_an_unknown_log_is_404_and_a_bad_tail_or_offset_400(owner_client, owner, store):
    run = submitted(owner)
    write_log(store, run, "sweep-w0-0", "a\n")
    assert owner_client.get(task_url(run, rest="logs/sweep-w9-0/")).status_code == 404
    assert owner_client.get(task_url(run, rest="logs/..%2F..%2Frun.json/")).status_code == 404
    for query in ["tail=0", "tail=-1", "tail=x", "tail=5001", "offset=-3", "offset=1e9"]:
        response = owner_client.get(task_url(run, rest=f"logs/sweep-w0-0/?{query}"))
        assert response.status_code == 400, query


# Outputs


def test_the_outputs_of_a_task_are_listed_with_their_urls(owner_client, owner, store):
    run = submitted(owner)
    out = out_dir(store, run)
    (out / "squares.json").write_text("[0, 1]")
    (out / "plots").mkdir()
    (out / "plots" / "curve.png").write_bytes(b"\x89PNG fake")
    (out / ".simrun-merged").write_text("")
    body = owner_client.get(task_url(run, rest="outputs/")).json()
    assert [(o["path"], o["is_image"], o["inline"]) for o in body] == [
        ("plots/curve.png", True, True),
        ("squares.json", False, True),
    ]
    assert body[1]["url"].endswith(task_url(run, rest="outputs/squares.json"))


def test_an_output_is_served_with_its_type_and_no_scripts(owner_client, owner, store):
    run = submitted(owner)
    out = out_dir(store, run)
    (out / "squares.json").write_text("[0, 1]")
    (out / "plot.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"><script/></svg>')
    (out / "data.bin").write_bytes(b"\x00\x01")
    text = owner_client.get(task_url(run, rest="outputs/squares.json"))
    assert text.status_code == 200 and b"".join(text.streaming_content) == b"[0, 1]"
    assert text["Content-Type"] == "text/plain; charset=utf-8"
    svg = owner_client.get(task_url(run, rest="outputs/plot.svg"))
    assert svg["Content-Type"] == "image/svg+xml"
    assert (
        "sandbox" in svg["Content-Security-Policy"] and svg["X-Content-Type-Options"] == "nosniff"
    )
    binary = owner_client.get(task_url(run, rest="outputs/data.bin"))
    assert binary["Content-Type"] == "application/octet-stream"
    assert binary["Content-Disposition"].startswith("attachment")


@pytest.mark.parametrize(
    ("name", "written", "served", "media"),
    [
        (
            "table.csv",
            "x,y\n=1+1,-2\n@SUM(A1),+cmd\n",
            "x,y\n'=1+1,-2\n'@SUM(A1),'+cmd\n",
            "text/csv",
        ),
        ("deep/more.CSV", "=HYPERLINK(1)\n", "'=HYPERLINK(1)\n", "text/csv"),
        ("t.tsv", "a\t=cmd|x\n", "a\t'=cmd|x\n", "text/tab-separated-values"),
    ],
)
def test_every_sheet_a_task_wrote_is_an_inert_download(
    owner_client, owner, store, name, written, served, media
):
    """Not only the results table: any .csv or .tsv of out/ is a download whose formulas are
    inert (a number stays a number), never a text shown inline (issue 45)."""
    run = submitted(owner)
    out = out_dir(store, run)
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(written)
    answer = owner_client.get(task_url(run, rest=f"outputs/{name}"))
    assert answer.status_code == 200
    assert b"".join(answer.streaming_content).decode() == served
    assert answer["Content-Type"].startswith(media)
    assert answer["Content-Disposition"].startswith("attachment")
    assert answer["X-Content-Type-Options"] == "nosniff"


def test_outputs_are_served_only_from_inside_out(owner_client, owner, store, tmp_path):
    run = submitted(owner)
    out = out_dir(store, run)
    secret = tmp_path / "secret.txt"
    secret.write_text("do not serve")
    (out / "leak.txt").symlink_to(secret)
    (out / "inside.txt").write_text("fine")
    (out / "alias.txt").symlink_to(out / "inside.txt")
    (out / "dir-leak").symlink_to(tmp_path)
    (out / ".hidden").write_text("hidden")
    for path in [
        "leak.txt",
        "dir-leak/secret.txt",
        "../task.json",
        "..%2Ftask.json",
        "%2Fetc%2Fpasswd",
        ".hidden",
        "nosuch.txt",
        # A link is never followed, even one that stays inside out/ (issue 27).
        "alias.txt",
    ]:
        assert owner_client.get(task_url(run, rest=f"outputs/{path}")).status_code == 404, path
    inside = owner_client.get(task_url(run, rest="outputs/inside.txt"))
    assert inside.status_code == 200 and b"".join(inside.streaming_content) == b"fine"
    listed = [o["path"] for o in owner_client.get(task_url(run, rest="outputs/")).json()]
    assert listed == ["inside.txt"]


@pytest.fixture
def fast_store(settings, tmp_path):
    """The store on a tmpfs of the test's own, for trees of thousands of folders."""
    with tmpfs(tmp_path / "fs") as fs:
        settings.SIMRUN_STORE = fs / "store"
        settings.SIMRUN_STORE.mkdir()
        yield settings.SIMRUN_STORE


def test_outputs_named_with_a_newline_or_bytes_not_utf8_are_listed_escaped(
    owner_client, owner, store
):
    run = submitted(owner)
    out = out_dir(store, run)
    (out / "two\nlines.txt").write_text("x")
    Path(os.fsdecode(os.fsencode(out) + b"/caf\xe9.csv")).write_text("y")
    (out / "plain.txt").write_text("z")

    answer = owner_client.get(task_url(run, rest="outputs/"))

    assert answer.status_code == 200
    rows = {o["path"]: o for o in answer.json()}
    assert set(rows) == {"caf\\xe9.csv", "plain.txt", "two\\nlines.txt"}
    assert rows["caf\\xe9.csv"]["url"] is None and rows["two\\nlines.txt"]["url"] is None
    assert rows["plain.txt"]["url"].endswith("outputs/plain.txt")


def test_outputs_3000_folders_deep_are_listed_down_to_the_bound_and_said_too_deep(
    owner_client, owner, fast_store, settings
):
    run = submitted(owner)
    out = out_dir(fast_store, run)
    (out / "result.txt").write_text("x")
    deep_tree(out, 3000)

    answer = owner_client.get(task_url(run, rest="outputs/"))

    assert answer.status_code == 200
    assert [o["path"] for o in answer.json()] == ["result.txt"]
    assert answer["Simrun-Listing-Cut"] == (
        f"too deep: folders more than {settings.SIMRUN_WALK_DEPTH} levels down"
    )


def test_outputs_beyond_the_entries_a_walk_looks_at_are_said_too_many(
    owner_client, owner, fast_store, settings
):
    settings.SIMRUN_WALK_ENTRIES = 300
    run = submitted(owner)
    out = out_dir(fast_store, run)
    for i in range(400):
        (out / f"{i:03}.txt").write_text("x")

    answer = owner_client.get(task_url(run, rest="outputs/"))

    assert answer.status_code == 200 and len(answer.json()) == 300
    assert answer["Simrun-Listing-Cut"] == "too many: more than 300 entries"
    assert "Simrun-Listing-Cut" not in owner_client.get(task_url(run, rest="logs/"))


def test_an_out_folder_replaced_by_a_link_to_the_services_home_serves_nothing(
    owner_client, owner, store, tmp_path
):
    run = submitted(owner)
    home = tmp_path / "service-home"
    home.mkdir()
    (home / "secret_key").write_text("the service's key")
    out_dir(store, run).rmdir()
    (store / "runs" / run.id / "tasks" / "sweep" / "out").symlink_to(home)
    answer = owner_client.get(task_url(run, rest="outputs/secret_key"))
    assert answer.status_code == 404
    assert owner_client.get(task_url(run, rest="outputs/")).json() == []


def test_an_out_folder_linked_to_proc_self_serves_no_environment(owner_client, owner, store):
    run = submitted(owner)
    out_dir(store, run).rmdir()
    (store / "runs" / run.id / "tasks" / "sweep" / "out").symlink_to("/proc/self")
    for path in ["environ", "cmdline", "cwd/manage.py", "root/etc/passwd"]:
        assert owner_client.get(task_url(run, rest=f"outputs/{path}")).status_code == 404, path
    assert owner_client.get(task_url(run, rest="outputs/")).json() == []


def test_a_fifo_among_the_outputs_and_the_logs_is_answered_without_blocking(
    owner_client, owner, store
):
    run = submitted(owner)
    fifo = out_dir(store, run) / "pipe.txt"
    os.mkfifo(fifo)
    (out_dir(store, run) / "fine.txt").write_text("fine")
    log = write_log(store, run, "sweep-w0-0", "x\n")
    log.unlink()
    os.mkfifo(log)
    with not_blocked_on(fifo, log):
        assert owner_client.get(task_url(run, rest="outputs/pipe.txt")).status_code == 404
        listed = [o["path"] for o in owner_client.get(task_url(run, rest="outputs/")).json()]
        assert listed == ["fine.txt"]
        assert owner_client.get(task_url(run, rest="logs/")).json() == []
        assert owner_client.get(task_url(run, rest="logs/sweep-w0-0/")).status_code == 404


class Blocked(BaseException):
    """A request blocked on a FIFO: not an ``Exception``, which a handler could swallow."""


@contextmanager
def not_blocked_on(*fifos, timeout: float = 10.0):
    """Fail, instead of hanging, when what runs inside blocks on one of ``fifos``: an alarm
    interrupts a blocked ``open`` (the request runs in this thread, with the test's database
    transaction)."""

    def blocked(signum, frame):
        raise Blocked(f"blocked on a FIFO of {[f.name for f in fifos]}")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.setitimer(signal.ITIMER_REAL, timeout, 1.0)  # again, should one be swallowed
    try:
        yield
    except Blocked as error:
        pytest.fail(str(error))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_outputs_larger_than_the_inline_caps_are_not_shown_inline(owner_client, owner, store):
    from runs.reads.task_files import INLINE_IMAGE_BYTES, INLINE_TEXT_BYTES

    run = submitted(owner)
    out = out_dir(store, run)
    (out / "small.csv").write_text("a\n" * 10)
    (out / "big.csv").write_text("x" * (INLINE_TEXT_BYTES + 1))
    (out / "small.png").write_bytes(b"\x89PNG" + b"\0" * 100)
    (out / "big.png").write_bytes(b"\x89PNG" + b"\0" * INLINE_IMAGE_BYTES)
    body = owner_client.get(task_url(run, rest="outputs/")).json()
    assert {o["path"]: o["inline"] for o in body} == {
        "big.csv": False,
        "big.png": False,
        "small.csv": True,
        "small.png": True,
    }
