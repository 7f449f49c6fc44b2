"""Benchmark: the Argo backend at scale, against the Kubernetes API stand-in on loopback.

    .venv/bin/python bench/argo_scale.py [WORKERS]

Measures, for issue 43:
- the Workflow of a sweep of WORKERS workers (1,000) and 100,000 units, and of runs of 10, 100
  and 500 command tasks and of split tasks: its bytes, templates and the DAG tasks of each DAG,
  and whether submission refuses it (``workflow_limits``: Argo's CRD caps templates and DAG
  tasks at 200, etcd a Workflow at 1 MiB);
- a steady pass of the control loop over the sweep's WORKERS running pods, its Workflow held by
  the watch (``versions``, ``status``, ``keep_logs`` of the task): the API requests and the bytes
  they answered; beside it what reading every pod's log costs (``logs``, what ``keep_logs``
  did before) and a pass after one attempt ended;
- one placements page (``placements``: every run pod): its requests, bytes and seconds;
- the peak of the Python memory the backend allocated meanwhile (``tracemalloc``).
Target: requests and bytes per steady pass that do not grow with the pods.
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "simrun_site.settings")

UNITS = 100_000
LOG = "".join(f"unit {i} done\n" for i in range(700))  # about 10 KB a pod


def layouts(workers: int) -> None:
    """The Workflow of each run: bytes, templates, DAG tasks, the refusal if any."""
    import yaml

    from harness.tasktypes import task_types
    from runs.backends.argo.manifest import workflow_manifest
    from runs.backends.argo.workflow_limits import workflow_bytes, workflow_refusal
    from runs.backends.base import ClusterConfig
    from tests.backends.argo_runs import run_of

    sweep = f"tasks: {{sweep: {{type: squares, settings: {{n: {UNITS}}}, workers: {workers}}}}}"
    runs = {f"sweep, {workers} workers, {UNITS:,} units": sweep}
    for count in (10, 100, 500):
        tasks = {f"t{i}": {"command": ["echo", str(i)]} for i in range(count)}
        runs[f"{count} command tasks"] = yaml.safe_dump({"tasks": tasks})
    for count in (10, 100, 500):
        split = {"type": "squares", "settings": {"n": 1000}, "workers": 4}
        tasks = {f"s{i}": copy.deepcopy(split) for i in range(count)}
        runs[f"{count} split tasks"] = yaml.safe_dump({"tasks": tasks})
    print("Workflow layout (bytes as created, templates, DAG tasks of each DAG):")
    for what, text in runs.items():
        record, plans = run_of(text)
        manifest = workflow_manifest(
            record=record, plans=plans, types=task_types(), cluster=ClusterConfig()
        )
        templates = manifest["spec"]["templates"]
        dags = [len(t["dag"]["tasks"]) for t in templates if "dag" in t]
        refusal = workflow_refusal(manifest) or "submitted"
        size = workflow_bytes(manifest)
        print(
            f"  {what}: {size:,} bytes ({size / max(1, len(plans)):,.0f} a task), "
            f"{len(templates)} templates, DAG tasks {dags}: {refusal}"
        )


def sweep_state(kube: Any, workers: int) -> None:
    """The sweep's Workflow with WORKERS running pods, as Argo and the kubelet keep them."""
    from tests.backends.argo_workflows import WF, Nodes, argo_pod, fnv1a_32, pod, workflow

    nodes = Nodes()
    nodes.task("sweep-w0", "Running", [pod("Running")])
    extra = {f"({i}:{i})": ("Running", [pod("Running")]) for i in range(1, workers)}
    nodes.fan_out("sweep-extra", "Running", extra)
    kube.state.put_workflow(workflow(nodes), "ADDED")
    for node, template in [("sweep-w0(0)", "sweep-w0")] + [
        (f"sweep-extra({i}:{i})(0)", "sweep-extra") for i in range(1, workers)
    ]:
        name = f"{WF}-{template}-{fnv1a_32(f'{WF}.{node}')}"
        running = argo_pod(name, node_name=node, phase="Running", host="node-a")
        kube.state.put_pod(running, log=LOG)


def measured(kube: Any, call: Any) -> tuple[Any, int, int, float]:
    """What ``call()`` returned, with the requests, answered bytes and seconds it took."""
    kube.state.requests.clear()
    start = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - start
    # The watch's own requests (one every few minutes, its events streamed) are not the pass's.
    requests = [r for r in kube.state.requests if r.query.get("watch") != "true"]
    return result, len(requests), sum(r.sent for r in requests), seconds


def passes(workers: int) -> None:
    """A steady pass, the old cost of logs, a pass after an attempt ended, a placements page."""
    from runs.backends.argo.backend import ArgoBackend
    from runs.backends.base import ClusterConfig
    from runs.common import store
    from tests.backends.argo_workflows import WF
    from tests.backends.kube_api import KubeApiServer
    from tests.polling import wait_for

    with KubeApiServer() as kube, tempfile.TemporaryDirectory() as folder:
        sweep_state(kube, workers)
        root = Path(folder)
        (root / "runs" / "abc123def0" / "tasks" / "sweep").mkdir(parents=True)
        task = store.TaskFolder(root, store.task_parts("abc123def0", "sweep"))
        tracemalloc.start()
        backend = ArgoBackend(cluster=ClusterConfig(), api=kube.client(), store=root)
        try:
            wait_for(lambda: backend.versions([WF]), 60, "the watch's first list")

            def steady() -> Any:
                backend.versions([WF])
                backend.status(WF)
                return backend.keep_logs(WF, "sweep", task)

            measured(kube, steady)  # the first reads the pods' reasons once per TTL
            _, requests, sent, seconds = measured(kube, steady)
            print(f"Steady pass over {workers} running pods (versions, status, keep_logs):")
            print(f"  {requests} requests, {sent:,} bytes, {seconds * 1000:.1f} ms")
            _, requests, sent, seconds = measured(kube, lambda: backend.logs(WF, "sweep"))
            print("  reading every pod's log instead (logs, the cost keep_logs had before):")
            print(f"  {requests} requests, {sent:,} bytes, {seconds:.2f} s")
            _, requests, sent, seconds = measured(kube, backend.placements)
            print(f"One placements page over {workers} pods:")
            print(f"  {requests} requests, {sent:,} bytes, {seconds:.2f} s")
        finally:
            backend.close()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"Peak Python memory of the backend and the stand-in: {peak / 2**20:.1f} MiB")


def main(argv: list[str]) -> int:
    import django

    django.setup()
    workers = int(argv[0]) if argv else 1000
    layouts(workers)
    passes(workers)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
