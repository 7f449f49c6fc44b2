"""The deployment: Kubernetes manifests valid and consistent, RBAC exactly what the backend
uses, Dockerfiles that lint clean, a compose file for one host."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from harness.tasktypes import task_types
from runs.backends.argo.backend import ArgoBackend
from runs.backends.argo.build import build_pod
from runs.backends.argo.versions import EXECUTOR_REQUESTS
from runs.backends.base import ClusterConfig
from tests.backends import kube_policies, kube_rbac
from tests.backends.argo_pod_security import restricted_violations
from tests.backends.argo_pods import EXECUTOR_RESOURCES
from tests.backends.argo_runs import build_context, run_of
from tests.backends.argo_workflows import SIGTERM, WF, Nodes, argo_pod, kube_node, pod, workflow
from tests.backends.kube_api import KubeApiServer
from tests.backends.kube_rbac import Grant
from tests.backends.kube_rules import refusals
from tests.polling import wait_for

DOCKER = Path(__file__).resolve().parents[2] / "docker"
MANIFESTS = sorted((DOCKER / "k8s").glob("*.yaml"))
HADOLINT = Path(sys.executable).parent / "hadolint"
KUEUE = "kueue.x-k8s.io/v1beta2"


def documents() -> list[dict[str, Any]]:
    return [d for path in MANIFESTS for d in yaml.safe_load_all(path.read_text()) if d]


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in documents() if d["kind"] == kind]


def config() -> dict[str, str]:
    [config_map] = by_kind("ConfigMap")
    data: dict[str, str] = config_map["data"]
    return data


def test_there_are_manifests_for_the_service_next_to_argo_and_kueue() -> None:
    kinds = {d["kind"] for d in documents()}

    assert {
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "PersistentVolumeClaim",
        "ConfigMap",
        "Deployment",
        "Service",
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
    } <= kinds
    assert {d["metadata"]["name"] for d in by_kind("Deployment")} >= {
        "simrun-web",
        "simrun-worker",
        "simrun-beat",
    }


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_kubernetes_object_validates_strictly(path: Path) -> None:
    version = kubernetes_validate.latest_version()
    for document in yaml.safe_load_all(path.read_text()):
        if document["apiVersion"] == KUEUE:
            # Kueue's own kinds against Kueue's CRD of that version, as the API server holds them.
            assert refusals(document) == [], document["metadata"]["name"]
            continue
        kubernetes_validate.validate(document, version, strict=True)


@pytest.mark.parametrize(
    ("kind", "change", "field"),
    [
        ("ClusterQueue", {"cohort": "team"}, "spec"),  # v1beta1's name of cohortName
        ("ClusterQueue", {"queueingStrategy": "FIFO"}, "spec.queueingStrategy"),
        ("LocalQueue", {"clusterQueue": "Simrun"}, "spec.clusterQueue"),
        ("ResourceFlavor", {"nodeLabel": {"pool": "sims"}}, "spec"),
    ],
)
def test_kueues_rules_refuse_a_kueue_object_of_docker_k8s_changed(
    kind: str, change: dict[str, Any], field: str
) -> None:
    [document] = by_kind(kind)
    document.setdefault("spec", {}).update(change)

    assert [c.field for c in refusals(document)] == [field]


def test_the_strict_validation_refuses_a_misspelt_field() -> None:
    [deployment] = [d for d in by_kind("Deployment") if d["metadata"]["name"] == "simrun-web"]
    deployment["spec"]["template"]["spec"]["containers"][0]["imagee"] = "x"

    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, kubernetes_validate.latest_version(), strict=True)


def test_kueues_objects_form_one_queue_for_simruns_pods() -> None:
    [flavor] = by_kind("ResourceFlavor")
    [cluster_queue] = by_kind("ClusterQueue")
    [local_queue] = by_kind("LocalQueue")

    assert {flavor["apiVersion"], cluster_queue["apiVersion"], local_queue["apiVersion"]} == {KUEUE}
    assert local_queue["metadata"] == {
        "name": config()["SIMRUN_KUEUE_QUEUE"],
        "namespace": "simrun",
    }
    assert local_queue["spec"] == {"clusterQueue": cluster_queue["metadata"]["name"]}
    [group] = cluster_queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "ephemeral-storage"]
    [flavor_quota] = group["flavors"]
    assert flavor_quota["name"] == flavor["metadata"]["name"]
    assert [r["name"] for r in flavor_quota["resources"]] == group["coveredResources"]
    assert cluster_queue["spec"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "simrun"}
    }


def test_the_configuration_names_the_objects_the_manifests_create() -> None:
    settings = config()
    names = {(d["kind"], d["metadata"]["name"]) for d in documents()}

    assert settings["SIMRUN_BACKEND"] == "argo"
    assert ("PersistentVolumeClaim", settings["SIMRUN_STORE_CLAIM"]) in names
    assert ("ServiceAccount", settings["SIMRUN_K8S_SERVICE_ACCOUNT"]) in names
    assert ("Namespace", settings["SIMRUN_K8S_NAMESPACE"]) in names
    assert settings["SIMRUN_STORE"] == settings["SIMRUN_STORE_MOUNT"]
    [claim] = by_kind("PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    for deployment in by_kind("Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        if deployment["metadata"]["name"].startswith("simrun-"):
            mounts = {
                m["mountPath"]
                for c in spec.get("containers", [])
                for m in c.get("volumeMounts", [])
            }
            if "store" in {v["name"] for v in spec.get("volumes", [])}:
                assert settings["SIMRUN_STORE"] in mounts


def test_the_service_runs_as_a_user_not_root() -> None:
    for deployment in by_kind("Deployment") + by_kind("StatefulSet"):
        spec = deployment["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        for container in spec["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False


def granted(service_account: str) -> set[Grant]:
    """What the manifests' RBAC grants a ServiceAccount of the namespace simrun."""
    return kube_rbac.grants(documents(), service_account, "simrun")


