"""The Workflow of a run: valid for Argo, and the pods the spec and the plans say."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.tasktypes import task_types
from runs.backends.argo.manifest import workflow_manifest
from runs.backends.argo.pod_templates import STAGE_SCRIPT
from runs.backends.argo.retries import RETRY_EXPRESSION
from runs.backends.base import ClusterConfig
from runs.planning.planner import ObservedPeak
from tests.backends.argo_pod_security import restricted_violations
from tests.backends.argo_pods import FIRST, argo_pods, main_container, node_pod
from tests.backends.argo_runs import IMAGE, evaluate, run_of
from tests.backends.argo_schemas import schema_errors

CLUSTER = ClusterConfig(namespace="sims", queue="team-a", store_mount="/mnt/store")

SPLIT_ONE = "tasks: {sweep: {type: squares, settings: {n: 10}}}"
SPLIT_THREE = "tasks: {sweep: {type: squares, settings: {n: 100}, workers: 3, cores: 4}}"
PLUGIN = """
tasks:
  table: {type: squares, settings: {n: 10}}
  summary: {type: csv-stats, inputs: {table: table}}
"""
COMMAND = """
tasks:
  plot:
    command: [python, -m, mypkg.plot, --in, inputs/stats]
    image: python:3.12-slim
    memory: {gb: 2}
"""
DAG = """
name: demo
tasks:
  sweep: {type: squares, settings: {n: 1000}, workers: 2}
  ising: {type: ising, settings: {}, workers: 2}
  summary: {type: csv-stats, inputs: {table: sweep}}
  plot:
    command: [python, -m, mypkg.plot, --in, inputs/stats, --lattice, inputs/lattice]
    inputs: {stats: summary, lattice: ising}
"""
RESERVED = "reserve_node: true\ntasks: {sweep: {type: squares, settings: {n: 10}, workers: 2}}"
MANY = "tasks: {sweep: {type: squares, settings: {n: 100000}, workers: 500}}"
SOURCES = f"""
sources: ['{"a" * 64}', '{"b" * 64}']
tasks: {{sweep: {{type: squares, settings: {{n: 5}}}}}}
"""
LONG_ID = f"tasks: {{{'t' * 40}: {{type: squares, settings: {{n: 5}}, workers: 2}}}}"
COMMAND_SWEEP = """
tasks:
  mesh: {command: [make-mesh, --out, out], image: python:3.12-slim}
  sim:
    command: [md-sim, --mesh, "{inputs.grid}/m.msh", --T, "{T}", --json, '{{"seed": {seed}}}']
    inputs: {grid: mesh}
    sweep: {T: {linspace: [0.5, 3.0, 26]}, seed: {range: [0, 10]}}
    workers: 3
    results: result.json
    failures: {allowed: 2%}
"""

CORPUS = {
    "split with one worker": (SPLIT_ONE, {}),
    "split with three workers": (SPLIT_THREE, {}),
    "plugin reading a split task": (PLUGIN, {}),
    "command in its own image": (COMMAND, {}),
    "a DAG of all kinds": (DAG, {}),
    "a reserved node": (RESERVED, {"reserved_node": "node-7"}),
    "retry memory from observed kills": (
        SPLIT_THREE,
        {"observed": {"squares": [ObservedPeak(gb_per_process=1.5, oom=True)]}},
    ),
    "many extra workers": (MANY, {}),
    "source snapshots": (SOURCES, {}),
    "a coordinator that merges": (SPLIT_THREE, {"extra_workers": False}),
    "the longest task id": (LONG_ID, {}),
    "a command sweep": (COMMAND_SWEEP, {}),
}


def manifest(text: str, cluster: ClusterConfig = CLUSTER, **options: Any) -> dict[str, Any]:
    record, plans = run_of(text, **options)
    return workflow_manifest(record=record, plans=plans, types=task_types(), cluster=cluster)


def dag_tasks(wf: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tasks of the entry DAG."""
    [dag] = [t for t in wf["spec"]["templates"] if t["name"] == "Run"]
    return {t["name"]: t for t in dag["dag"]["tasks"]}


