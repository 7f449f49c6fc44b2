"""Each backend says when the latest pod of a node started, and when a failed attempt ran."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from runs.backends.argo.status import status_from_workflow
from runs.backends.local.backend import LocalBackend, workflow_name
from tests.backends.argo_workflows import SIGTERM, Nodes, pod, workflow
from tests.backends.local_fixtures import ended, phase, shell, stepping, submit, until_flag
from tests.backends.test_argo_status import realistic
from tests.polling import wait_for

pytestmark = pytest.mark.django_db


def epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_argo_gives_the_start_of_each_nodes_latest_pod_and_the_times_of_a_failed_one() -> None:
    nodes = Nodes()
    evicted = pod("Failed", message=SIGTERM, exit_code="143", host="node-a")
    evicted["startedAt"] = "2026-11-29T10:00:05Z"  # finished at 10:05, as the fixture has it
    retry = pod("Running", host="node-b") | {"startedAt": "2026-11-29T10:01:10Z"}
    nodes.task("sweep-w0", "Running", [evicted, retry])
    nodes.task("plot", "Pending", [pod("Pending")])

    status = status_from_workflow(realistic(workflow(nodes)))

    assert status.started["sweep-w0"] == epoch("2026-11-29T10:01:10+00:00")
    [failed] = status.failed["sweep-w0"]
    assert failed.started_at == epoch("2026-11-29T10:00:05+00:00")
    assert failed.ended_at == epoch("2026-11-29T10:05:00+00:00")


def test_the_local_backend_gives_the_start_of_each_process(tmp_path: Path) -> None:
    backend = LocalBackend(
        store=tmp_path / "store", scratch=tmp_path / "scratch", cores=2, memory_gb=8, grace_s=2
    )
    flag = tmp_path / "go"
    before = time.time()
    with stepping(backend):
        submit(backend, "r1", {"hold": {"command": until_flag(flag)}})
        wait_for(lambda: phase(backend, "r1", "hold") == "Running", what="running")
        started = backend.status(workflow_name("r1")).started["hold"]
        assert before <= started <= time.time()
        flag.touch()
        wait_for(lambda: ended(backend, "r1"), what="the end")
        submit(backend, "r2", {"fail": {"command": shell("exit 3")}})
        wait_for(lambda: ended(backend, "r2"), what="the failure")
    [failed] = backend.status(workflow_name("r2")).failed["fail"]
    assert failed.started_at is not None and before <= failed.started_at <= time.time()