def used(request: Any) -> Grant | None:
    """The grant an API request needs, as the API server authorizes it."""
    return kube_rbac.needed(request.method, request.path, request.query)


def backend_on(kube: KubeApiServer, tmp_path: Path, component: str) -> ArgoBackend:
    """The backend as the manifests configure it, on a loopback API with a node, a pod that
    failed (so a status reads the pods), one Kueue holds back and one that never started (so
    a status reads its events), its ClusterQueue in a cohort (so the quota reads its tree)."""
    state = kube.state
    state.cluster_queues["simrun"]["spec"]["cohortName"] = "lab"
    state.put_node(
        {
            "metadata": {"name": "node-a", "labels": {"simrun.io/pool": "sims"}},
            "spec": {},
            "status": {},
        }
    )
    state.on_pod_created = lambda pod: pod.update(status={"phase": "Succeeded"})
    state.put_pod(argo_pod("p", node_name="sweep-w0(0)", phase="Running"), log="unit 1\n")
    gated = argo_pod("q", node_name="sweep-w0(1)", phase="Pending", attempt=1)
    gated["metadata"]["uid"] = "uid-q"
    gated["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    state.put_pod(gated)
    mounting = argo_pod("r", node_name="sweep-w1(0)", phase="Pending", dag_task="sweep-w1")
    mounting["status"] = {  # scheduled long ago, its volume never mounted: its events are read
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-29T10:00:00Z"}
        ],
        "containerStatuses": [
            {
                "name": "main",
                "ready": False,
                "restartCount": 0,
                "image": "",
                "imageID": "",
                "state": {"waiting": {"reason": "ContainerCreating"}},
            }
        ],
    }
    state.put_pod(mounting)
    cluster = ClusterConfig(build_namespace=config()["SIMRUN_BUILD_NAMESPACE"])
    api = kube.client(f"simrun-{component}")
    return ArgoBackend(cluster=cluster, api=api, store=tmp_path, build_poll_s=0.01)


def web_calls(backend: ArgoBackend) -> None:
    """What the web process asks of the cluster: the nodes page (runs.reads.capacity), the logs of
    a live task (runs.reads.task_logs), the largest node and the queue's quota for one pod when
    a run is planned (runs.planning.submission)."""
    backend.nodes()
    backend.placements()
    backend.logs(WF, "sweep")
    assert backend.max_cores == 31  # node-a has no allocatable: the quota's 32 beside Argo's


