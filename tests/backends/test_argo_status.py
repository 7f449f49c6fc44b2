"""status_from_workflow on Workflow objects as Argo writes them."""

from __future__ import annotations

import base64
import gzip
import json

import pytest
import yaml

from harness.tasktypes import task_types
from runs.backends.argo.dag_nodes import NodesUnavailable
from runs.backends.argo.manifest import workflow_manifest
from runs.backends.argo.status import NODE_NAME_ANNOTATION as NODE_NAME
from runs.backends.argo.status import pod_node, status_from_workflow
from runs.backends.base import (
    PREEMPTED_PHASE,
    RETRYING_PHASE,
    ClusterConfig,
    FailedAttempt,
    worker_of_node,
)
from tests.backends.argo_runs import run_of
from tests.backends.argo_schemas import json_schema_validator
from tests.backends.argo_workflows import (
    LOW_MEMORY,
    OOM,
    POD_DELETED,
    SIGTERM,
    UNIT_FAILED,
    WF,
    Nodes,
    node_id,
    pod,
    workflow,
)

STARTED, FINISHED = 1795946400.0, 1795946700.0
"""The fixture's startedAt and finishedAt (10:00 and 10:05 UTC)."""


def realistic(wf: dict) -> dict:
    """The fixture's nodes are valid NodeStatus objects of Argo's schema, ids as Argo's."""
    node_schema = json_schema_validator("io.argoproj.workflow.v1alpha1.NodeStatus")
    for key, node in wf["status"]["nodes"].items():
        errors = [e.message for e in node_schema.iter_errors(node)]
        assert errors == [], (node["name"], errors)
        assert key == node["id"] == node_id(node["name"])
    return wf


def split_succeeded() -> dict:
    nodes = Nodes("Succeeded")
    nodes.task("sweep-w0", "Succeeded", [pod("Succeeded", exit_code="0", host="node-a")])
    nodes.fan_out(
        "sweep-extra",
        "Succeeded",
        {
            "(0:1)": ("Succeeded", [pod("Succeeded", exit_code="0", host="node-b")]),
            "(1:2)": ("Succeeded", [pod("Succeeded", exit_code="0", host="node-a")]),
        },
    )
    nodes.task("sweep-merge", "Succeeded", [pod("Succeeded", exit_code="0", host="node-b")])
    return realistic(workflow(nodes, "Succeeded"))


def test_a_split_task_that_succeeded_has_every_node_succeeded_and_nothing_failed() -> None:
    status = status_from_workflow(split_succeeded())

    assert status.phase == "Succeeded"
    assert status.tasks == {
        "sweep-w0": "Succeeded",
        "sweep-extra(0:1)": "Succeeded",
        "sweep-extra(1:2)": "Succeeded",
        "sweep-merge": "Succeeded",
    }
    assert status.failed == {}
    assert status.hosts == {
        "sweep-w0": "node-a",
        "sweep-extra(0:1)": "node-b",
        "sweep-extra(1:2)": "node-a",
        "sweep-merge": "node-b",
    }


def test_an_oom_kill_then_a_retry_that_succeeds_is_one_failed_attempt_killed_for_memory() -> None:
    nodes = Nodes()
    nodes.task(
        "sweep-w0",
        "Succeeded",
        [
            pod("Failed", message=OOM, exit_code="137", host="node-a"),
            pod("Succeeded", exit_code="0", host="node-c"),
        ],
    )
    status = status_from_workflow(realistic(workflow(nodes)))

    assert status.tasks == {"sweep-w0": "Succeeded"}
    assert status.failed == {
        "sweep-w0": [
            FailedAttempt(
                attempt=0,
                exit_code=137,
                oom_killed=True,
                node="node-a",
                message=OOM,
                started_at=STARTED,
                ended_at=FINISHED,
            )
        ]
    }
    assert status.hosts == {"sweep-w0": "node-c"}


def test_a_second_oom_kill_is_a_second_attempt_killed_for_memory_and_the_node_retrying() -> None:
    nodes = Nodes()
    nodes.task(
        "summary",
        "Running",
        [pod("Failed", message=OOM, exit_code="137"), pod("Failed", message=OOM, exit_code="137")],
        message="Backoff for 15 seconds",
    )
    status = status_from_workflow(realistic(workflow(nodes)))

    assert status.tasks == {"summary": RETRYING_PHASE}
    assert [(a.attempt, a.oom_killed, a.exit_code) for a in status.failed["summary"]] == [
        (0, True, 137),
        (1, True, 137),
    ]


def test_a_node_whose_retries_are_exhausted_is_failed() -> None:
    nodes = Nodes("Failed")
    nodes.task(
        "sweep-merge",
        "Failed",
        [pod("Failed", message=OOM, exit_code="137"), pod("Failed", message=OOM, exit_code="137")],
        message="No more retries left",
    )
    status = status_from_workflow(realistic(workflow(nodes, "Failed", "child failed")))

    assert status.phase == "Failed"
    assert status.message == "child failed"
    assert status.tasks == {"sweep-merge": "Failed"}
    assert len(status.failed["sweep-merge"]) == 2


