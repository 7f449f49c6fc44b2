"""Resume on Argo, against the strict stand-in: a task done from earlier outputs is not in the
Workflow, and the pods of a partly reused split task see the reused units as done."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.ledger import Ledger
from harness.tasktypes import task_types
from runs.backends.argo.backend import ArgoBackend
from runs.backends.base import ClusterConfig
from runs.common import store
from runs.control import submitting
from runs.models import Run, RunState, Task, TaskState
from runs.planning.reruns import submit_rerun
from runs.planning.spec import validate_spec
from runs.planning.spec_document import parse_spec
from runs.planning.submission import create_run
from tests.backends.argo_pods import main_container, node_pod
from tests.backends.kube_api import KubeApiServer
from tests.factories import ended

pytestmark = pytest.mark.django_db

CLUSTER = ClusterConfig(namespace="simrun", queue="simrun")
SPEC = {
    "tasks": {
        "first": {"type": "squares", "settings": {"n": 4}},
        "sweep": {"type": "squares", "settings": {"n": 12}, "workers": 2},
        "plot": {"command": ["ls", "inputs"], "inputs": {"a": "first", "b": "sweep"}},
    }
}


@pytest.fixture
def argo(kube: KubeApiServer, settings: Any, tmp_path: Path) -> ArgoBackend:
    settings.SIMRUN_HOME = tmp_path / "home"
    settings.SIMRUN_HOME.mkdir()
    return ArgoBackend(cluster=CLUSTER, api=kube.client(), store=settings.SIMRUN_STORE)


def source_run(owner: Any, argo: ArgoBackend) -> Run:
    """A run whose first task succeeded and whose sweep failed with units 0 to 5 done."""
    spec = parse_spec(yaml.safe_dump(SPEC), types=task_types())
    run = create_run(spec=spec, owner=owner, backend=argo)
    out = store.task_dir(run.id, "first") / "out"
    out.mkdir(parents=True)
    (out / "squares.json").write_text("[0, 1, 4, 9]")
    (out / ".simrun-merged").write_text("{}")
    ledger = Ledger.open(store.task_dir(run.id, "sweep") / "units", 12, "sweep-w0")
    ledger.write_piece(list(range(6)), [i * i for i in range(6)])
    run = ended(run, RunState.FAILED)
    Task.objects.filter(run=run, task_id="first").update(state=TaskState.DONE)
    return run


def dag(workflow: dict[str, Any]) -> dict[str, dict[str, Any]]:
    [template] = [t for t in workflow["spec"]["templates"] if "dag" in t]
    return {task["name"]: task for task in template["dag"]["tasks"]}


def test_the_workflow_of_a_resumed_run_leaves_its_reused_tasks_out(
    owner: Any, argo: ArgoBackend, kube: KubeApiServer
) -> None:
    source = source_run(owner, argo)
    spec = validate_spec(source.spec, types=task_types())
    run = submit_rerun(source=source, spec=spec, actor=owner, resume=True)

    assert submitting.submit(run.id, backend=argo)

    run = Run.objects.get(pk=run.pk)
    workflow = kube.state.workflows[("simrun", run.workflow)]
    nodes = dag(workflow)
    assert set(nodes) == {"sweep-w0", "sweep-extra", "sweep-merge", "plot"}
    assert nodes["plot"]["dependencies"] == ["sweep-merge"]
    assert not [n for n in nodes if n.startswith("first")]
    tasks = {t.task_id: t for t in run.tasks.all()}
    assert tasks["first"].reused_whole and tasks["first"].state == TaskState.DONE
    assert tasks["sweep"].units_reused == 6
    # The plot reads the reused task's outputs where a task of the run would have left them.
    [stage] = [
        c for c in node_pod(workflow, "plot")["spec"]["initContainers"] if c["name"] == "stage"
    ]
    [inputs] = [e["value"] for e in stage["env"] if e["name"] == "SIMRUN_INPUTS"]
    assert f"a=runs/{run.id}/tasks/first/out" in inputs.split(",")


def test_the_pods_of_a_partly_reused_split_task_compute_only_the_units_not_reused(
    owner: Any, argo: ArgoBackend, kube: KubeApiServer, tmp_path: Path
) -> None:
    source = source_run(owner, argo)
    spec = validate_spec(source.spec, types=task_types())
    run = submit_rerun(source=source, spec=spec, actor=owner, resume=True)
    assert submitting.submit(run.id, backend=argo)
    workflow = kube.state.workflows[("simrun", Run.objects.get(pk=run.pk).workflow)]

    for name in ("sweep-w0", "sweep-merge"):
        assert run_pod(workflow, name, tmp_path).returncode == 0

    folder = store.task_dir(run.id, "sweep")
    lines = (folder / "progress.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["unit"] for line in lines) == list(range(6, 12))
    squares = json.loads((folder / "out" / "squares.json").read_text())
    assert squares == [i * i for i in range(12)]


def run_pod(workflow: dict[str, Any], template: str, scratch: Path) -> Any:
    """The main container of a template's first pod, run here on the test's store: the
    command and environment Argo gives it, the store's mount being the test's store."""
    main = main_container(node_pod(workflow, template))
    mount = CLUSTER.store_mount
    env = {
        item["name"]: item["value"].replace(mount, str(store.root()))
        for item in main.get("env", [])
        if "value" in item
    }
    env.update(
        SIMRUN_SCRATCH=str(scratch / template),
        SIMRUN_MEMORY_SOURCE="process",
        SIMRUN_MEMORY_LIMIT_GB="2",
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    )
    (scratch / template).mkdir()
    return subprocess.run(
        main["command"][main["command"].index("--") + 1 :],
        env=env,
        cwd=scratch / template,
        capture_output=True,
        timeout=120,
    )