def worker_calls(backend: ArgoBackend, state: Any, tmp_path: Path) -> None:
    """What the Celery worker asks of the cluster: a submission (runs.control.submitting.submit),
    the loop (status, logs, stop), settling (cancel, release) and the watch (runs.tasks)."""
    woken = threading.Event()
    try:
        with pytest.raises(KeyError):  # one the watch has not seen is read by a GET
            backend.status(WF)
        backend.subscribe(woken.set)
        wait_for(lambda: any(r.query.get("watch") for r in state.requests), 10, "the watch")
        backend.build_image(build_context(tmp_path / "images" / "h"), "registry.example/env:h")
        state.on_pod_created = lambda pod: pod.update(status={"phase": "Failed"})
        with pytest.raises(RuntimeError, match="failed"):  # its log is read
            backend.build_image(build_context(tmp_path / "images" / "i"), "registry.example/e:i")
        backend.nodes()
        backend.reserve("node-a", "run1")
        record, plans = run_of("tasks: {sweep: {type: squares, settings: {n: 5}}}")
        backend.submit(record, plans, task_types(), ClusterConfig())
        assert woken.wait(10)
        nodes = Nodes()
        nodes.task("sweep-w0", "Running", [pod("Failed", message=SIGTERM), pod("Pending")])
        state.put_workflow(workflow(nodes))
        version = state.workflows[("simrun", WF)]["metadata"]["resourceVersion"]
        wait_for(lambda: backend.versions([WF]).get(WF) == version, 10, "the watch saw it")
        backend.status(WF)
        wait_for(
            lambda: any(
                r.path.endswith("/workloads") and r.query.get("watch") for r in state.requests
            ),
            10,
            "the watch of the pods' Workloads",
        )
        backend.logs(WF, "sweep")
        backend.placements()
        backend.stop(WF)
        backend.cancel(WF)
        backend.unreserve("node-a", "run1")
    finally:
        backend.close()


@pytest.mark.parametrize("component", ["web", "worker"])
def test_each_component_is_granted_exactly_the_verbs_of_the_calls_it_makes(
    tmp_path: Path, component: str
) -> None:
    with KubeApiServer() as kube:
        backend = backend_on(kube, tmp_path, component)
        if component == "web":
            web_calls(backend)
        else:
            worker_calls(backend, kube.state, tmp_path)

    assert granted(f"simrun-{component}") == {used(r) for r in kube.state.requests} - {None}
    assert not {r.status for r in kube.state.requests} & {401, 403}, "none refused"


def test_every_pod_that_mounts_the_store_is_not_re_owned_at_every_start() -> None:
    pods = [
        d["spec"]["template"]["spec"]
        for d in by_kind("Deployment")
        if any(
            (v.get("persistentVolumeClaim") or {}).get("claimName") == "simrun-store"
            for v in d["spec"]["template"]["spec"].get("volumes") or []
        )
    ]

    assert len(pods) >= 2
    for spec in pods:
        assert spec["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"


def test_beat_calls_nothing_and_gets_no_token() -> None:
    [account] = [a for a in by_kind("ServiceAccount") if a["metadata"]["name"] == "simrun-beat"]
    [beat] = [d for d in by_kind("Deployment") if d["metadata"]["name"] == "simrun-beat"]

    assert granted("simrun-beat") == set()
    assert account["automountServiceAccountToken"] is False
    assert beat["spec"]["template"]["spec"]["serviceAccountName"] == "simrun-beat"


def test_each_deployment_runs_as_its_own_service_account() -> None:
    accounts = {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]["serviceAccountName"]
        for d in by_kind("Deployment")
        if d["metadata"]["name"] in {"simrun-web", "simrun-worker", "simrun-beat"}
    }

    assert accounts == {f"simrun-{c}": f"simrun-{c}" for c in ("web", "worker", "beat")}


