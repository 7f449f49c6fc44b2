"""The ``simrun`` client commands as a user runs them, against a live server."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys

import pytest

from runs.models import Attempt, Run, RunState, Snapshot, Task
from tests.e2e.service import CONFIGURATION, SIMRUN, free_port
from tests.factories import running, submitted

pytestmark = pytest.mark.django_db(transaction=True)

SQUARES = "name: {name}\ntasks:\n  sweep: {{type: squares, settings: {{n: 8}}, workers: 2}}\n"


def spec_file(tmp_path, name="sweep-ok", text=None):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text if text is not None else SQUARES.format(name=name))
    return path


def test_the_client_commands_never_import_django():
    modules = ["login", "submit", "runs", "show", "logs", "cancel", "results"]
    code = (
        "import sys\n"
        + "".join(f"import runs.cli.{m}\n" for m in modules)
        + "assert not [m for m in sys.modules if m.split('.')[0] in "
        "{'django', 'rest_framework', 'celery'}], 'django imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_command_imports_only_its_own_module_and_help_names_them_all():
    code = (
        "import sys\n"
        "from runs.cli import parser\n"
        "parser('serve').parse_args(['serve', '--port', '9'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('runs.cli.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "runs.cli.serve" in done.stdout, done.stderr
    assert "runs.cli.submit" not in done.stdout and "runs.cli.results" not in done.stdout
    mistyped = subprocess.run(
        [sys.executable, "-c", "from runs.cli import main; main(['serv'])"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert mistyped.returncode == 2
    assert "render-workflow" in mistyped.stderr and "results" in mistyped.stderr


def test_submit_follow_returns_0_for_a_run_that_succeeds_and_shows_progress(
    simrun, cluster, tmp_path
):
    result = simrun("submit", str(spec_file(tmp_path)), "--follow")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].startswith("submitted run ") and "/runs/" in lines[0]
    progress = [line.split()[1:3] for line in lines if line.startswith("sweep ")]
    done = [int(units.split("/")[0]) for _, units in progress]
    # The first poll may come after the cluster's first step: only "not done yet" is certain.
    assert done[0] < 8 and progress[-1] == ["done", "8/8"]
    assert any(
        state == "running" and 0 < d < 8 for (state, _), d in zip(progress, done, strict=True)
    )
    assert done == sorted(done)
    assert "succeeded" in lines[-1]
    assert Run.objects.get().state == RunState.SUCCEEDED


def test_submit_follow_returns_non_zero_for_a_run_that_fails(simrun, cluster, tmp_path):
    result = simrun("submit", str(spec_file(tmp_path, "sweep-fail")), "--follow")
    assert result.code == 1
    assert "failed" in result.out.splitlines()[-1] and "Traceback" not in result.err
    assert Run.objects.get().state == RunState.FAILED


def test_a_bad_spec_prints_the_field_errors_and_no_traceback(simrun, tmp_path):
    bad = "tasks:\n  sweep: {type: squares, settings: {n: 0}}\n  b: {type: nosuch}\n"
    result = simrun("submit", str(spec_file(tmp_path, "bad", bad)))
    assert result.code == 2
    assert "is not a valid run specification" in result.err
    assert "tasks.sweep.settings.n: Input should be greater than or equal to 1" in result.err
    assert "tasks.b.type: unknown task type 'nosuch'" in result.err
    assert "Traceback" not in result.err and not Run.objects.exists()


def test_a_file_that_is_no_yaml_is_refused_naming_the_file_and_line(simrun, tmp_path):
    broken = spec_file(tmp_path, "broken", "tasks:\n  sweep: {type: squares, settings: [n\n")

    result = simrun("submit", str(broken))

    assert result.code == 2 and "not valid YAML or JSON" in result.err
    assert f'in "{broken}", line 2' in result.err and "<unicode string>" not in result.err
    assert not Run.objects.exists()


def test_a_missing_file_is_a_clear_error(simrun, tmp_path):
    result = simrun("submit", str(tmp_path / "nosuch.yaml"))
    assert result.code == 2 and "cannot read" in result.err and "Traceback" not in result.err


def test_an_unreachable_server_is_a_clear_error(simrun, tmp_path):
    result = simrun("runs", url=f"http://127.0.0.1:{free_port()}")
    assert result.code == 3 and "cannot reach the simrun server" in result.err
    assert "Traceback" not in result.err


def test_a_bad_token_is_a_clear_error(simrun):
    result = simrun("runs", token_="not-a-token")
    assert result.code == 3 and "refused the token" in result.err
    assert "simrun login" in result.err and "Traceback" not in result.err


def test_without_a_server_or_token_the_user_is_told_to_log_in(simrun):
    assert "simrun login" in simrun("runs", token_=None).err
    assert "no simrun server configured" in simrun("runs", url="").err


def test_login_keeps_the_server_and_token_for_later_commands(simrun, live_server, home, owner):
    result = simrun(
        "login", live_server.url, "-u", "alice", "--password-stdin",
        token_=None, url="", stdin="alice-password\n",
    )  # fmt: skip
    assert result.code == 0 and "logged in" in result.out and "as alice" in result.out
    config = home / ".config" / "simrun" / "config.json"
    assert json.loads(config.read_text())["url"] == live_server.url
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    submitted(owner)
    listed = simrun("runs", token_=None, url="")
    assert listed.code == 0 and "demo" in listed.out
    wrong = simrun(
        "login", live_server.url, "-u", "alice", "--password-stdin",
        token_=None, url="", stdin="nope\n",
    )  # fmt: skip
    assert wrong.code == 3 and "username or password is wrong" in wrong.err


def test_login_says_when_to_try_again_after_too_many_failures(simrun, live_server, settings):
    settings.AXES_FAILURE_LIMIT = 1
    for _ in range(2):
        locked = simrun(
            "login", live_server.url, "-u", "alice", "--password-stdin",
            token_=None, url="", stdin="nope\n",
        )  # fmt: skip
    assert locked.code == 3 and "too many failed logins: try again in 900 s" in locked.err


def test_submit_uploads_the_local_source_trees_a_spec_names(simrun, tmp_path, live_server):
    package = tmp_path / "mypkg"
    (package / "mypkg").mkdir(parents=True)
    (package / "pyproject.toml").write_text("[project]\nname = 'mypkg'\n")
    (package / "mypkg" / "__init__.py").write_text("VALUE = 1\n")
    (package / ".git").mkdir()
    (package / ".git" / "HEAD").write_text("ref")
    text = SQUARES.format(name="with-sources") + "sources: [./mypkg]\n"
    result = simrun("submit", str(spec_file(tmp_path, "with-sources", text)))
    assert result.code == 0, result.err
    snapshot = Snapshot.objects.get()
    assert "uploaded ./mypkg" in result.out and snapshot.digest[:12] in result.out
    assert Run.objects.get().spec["sources"] == [snapshot.digest]
    again = simrun("submit", str(spec_file(tmp_path, "with-sources", text)))
    assert again.code == 0 and Snapshot.objects.count() == 1  # the same tree, the same id


def test_runs_show_and_cancel(simrun, owner, stranger):
    run = running(submitted(owner), sweep="running")
    theirs = submitted(stranger)
    listed = simrun("runs")
    assert run.id in listed.out and theirs.id not in listed.out and "running" in listed.out
    shown = simrun("show", run.id)
    assert shown.code == 0 and "sweep" in shown.out and "summary" in shown.out
    assert simrun("show", theirs.id).code == 2
    cancelled = simrun("cancel", run.id)
    assert cancelled.code == 0 and f"run {run.id} cancelled" in cancelled.out
    again = simrun("cancel", run.id)
    assert again.code == 1 and "has ended" in again.err


def test_runs_of_another_owner_need_staff_and_say_so(simrun, owner, stranger):
    theirs = submitted(stranger)
    refused = simrun("runs", "--owner", "mallory")
    assert refused.code == 2 and "--owner needs a staff user" in refused.err
    assert refused.out == ""
    mine = simrun("runs", "--owner", "alice")
    assert mine.code == 0 and theirs.id not in mine.out


def test_logs_print_the_tail_and_follow_until_the_task_is_final(simrun, owner, store):
    run = running(submitted(owner), sweep="running")
    folder = store / "runs" / run.id / "tasks" / "sweep" / "logs"
    folder.mkdir(parents=True)
    (folder / "sweep-w0-0.log").write_text("".join(f"line {i}\n" for i in range(10)))
    (folder / "sweep-w1-0.log").write_text("other\n")
    tail = simrun("logs", run.id, "sweep", "--log", "sweep-w0-0", "-n", "2")
    assert tail.code == 0 and tail.out == "line 8\nline 9\n"
    both = simrun("logs", run.id, "sweep")
    assert "==> sweep-w0-0 <==" in both.out and "other" in both.out
    (folder / "sweep-w1-0.pid").write_text("{}")
    follower = simrun("logs", run.id, "sweep", "-f", "--log", "sweep-w1-0", background=True)
    assert follower.stdout.readline() == "other\n"  # the tail, printed at once
    with (folder / "sweep-w1-0.log").open("a") as log:
        log.write("later\n")
    Task.objects.filter(run=run, task_id="sweep").update(state="done")
    (folder / "sweep-w1-0.pid").unlink()
    out, err = follower.communicate(timeout=60)
    assert follower.returncode == 0, err
    assert out == "later\n"


def test_login_without_a_terminal_says_how_to_log_in_instead_of_a_traceback(simrun, live_server):
    result = simrun("login", live_server.url, token_=None, url="")
    assert result.code == 2 and "Traceback" not in result.err
    assert "no terminal to ask for the username" in result.err and "--token" in result.err


def test_login_without_a_terminal_for_the_password_says_so(live_server, home):
    env = {k: v for k, v in os.environ.items() if not k.startswith(CONFIGURATION)}
    env.update(XDG_CONFIG_HOME=str(home / ".config"), HOME=str(home))
    done = subprocess.run(
        [SIMRUN, "login", live_server.url, "-u", "alice"],
        env=env,
        input="",
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,  # no controlling terminal for getpass to open
        check=False,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "no terminal to ask for the password" in done.stderr
    assert "--password-stdin" in done.stderr


def test_not_found_names_the_run_or_task_asked_for(simrun, owner, stranger):
    theirs = submitted(stranger)
    for args in (["show", "r-nosuch"], ["cancel", "r-nosuch"], ["show", theirs.id]):
        result = simrun(*args)
        assert result.code == 2 and repr(args[1]) in result.err, result.err
        assert "No Run matches" not in result.err
    mine = submitted(owner)
    logs = simrun("logs", mine.id, "nosuch")
    assert logs.code == 2 and "'nosuch'" in logs.err and repr(mine.id) in logs.err
    assert "did you mean" not in logs.err


def test_logs_of_a_task_the_run_lacks_names_the_closest_it_has(simrun, owner):
    mine = submitted(owner)
    tasks = ", ".join(mine.tasks.order_by("position").values_list("task_id", flat=True))

    logs = simrun("logs", mine.id, "swep")

    assert logs.code == 2
    assert f"has no task 'swep' (did you mean 'sweep'? its tasks: {tasks})" in logs.err


def test_show_names_a_memory_kill_once_and_commands_as_the_shell_quotes_them(simrun, owner):
    text = (
        "tasks:\n"
        "  sweep: {type: squares, settings: {n: 4}}\n"
        '  say: {command: [echo, "a b", "it\'s"], inputs: {x: sweep}}\n'
    )
    run = running(submitted(owner, text), sweep="running")
    task = run.tasks.get(task_id="sweep")
    Attempt.objects.create(
        task=task, worker="sweep-w0", attempt=0, phase="Failed", exit_code=137,
        oom_killed=True, oom_evidence="OOMKilled", memory_gb=1.0,
    )  # fmt: skip
    shown = simrun("show", run.id)
    assert shown.code == 0, shown.err
    assert "OOM killed" in shown.out and "OOMKilled" not in shown.out
    assert "command of say: echo 'a b' 'it'\"'\"'s'" in shown.out


def test_ctrl_c_on_follow_says_the_run_goes_on_and_how_to_cancel_it(simrun, tmp_path):
    follower = simrun("submit", str(spec_file(tmp_path)), "--follow", background=True)
    first = follower.stdout.readline()
    assert first.startswith("submitted run "), first
    run_id = first.split()[2].rstrip(":")
    follower.send_signal(signal.SIGINT)
    out, err = follower.communicate(timeout=60)
    assert follower.returncode == 130, err
    assert f"stopped following run {run_id}; the run goes on" in out
    assert f"simrun cancel {run_id}" in out and "Traceback" not in err
    assert not Run.objects.get(pk=run_id).ended


def test_submit_rerun_submits_the_spec_of_a_run_again_linked_to_it(simrun, owner, tmp_path):
    source = submitted(owner)
    result = simrun("submit", "--rerun", source.id)
    assert result.code == 0, result.err
    again = Run.objects.exclude(pk=source.pk).get()
    assert f"submitted run {again.id} (demo) as a re-run of {source.id}" in result.out
    assert again.spec == source.spec and again.rerun_of == source
    assert f"re-run of {source.id}" in simrun("show", again.id).out
    assert f"re-run as {again.id}" in simrun("show", source.id).out
    edited = simrun("submit", str(spec_file(tmp_path, "edited")), "--rerun", source.id)
    assert edited.code == 0, edited.err
    assert Run.objects.get(name="edited").rerun_of == source
    missing = simrun("submit", "--rerun", "r-nosuch")
    assert missing.code == 2 and "'r-nosuch'" in missing.err
    nothing = simrun("submit")
    assert nothing.code == 2 and "--rerun RUN" in nothing.err


HOSTILE = (
    "\x1b]52;c;ZXZpbA==\x07"  # set the clipboard
    "\x1b]0;owned\x07"  # set the title
    "\x1b[2J\x1b[H"  # clear the screen
    "\x9b31m"  # a C1 control sequence introducer
    "shown\rhidden"  # a carriage return that overwrites
    "\u202egnp.exe"  # a bidirectional override
)
TERMINAL_ACTS = ("\x1b", "\x07", "\x9b", "\r", "\u202e")


def test_nothing_a_task_wrote_reaches_the_terminal_as_a_control_sequence(simrun, owner, store):
    run = running(submitted(owner), sweep="running")
    folder = store / "runs" / run.id / "tasks" / "sweep"
    (folder / "logs").mkdir(parents=True)
    (folder / "logs" / "sweep-w0-0.log").write_text(f"line {HOSTILE}\n")
    (folder / "out").mkdir(parents=True, exist_ok=True)
    (folder / "out" / "results.csv").write_text(f"unit,note\n0,{HOSTILE}\n")
    Task.objects.filter(run=run, task_id="sweep").update(state="failed", message=HOSTILE)

    for args in (("logs", run.id, "sweep"), ("results", run.id, "sweep"), ("show", run.id)):
        printed = simrun(*args)
        assert printed.code == 0, printed.err
        assert "shown" in printed.out and "hidden" in printed.out, args
        assert not [c for c in TERMINAL_ACTS if c in printed.out + printed.err], args