def test_an_extra_worker_preempted_by_kueue_is_preempted_and_its_attempt_kept_by_worker_id() -> (
    None
):
    nodes = Nodes()
    nodes.task("sweep-w0", "Running", [pod("Running", host="node-a")])
    nodes.fan_out(
        "sweep-extra",
        "Running",
        {
            "(0:1)": ("Running", [pod("Running", host="node-b")]),
            "(1:2)": ("Running", [pod("Error", message=POD_DELETED, host="node-c")]),
        },
    )
    status = status_from_workflow(realistic(workflow(nodes)))

    assert status.tasks["sweep-extra(1:2)"] == PREEMPTED_PHASE
    assert status.tasks["sweep-extra(0:1)"] == "Running"
    assert status.failed == {
        "sweep-w2": [
            FailedAttempt(
                attempt=0,
                exit_code=None,
                evicted=True,
                oom_killed=False,
                node="node-c",
                message=POD_DELETED,
                started_at=STARTED,
                ended_at=FINISHED,
            )
        ]
    }


def test_a_pod_stopped_by_sigterm_on_its_deletion_is_preempted() -> None:
    nodes = Nodes()
    nodes.task("sweep-w0", "Running", [pod("Failed", message=SIGTERM, exit_code="143")])
    status = status_from_workflow(realistic(workflow(nodes)))

    assert status.tasks == {"sweep-w0": PREEMPTED_PHASE}
    assert status.failed["sweep-w0"][0].evicted


def test_a_coordinator_evicted_and_retried_is_running_with_its_eviction_no_oom_kill() -> None:
    nodes = Nodes()
    nodes.task(
        "sweep-w0",
        "Running",
        [
            pod("Failed", message=LOW_MEMORY, exit_code="137", host="node-a"),
            pod("Running", host="node-b"),
        ],
    )
    status = status_from_workflow(realistic(workflow(nodes)))

    assert status.tasks == {"sweep-w0": "Running"}
    [evicted] = status.failed["sweep-w0"]
    assert (evicted.attempt, evicted.evicted, evicted.oom_killed) == (0, True, False)
    assert evicted.exit_code == 137  # an exit 137 alone is no kill for memory
    assert status.hosts == {"sweep-w0": "node-b"}


def test_kueue_gated_pods_are_pending_with_nothing_failed() -> None:
    nodes = Nodes()
    nodes.task("sweep-w0", "Running", [pod("Pending")])
    nodes.fan_out("sweep-extra", "Running", {"(0:1)": ("Running", [pod("Pending")])})
    status = status_from_workflow(realistic(workflow(nodes)))

    assert status.tasks == {"sweep-w0": "Pending", "sweep-extra(0:1)": "Pending"}
    assert status.failed == {}
    assert status.hosts == {}


def test_a_genuine_failure_is_failed_and_not_evicted() -> None:
    nodes = Nodes("Failed")
    nodes.task("sweep-w0", "Failed", [pod("Failed", message=UNIT_FAILED, exit_code="3")])
    nodes.skipped("sweep-merge")
    status = status_from_workflow(realistic(workflow(nodes, "Failed")))

    assert status.tasks == {"sweep-w0": "Failed", "sweep-merge": "Omitted"}
    [attempt] = status.failed["sweep-w0"]
    assert (attempt.exit_code, attempt.evicted, attempt.oom_killed) == (3, False, False)


def test_a_failure_that_waits_for_its_retry_and_was_no_eviction_is_retrying() -> None:
    nodes = Nodes()
    nodes.task(
        "plot", "Running", [pod("Failed", message="main: Error (exit code 137)", exit_code="137")]
    )
    status = status_from_workflow(realistic(workflow(nodes)))

    assert status.tasks == {"plot": RETRYING_PHASE}
    assert not status.failed["plot"][0].oom_killed


def test_a_wait_container_killed_for_memory_is_no_oom_kill_of_the_task() -> None:
    nodes = Nodes()
    nodes.task("plot", "Running", [pod("Error", message="wait: OOMKilled (exit code 137)")])
    status = status_from_workflow(realistic(workflow(nodes)))

    assert not status.failed["plot"][0].oom_killed


def test_an_oom_kill_in_the_message_format_before_argo_3_7_is_a_kill_for_memory() -> None:
    nodes = Nodes()
    nodes.task(
        "plot", "Running", [pod("Failed", message="OOMKilled (exit code 137)", exit_code="137")]
    )
    assert status_from_workflow(workflow(nodes)).failed["plot"][0].oom_killed


def test_a_pod_argo_restarts_after_an_eviction_is_preempted() -> None:
    nodes = Nodes()
    restarting = pod("Pending", message="Pod auto-restarting due to Evicted: The node was low")
    restarting["failedPodRestarts"] = 1
    nodes.task("sweep-w0", "Running", [restarting])
    status = status_from_workflow(realistic(workflow(nodes)))

    assert status.tasks == {"sweep-w0": PREEMPTED_PHASE}
    assert status.failed == {}


