"""Benchmark: the Argo backend at scale, against the Kubernetes API stand-in on loopback.

    .venv/bin/python bench/argo_scale.py [WORKERS]

Measures, for issue 43, each figure printed beside its target:
- the Workflow of a sweep of WORKERS workers (1,000) and 100,000 units, and of runs of 10, 100
  and 500 command tasks and of split tasks: its bytes, templates and the DAG tasks of each DAG,
  and whether submission refuses it (``workflow_limits``: Argo's CRD caps templates and DAG
  tasks at 200, Argo a Workflow at 1 MiB);
- in a process of its own, as the Celery worker runs the control loop, over a sweep of 100 and
  of WORKERS running pods (the stand-in API server in the bench's process): a steady pass
  (``versions``, ``status``, ``keep_logs`` of the task), the API requests it made and the
  bytes they answered; the pass after ENDED attempts ended (one log read each), and the steady
  pass after it; one placements page (requests, bytes, seconds); beside them what reading
  every pod's log costs (``logs``, what ``keep_logs`` did before); and the worker process's
  peak resident memory (``ru_maxrss``) and Python allocations (``tracemalloc``).
Target: requests and bytes per steady pass that do not grow with the pods.
"""

from __future__ import annotations

import copy
import multiprocessing
import os
import resource
import sys
import tempfile
import time
import tracemalloc
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "simrun_site.settings")

UNITS = 100_000
SMALL = 100
"""The smaller sweep, whose figures the larger's are compared with."""
ENDED = 10
"""The attempts that end between two passes."""
LOG = "".join(f"unit {i} done\n" for i in range(700))  # about 10 KB a pod


def layouts(workers: int) -> None:
    """The Workflow of each run: bytes, templates, DAG tasks, the refusal if any."""
    import yaml

    from harness.tasktypes import task_types
    from runs.backends.argo.manifest import workflow_manifest
    from runs.backends.argo.node_status import status_bytes
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
    print(
        "Workflow layout (bytes as created and of the status Argo writes, templates, DAG tasks "
        "of each DAG; target: both under 1 MiB, 200 templates and 200 DAG tasks a DAG, bytes "
        "a task not growing with tasks):"
    )
    for what, text in runs.items():
        record, plans = run_of(text)
        manifest = workflow_manifest(
            record=record, plans=plans, types=task_types(), cluster=ClusterConfig()
        )
        templates = manifest["spec"]["templates"]
        dags = [len(t["dag"]["tasks"]) for t in templates if "dag" in t]
        refusal = workflow_refusal(manifest) or "submitted"
        size = workflow_bytes(manifest)
        nodes, status = status_bytes(manifest)
        print(
            f"  {what}: {size:,} bytes ({size / max(1, len(plans)):,.0f} a task) and "
            f"{status:,} of status by its end ({nodes:,} nodes), {len(templates)} templates, "
            f"DAG tasks {dags}: {refusal}"
        )


def sweep_state(kube: Any, workers: int, ended: int = 0) -> str:
    """The sweep's Workflow with WORKERS pods, as Argo and the kubelet keep them: the first
    ``ended`` extra workers Succeeded, the others running; its resourceVersion."""
    from tests.backends.argo_workflows import WF, Nodes, argo_pod, fnv1a_32, pod, workflow

    def phase(i: int) -> str:
        return "Succeeded" if 1 <= i <= ended else "Running"

    nodes = Nodes()
    nodes.task("sweep-w0", "Running", [pod("Running")])
    extra = {f"({i}:{i})": (phase(i), [pod(phase(i))]) for i in range(1, workers)}
    nodes.fan_out("sweep-extra", "Running", extra)
    with kube.state.lock:  # the pods end, then Argo writes it in the Workflow
        for i in range(1, ended + 1) if ended else range(workers):
            node, template = (
                ("sweep-w0(0)", "sweep-w0")
                if i == 0
                else (f"sweep-extra({i}:{i})(0)", "sweep-extra")
            )
            name = f"{WF}-{template}-{fnv1a_32(f'{WF}.{node}')}"
            made = argo_pod(name, node_name=node, phase=phase(i), host="node-a")
            kube.state.put_pod(made, log=LOG)
        kube.state.put_workflow(workflow(nodes), "ADDED" if not ended else "MODIFIED")
        return str(kube.state.workflows[("simrun", WF)]["metadata"]["resourceVersion"])


