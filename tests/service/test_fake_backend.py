"""The fake backend: scriptable, recording, and shared between processes through a file."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runs.backends.base import Backend, PodLog, RunRecord, TaskPlan, TaskRecord
from runs.backends.fake import FakeBackend

PLAN = TaskPlan(cores=2, memory_gb=1, workers=3, base_gb=0.1, per_worker_gb=0.4, retry_memory_gb=2)
RECORD = RunRecord(
    id="abc",
    tasks={
        "sweep": TaskRecord(id="sweep", kind="split", type="squares"),
        "plot": TaskRecord(id="plot", kind="command", command=["echo"]),
    },
    store=Path("/store"),
)
PLANS = {"sweep": PLAN, "plot": PLAN.model_copy(update={"workers": 1})}


@pytest.fixture(params=["memory", "file"])
def backend(request, tmp_path: Path) -> FakeBackend:
    return FakeBackend(state_file=tmp_path / "fake.json" if request.param == "file" else None)


def test_the_fake_is_a_backend():
    assert isinstance(FakeBackend(), Backend)


def test_a_submitted_workflow_is_pending_and_a_second_submission_keeps_it(backend):
    name = backend.submit(RECORD, PLANS, {}, None)
    assert name == "simrun-abc" and backend.status(name).phase == "Pending"
    backend.set_nodes(name, {"plot": "Running"})
    assert backend.submit(RECORD, PLANS, {}, None) == name
    assert backend.status(name).tasks == {"plot": "Running"}
    assert backend.called("submit") == [["abc"], ["abc"]]
    assert backend.submission(name).plans["sweep"] == PLAN


def test_the_fake_names_the_dag_nodes_as_the_argo_backend_does(backend):
    name = backend.submit(RECORD, PLANS, {}, None)
    assert backend.dag_nodes(name) == [
        "sweep-w0",
        "sweep-extra(0:1)",
        "sweep-extra(1:2)",
        "sweep-merge",
        "plot",
    ]
    backend.finish(name)
    status = backend.status(name)
    assert status.phase == "Succeeded" and set(status.tasks.values()) == {"Succeeded"}


def test_a_vanished_workflow_is_a_key_error_and_failures_are_scripted(backend):
    name = backend.submit(RECORD, PLANS, {}, None)
    backend.fail_attempt(name, "sweep-w0", attempt=0, exit_code=137, oom_killed=True)
    assert backend.status(name).failed["sweep-w0"][0].oom_killed
    backend.fail_next("stop", "RuntimeError", "apiserver down")
    with pytest.raises(RuntimeError, match="apiserver down"):
        backend.stop(name)
    backend.stop(name)
    backend.vanish(name)
    with pytest.raises(KeyError):
        backend.status(name)
    with pytest.raises(KeyError):
        backend.logs(name, "sweep")
    assert [call for call, _ in backend.calls] == [
        "submit",
        "status",
        "stop",
        "stop",
        "status",
        "logs",
    ]


def test_a_node_is_released_only_from_the_reservation_of_its_run(backend):
    backend.add_node("node-a")
    backend.reserve("node-a", "run1")
    backend.unreserve("node-a", "run2")
    assert backend.reserved_by("node-a") == "run1"
    backend.unreserve("node-a", "run1")
    assert backend.reserved_by("node-a") is None
    with pytest.raises(KeyError):
        backend.unreserve("node-z", "run1")


def test_logs_are_cut_to_their_last_lines(backend):
    name = backend.submit(RECORD, PLANS, {}, None)
    log = PodLog(node="plot", pod="p", text="a\nb\nc\n", done=True)
    backend.set_logs(name, "plot", [log])
    assert backend.logs(name, "plot")[0].text == "a\nb\nc\n"
    assert backend.logs(name, "plot", tail_lines=2)[0].text == "b\nc\n"


def test_another_process_sees_and_scripts_the_same_backend(tmp_path: Path):
    state = tmp_path / "fake.json"
    here = FakeBackend(state_file=state)
    name = here.submit(RECORD, PLANS, {}, None)
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from runs.backends.fake import FakeBackend
        there = FakeBackend(state_file=Path({str(state)!r}))
        print(there.status({name!r}).phase)
        there.set_phase({name!r}, "Running")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "Pending"
    assert here.status(name).phase == "Running"
    assert [call for call, _ in here.calls] == ["submit", "status", "status"]
