"""Logs kept as pods end, before the pod GC outruns them; a log that cannot be read kept as
missing with its reason; one failing pod never stops the others."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.tasktypes import task_types
from runs.backends.argo.backend import ArgoBackend
from runs.backends.base import ClusterConfig, KeptLogs
from runs.common import store
from runs.control import log_keeping, submitting
from runs.models import Run, Task, TaskState
from runs.planning.spec_document import parse_spec
from runs.planning.submission import create_run
from tests.backends.argo_workflows import (
    WF,
    Nodes,
    argo_pod,
    container_status,
    fnv1a_32,
    pod,
    workflow,
)
from tests.backends.kube_api import KubeApiServer, Request
from tests.backends.kube_fixtures import asked, pods_seen
from tests.polling import wait_for

CLUSTER = ClusterConfig(namespace="simrun", queue="simrun")
RUN = "abc123def0"


@pytest.fixture
def backend(kube: KubeApiServer, tmp_path: Path) -> ArgoBackend:
    return ArgoBackend(cluster=CLUSTER, api=kube.client(), store=tmp_path / "store")


def kept_dir(root: Path, run_id: str = RUN) -> Path:
    return root / "runs" / run_id / "tasks" / "sweep" / "logs"


def log_reads(kube: KubeApiServer) -> list[str]:
    return [r.path.split("/")[-2] for r in kube.state.requests if r.path.endswith("/log")]


def test_a_log_the_store_keeps_already_is_not_read_again(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_pod(argo_pod("p0", node_name="sweep-w0(0)", phase="Failed"), log="first\n")
    kube.state.put_pod(
        argo_pod("p1", node_name="sweep-w0(1)", phase="Running", attempt=1), log="second\n"
    )
    folder = kept_dir(backend.store)
    folder.mkdir(parents=True)
    (folder / "sweep-w0-0.log").write_text("first\n")

    logs = {log.pod: log for log in backend.logs(WF, "sweep")}

    assert (logs["p0"].done, logs["p0"].text) == (True, "")
    assert logs["p1"].text == "second\n"
    assert log_reads(kube) == ["p1"]


@pytest.mark.parametrize(
    ("phase", "expected"),
    [
        ("Pending", "its container never started"),
        ("Failed", "its pod was deleted (by the pod GC or a preemption) before its log was kept"),
    ],
)
def test_a_log_that_cannot_be_read_any_more_is_missing_with_its_reason(
    backend: ArgoBackend, kube: KubeApiServer, phase: str, expected: str
) -> None:
    ended = argo_pod("p0", node_name="sweep-w0(0)", phase="Failed")
    kube.state.put_pod(ended)
    # The log endpoint answers as for a pod that never ran, or one deleted since the list.
    code = 400 if phase == "Pending" else 404
    kube.state.intercept = lambda request: code if request.path.endswith("/log") else None

    [log] = backend.logs(WF, "sweep")

    assert (log.done, log.missing) == (True, expected)


def test_a_pod_whose_log_fails_now_does_not_stop_the_others(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    from runs.backends.argo.api import CallPolicy

    backend = ArgoBackend(
        cluster=CLUSTER,
        api=kube.client(),
        store=tmp_path,
        calls=CallPolicy(tries=2, backoff_s=0.01),
    )
    for n in range(3):
        kube.state.put_pod(
            argo_pod(f"p{n}", node_name=f"sweep-w0({n})", phase="Failed", attempt=n),
            log=f"attempt {n}\n",
        )
    kube.state.intercept = lambda r: 500 if r.path.endswith("/p1/log") else None

    logs = {log.pod: log for log in backend.logs(WF, "sweep")}

    assert (logs["p0"].text, logs["p2"].text) == ("attempt 0\n", "attempt 2\n")
    assert (logs["p1"].done, logs["p1"].missing) == (False, "")  # asked again later


@pytest.mark.django_db
def test_the_controller_keeps_each_log_as_its_pod_ends_so_the_pod_gc_cannot_outrun_it(
    kube: KubeApiServer, tmp_path: Path, owner: Any, settings: Any
) -> None:
    settings.SIMRUN_HOME = tmp_path / "home"
    settings.SIMRUN_HOME.mkdir()
    backend = ArgoBackend(cluster=CLUSTER, api=kube.client(), store=settings.SIMRUN_STORE)
    text = yaml.safe_dump({"tasks": {"sweep": {"type": "squares", "settings": {"n": 40}}}})
    run = create_run(spec=parse_spec(text, types=task_types()), owner=owner, backend=backend)
    assert submitting.submit(run.id, backend=backend)
    run = Run.objects.get(pk=run.pk)
    Task.objects.filter(run=run).update(state=TaskState.RUNNING)
    tasks = list(run.tasks.all())
    labels = {"workflows.argoproj.io/workflow": run.workflow, "simrun/run": run.id}

    def pod_of(name: str, node: str, phase: str, attempt: int) -> dict[str, Any]:
        found = argo_pod(name, node_name=node, phase=phase, attempt=attempt)
        found["metadata"]["labels"].update(labels)
        found["metadata"]["annotations"]["workflows.argoproj.io/node-name"] = (
            f"{run.workflow}.{node}"
        )
        return found

    kube.state.put_pod(pod_of("p0", "sweep-w0(0)", "Failed", 0), log="killed\n")
    kube.state.put_pod(pod_of("p1", "sweep-w0(1)", "Running", 1), log="working\n")

    log_keeping.keep_logs(run, tasks, backend=backend)
    log_keeping.keep_logs(run, tasks, backend=backend)

    folder = store.task_dir(run.id, "sweep") / "logs"
    assert sorted(p.name for p in folder.iterdir()) == ["sweep-w0-0.log"]
    assert (folder / "sweep-w0-0.log").read_text() == "killed\n"
    assert log_reads(kube).count("p0") == 1, "a kept log is read once"

    kube.state.pods.pop(("simrun", "p0"))  # the pod GC, or the workflow's retry strategy

    def gone(request: Request) -> int | None:
        return 404 if request.path.endswith("/p1/log") else None

    kube.state.pods[("simrun", "p1")]["status"]["phase"] = "Succeeded"
    pods_seen(backend, kube)
    kube.state.intercept = gone
    log_keeping.keep_logs(run, tasks, backend=backend)

    assert (folder / "sweep-w0-0.log").read_text() == "killed\n"
    assert (folder / "sweep-w0-1.log").read_text() == (
        "[simrun] no log was kept: its pod was deleted (by the pod GC or a preemption) "
        "before its log was kept\n"
    )


def test_a_pod_whose_log_read_failed_and_which_is_gone_since_is_missing_with_why(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    from runs.backends.argo.api import CallPolicy

    backend = ArgoBackend(
        cluster=CLUSTER, api=kube.client(), store=tmp_path, calls=CallPolicy(tries=1)
    )
    kube.state.put_pod(argo_pod("p0", node_name="sweep-w0(0)", phase="Failed"), log="lost\n")
    kube.state.put_pod(argo_pod("p1", node_name="sweep-w0(1)", phase="Running", attempt=1))
    kube.state.intercept = lambda r: 500 if r.path.endswith("/p0/log") else None

    [first, _running] = backend.logs(WF, "sweep")
    assert (first.done, first.unread) == (False, "500 Internal Server Error")

    [again, _running] = backend.logs(WF, "sweep")  # still there: asked again
    assert log_reads(kube).count("p0") == 2 and again.unread

    kube.state.pods.pop(("simrun", "p0"))  # the pod GC came before a read went through
    pods_seen(backend, kube)
    logs = {log.pod: log for log in backend.logs(WF, "sweep")}
    assert (logs["p0"].done, logs["p0"].node, logs["p0"].attempt) == (True, "sweep-w0(0)", 0)
    assert logs["p0"].missing == (
        "its pod was deleted before its log could be read (last read: 500 Internal Server Error)"
    )
    assert [log.pod for log in backend.logs(WF, "sweep")] == ["p1"], "said once"


def test_the_log_of_a_failed_staging_is_kept_where_main_never_started(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    pod = argo_pod("p0", node_name="plot(0)", phase="Failed", task="plot", dag_task="plot")
    pod["spec"]["initContainers"] = [{"name": "init", "image": "argoexec"}]
    pod["spec"]["initContainers"].append({"name": "stage", "image": "img"})
    pod["status"]["initContainerStatuses"] = [
        container_status("stage", terminated={"exitCode": 1, "reason": "Error"})
    ]
    pod["status"]["containerStatuses"] = [
        container_status("main", waiting={"reason": "PodInitializing"})
    ]
    kube.state.put_pod(pod)
    kube.state.container_logs[("simrun", "p0", "stage")] = (
        "FileNotFoundError: [Errno 2] No such file or directory: '/store/runs/x/out'\n"
    )

    [log] = backend.logs(WF, "plot")

    assert (log.done, log.missing) == (True, "")
    assert log.text == (
        "[simrun] the log of stage, which staged the inputs:\n"
        "FileNotFoundError: [Errno 2] No such file or directory: '/store/runs/x/out'\n"
        "[simrun] the log of main:\n(none: its container never started)\n"
    )


def test_a_staged_command_keeps_both_logs_one_after_the_other(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    pod = argo_pod("p0", node_name="plot(0)", phase="Succeeded", task="plot", dag_task="plot")
    pod["spec"]["initContainers"] = [{"name": "stage", "image": "img"}]
    kube.state.put_pod(pod, log="plotted\n")
    kube.state.container_logs[("simrun", "p0", "stage")] = "staged 2 inputs"

    [log] = backend.logs(WF, "plot")

    assert log.text.endswith("staged 2 inputs\n[simrun] the log of main:\nplotted\n")


def test_a_pod_log_longer_than_its_budget_is_kept_as_its_head_and_its_last_lines(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    backend = ArgoBackend(
        cluster=CLUSTER, api=kube.client(), store=tmp_path / "store", log_bytes=64 * 1024
    )
    printed = "".join(f"line {i}\n" for i in range(100_000))  # 1.2 MB
    kube.state.put_pod(argo_pod("p0", node_name="sweep-w0(0)", phase="Failed"), log=printed)

    [log] = backend.logs(WF, "sweep")

    assert len(log.text.encode()) <= 64 * 1024
    assert log.text.startswith("line 0\nline 1\n")
    assert log.text.endswith("line 99998\nline 99999\n")
    assert "was dropped (SIMRUN_TASK_LOG_MB)" in log.text
    assert [r.query.get("limitBytes") for r in kube.state.requests if r.path.endswith("/log")] == [
        str(64 * 1024),
        str(16 * 1024),
    ]


# Keeping logs from what the watch knows


def pod_name(node: str, template: str = "sweep-w0") -> str:
    """The pod of a Pod node, as Argo's controller names it (``v2``)."""
    return f"{WF}-{template}-{fnv1a_32(f'{WF}.{node}')}"