def worker_process(url: str, token: str, link: Connection) -> None:
    """The control loop's process: its passes over the sweep, each measured by the stand-in
    (``link``: "start", then "stop" for the requests and bytes since), sent back as figures."""
    import django

    django.setup()
    from kubernetes.client import ApiClient, Configuration

    from runs.backends.argo.backend import ArgoBackend
    from runs.backends.base import ClusterConfig
    from runs.common import store
    from tests.backends.argo_workflows import WF
    from tests.polling import wait_for

    figures: dict[str, Any] = {"baseline MiB": _rss_mib()}
    configuration = Configuration(host=url)
    configuration.api_key = {"authorization": token}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    tracemalloc.start()

    def measured(name: str, call: Any) -> None:
        link.send("start")
        link.recv()
        start = time.perf_counter()
        call()
        seconds = time.perf_counter() - start
        link.send("stop")
        requests, sent = link.recv()
        figures[name] = (requests, sent, seconds)

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "runs" / "abc123def0" / "tasks" / "sweep").mkdir(parents=True)
        task = store.TaskFolder(root, store.task_parts("abc123def0", "sweep"))
        backend = ArgoBackend(
            cluster=ClusterConfig(), api=ApiClient(configuration), store=root, reasons_ttl_s=0
        )
        try:
            wait_for(lambda: backend.versions([WF]), 60, "the watch's first list")

            def steady() -> None:
                backend.versions([WF])
                backend.status(WF)
                backend.keep_logs(WF, "sweep", task)

            steady()  # the process's first reads list the pods once
            measured("steady pass", steady)
            link.send("end attempts")
            version = link.recv()
            wait_for(lambda: backend.versions([WF]).get(WF) == version, 60, "the ended attempts")
            measured(f"pass after {ENDED} attempts ended", steady)
            measured("steady pass after it", steady)
            measured("first placements page", backend.placements)
            measured("placements page", backend.placements)
            figures["peak Python MiB"] = tracemalloc.get_traced_memory()[1] / 2**20
            figures["peak RSS MiB"] = _rss_mib()
            # Last: every log held at once would be the worker's peak.
            measured("every pod's log (the old keep_logs)", lambda: backend.logs(WF, "sweep"))
        finally:
            backend.close()
    link.send(("done", figures))


def _rss_mib() -> float:
    """This process's peak resident memory (``ru_maxrss``, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def passes(workers: int) -> dict[str, Any]:
    """The figures of the worker process over a sweep of WORKERS pods in the stand-in."""
    from tests.backends.kube_api import KubeApiServer, token_of

    with KubeApiServer() as kube:
        sweep_state(kube, workers)
        ours, theirs = multiprocessing.get_context("spawn").Pipe()
        worker = multiprocessing.get_context("spawn").Process(
            target=worker_process, args=(kube.url, token_of("simrun-worker"), theirs)
        )
        worker.start()
        while True:
            message = ours.recv()
            if message == "start":
                kube.state.requests.clear()
                ours.send("ok")
            elif message == "stop":
                # The watches' own requests (one every few minutes, events streamed) are not
                # the pass's.
                asked = [r for r in kube.state.requests if r.query.get("watch") != "true"]
                ours.send((len(asked), sum(r.sent for r in asked)))
            elif message == "end attempts":
                ours.send(sweep_state(kube, workers, ended=ENDED))
            else:
                worker.join()
                figures: dict[str, Any] = message[1]
                return figures


TARGETS = {
    "steady pass": "0 requests, 0 bytes, at any size",
    f"pass after {ENDED} attempts ended": f"{ENDED} requests (one log each), at any size",
    "steady pass after it": "0 requests, 0 bytes, at any size",
    "first placements page": "the process's one list of the pods, 500 a page",
    "placements page": "0 requests, 0 bytes, at any size",
    "every pod's log (the old keep_logs)": "(what a pass cost before: grows with the pods)",
}


def report(workers: int, small: dict[str, Any], large: dict[str, Any]) -> None:
    """The figures at both sizes, each beside its target."""
    print(f"\nThe control loop's process over a sweep of {SMALL:,} and {workers:,} running pods:")
    for name, target in TARGETS.items():
        cells = []
        for figures in (small, large):
            requests, sent, seconds = figures[name]
            cells.append(f"{requests} requests, {sent:,} bytes, {seconds * 1000:,.0f} ms")
        print(f"  {name}: {cells[0]} | {cells[1]}   target: {target}")
    for name in ("baseline MiB", "peak RSS MiB", "peak Python MiB"):
        print(f"  the worker's {name}: {small[name]:.1f} | {large[name]:.1f}")
    for name in ("peak RSS MiB", "peak Python MiB"):
        grown = (large[name] - small[name]) * 2**20 / (workers - SMALL)
        print(f"  the worker's {name} grows by {grown / 1024:.1f} KiB a pod")
    print(
        "  target: the worker's memory grows only by what its caches keep of a pod (its slim "
        "fields) and of the Workflow's status, not by logs or whole objects"
    )


def main(argv: list[str]) -> int:
    import django

    django.setup()
    workers = int(argv[0]) if argv else 1000
    layouts(workers)
    report(workers, passes(SMALL), passes(workers))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
