"""The team mode on the real Slurm cluster: a service run as root submits each simrun user's
jobs as the Unix login mapped to them, never as root; a user without one is refused at once."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runs.backends.base import workflow_name
from runs.backends.local import user as local_user
from runs.backends.slurm.backend import SlurmBackend
from runs.cli.user import ensure_user
from runs.models import Profile, Run
from tests.backends.slurm_cluster import (
    TEAM_LOGIN,
    accounted_user,
    cluster,
    make_backend,
    plan,
    shell,
    slurm_command,
    submit,
    wait_phase,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the team mode is a root service's")
COMMAND = "tasks:\n  say: {command: [echo, hi]}\n"


@pytest.fixture(scope="session")
def slurm_conf() -> str:
    return cluster()


@pytest.fixture
def team(slurm_conf: str) -> Iterator[SlurmBackend]:
    """A team-mode backend whose store the login may reach (pytest's folders below
    /tmp/pytest-of-root let no other user pass)."""
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        os.chmod(folder, 0o711)
        yield make_backend(Path(folder) / "store", slurm_conf, team=True)


def test_a_team_job_runs_as_the_login_mapped_to_its_owner(team, slurm_conf):
    tasks = {
        "make": {"command": shell('echo 41 > "$SIMRUN_OUT/n"')},
        "who": {"command": shell('id -un > "$SIMRUN_OUT/who"'), "inputs": {"data": "make"}},
    }
    submit(team, "t1", tasks, login=TEAM_LOGIN)
    first = team.ledger.read(workflow_name("t1")).jobs[0].job_id
    queued = slurm_command(slurm_conf, "squeue", "-h", "-t", "all", "-j", first, "-o", "%u")
    assert queued.strip() == TEAM_LOGIN
    assert wait_phase(team, "t1", {"Succeeded", "Failed"}, timeout_s=180) == "Succeeded"
    assert (team.store / "runs/t1/tasks/who/out/who").read_text().strip() == TEAM_LOGIN
    jobs = team.ledger.read(workflow_name("t1")).jobs
    assert {accounted_user(slurm_conf, job.job_id) for job in jobs} == {TEAM_LOGIN}
    [log] = team.logs(workflow_name("t1"), "who")  # the login's log, read from the store
    assert log.done and "[simrun] exit 0" in log.text


def test_a_split_task_needs_an_interpreter_the_login_reaches(team):
    assert team.isolation_problem(1, "command") is None
    expected = local_user.unreachable(team.store, Path(sys.executable).resolve(), otherwise="")
    assert team.isolation_problem(1, "split") == expected
    assert "SIMRUN_TASK_UID_BASE" not in (expected or "")  # no task users on Slurm


def test_a_user_without_a_login_gets_a_400_saying_how_to_map_one(
    team, owner, owner_client, monkeypatch
):
    monkeypatch.setattr("runs.planning.submission.get_backend", lambda: team)
    response = owner_client.post("/api/runs/", data=COMMAND, content_type="application/yaml")
    assert response.status_code == 400
    [reason] = response.json()["tasks"]
    assert "no Unix login" in reason and "simrun user NAME --login LOGIN" in reason
    # A login gone from the host since it was mapped is refused as well, naming it.
    Profile.objects.create(user=owner, login="simrun-nobody-here")
    response = owner_client.post("/api/runs/", data=COMMAND, content_type="application/yaml")
    assert response.status_code == 400
    assert "no Unix user 'simrun-nobody-here'" in response.json()["tasks"][0]
    assert not Run.objects.exists()


def test_a_team_run_on_a_reserved_node_runs_there_as_its_login(team):
    node = team.choose_node({"who": plan()})
    team.reserve(node, "t8")  # as the service (root): the login is let in at submission
    try:
        who = {"who": {"command": shell('id -un > "$SIMRUN_OUT/who"')}}
        submit(team, "t8", who, login=TEAM_LOGIN, reserved_node=node)
        assert wait_phase(team, "t8", {"Succeeded", "Failed"}, timeout_s=180) == "Succeeded"
        assert team.status(workflow_name("t8")).hosts["who"] == node
        assert (team.store / "runs/t8/tasks/who/out/who").read_text().strip() == TEAM_LOGIN
    finally:
        team.unreserve(node, "t8")


def test_packages_the_login_cannot_build_with_this_python_are_refused_naming_why(
    team, tmp_path, monkeypatch
):
    # This service's Python in a folder the login cannot cross (pytest's, below
    # /tmp/pytest-of-root), as one under /root is: wherever the tests' own Python is.
    python = tmp_path / "python3"
    python.touch()
    monkeypatch.setattr(sys, "executable", str(python))
    with pytest.raises(ValueError, match="environment.packages: the venv of the packages is"):
        submit(team, "t9", {"say": {"command": ["true"]}}, login=TEAM_LOGIN, packages=("x",))
    with pytest.raises(KeyError):
        team.ledger.read(workflow_name("t9"))


@pytest.mark.django_db
def test_simrun_user_maps_a_login_and_refuses_root_and_unknown_ones():
    ensure_user(name="ana", token=False, login=TEAM_LOGIN)
    assert Profile.objects.get(user__username="ana").login == TEAM_LOGIN
    for login, words in (("root", "never submits a user's jobs as root"), ("nosuch", "no Unix")):
        with pytest.raises(ValueError, match=words):
            ensure_user(name="ana", token=False, login=login)
    ensure_user(name="ana", token=False, login="")
    assert Profile.objects.get(user__username="ana").login == ""


def test_the_banner_says_which_mode(team, tmp_path, slurm_conf):
    [line] = team.describe()
    assert line.startswith("team mode:") and "never as root" in line
    [line] = make_backend(tmp_path, slurm_conf).describe()
    assert line.startswith("scientist mode: jobs submitted as root")


@pytest.mark.django_db
def test_serve_demo_says_why_the_example_sweep_was_not_submitted(
    team, settings, tmp_path, monkeypatch, capsys
):
    from runs.cli import serve

    settings.SIMRUN_HOME = tmp_path
    monkeypatch.setattr("runs.planning.submission.get_backend", lambda: team)
    assert serve.demo(tmp_path).startswith("log in as demo")
    said = capsys.readouterr().out
    assert "the example sweep" in said and "was not submitted" in said
    assert "simrun user NAME --login LOGIN" in said or "lets no other user pass" in said
    assert "tasks-as-service" not in said and "SIMRUN_TASK_UID_BASE" not in said  # local's fixes
    assert not Run.objects.exists()
