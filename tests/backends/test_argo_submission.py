# ruff: noqa: F811  (the fixture home is imported from controller_support by name)
"""A submission the Argo backend refuses, resumed by a process just started: the workflow a
process before made is found by asking the API server, and cancelled."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.tasktypes import task_types
from runs.backends.argo.backend import ArgoBackend
from runs.backends.base import ClusterConfig
from runs.control import submitting
from runs.models import Run, RunState
from runs.planning.spec_document import parse_spec
from runs.planning.submission import create_run
from tests.backends.kube_api import KubeApiServer
from tests.service.controller_support import home  # noqa: F401

pytestmark = pytest.mark.django_db

SPEC = {"name": "resumed", "tasks": {"t": {"command": ["true"]}}}


def test_a_resumed_submission_refused_cancels_the_workflow_made_before_the_cache_synced(
    owner,
    kube: KubeApiServer,
    home: Path,
    settings,  # noqa: F811
) -> None:
    earlier = ArgoBackend(cluster=ClusterConfig(), api=kube.client(), store=settings.SIMRUN_STORE)
    spec = parse_spec(yaml.safe_dump(SPEC), types=task_types())
    run = create_run(spec=spec, owner=owner, backend=earlier, schedule=lambda run_id: None)
    assert submitting.submit(run.id, backend=earlier)
    made = f"simrun-{run.id}"
    assert ("simrun", made) in kube.state.workflows
    earlier.close()
    # That process died before its write of the run as running went through.
    Run.objects.filter(pk=run.pk).update(state=RunState.SUBMITTING, workflow="")
    kube.state.argo_version = "v3.6.5"  # since then the cluster went back: refused now
    resumed = ArgoBackend(cluster=ClusterConfig(), api=kube.client(), store=settings.SIMRUN_STORE)

    assert submitting.submit(run.id, backend=resumed)

    run = Run.objects.get(pk=run.pk)
    assert run.state == RunState.FAILED
    assert run.message.startswith("the cluster runs Argo Workflows 3.6")
    assert kube.state.workflows[("simrun", made)]["spec"]["shutdown"] == "Stop"