def template(wf: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [t for t in wf["spec"]["templates"] if t["name"] == name]
    return found


def pod(wf: dict[str, Any], node: str, last: dict[str, str] = FIRST) -> dict[str, Any]:
    """The pod Argo makes of a DAG node (``sweep-extra(0:1)``: a fan-out's first item)."""
    return node_pod(wf, node, last)


def main(wf: dict[str, Any], node: str, last: dict[str, str] = FIRST) -> dict[str, Any]:
    return main_container(pod(wf, node, last))


def command(wf: dict[str, Any], node: str) -> list[str]:
    """The command of a DAG node's ``main``, behind Argo's ``argoexec emissary --``."""
    found: list[str] = main(wf, node)["command"]
    return found[found.index("--") + 1 :]


def env(wf: dict[str, Any], node: str) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in main(wf, node)["env"]}


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_every_workflow_of_the_corpus_validates_against_the_crd_and_argos_json_schema(
    case: str,
) -> None:
    text, options = CORPUS[case]
    assert schema_errors(manifest(text, **options)) == []


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_every_pod_of_the_corpus_satisfies_the_restricted_pod_security(case: str) -> None:
    text, options = CORPUS[case]
    wf = manifest(text, **options)
    for node, attempt, pod_ in argo_pods(wf):
        assert restricted_violations(pod_["spec"]) == [], (node, attempt)


def test_the_strict_crd_refuses_a_misspelt_field_and_the_json_schema_an_integer_quantity() -> None:
    wf = manifest(SPLIT_ONE)
    template(wf, "worker")["retryStrategie"] = template(wf, "worker").pop("retryStrategy")
    template(wf, "worker")["container"]["resources"]["requests"]["cpu"] = 2

    errors = schema_errors(wf)

    assert any(e.startswith("crd:") and "retryStrategie" in e for e in errors)
    assert any(e.startswith("json:") and "2 is not of type 'string'" in e for e in errors)


def test_the_workflow_is_named_after_the_run_in_the_clusters_namespace() -> None:
    wf = manifest(DAG)

    assert wf["metadata"]["name"] == "simrun-abc123def0"
    assert wf["metadata"]["namespace"] == "sims"
    assert wf["metadata"]["labels"] == {"simrun/run": "abc123def0"}
    assert wf["metadata"]["annotations"] == {"simrun/name": "demo"}


def test_a_split_task_is_its_coordinator_extra_workers_fanned_out_and_a_merge_after_it() -> None:
    tasks = dag_tasks(manifest(SPLIT_THREE))

    assert set(tasks) == {"sweep-w0", "sweep-extra", "sweep-merge"}
    assert "dependencies" not in tasks["sweep-w0"]
    assert tasks["sweep-merge"]["dependencies"] == ["sweep-w0"]
    extra = tasks["sweep-extra"]
    assert extra["withSequence"] == {"start": "1", "end": "2"}
    assert {"name": "worker", "value": "sweep-w{{item}}"} in extra["arguments"]["parameters"]


def test_a_command_sweep_is_a_split_task_of_the_harness_in_the_runs_image() -> None:
    wf = manifest(COMMAND_SWEEP)

    tasks = dag_tasks(wf)
    assert {"sim-w0", "sim-extra", "sim-merge"} <= set(tasks)
    assert tasks["sim-w0"]["dependencies"] == ["mesh"]
    assert command(wf, "sim-w0") == ["simrun-worker"]
    assert command(wf, "sim-merge") == ["simrun-merge"]
    assert {main(wf, n)["image"] for n in ("sim-w0", "sim-extra(0:1)")} == {IMAGE}
    assert env(wf, "sim-w0")["SIMRUN_INPUTS"] == "grid=runs/abc123def0/tasks/mesh/out"
    # The command's placeholders live in task.json, never where Argo reads {{...}}.
    assert "{T}" not in json.dumps(wf) and '{{"seed"' not in json.dumps(wf)


def test_the_coordinator_is_the_base_worker_w0_and_extra_workers_take_their_worker_id() -> None:
    wf = manifest(SPLIT_THREE)

    assert env(wf, "sweep-w0")["SIMRUN_ROLE"] == "base"
    assert env(wf, "sweep-w0")["SIMRUN_WORKER"] == "sweep-w0"
    assert env(wf, "sweep-extra(0:1)")["SIMRUN_ROLE"] == "extra"
    assert env(wf, "sweep-extra(0:1)")["SIMRUN_WORKER"] == "sweep-w1"
    assert command(wf, "sweep-w0") == ["simrun-worker"]
    assert command(wf, "sweep-extra(0:1)") == ["simrun-worker"]
    assert command(wf, "sweep-merge") == ["simrun-merge"]
    assert "SIMRUN_WORKER" not in env(wf, "sweep-merge")