def test_the_pods_of_the_runs_may_report_their_results_to_argo_and_nothing_more() -> None:
    assert granted("simrun-runner") == {
        ("simrun", "argoproj.io", "workflowtaskresults", "create"),
        ("simrun", "argoproj.io", "workflowtaskresults", "patch"),
    }


# Pod Security


def namespace(name: str) -> dict[str, Any]:
    [found] = [n for n in by_kind("Namespace") if n["metadata"]["name"] == name]
    return found


def test_the_runs_namespace_enforces_the_restricted_pod_security() -> None:
    labels = namespace("simrun")["metadata"]["labels"]

    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels["pod-security.kubernetes.io/enforce-version"] == "latest"
    assert labels["managed-by-kueue"] == "true"


@pytest.mark.parametrize(
    "name", ["simrun-web", "simrun-worker", "simrun-beat", "simrun-redis", "simrun-postgres"]
)
def test_every_pod_of_the_service_satisfies_the_restricted_pod_security(name: str) -> None:
    [workload] = [
        d for d in by_kind("Deployment") + by_kind("StatefulSet") if d["metadata"]["name"] == name
    ]

    assert restricted_violations(workload["spec"]["template"]["spec"]) == []


def test_the_checker_refuses_what_restricted_refuses() -> None:
    build = build_pod(ref="registry.example/env:h", cluster=ClusterConfig())["spec"]

    assert "main may run as root (runAsNonRoot)" in restricted_violations(build)
    assert restricted_violations({"containers": [], "volumes": [{"name": "h", "hostPath": {}}]})


def test_image_builds_run_as_root_in_a_namespace_of_their_own_that_allows_it() -> None:
    labels = namespace(config()["SIMRUN_BUILD_NAMESPACE"])["metadata"]["labels"]

    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert "managed-by-kueue" not in labels


