"""Rounds of a stalled Kubernetes API under the controller and the real Argo backend.

The loopback API server (tests/backends/kube_api.py) plays the cluster; mid-run it stops
answering. A reconcile pass must come back within the calls' timeouts (never freeze), the
run be tried again within 30 s, and reach its end once the API answers. ``SIMRUN_CHAOS_ROUNDS``
sets the rounds (``bench/chaos.py`` plays many and prints the figures this test prints).
"""
# ruff: noqa: F811  (the fixtures are imported from controller_support by name)

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
import yaml
from django.utils import timezone

from harness.tasktypes import task_types
from runs.backends.argo.api import CallPolicy
from runs.backends.argo.backend import ArgoBackend
from runs.backends.base import ClusterConfig
from runs.control import backoff, reconciling, settling, submitting
from runs.models import Run, RunState
from runs.planning.spec_document import parse_spec
from runs.planning.submission import create_run
from tests.backends.argo_workflows import WF, Nodes, pod, workflow
from tests.backends.kube_api import STALL, KubeApiServer
from tests.polling import wait_for
from tests.service.controller_support import home  # noqa: F401

pytestmark = [pytest.mark.chaos, pytest.mark.django_db]

ROUNDS = int(os.environ.get("SIMRUN_CHAOS_ROUNDS", "2"))
CLUSTER = ClusterConfig(namespace="simrun", queue="simrun")
CALLS = CallPolicy(connect_timeout_s=1.0, read_timeout_s=0.5, backoff_s=0.01, quiet_s=0.2)
PASS_LIMIT_S = CALLS.silent_tries * (CALLS.connect_timeout_s + CALLS.read_timeout_s) * 2
"""The longest a pass over a run may take while the API is silent: its calls' timeouts."""
SPEC = {"name": "stall", "tasks": {"t": {"command": ["true"]}}}


@pytest.fixture
def argo(kube: KubeApiServer, home: Path, settings) -> ArgoBackend:
    return ArgoBackend(cluster=CLUSTER, api=kube.client(), store=settings.SIMRUN_STORE, calls=CALLS)


def argo_status(run_id: str, phase: str) -> dict[str, Any]:
    """The workflow of a run as Argo writes it: its task ``t`` running or succeeded."""
    nodes = Nodes(phase)
    nodes.task("t", phase, [pod(phase, exit_code="0" if phase == "Succeeded" else None)])
    found = json.loads(json.dumps(workflow(nodes, phase)).replace(WF, f"simrun-{run_id}"))
    found["metadata"]["labels"]["simrun/run"] = run_id
    return dict(found)


def stalled_round(owner, kube: KubeApiServer, argo: ArgoBackend) -> dict[str, Any]:
    """One run through a stall of the API; what it showed."""
    spec = parse_spec(yaml.safe_dump(SPEC), types=task_types())
    run = create_run(spec=spec, owner=owner, backend=argo, schedule=lambda run_id: None)
    # A create that timed out on a loaded machine is handed on and made again, as the loop does.
    wait_for(
        lambda: (
            submitting.submit(run.id, backend=argo)
            and Run.objects.get(pk=run.pk).state == RunState.RUNNING
        ),
        60,
        "the run to be submitted",
    )
    run = Run.objects.get(pk=run.pk)
    kube.state.put_workflow(argo_status(run.id, "Running"))
    # Several passes failed already (minutes of an outage): a broken record would wait 600 s.
    Run.objects.filter(pk=run.pk).update(reconcile_failures=6)
    kube.state.intercept = lambda request: STALL
    started = time.monotonic()
    now = timezone.now()
    with time_machine.travel(now, tick=False):
        reconciling.reconcile_pass(backend=argo, schedule=lambda run_id: None)
    stalled_s = time.monotonic() - started
    aside = Run.objects.get(pk=run.pk).reconcile_after
    kube.state.intercept = None
    kube.state.put_workflow(argo_status(run.id, "Succeeded"))
    passes = passes_to_end(run.pk, argo)
    run = Run.objects.get(pk=run.pk)
    return {
        "state": run.state,
        "stalled_pass_s": stalled_s,
        "retried_within_s": (aside - now).total_seconds() if aside else 0.0,
        "passes_after": passes,
        "live": run.live,
        "message": run.message,
    }


def passes_to_end(run_pk: str, argo: ArgoBackend, limit_s: float = 30.0) -> int:
    """Passes of the loop, each (with settling) at the time the run is next due, until the run
    has ended or ``limit_s`` has passed; how many it took. A watch stalled with the API may
    time out after the API answers again and keep the backend quiet a while: the loop's next
    passes are what end the run then, as the service's would."""
    deadline = time.monotonic() + limit_s
    passes = 0
    while (run := Run.objects.get(pk=run_pk)).live and time.monotonic() < deadline:
        if passes:
            time.sleep(0.05)  # the loop's next period, shortened
        due = max(timezone.now(), run.reconcile_after or timezone.now()) + timedelta(seconds=1)
        with time_machine.travel(due, tick=False):
            reconciling.reconcile_pass(backend=argo, schedule=lambda run_id: None)
            settling.settle_pending(backend=argo)
        passes += 1
    return passes


def test_a_stalled_api_neither_freezes_the_loop_nor_leaves_a_run_stuck(owner, kube, argo):
    found = [stalled_round(owner, kube, argo) for _ in range(ROUNDS)]
    right = [f for f in found if f["state"] == RunState.SUCCEEDED and not f["live"]]
    longest = max(f["stalled_pass_s"] for f in found)
    print(
        f"\nstalled-api      rounds {len(found):>3}  right end {len(right):>3}"
        f"  stuck {len(found) - len(right):>2}  longest stalled pass {longest:.2f} s"
        f"  retried within {max(f['retried_within_s'] for f in found):.0f} s"
        f"  passes to the end {max(f['passes_after'] for f in found)}"
    )
    for outcome in found:
        assert outcome["state"] == RunState.SUCCEEDED and not outcome["live"], outcome
        assert outcome["stalled_pass_s"] < PASS_LIMIT_S, outcome
        assert 0 < outcome["retried_within_s"] <= backoff.UNAVAILABLE_MAX_S, outcome