def test_an_extra_worker_never_fails_the_workflow_and_no_failure_stops_the_dag() -> None:
    wf = manifest(SPLIT_THREE)

    assert dag_tasks(wf)["sweep-extra"]["continueOn"] == {"failed": True, "error": True}
    assert template(wf, "Run")["dag"]["failFast"] is False


def test_a_split_task_with_one_worker_has_no_extra_workers() -> None:
    wf = manifest(SPLIT_ONE)

    assert set(dag_tasks(wf)) == {"sweep-w0", "sweep-merge"}
    assert {t["name"] for t in wf["spec"]["templates"]} == {"Run", "worker", "merge"}


def test_many_extra_workers_are_one_fan_out_not_one_template_each() -> None:
    wf = manifest(MANY)

    assert dag_tasks(wf)["sweep-extra"]["withSequence"] == {"start": "1", "end": "499"}
    assert len(wf["spec"]["templates"]) == 4


def test_a_plan_whose_coordinator_merges_has_no_merge_and_readers_wait_for_the_coordinator() -> (
    None
):
    text = PLUGIN.replace("n: 10}", "n: 10}, workers: 2")
    tasks = dag_tasks(manifest(text, extra_workers=False))

    assert set(tasks) == {"table-w0", "summary"}
    assert tasks["summary"]["dependencies"] == ["table-w0"]


def test_a_task_waits_for_the_merge_of_a_split_task_and_for_an_unsplit_task_itself() -> None:
    tasks = dag_tasks(manifest(DAG))

    assert tasks["summary"]["dependencies"] == ["sweep-merge"]
    assert tasks["plot"]["dependencies"] == ["ising-merge", "summary"]
    assert "dependencies" not in tasks["sweep-extra"]
    assert "dependencies" not in tasks["ising-w0"]


def test_extra_workers_start_with_their_coordinator_after_the_tasks_they_read() -> None:
    text = """
tasks:
  first: {type: squares, settings: {n: 5}}
  second: {type: squares, settings: {n: 5}, workers: 3, inputs: {prev: first}}
"""
    tasks = dag_tasks(manifest(text))

    assert tasks["second-w0"]["dependencies"] == ["first-merge"]
    assert tasks["second-extra"]["dependencies"] == ["first-merge"]