@pytest.mark.parametrize("name", ["service.Dockerfile", "harness.Dockerfile"])
def test_the_dockerfiles_lint_clean(name: str) -> None:
    done = subprocess.run(
        [str(HADOLINT), "--no-color", str(DOCKER / name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert (done.returncode, done.stdout) == (0, "")


def test_hadolint_finds_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\n")

    done = subprocess.run([str(HADOLINT), str(bad)], capture_output=True, text=True, check=False)

    assert done.returncode != 0
    assert "DL3007" in done.stdout


@pytest.mark.parametrize("name", ["service.Dockerfile", "harness.Dockerfile"])
def test_the_images_are_pinned_and_run_as_a_user(name: str) -> None:
    lines = (DOCKER / name).read_text().splitlines()

    assert [line for line in lines if line.startswith("FROM ")] == [
        "FROM python:3.11.11-slim-bookworm"
    ]
    assert "USER 1000:1000" in lines


def test_the_compose_file_runs_web_worker_beat_postgres_and_redis() -> None:
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = compose["services"]

    assert set(services) == {"web", "worker", "learner", "beat", "steps", "postgres", "redis"}
    for name in ("web", "worker", "learner", "beat"):
        assert services[name]["build"]["dockerfile"] == "docker/service.Dockerfile"
        assert services[name]["environment"]["CELERY_BROKER_URL"] == "redis://redis:6379/0"
        assert "postgres:5432/simrun" in services[name]["environment"]["DATABASE_URL"]
    assert services["worker"]["command"][:4] == ["celery", "--app", "simrun_site", "worker"]
    assert services["beat"]["command"][:4] == ["celery", "--app", "simrun_site", "beat"]
    assert "migrate" in " ".join(services["web"]["command"])
    for name in ("postgres", "redis"):
        assert ":" in services[name]["image"] and not services[name]["image"].endswith(":latest")


def test_the_builder_is_the_maintained_fork_of_kaniko_pinned_to_a_release() -> None:
    image = ClusterConfig().builder_image

    assert not image.startswith("gcr.io/kaniko-project/"), "Google archived it in 2025"
    assert image.startswith("ghcr.io/osscontainertools/kaniko:v")
    assert (
        build_pod(ref="registry.example/env:h", cluster=ClusterConfig())["spec"]["containers"][0][
            "image"
        ]
        == image
    )


@pytest.mark.parametrize(
    ("patch", "allowed"),
    [
        ({"metadata": {"labels": {"simrun/reserved": "run1"}}}, True),
        (
            {"spec": {"taints": [{"key": "simrun/reserved", "value": "r", "effect": "NoExecute"}]}},
            True,
        ),
        ({"metadata": {"labels": {"team": "b"}}}, False),
        ({"metadata": {"labels": {"kubernetes.io/hostname": None}}}, False),
        ({"spec": {"taints": [{"key": "gpu", "value": "x", "effect": "NoSchedule"}]}}, False),
        ({"spec": {"unschedulable": True}}, False),
        (
            {"metadata": {"annotations": {"cluster-autoscaler.kubernetes.io/scale-down": "x"}}},
            False,
        ),
    ],
)
def test_the_worker_may_change_a_nodes_reservation_and_nothing_else_of_it(
    patch: dict[str, Any], allowed: bool
) -> None:
    with KubeApiServer() as kube:
        kube.state.put_node(kube_node("node-a", labels={"simrun.io/pool": "sims"}))
        worker = CoreV1Api(kube.client("simrun-worker"))
        if allowed:
            worker.patch_node("node-a", patch)
            return
        with pytest.raises(ApiException) as raised:
            worker.patch_node("node-a", patch)
        CoreV1Api(kube.client("cluster-admin")).patch_node("node-a", patch)  # an operator may

    assert raised.value.status == 422
    assert "ValidatingAdmissionPolicy 'simrun-worker-reserves-only'" in raised.value.body


def test_the_executor_requests_simrun_counts_are_the_ones_the_docs_configure() -> None:
    """docs/cluster.md gives Argo's executor its requests; the quota check counts them, and the
    stand-in's Argo makes its wait container with them."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "cluster.md").read_text()
    block = text.split("```yaml\nexecutor: |\n", 1)[1].split("```", 1)[0]
    executor = yaml.safe_load(textwrap.dedent(block))

    assert executor["resources"] == EXECUTOR_RESOURCES
    assert {k: parse_quantity(v) for k, v in EXECUTOR_RESOURCES["requests"].items()} == (
        EXECUTOR_REQUESTS
    )


@pytest.mark.parametrize(
    "labels",
    [{}, {"simrun.io/pool": "sims", "node-role.kubernetes.io/control-plane": ""}],
    ids=["unmarked", "control-plane"],
)
def test_the_worker_may_reserve_no_node_but_those_marked_for_simrun(
    labels: dict[str, str],
) -> None:
    with KubeApiServer() as kube:
        kube.state.put_node(kube_node("node-a", labels=labels))
        worker = CoreV1Api(kube.client("simrun-worker"))
        taint = {"key": "simrun/reserved", "value": "r", "effect": "NoSchedule"}
        with pytest.raises(ApiException) as refused:
            worker.patch_node("node-a", {"spec": {"taints": [taint]}})

    assert refused.value.status == 422
    assert "may reserve only a node labelled simrun.io/pool" in refused.value.body
    assert "taints" not in kube.state.nodes["node-a"]["spec"]


@pytest.mark.parametrize("namespace", ["simrun", "sims-prod"])
def test_the_node_policy_holds_the_worker_of_any_namespace_the_service_runs_in(
    namespace: str,
) -> None:
    """SIMRUN_K8S_NAMESPACE may name another namespace: its simrun-worker is held all the same."""
    node = kube_node("node-a", labels={"simrun.io/pool": "sims"})
    changed = {**node, "metadata": {**node["metadata"], "labels": {"team": "b"}}}

    def denied(username: str) -> list[str]:
        return kube_policies.denials(
            kube_policies.policies(documents()),
            resource=("", "v1", "nodes"),
            operation="UPDATE",
            obj=changed,
            old=node,
            username=username,
        )

    assert denied(f"system:serviceaccount:{namespace}:simrun-worker") == [
        "ValidatingAdmissionPolicy 'simrun-worker-reserves-only' with binding "
        "'simrun-worker-reserves-only' denied request: simrun-worker may change no label of a "
        "node but simrun/reserved"
    ]
    assert denied(f"system:serviceaccount:{namespace}:node-admin") == []