def test_a_pod_without_a_retry_strategy_is_its_own_attempt() -> None:
    nodes = Nodes()
    node = nodes._add(f"{WF}.plot", "Pod", "Failed", template="plot", message=UNIT_FAILED)
    node["outputs"] = {"exitCode": "3"}
    status = status_from_workflow(workflow(nodes))

    assert status.tasks == {"plot": "Failed"}
    assert status.failed["plot"][0].attempt == 0


def test_compressed_nodes_give_the_same_status_as_plain_ones() -> None:
    plain = split_succeeded()
    compressed = json.loads(json.dumps(plain))
    nodes = compressed["status"].pop("nodes")
    compressed["status"]["compressedNodes"] = base64.b64encode(
        gzip.compress(json.dumps(nodes).encode())
    ).decode()

    assert status_from_workflow(compressed) == status_from_workflow(plain)


def test_nodes_offloaded_to_a_database_are_unavailable_not_empty() -> None:
    wf = split_succeeded()
    wf["status"].pop("nodes")
    wf["status"]["offloadNodeStatusVersion"] = "fnv-12345"

    with pytest.raises(NodesUnavailable, match="offloaded"):
        status_from_workflow(wf)


def test_nodes_compressed_with_another_algorithm_than_gzip_are_unavailable() -> None:
    wf = split_succeeded()
    wf["status"].pop("nodes")
    wf["status"]["compressedNodes"] = base64.b64encode(b"(\xb5/\xfd zstd frame").decode()

    with pytest.raises(NodesUnavailable, match="gzip"):
        status_from_workflow(wf)


def test_a_workflow_just_created_is_pending_without_nodes() -> None:
    wf = workflow(Nodes())
    wf.pop("status")

    status = status_from_workflow(wf)

    assert (status.phase, status.tasks, status.failed) == ("Pending", {}, {})


def test_failed_attempts_are_kept_by_worker_id_task_id_and_merge() -> None:
    assert worker_of_node("sweep-extra(3:4)") == "sweep-w4"
    assert worker_of_node("sweep-w0") == "sweep-w0"
    assert worker_of_node("sweep-merge") == "sweep-merge"
    assert worker_of_node("plot") == "plot"


def test_the_nodes_argo_makes_of_the_built_workflow_are_the_names_the_controller_reads() -> None:
    record, plans = run_of(
        """
tasks:
  sweep: {type: squares, settings: {n: 100}, workers: 3}
  summary: {type: csv-stats, inputs: {table: sweep}}
"""
    )
    built = workflow_manifest(
        record=record, plans=plans, types=task_types(), cluster=ClusterConfig()
    )
    assert built["metadata"]["name"] == WF
    nodes = Nodes()
    for task in built["spec"]["templates"][0]["dag"]["tasks"]:
        sequence = task.get("withSequence")
        if sequence is None:
            nodes.task(task["name"], "Running", [pod("Failed", message=OOM, exit_code="137")])
            continue
        items = range(int(sequence["start"]), int(sequence["end"]) + 1)
        nodes.fan_out(
            task["name"],
            "Running",
            {
                f"({i}:{item})": ("Running", [pod("Error", message=POD_DELETED)])
                for i, item in enumerate(items)
            },
        )

    status = status_from_workflow(realistic(workflow(nodes)))

    assert set(status.tasks) == {
        "sweep-w0",
        "sweep-extra(0:1)",
        "sweep-extra(1:2)",
        "sweep-merge",
        "summary",
    }
    [worker] = [
        p
        for p in built["spec"]["templates"][0]["dag"]["tasks"][1]["arguments"]["parameters"]
        if p["name"] == "worker"
    ]
    assert {worker["value"].replace("{{item}}", str(n)) for n in (1, 2)} | {
        "sweep-w0",
        "sweep-merge",
        "summary",
    } == set(status.failed)


def test_the_nodes_of_a_dag_nested_in_parts_are_read_by_their_tasks_names() -> None:
    tasks = {f"t{i}": {"command": ["echo", str(i)]} for i in range(250)}
    record, plans = run_of(yaml.safe_dump({"tasks": tasks}))
    built = workflow_manifest(
        record=record, plans=plans, types=task_types(), cluster=ClusterConfig()
    )
    [part] = [t for t in built["spec"]["templates"] if t["name"] == "Part2"]
    last = part["dag"]["tasks"][-1]["name"]
    nodes = Nodes()
    nodes._add(f"{WF}.Part1", "DAG", "Succeeded", template="Part1")
    nodes._add(f"{WF}.Part2", "DAG", "Running", template="Part2")
    nodes.task("Part1.t0", "Succeeded", [pod("Succeeded", exit_code="0", host="node-a")])
    nodes.task(f"Part2.{last}", "Running", [pod("Failed", message=OOM, exit_code="137")])

    status = status_from_workflow(realistic(workflow(nodes)))

    assert status.tasks == {"t0": "Succeeded", last: RETRYING_PHASE}
    assert set(status.failed) == {last}
    annotated = {"metadata": {"annotations": {NODE_NAME: f"{WF}.Part2.{last}(1)"}}}
    assert pod_node(annotated, WF) == (last, 1)