def test_every_pod_has_the_simrun_environment_of_its_task() -> None:
    wf = manifest(DAG.replace("name: demo", f"sources: ['{'c' * 64}']"))
    summary = env(wf, "summary")

    assert summary["SIMRUN_TASK_DIR"] == "/mnt/store/runs/abc123def0/tasks/summary"
    assert summary["SIMRUN_INPUTS"] == "table=runs/abc123def0/tasks/sweep/out"
    assert summary["SIMRUN_ATTEMPT"] == "0"
    again = main_container(node_pod(wf, "summary", attempt=1))["env"]
    assert {"name": "SIMRUN_ATTEMPT", "value": "1"} in again
    assert summary["SIMRUN_WORKER"] == "summary"
    assert summary["SIMRUN_CORES"] == "1"
    assert summary["SIMRUN_STALE_S"].isdigit()
    assert summary["SIMRUN_SCRATCH"] == "/scratch"
    assert summary["SIMRUN_STORE"] == "/mnt/store"
    assert summary["SIMRUN_EDITABLE"] == f"/mnt/store/snapshots/{'c' * 64}"
    plot = env(wf, "plot")
    assert plot["SIMRUN_INPUTS"] == (
        "stats=runs/abc123def0/tasks/summary/out,lattice=runs/abc123def0/tasks/ising/out"
    )
    assert plot["SIMRUN_OUT"] == "/mnt/store/runs/abc123def0/tasks/plot/out"
    for name in ("sweep-w0", "sweep-extra(0:1)", "sweep-merge", "ising-w0", "summary", "plot"):
        assert {"SIMRUN_ATTEMPT", "SIMRUN_ROLE", "SIMRUN_MEMORY_LIMIT_GB"} <= set(env(wf, name))
        # The report names the server the pod ran on, from the downward API.
        assert env(wf, name)["SIMRUN_NODE"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_pods_request_and_limit_the_cores_and_memory_of_the_plan() -> None:
    record, plans = run_of(SPLIT_THREE)
    wf = workflow_manifest(record=record, plans=plans, types=task_types(), cluster=CLUSTER)
    plan = plans["sweep"]
    memory = f"{-(-round(plan.memory_gb * 1024 * 1000) // 1000)}Mi"

    for name in ("sweep-w0", "sweep-extra(0:1)"):
        resources = main(wf, name)["resources"]
        assert resources["limits"] == {"cpu": "4", "memory": memory}
        assert resources["requests"] == {**resources["limits"], "ephemeral-storage": "10Gi"}
        assert env(wf, name)["SIMRUN_CORES"] == "4"
        assert env(wf, name)["SIMRUN_MEMORY_LIMIT_GB"] == f"{plan.memory_gb:g}"
    assert main(wf, "sweep-merge")["resources"]["limits"]["cpu"] == "1"


def test_a_memory_of_the_spec_becomes_the_pods_limit_in_whole_mib_rounded_up() -> None:
    wf = manifest(COMMAND.replace("gb: 2", "gb: 1.0001"))

    assert main(wf, "plot")["resources"]["limits"]["memory"] == "1025Mi"


def test_pods_carry_kueues_queue_label_and_the_labels_simrun_finds_them_by() -> None:
    wf = manifest(SPLIT_THREE)

    assert wf["spec"]["podMetadata"]["labels"] == {
        "simrun/run": "abc123def0",
        "kueue.x-k8s.io/queue-name": "team-a",
    }
    labels = pod(wf, "sweep-extra(0:1)")["metadata"]["labels"]
    assert {k: v for k, v in labels.items() if k.startswith("simrun/")} == {
        "simrun/run": "abc123def0",
        "simrun/task": "sweep",
        "simrun/dag-task": "sweep-extra",
    }
    assert labels["kueue.x-k8s.io/queue-name"] == "team-a"


def test_every_pod_mounts_the_store_and_a_scratch_directory_and_snapshots_read_only() -> None:
    plain = manifest(SPLIT_ONE)
    with_sources = manifest(SOURCES)

    assert plain["spec"]["volumes"] == [
        {"name": "store", "persistentVolumeClaim": {"claimName": "simrun-store"}}
    ]
    assert template(plain, "worker")["volumes"] == [
        {"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}},
        {"name": "no-token", "emptyDir": {"sizeLimit": "1Mi"}},
    ]
    assert template(plain, "worker")["container"]["volumeMounts"] == [
        {"name": "store", "mountPath": "/mnt/store"},
        {"name": "scratch", "mountPath": "/scratch"},
        {
            "name": "no-token",
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            "readOnly": True,
        },
    ]
    assert template(with_sources, "merge")["container"]["volumeMounts"][-1] == {
        "name": "store",
        "mountPath": "/mnt/store/snapshots",
        "subPath": "snapshots",
        "readOnly": True,
    }


def test_every_pod_runs_in_the_runs_image_and_a_command_task_in_its_own() -> None:
    wf = manifest(
        DAG.replace("    inputs: {stats", "    image: 'python:3.12-slim'\n    inputs: {stats")
    )

    assert {main(wf, n)["image"] for n in ("sweep-w0", "summary")} == {IMAGE}
    assert main(wf, "plot")["image"] == "python:3.12-slim"
    assert stage(wf, "plot")["image"] == IMAGE
    assert main(manifest(DAG), "plot")["image"] == IMAGE


def stage(wf: dict[str, Any], node: str) -> dict[str, Any]:
    [found] = [c for c in pod(wf, node)["spec"]["initContainers"] if c["name"] == "stage"]
    return found


def test_a_plugin_task_runs_its_types_command_through_simrun_exec() -> None:
    wf = manifest(PLUGIN)

    assert command(wf, "summary") == [
        "simrun-exec",
        "python",
        "-m",
        "harness.examples.csv_stats",
        "--port",
        "table",
    ]


def test_a_command_task_runs_its_args_in_the_scratch_directory_where_its_inputs_are_staged(
    tmp_path: Path,
) -> None:
    wf = manifest(DAG)
    staging = stage(wf, "plot")

    assert command(wf, "plot") == dag_command()
    assert main(wf, "plot")["workingDir"] == staging["workingDir"] == "/scratch"
    assert staging["command"][:3] == ["python", "-c", STAGE_SCRIPT]
    assert staging["volumeMounts"] == template(wf, "command")["container"]["volumeMounts"]

    # The staging step itself, on real files: inputs/<port> below its working directory.
    store, scratch = tmp_path / "store", tmp_path / "scratch"
    for source, name in (("summary", "stats.json"), ("ising", "lattice.csv")):
        out = store / "runs/abc123def0/tasks" / source / "out"
        (out / "sub").mkdir(parents=True)
        (out / "sub" / name).write_text(source)
    scratch.mkdir()
    assert staging["command"][3:] == ["/mnt/store", "/mnt/store/runs/abc123def0/tasks/plot/out"]
    args = [str(store), str(store / "runs/abc123def0/tasks/plot/out")]
    inputs = {e["name"]: e["value"] for e in staging["env"]}
    subprocess.run([sys.executable, "-c", STAGE_SCRIPT, *args], cwd=scratch, check=True, env=inputs)

    assert (scratch / "inputs/stats/sub/stats.json").read_text() == "summary"
    assert (scratch / "inputs/lattice/sub/lattice.csv").read_text() == "ising"
    assert (store / "runs/abc123def0/tasks/plot/out").is_dir()


def dag_command() -> list[str]:
    return ["python", "-m", "mypkg.plot", "--in", "inputs/stats", "--lattice", "inputs/lattice"]


def test_a_run_without_an_image_cannot_be_submitted() -> None:
    with pytest.raises(ValueError, match="has no image"):
        manifest(SPLIT_ONE, image="")
    with pytest.raises(ValueError, match="has no image"):
        manifest(COMMAND, image="")  # its own image runs it, but the staging needs the run's


def test_a_reserved_run_tolerates_its_taint_and_selects_its_node() -> None:
    cluster = CLUSTER.model_copy(update={"node_selector": {"pool": "sims"}})
    wf = manifest(RESERVED, cluster, reserved_node="node-7")

    assert wf["spec"]["nodeSelector"] == {"pool": "sims", "simrun/reserved": "abc123def0"}
    assert wf["spec"]["tolerations"] == [
        {
            "key": "simrun/reserved",
            "operator": "Equal",
            "value": "abc123def0",
            "effect": "NoSchedule",
        }
    ]
    unreserved = manifest(RESERVED, cluster)
    assert unreserved["spec"]["nodeSelector"] == {"pool": "sims"}
    assert "tolerations" not in unreserved["spec"]


def test_the_shared_store_is_not_reowned_at_every_mount() -> None:
    security = manifest(SPLIT_ONE)["spec"]["securityContext"]

    assert security["fsGroup"] == 1000
    assert security["fsGroupChangePolicy"] == "OnRootMismatch"


def test_the_scratch_directory_is_bounded_and_its_disk_requested() -> None:
    wf = manifest(SPLIT_THREE, CLUSTER.model_copy(update={"scratch_gb": 25}))

    for name in ("sweep-w0", "sweep-extra(0:1)", "sweep-merge"):
        [scratch] = [v for v in pod(wf, name)["spec"]["volumes"] if v["name"] == "scratch"]
        assert scratch == {"name": "scratch", "emptyDir": {"sizeLimit": "25Gi"}}
        resources = main(wf, name)["resources"]
        assert resources["requests"]["ephemeral-storage"] == "25Gi"
        assert "ephemeral-storage" not in resources["limits"]


def test_the_service_account_and_pull_secret_of_the_cluster_are_the_pods() -> None:
    wf = manifest(SPLIT_ONE, CLUSTER.model_copy(update={"pull_secret": "regcred"}))

    assert wf["spec"]["serviceAccountName"] == "simrun-runner"
    assert wf["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert "imagePullSecrets" not in manifest(SPLIT_ONE)["spec"]


def test_failed_pods_stay_for_their_logs_until_the_time_to_live_deletes_the_workflow() -> None:
    wf = manifest(SPLIT_ONE, CLUSTER.model_copy(update={"ttl_s": 7200}))

    assert wf["spec"]["podGC"]["strategy"] == "OnPodSuccess"
    assert re.fullmatch(r"\d+m", wf["spec"]["podGC"]["deleteDelayDuration"])
    assert wf["spec"]["ttlStrategy"] == {"secondsAfterCompletion": 7200}


OVERFLOW = 'Usage of EmptyDir volume "scratch" exceeds the limit "10Gi". '
LAST_ATTEMPTS = {
    "scratch overflow, killed": (
        {"status": "Failed", "exitCode": "137", "message": OVERFLOW},
        False,
    ),
    "scratch overflow, stopped": (
        {"status": "Failed", "exitCode": "143", "message": OVERFLOW},
        False,
    ),
    "killed for memory": (
        {"status": "Failed", "exitCode": "137", "message": "main: OOMKilled (exit code 137)"},
        True,
    ),
    "pool process killed": (
        {"status": "Failed", "exitCode": "137", "message": "main: Error (exit code 137)"},
        True,
    ),
    "pod deleted": ({"status": "Error", "exitCode": "-1", "message": "pod deleted"}, True),
    "kubelet eviction": (
        {"status": "Failed", "exitCode": "-1", "message": "The node was low on resource: memory. "},
        True,
    ),
    "node shutdown": (
        {
            "status": "Failed",
            "exitCode": "-1",
            "message": "Pod was terminated in response to imminent node shutdown.",
        },
        True,
    ),
    "SIGTERM on deletion": (
        {"status": "Failed", "exitCode": "143", "message": "main: Error (exit code 143)"},
        True,
    ),
    "a transient storage error": (
        {"status": "Failed", "exitCode": "75", "message": "main: Error (exit code 75)"},
        True,
    ),
    "a second kill for memory, with the retry memory": (
        {
            "status": "Failed",
            "exitCode": "137",
            "message": "main: OOMKilled (exit code 137): simrun: the retry memory after a kill "
            "for memory",
        },
        False,
    ),
    "a second kill for memory, its note naming the retry memory": (
        {
            "status": "Failed",
            "exitCode": "137",
            "message": "main: OOMKilled (exit code 137): simrun: the retry memory after a kill "
            "for memory (4.5 GiB)",
        },
        False,
    ),
    "a kill for memory with the retry memory after a SIGKILL": (
        {"status": "Failed", "exitCode": "137", "message": "main: OOMKilled (exit code 137)"},
        True,
    ),
    "a unit failed": (
        {"status": "Failed", "exitCode": "3", "message": "main: Error (exit code 3)"},
        False,
    ),
    "configuration error": (
        {"status": "Failed", "exitCode": "4", "message": "main: Error (exit code 4)"},
        False,
    ),
    "a command failed": (
        {"status": "Failed", "exitCode": "1", "message": "main: Error (exit code 1)"},
        False,
    ),
    "a controller error a retry may fix": (
        {"status": "Error", "exitCode": "-1", "message": "failed to create pod: etcd timeout"},
        True,
    ),
    "a podSpecPatch Argo cannot apply": (
        {"status": "Error", "exitCode": "-1", "message": "Error applying PodSpecPatch"},
        False,
    ),
    "a pod the API server refuses": (
        {
            "status": "Error",
            "exitCode": "-1",
            "message": 'pods "simrun-x-sweep-w0-1" is invalid: metadata.labels: Invalid value',
        },
        False,
    ),
    "a pod Pod Security forbids": (
        {
            "status": "Error",
            "exitCode": "-1",
            "message": 'pods "p" is forbidden: violates PodSecurity "restricted:latest"',
        },
        False,
    ),
    "a missing Secret": (
        {
            "status": "Error",
            "exitCode": "-1",
            "message": "Pod failed before main container starts due to "
            'CreateContainerConfigError: secret "s" not found',
        },
        False,
    ),
}


@pytest.mark.parametrize("case", sorted(LAST_ATTEMPTS))
def test_evictions_preemptions_and_kills_are_retried_genuine_failures_not(case: str) -> None:
    last, retried = LAST_ATTEMPTS[case]
    template_ = template(manifest(SPLIT_ONE), "worker")

    assert template_["retryStrategy"]["expression"] == RETRY_EXPRESSION
    assert template_["retryStrategy"]["retryPolicy"] == "Always"
    assert evaluate(RETRY_EXPRESSION, last) is retried


def patched(last: dict[str, str]) -> dict[str, Any]:
    """The memory of ``main`` of the coordinator's attempt after ``last``, and the variables
    of the retry rule in its environment."""
    record, plans = run_of(SPLIT_THREE)
    wf = workflow_manifest(record=record, plans=plans, types=task_types(), cluster=CLUSTER)
    found = main(wf, "sweep-w0", last)
    memory = {k: {"memory": v["memory"]} for k, v in found["resources"].items()}
    names = ("SIMRUN_MEMORY_LIMIT_GB", "SIMRUN_AFTER_MEMORY_KILL")
    return {"resources": memory, "env": [e for e in found["env"] if e["name"] in names]}


def test_an_attempt_after_a_kill_for_memory_gets_the_retry_memory() -> None:
    _, plans = run_of(SPLIT_THREE)
    retry_gb = plans["sweep"].retry_memory_gb
    main = patched({"exitCode": "137", "status": "Failed", "message": "main: OOMKilled"})

    memory = f"{-(-round(retry_gb * 1024 * 1000) // 1000)}Mi"
    assert main["resources"] == {"requests": {"memory": memory}, "limits": {"memory": memory}}
    assert main["env"] == [
        {"name": "SIMRUN_MEMORY_LIMIT_GB", "value": f"{retry_gb:g}"},
        {"name": "SIMRUN_AFTER_MEMORY_KILL", "value": "1"},
    ]


def test_an_attempt_after_a_sigkill_gets_the_retry_memory_but_is_no_kill_for_memory() -> None:
    main = patched(
        {"exitCode": "137", "status": "Failed", "message": "main: Error (exit code 137)"}
    )

    assert main["env"][1] == {"name": "SIMRUN_AFTER_MEMORY_KILL", "value": "0"}


@pytest.mark.parametrize("exit_code", ["0", "143", "-1", "75"])
def test_the_first_attempt_and_one_after_an_eviction_keep_the_plans_memory(exit_code: str) -> None:
    _, plans = run_of(SPLIT_THREE)
    main = patched({"exitCode": exit_code, "status": "Failed", "message": ""})

    assert main["env"] == [
        {"name": "SIMRUN_MEMORY_LIMIT_GB", "value": f"{plans['sweep'].memory_gb:g}"},
        {"name": "SIMRUN_AFTER_MEMORY_KILL", "value": "0"},
    ]


def test_expressions_avoid_the_characters_gos_json_encoding_escapes() -> None:
    wf = manifest(SPLIT_ONE)

    for text in (RETRY_EXPRESSION, template(wf, "worker")["podSpecPatch"]):
        assert not set(text) & set("&<>")


def test_names_of_the_longest_task_id_fit_kubernetes_and_argo() -> None:
    wf = manifest(LONG_ID)
    name = re.compile(r"^[a-zA-Z0-9][-a-zA-Z0-9]{0,62}$")

    for t in wf["spec"]["templates"]:
        assert name.match(t["name"]), t["name"]
    for _, _, pod_ in argo_pods(wf):
        for value in pod_["metadata"]["labels"].values():
            assert len(value) <= 63
    for task in dag_tasks(wf):
        assert name.match(task), task


def test_a_dag_past_200_tasks_is_nested_in_parts_each_after_the_parts_its_tasks_read() -> None:
    tasks = {"t0": {"command": ["echo"]}}
    tasks |= {f"t{i}": {"command": ["echo"], "inputs": {"x": f"t{i - 1}"}} for i in range(1, 250)}
    wf = manifest(yaml.safe_dump({"tasks": tasks}))

    entry = dag_tasks(wf)
    assert entry == {
        "Part1": {"name": "Part1", "template": "Part1"},
        "Part2": {"name": "Part2", "template": "Part2", "dependencies": ["Part1"]},
    }
    parts = {
        t["name"]: {d["name"]: d for d in t["dag"]["tasks"]}
        for t in wf["spec"]["templates"]
        if "dag" in t
    }
    assert len(parts["Part1"]) == 200 and len(parts["Part2"]) == 50
    assert parts["Part1"]["t199"]["dependencies"] == ["t198"]
    assert "dependencies" not in parts["Part2"]["t200"], "its part waits for t199's"
    assert parts["Part2"]["t201"]["dependencies"] == ["t200"]
    assert parts["Part2"]["t201"]["template"] == "command"
    assert schema_errors(wf) == []
    assert env(wf, "t230")["SIMRUN_TASK_DIR"] == "/mnt/store/runs/abc123def0/tasks/t230"