def folder_of(backend: ArgoBackend, task: str = "sweep") -> store.TaskFolder:
    """The task's folder, made as the service makes it at submission."""
    (backend.store / "runs" / RUN / "tasks" / task).mkdir(parents=True, exist_ok=True)
    return store.TaskFolder(backend.store, store.task_parts(RUN, task))


def watched(backend: ArgoBackend, kube: KubeApiServer, nodes: Nodes, phase: str) -> None:
    """Put the Workflow and wait until the status cache holds this version of it."""
    kube.state.put_workflow(workflow(nodes, phase), "ADDED")
    version = kube.state.workflows[("simrun", WF)]["metadata"]["resourceVersion"]
    wait_for(lambda: backend.versions([WF]).get(WF) == version, what="the cache has it")


def test_the_log_of_a_node_in_a_part_of_a_nested_dag_is_kept_under_its_tasks_node(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    nodes = Nodes()
    nodes.task("Part2.sweep-w0", "Running", [pod("Failed", exit_code="137"), pod("Running")])
    name = pod_name("Part2.sweep-w0(0)", "Part2.sweep-w0")
    ended = argo_pod(name, node_name="Part2.sweep-w0(0)", phase="Failed")
    kube.state.put_pod(ended, log="killed\n")
    watched(backend, kube, nodes, "Running")

    backend.keep_logs(WF, "sweep", folder_of(backend))

    assert sorted(p.name for p in kept_dir(backend.store).iterdir()) == ["sweep-w0-0.log"]
    [log] = backend.logs(WF, "sweep")
    assert (log.node, log.attempt) == ("sweep-w0(0)", 0)


def test_a_steady_pass_over_running_pods_reads_no_log_and_asks_nothing(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    nodes = Nodes()
    nodes.task("sweep-w0", "Running", [pod("Failed", exit_code="137"), pod("Running")])
    kube.state.put_pod(
        argo_pod(pod_name("sweep-w0(0)"), node_name="sweep-w0(0)", phase="Failed"), log="killed\n"
    )
    kube.state.put_pod(
        argo_pod(pod_name("sweep-w0(1)"), node_name="sweep-w0(1)", phase="Running", attempt=1),
        log="working\n",
    )
    watched(backend, kube, nodes, "Running")
    kube.state.requests.clear()

    first = backend.keep_logs(WF, "sweep", folder_of(backend))
    assert [r.path.split("/")[-2] for r in asked(kube)] == [pod_name("sweep-w0(0)")]
    kube.state.requests.clear()
    again = backend.keep_logs(WF, "sweep", folder_of(backend))

    assert asked(kube) == [], "a pass that finds nothing new asks nothing"
    assert (first, again) == (KeptLogs(complete=False), KeptLogs(complete=False))
    assert (kept_dir(backend.store) / "sweep-w0-0.log").read_text() == "killed\n"
    assert sorted(p.name for p in kept_dir(backend.store).iterdir()) == ["sweep-w0-0.log"]


def test_the_last_attempt_is_kept_once_it_ended_and_the_task_is_then_complete(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    nodes = Nodes()
    nodes.task("sweep-w0", "Running", [pod("Running")])
    watched(backend, kube, nodes, "Running")
    assert backend.keep_logs(WF, "sweep", folder_of(backend)) == KeptLogs(complete=False)

    ended = Nodes("Succeeded")
    ended.task("sweep-w0", "Succeeded", [pod("Succeeded")])
    kube.state.put_pod(
        argo_pod(pod_name("sweep-w0(0)"), node_name="sweep-w0(0)", phase="Succeeded"), log="done\n"
    )
    watched(backend, kube, ended, "Succeeded")

    assert backend.keep_logs(WF, "sweep", folder_of(backend)) == KeptLogs(complete=True)
    assert (kept_dir(backend.store) / "sweep-w0-0.log").read_text() == "done\n"
    assert log_reads(kube) == [pod_name("sweep-w0(0)")]


def test_an_ended_attempt_whose_pod_is_gone_is_kept_as_why_and_one_unreadable_now_is_owed(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    from runs.backends.argo.api import CallPolicy

    backend = ArgoBackend(
        cluster=CLUSTER, api=kube.client(), store=tmp_path, calls=CallPolicy(tries=1)
    )
    nodes = Nodes("Failed")
    nodes.task("sweep-w0", "Failed", [pod("Failed"), pod("Error", message="pod deleted")])
    kube.state.put_pod(
        argo_pod(pod_name("sweep-w0(0)"), node_name="sweep-w0(0)", phase="Failed"), log="lost\n"
    )
    watched(backend, kube, nodes, "Failed")
    kube.state.intercept = lambda r: (
        500 if r.path.endswith(f"{pod_name('sweep-w0(0)')}/log") else None
    )

    assert backend.keep_logs(WF, "sweep", folder_of(backend)) == KeptLogs(
        complete=False, unread=True
    )
    kube.state.intercept = None
    assert backend.keep_logs(WF, "sweep", folder_of(backend)) == KeptLogs(complete=True)

    assert (kept_dir(tmp_path) / "sweep-w0-0.log").read_text() == "lost\n"
    assert (kept_dir(tmp_path) / "sweep-w0-1.log").read_text() == (
        "[simrun] no log was kept: its pod was deleted (by the pod GC or a preemption) "
        "before its log was kept\n"
    )


def test_a_log_longer_than_its_budget_is_streamed_into_the_store_as_its_head_and_last_lines(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    backend = ArgoBackend(cluster=CLUSTER, api=kube.client(), store=tmp_path, log_bytes=64 * 1024)
    nodes = Nodes("Failed")
    nodes.task("sweep-w0", "Failed", [pod("Failed")])
    printed = "".join(f"line {i}\n" for i in range(100_000))  # 1.2 MB
    kube.state.put_pod(
        argo_pod(pod_name("sweep-w0(0)"), node_name="sweep-w0(0)", phase="Failed"), log=printed
    )
    watched(backend, kube, nodes, "Failed")

    assert backend.keep_logs(WF, "sweep", folder_of(backend)) == KeptLogs(complete=True)

    text = (kept_dir(tmp_path) / "sweep-w0-0.log").read_text()
    assert len(text.encode()) <= 64 * 1024
    assert text.startswith("line 0\nline 1\n") and text.endswith("line 99998\nline 99999\n")
    assert "was dropped (SIMRUN_TASK_LOG_MB)" in text
    assert [n for n in os.listdir(kept_dir(tmp_path)) if n.startswith(".")] == []


def test_a_staged_command_keeps_its_stage_log_before_its_main_log(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    nodes = Nodes("Failed")
    nodes.task("plot", "Failed", [pod("Failed")])
    flow = workflow(nodes, "Failed")
    flow["spec"]["templates"].append(
        {"name": "plot", "initContainers": [{"name": "stage"}], "container": {"image": "i"}}
    )
    name = pod_name("plot(0)", "plot")
    staged = argo_pod(name, node_name="plot(0)", phase="Failed", task="plot")
    staged["spec"]["initContainers"] = [{"name": "stage", "image": "img"}]
    staged["status"]["initContainerStatuses"] = [
        container_status("stage", terminated={"exitCode": 1, "reason": "Error"})
    ]
    staged["status"]["containerStatuses"] = [
        container_status("main", waiting={"reason": "PodInitializing"})
    ]
    kube.state.put_pod(staged)
    kube.state.container_logs[("simrun", name, "stage")] = "no such input\n"
    kube.state.put_workflow(flow, "ADDED")
    version = kube.state.workflows[("simrun", WF)]["metadata"]["resourceVersion"]
    wait_for(lambda: backend.versions([WF]).get(WF) == version)

    assert backend.keep_logs(WF, "plot", folder_of(backend, "plot")).complete
    assert (kept_dir(backend.store).parent.parent / "plot" / "logs" / "plot-0.log").read_text() == (
        "[simrun] the log of stage, which staged the inputs:\nno such input\n"
        "[simrun] the log of main:\n(none: its container never started)\n"
    )
