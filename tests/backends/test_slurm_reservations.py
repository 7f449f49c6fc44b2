"""Node reservations on the real cluster of ``.ci/slurm``: offered where the service has
Slurm's Operator level (the tests run as root, Slurm's ``SlurmUser``), refused with why
elsewhere."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from runs.backends.base import workflow_name
from runs.backends.slurm import reservations
from runs.backends.slurm.backend import SlurmBackend
from runs.backends.slurm.commands import Slurm
from tests.backends.slurm_cluster import (
    TEAM_LOGIN,
    cluster,
    make_backend,
    plan,
    shell,
    slurm_command,
    start_cluster,
    submit,
    wait_phase,
)
from tests.e2e.service import task_user_venv


@pytest.fixture
def backend(tmp_path: Path) -> SlurmBackend:
    """A backend of the cluster with both its nodes idle again: a test before may have
    killed a slurmd, which Slurm declares down for a while (``.ci/slurm`` waits it out)."""
    return make_backend(tmp_path / "store", start_cluster())


def test_an_operator_reserves_a_node_whose_jobs_are_the_runs_until_released(backend):
    assert backend.reserves_nodes and backend.no_reservations == ""
    node = backend.choose_node({"t": plan()})
    backend.reserve(node, "rv1")
    try:
        assert {n.name: n.reserved_by for n in backend.nodes()}[node] == "rv1"
        backend.reserve(node, "rv1")  # again: nothing changes
        with pytest.raises(ValueError, match=f"{node} is reserved by the run rv1"):
            backend.reserve(node, "rv2")
        other = backend.choose_node({"t": plan()})
        assert other != node, "a reserved node is never chosen for another run"
        submit(
            backend, "rv1", {"hi": {"command": shell("echo on $SIMRUN_NODE")}}, reserved_node=node
        )
        assert wait_phase(backend, "rv1", {"Succeeded", "Failed"}) == "Succeeded"
        assert backend.status(workflow_name("rv1")).hosts["hi"] == node
        backend.unreserve(node, "rv2")  # another run's release leaves it
        assert {n.name: n.reserved_by for n in backend.nodes()}[node] == "rv1"
    finally:
        backend.unreserve(node, "rv1")
    assert {n.name: n.reserved_by for n in backend.nodes()}[node] is None
    shown = slurm_command(cluster(), "scontrol", "-o", "show", "reservation")
    assert reservations.name("rv1") not in shown
    with pytest.raises(KeyError):
        backend.unreserve("no-such-node", "rv1")


def test_a_user_without_the_operator_level_is_told_why_no_node_is_reserved():
    said = reservations.problem(Slurm(conf=cluster()), TEAM_LOGIN)
    assert said is not None
    assert f"needs Slurm's Operator level, which {TEAM_LOGIN} lacks (its AdminLevel is None" in said
    assert f"sacctmgr modify user {TEAM_LOGIN} set adminlevel=operator" in said
    # Without accounting no AdminLevel exists: only root and SlurmUser may reserve.
    said = reservations.problem(Slurm(conf=cluster("--accounting=off")), TEAM_LOGIN)
    assert said is not None and "its AdminLevel is unknown: no accounting" in said


@pytest.mark.skipif(os.geteuid() != 0, reason="becoming another user is root's")
def test_a_service_run_by_a_user_without_the_level_offers_no_reservation_and_says_why():
    """The backend started by the login ``simrun-team`` (no AdminLevel), as a scientist would
    start it; Slurm itself refuses that login a reservation."""
    folder = Path(tempfile.mkdtemp(dir="/tmp"))  # a folder the login may cross
    try:
        folder.chmod(0o755)
        python = task_user_venv(folder).with_name("python")
        code = (
            "from runs.backends.slurm.backend import SlurmBackend\n"
            "from runs.backends.slurm.commands import Slurm\n"
            f"b = SlurmBackend({str(folder / 'store')!r}, slurm=Slurm(conf={cluster()!r}))\n"
            "print(b.reserves_nodes, b.no_reservations)\n"
        )
        said = as_login([str(python), "-c", code], cwd=folder)
        assert said.startswith("False the slurm backend reserves no nodes here: a reservation")
        assert f"which {TEAM_LOGIN} lacks (its AdminLevel is None" in said
        create = ["scontrol", "create", "reservation", "ReservationName=simrun-nope", "Nodes=n1"]
        create += ["StartTime=now", "Duration=1", f"Users={TEAM_LOGIN}"]
        with pytest.raises(subprocess.CalledProcessError) as refused:
            as_login(create, cwd=folder)
        assert "Invalid user id" in refused.value.stderr
    finally:
        shutil.rmtree(folder)


def as_login(argv: list[str], cwd: Path) -> str:
    """Run ``argv`` as the team login with the cluster's configuration; its output."""
    env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": cluster(), "HOME": str(cwd)}
    done = subprocess.run(
        ["setpriv", f"--reuid={TEAM_LOGIN}", f"--regid={TEAM_LOGIN}", "--init-groups", *argv],
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )
    return done.stdout


def test_a_backend_that_may_not_reserve_refuses_naming_why(backend):
    backend.reserves_nodes = False
    backend.no_reservations = reservations.problem(backend.slurm, TEAM_LOGIN) or ""
    with pytest.raises(LookupError, match="Operator level"):
        backend.choose_node({"t": plan()})
    with pytest.raises(ValueError, match="Operator level"):
        backend.reserve("n1", "rv3")
