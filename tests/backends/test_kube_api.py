"""The strict stand-in refuses what a real cluster refuses, in the API server's words."""

from __future__ import annotations

import copy
import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
import time_machine
from kubernetes.client import CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from harness.tasktypes import task_types
from runs.backends.argo.manifest import workflow_manifest
from runs.backends.base import ClusterConfig
from tests.backends.argo_pods import argo_pods
from tests.backends.argo_runs import run_of
from tests.backends.argo_workflows import argo_pod
from tests.backends.kube_api import ADMIN_TOKEN, KubeApiServer, matches
from tests.backends.kube_rules import refusals

CLUSTER = ClusterConfig()
SPEC = "tasks: {sweep: {type: squares, settings: {n: 100}, workers: 2}}"


def config_map(name: str = "context", **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, **metadata},
        "data": {"Dockerfile": "FROM x\n"},
    }


def refused(call: Any, *args: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ApiException) as raised:
        call(*args, **kwargs)
    return raised.value.status, json.loads(raised.value.body)


def a_workflow() -> dict[str, Any]:
    record, plans = run_of(SPEC)
    return workflow_manifest(record=record, plans=plans, types=task_types(), cluster=CLUSTER)


def create_workflow(kube: KubeApiServer, body: dict[str, Any]) -> Any:
    return CustomObjectsApi(kube.client("cluster-admin")).create_namespaced_custom_object(
        "argoproj.io", "v1alpha1", "simrun", "workflows", body
    )


def test_a_label_value_that_ends_in_a_dash_is_invalid_with_the_api_servers_status(
    kube: KubeApiServer,
) -> None:
    core = CoreV1Api(kube.client("cluster-admin"))

    code, status = refused(
        core.create_namespaced_config_map, "simrun", config_map(labels={"simrun/task": "sweep-"})
    )

    assert code == 422
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "Invalid", 422)
    assert status["message"].startswith('ConfigMap "context" is invalid: metadata.labels: ')
    assert "must start and end with an alphanumeric character" in status["message"]
    [cause] = status["details"]["causes"]
    assert cause["field"] == "metadata.labels"
    assert kube.state.config_maps == {}


@pytest.mark.parametrize(
    ("metadata", "field", "words"),
    [
        ({"name": "Context"}, "metadata.name", "RFC 1123 subdomain"),
        ({"name": "x" * 254}, "metadata.name", "RFC 1123 subdomain"),
        ({"labels": {"k": "v" * 64}}, "metadata.labels", "no more than 63 characters"),
        ({"labels": {"bad key!": "v"}}, "metadata.labels", "name part must consist"),
        ({"annotations": {"Bad_Prefix/k": "v"}}, "metadata.annotations", "prefix part"),
    ],
)
def test_names_and_labels_follow_kubernetes_rules(
    kube: KubeApiServer, metadata: dict[str, Any], field: str, words: str
) -> None:
    body = config_map(**metadata) if "name" not in metadata else config_map(**metadata)
    if "name" in metadata:
        body["metadata"]["name"] = metadata["name"]

    code, status = refused(
        CoreV1Api(kube.client("cluster-admin")).create_namespaced_config_map, "simrun", body
    )

    assert code == 422
    assert [c["field"] for c in status["details"]["causes"]] == [field]
    assert words in status["message"]


def test_a_misspelt_field_is_refused_by_the_schema_of_the_pinned_version(
    kube: KubeApiServer,
) -> None:
    body = config_map()
    body["datta"] = body.pop("data")
    request = urllib.request.Request(
        f"{kube.url}/api/v1/namespaces/simrun/configmaps",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {ADMIN_TOKEN}"},
        method="POST",
    )

    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=10)  # the client itself refuses to send it

    assert raised.value.code == 422
    assert "datta" in json.loads(raised.value.read())["message"]


def test_a_pod_its_namespace_forbids_is_forbidden_and_baseline_allows_root(
    kube: KubeApiServer,
) -> None:
    core = CoreV1Api(kube.client("cluster-admin"))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "root"},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    }

    code, status = refused(core.create_namespaced_pod, "simrun", copy.deepcopy(pod))

    assert (code, status["reason"]) == (403, "Forbidden")
    assert 'violates PodSecurity "restricted:latest"' in status["message"]
    core.create_namespaced_pod("simrun-build", pod)
    privileged = copy.deepcopy(pod)
    privileged["metadata"]["name"] = "privileged"
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert refused(core.create_namespaced_pod, "simrun-build", privileged)[0] == 403


def test_a_pod_spec_the_api_server_refuses_beyond_the_schema(kube: KubeApiServer) -> None:
    core = CoreV1Api(kube.client("cluster-admin"))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "volumeMounts": [{"name": "nowhere", "mountPath": "/x"}],
                    "resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}},
                },
                {"name": "main", "image": "busybox:1.36"},
            ]
        },
    }

    code, status = refused(core.create_namespaced_pod, "simrun-build", pod)

    assert code == 422
    fields = {c["field"] for c in status["details"]["causes"]}
    assert fields == {
        "spec.containers.name",
        "spec.containers[0].volumeMounts.name",
        "spec.containers[0].resources.requests[memory]",
    }


def test_a_pod_without_containers_is_refused(kube: KubeApiServer) -> None:
    core = CoreV1Api(kube.client("cluster-admin"))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}

    code, status = refused(core.create_namespaced_pod, "simrun-build", pod)

    assert code == 422
    assert [(c["field"], c["message"]) for c in status["details"]["causes"]] == [
        ("spec.containers", "Required value")
    ]


def test_a_workflow_past_the_crds_200_templates_is_refused(kube: KubeApiServer) -> None:
    body = a_workflow()
    [dag, pod, *_] = body["spec"]["templates"]
    body["spec"]["templates"] = [dag] + [{**pod, "name": f"t{i}"} for i in range(200)]

    code, status = refused(create_workflow, kube, body)

    assert code == 422
    assert "spec.templates" in {c["field"] for c in status["details"]["causes"]}


@pytest.mark.parametrize(
    ("argo", "created"), [("v3.7.18", True), ("v4.0.10", False), ("v4.1.2", False)]
)
def test_the_crds_caps_of_200_templates_and_dag_tasks_are_argo_4s_not_37s(
    kube: KubeApiServer, argo: str, created: bool
) -> None:
    """Argo 4.0 added them to its full CRD (with its CEL rules, to bound their cost)."""
    kube.state.argo_version = argo
    body = a_workflow()
    [dag, pod, *_] = body["spec"]["templates"]
    names = [f"t{i}" for i in range(201)]
    arguments = dag["dag"]["tasks"][0]["arguments"]
    dag["dag"]["tasks"] = [{"name": n, "template": n, "arguments": arguments} for n in names]
    body["spec"]["templates"] = [dag] + [{**pod, "name": n} for n in names]

    if created:
        assert create_workflow(kube, body)["metadata"]["name"] == body["metadata"]["name"]
        return
    code, status = refused(create_workflow, kube, body)
    assert code == 422
    fields = {c["field"] for c in status["details"]["causes"]}
    assert {"spec.templates", "spec.templates.0.dag.tasks"} <= fields


def test_an_object_past_etcds_limit_is_a_500_and_a_body_past_the_api_servers_a_413(
    kube: KubeApiServer,
) -> None:
    big = config_map(name="big")
    big["data"] = {"blob": "x" * 1_600_000}
    huge = config_map(name="huge")
    huge["data"] = {"blob": "x" * 3_200_000}
    core = CoreV1Api(kube.client("cluster-admin"))

    code, status = refused(core.create_namespaced_config_map, "simrun-build", big)
    assert (code, status["message"]) == (500, "etcdserver: request is too large")
    code, status = refused(core.create_namespaced_config_map, "simrun-build", huge)
    assert (code, status["reason"]) == (413, "RequestEntityTooLarge")
    assert kube.state.config_maps == {}


def test_events_expire_after_the_api_servers_event_ttl(kube: KubeApiServer) -> None:
    core = CoreV1Api(kube.client("cluster-admin"))
    pod = {"metadata": {"name": "p", "namespace": "simrun", "uid": "u1"}}
    start = time.time()
    with time_machine.travel(start, tick=False) as clock:
        kube.state.record_event(pod, "FailedMount", "secret not found")
        assert len(core.list_namespaced_event("simrun").items) == 1
        clock.shift(kube.state.event_ttl_s + 1)

        assert core.list_namespaced_event("simrun").items == []


def test_an_object_in_a_namespace_that_does_not_exist_is_not_found(kube: KubeApiServer) -> None:
    code, status = refused(
        CoreV1Api(kube.client("cluster-admin")).create_namespaced_config_map,
        "elsewhere",
        config_map(),
    )

    assert (code, status["message"]) == (404, 'namespaces "elsewhere" not found')


def test_a_workflow_is_held_to_argos_crd(kube: KubeApiServer) -> None:
    wf = a_workflow()
    wf["spec"]["templates"][1]["retryStrategie"] = {}

    code, status = refused(create_workflow, kube, wf)

    assert code == 422
    assert "retryStrategie" in status["message"]


def test_the_pods_argo_makes_of_a_workflow_carry_its_labels_patch_and_executor() -> None:
    pods = {(t, a): p for t, a, p in argo_pods(a_workflow())}

    first, retry = pods[("sweep-w0", 0)], pods[("sweep-w0", 1)]
    assert [c["name"] for c in first["spec"]["containers"]] == ["wait", "main"]
    assert [c["name"] for c in first["spec"]["initContainers"]] == ["init"]
    assert first["metadata"]["labels"]["simrun/task"] == "sweep"
    assert first["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "simrun"
    env = {e["name"]: e.get("value") for e in first["spec"]["containers"][1]["env"]}
    assert env["SIMRUN_ATTEMPT"] == "0"
    memory = [c for c in retry["spec"]["containers"] if c["name"] == "main"][0]["resources"]
    first_memory = first["spec"]["containers"][1]["resources"]
    assert memory["limits"]["memory"] != first_memory["limits"]["memory"]
    extra = pods[("sweep-extra(0:1)", 0)]["spec"]["containers"][1]["env"]
    assert {"name": "SIMRUN_WORKER", "value": "sweep-w1"} in extra


def test_a_workflow_whose_pods_would_be_refused_is_refused_naming_its_node_and_attempt(
    kube: KubeApiServer,
) -> None:
    wf = a_workflow()
    template = wf["spec"]["templates"][1]
    patch = template["podSpecPatch"].replace("inputs.parameters.retryMemory ", "'615MB' ", 1)
    template["podSpecPatch"] = patch

    code, status = refused(create_workflow, kube, wf)

    assert code == 422
    assert "spec.templates[worker] (the pod of sweep-w0, attempt 1)" in status["message"]
    assert "quantities must match" in status["message"]


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("unsupplied", "templates.Run.tasks.sweep-w0: inputs.parameters.cores was not supplied"),
        ("undeclared", "templates.worker: failed to resolve {{inputs.parameters.threads}}"),
    ],
)
def test_a_workflow_whose_parameters_argo_cannot_resolve_is_refused(
    kube: KubeApiServer, fault: str, message: str
) -> None:
    wf = a_workflow()
    [dag, template, *_] = wf["spec"]["templates"]
    if fault == "unsupplied":
        parameters = dag["dag"]["tasks"][0]["arguments"]["parameters"]
        parameters[:] = [p for p in parameters if p["name"] != "cores"]
    else:
        template["container"]["env"].append(
            {"name": "THREADS", "value": "{{inputs.parameters.threads}}"}
        )

    code, status = refused(create_workflow, kube, wf)

    assert code == 422
    assert message in status["message"]


def test_a_workflow_whose_pods_pod_security_forbids_is_refused(kube: KubeApiServer) -> None:
    wf = a_workflow()
    wf["spec"]["templates"][1]["container"]["securityContext"] = {"privileged": True}

    code, status = refused(create_workflow, kube, wf)

    assert code == 422
    assert 'violates PodSecurity "restricted:latest": main is privileged' in status["message"]


def test_a_patch_is_held_to_the_rules_and_leaves_the_object_as_it_was(
    kube: KubeApiServer,
) -> None:
    core = CoreV1Api(kube.client("cluster-admin"))
    core.create_namespaced_config_map("simrun", config_map())

    code, _ = refused(
        core.patch_namespaced_config_map,
        "context",
        "simrun",
        {"metadata": {"annotations": {"bad annotation": "x"}}},
    )

    assert code == 422
    assert "annotations" not in kube.state.config_maps[("simrun", "context")]["metadata"]


def test_a_request_without_a_known_token_is_unauthorized(kube: KubeApiServer) -> None:
    request = urllib.request.Request(f"{kube.url}/api/v1/namespaces/simrun/pods")

    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=10)

    assert raised.value.code == 401


def test_a_verb_the_manifests_do_not_grant_is_forbidden_in_the_api_servers_words(
    kube: KubeApiServer,
) -> None:
    web = CustomObjectsApi(kube.client("simrun-web"))

    code, status = refused(
        web.create_namespaced_custom_object,
        "argoproj.io",
        "v1alpha1",
        "simrun",
        "workflows",
        a_workflow(),
    )

    assert (code, status["reason"]) == (403, "Forbidden")
    assert status["message"] == (
        'workflows is forbidden: User "system:serviceaccount:simrun:simrun-web" cannot create '
        'resource "workflows" in API group "argoproj.io" in the namespace "simrun"'
    )
    assert kube.state.workflows == {}


def test_a_grant_of_a_role_holds_in_its_namespace_only(kube: KubeApiServer) -> None:
    worker = CoreV1Api(kube.client("simrun-worker"))

    # Its Role in simrun-build grants deleting the build's ConfigMap: not found, not refused.
    found, _ = refused(worker.delete_namespaced_config_map, "context", "simrun-build")
    code, status = refused(worker.delete_namespaced_config_map, "context", "simrun")

    assert found == 404
    assert code == 403
    assert 'in the namespace "simrun"' in status["message"]


def queued_pod(name: str, cores: str) -> dict[str, Any]:
    """A pod of the runs' queue that Pod Security allows, requesting ``cores``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "simrun"}},
        "spec": {
            "serviceAccountName": "simrun-runner",
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/simrun-env:1",
                    "resources": {"requests": {"cpu": cores, "memory": "1Gi"}},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def test_kueues_webhook_gates_each_pod_with_a_workload_and_its_quota_admits_or_holds(
    kube: KubeApiServer,
) -> None:
    core = CoreV1Api(kube.client("cluster-admin"))

    core.create_namespaced_pod("simrun", queued_pod("first", "30"))
    core.create_namespaced_pod("simrun", queued_pod("second", "4"))

    first, second = kube.state.pods[("simrun", "first")], kube.state.pods[("simrun", "second")]
    assert first["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true"
    assert first["spec"]["schedulingGates"] == []
    assert second["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
    held = kube.state.workloads[("simrun", "pod-second")]
    assert held["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == second["metadata"]["uid"]
    [reserved] = held["status"]["conditions"]
    assert (reserved["type"], reserved["status"]) == ("QuotaReserved", "False")
    assert reserved["message"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
        "simrun-flavor, 2 more needed"
    )

    core.delete_namespaced_pod("first", "simrun")

    assert second["spec"]["schedulingGates"] == []


def test_a_resource_the_cluster_queue_does_not_cover_is_never_admitted(
    kube: KubeApiServer,
) -> None:
    pod = queued_pod("scratchy", "1")
    pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"

    CoreV1Api(kube.client("cluster-admin")).create_namespaced_pod("simrun", pod)

    [reserved] = kube.state.workloads[("simrun", "pod-scratchy")]["status"]["conditions"]
    assert "resource nvidia.com/gpu unavailable in ClusterQueue" in reserved["message"]


def cluster_queue(name: str, version: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": "simrun-flavor", "resources": [{"name": "cpu", "nominalQuota": 4}]}
                    ],
                }
            ],
            **spec,
        },
    }


def test_kueue_objects_are_held_to_kueues_schema_of_the_version_asked(
    kube: KubeApiServer,
) -> None:
    custom = CustomObjectsApi(kube.client("cluster-admin"))
    create = custom.create_cluster_custom_object

    code, status = refused(
        create,
        "kueue.x-k8s.io",
        "v1beta2",
        "clusterqueues",
        cluster_queue("team", "v1beta2", cohort="research"),
    )

    assert code == 422
    assert status["message"].startswith('ClusterQueue "team" is invalid: spec: ')
    assert "'cohort' was unexpected" in status["message"]
    create("kueue.x-k8s.io", "v1beta2", "clusterqueues", cluster_queue("team", "v1beta2"))
    create(
        "kueue.x-k8s.io",
        "v1beta1",
        "clusterqueues",
        cluster_queue("old", "v1beta1", cohort="research"),
    )
    assert set(kube.state.cluster_queues) == {"simrun", "team", "old"}
    code, status = refused(
        custom.create_namespaced_custom_object,
        "kueue.x-k8s.io",
        "v1beta2",
        "simrun",
        "localqueues",
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "q"}},
    )
    assert code == 422
    assert status["details"]["causes"][0]["field"] == "<root>"
    assert "'spec' is a required property" in status["message"]


def test_the_workloads_the_stand_ins_kueue_makes_are_valid(kube: KubeApiServer) -> None:
    CoreV1Api(kube.client("cluster-admin")).create_namespaced_pod("simrun", queued_pod("p", "1"))

    [made] = kube.state.workloads.values()
    assert made["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert refusals(made) == []
    made["spec"]["podSets"] = []
    assert [c.field for c in refusals(made)] == ["spec.podSets"]


def test_a_pod_whose_claim_its_namespace_lacks_is_unschedulable_with_the_schedulers_event(
    kube: KubeApiServer,
) -> None:
    pod = queued_pod("mounted", "1")
    pod["spec"]["volumes"] = [
        {"name": "store", "persistentVolumeClaim": {"claimName": "simrun-store"}}
    ]
    kube.state.claims.discard(("simrun", "simrun-store"))

    CoreV1Api(kube.client("cluster-admin")).create_namespaced_pod("simrun", pod)

    made = kube.state.pods[("simrun", "mounted")]
    [scheduled] = made["status"]["conditions"]
    message = '0/3 nodes are available: persistentvolumeclaim "simrun-store" not found.'
    assert (scheduled["status"], scheduled["reason"], scheduled["message"]) == (
        "False",
        "Unschedulable",
        message,
    )
    [event] = kube.state.events
    assert (event["reason"], event["message"], event["source"]) == (
        "FailedScheduling",
        message,
        {"component": "default-scheduler"},
    )


def test_a_pod_of_a_service_account_its_namespace_lacks_is_forbidden(kube: KubeApiServer) -> None:
    pod = queued_pod("nobody", "1")
    pod["spec"]["serviceAccountName"] = "simrun-worker-typo"

    code, status = refused(
        CoreV1Api(kube.client("cluster-admin")).create_namespaced_pod, "simrun", pod
    )

    assert code == 403
    assert status["message"] == (
        'pods "nobody" is forbidden: error looking up service account '
        'simrun/simrun-worker-typo: serviceaccount "simrun-worker-typo" not found'
    )
    assert ("simrun", "nobody") not in kube.state.pods


def test_a_kueue_that_serves_v1beta1_only_answers_404_for_v1beta2(kube: KubeApiServer) -> None:
    kube.state.kueue_versions = ["v1beta1"]
    custom = CustomObjectsApi(kube.client("cluster-admin"))

    code, _ = refused(
        custom.list_namespaced_custom_object, "kueue.x-k8s.io", "v1beta2", "simrun", "workloads"
    )

    assert code == 404
    listing = custom.list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta1", "simrun", "workloads"
    )
    assert listing["apiVersion"] == "kueue.x-k8s.io/v1beta1"


def test_lists_come_in_pages_and_a_token_from_before_a_compaction_is_gone(
    kube: KubeApiServer,
) -> None:
    core = CoreV1Api(kube.client("cluster-admin"))
    for index in range(5):
        core.create_namespaced_config_map("simrun", config_map(f"c{index}"))

    first = core.list_namespaced_config_map("simrun", limit=2)
    second = core.list_namespaced_config_map("simrun", limit=2, _continue=first.metadata._continue)

    assert [c.metadata.name for c in first.items + second.items] == ["c0", "c1", "c2", "c3"]
    assert second.metadata.remaining_item_count == 1
    kube.state.compact()
    code, status = refused(
        core.list_namespaced_config_map, "simrun", limit=2, _continue=second.metadata._continue
    )
    assert (code, status["reason"]) == (410, "Expired")


def test_the_pages_of_a_list_are_cut_from_the_list_at_its_version(kube: KubeApiServer) -> None:
    """As etcd reads a continued list at the version of its first page: an object created
    or deleted meanwhile neither shifts the pages nor shows in them."""
    core = CoreV1Api(kube.client("cluster-admin"))
    for index in range(5):
        core.create_namespaced_config_map("simrun", config_map(f"c{index}"))

    first = core.list_namespaced_config_map("simrun", limit=2)
    core.delete_namespaced_config_map("c0", "simrun")
    core.create_namespaced_config_map("simrun", config_map("c9"))
    rest = core.list_namespaced_config_map("simrun", _continue=first.metadata._continue)

    assert [c.metadata.name for c in first.items + rest.items] == ["c0", "c1", "c2", "c3", "c4"]
    assert rest.metadata.resource_version == first.metadata.resource_version


def raw_watch(kube: KubeApiServer, query: str, path: str = "") -> list[dict[str, Any]]:
    """The events of a watch (of workflows unless ``path`` says), read until the server ends it."""
    path = path or "/apis/argoproj.io/v1alpha1/namespaces/simrun/workflows"
    request = urllib.request.Request(
        f"{kube.url}{path}?watch=true&{query}",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )
    with urllib.request.urlopen(request, timeout=20) as answer:
        return [json.loads(line) for line in answer.read().splitlines() if line]


def test_a_watch_from_a_compacted_version_ends_with_the_in_stream_410(kube: KubeApiServer) -> None:
    old = kube.state.version()
    kube.state.compact()

    [event] = raw_watch(kube, f"resourceVersion={old}&timeoutSeconds=5")

    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410
    assert event["object"]["message"].startswith(f"too old resource version: {old}")


def test_a_watch_that_asks_for_bookmarks_gets_them_when_nothing_changes(
    kube: KubeApiServer,
) -> None:
    kube.state.bookmark_s = 0.2
    version = kube.state.version()

    events = raw_watch(kube, f"resourceVersion={version}&timeoutSeconds=1&allowWatchBookmarks=true")

    assert events and {e["type"] for e in events} == {"BOOKMARK"}
    assert int(events[-1]["object"]["metadata"]["resourceVersion"]) >= int(version)
    assert raw_watch(kube, f"resourceVersion={version}&timeoutSeconds=1") == []


def test_a_field_selector_picks_the_events_of_one_pod(kube: KubeApiServer) -> None:
    for name in ("a", "b"):
        kube.state.record_event({"metadata": {"name": name, "namespace": "simrun"}}, "X", name)

    listing = CoreV1Api(kube.client("cluster-admin")).list_namespaced_event(
        "simrun", field_selector="involvedObject.name=b"
    )

    assert [e.message for e in listing.items] == ["b"]


def test_a_label_selector_term_with_a_bang_picks_the_objects_without_the_label() -> None:
    labels = {"simrun/run": "r1", "workflows.argoproj.io/controller-instanceid": "a"}

    assert matches(labels, "simrun/run,workflows.argoproj.io/controller-instanceid=a")
    assert not matches(labels, "simrun/run,!workflows.argoproj.io/controller-instanceid")
    assert matches({"simrun/run": "r1"}, "simrun/run,!workflows.argoproj.io/controller-instanceid")


def test_every_write_of_a_pod_is_an_event_of_a_watch_of_pods(kube: KubeApiServer) -> None:
    """A pod created, changed in place (as the stand-in's kubelet and Kueue write, or a test) and
    deleted: ADDED, MODIFIED with a new resourceVersion, DELETED, as the API server tells."""
    made = argo_pod("p-a", node_name="sweep-w0(0)", phase="Pending")
    kube.state.put_pod(made)
    since = kube.state.pods_version
    made["status"]["phase"] = "Running"  # in place
    kube.state.pod_events()
    del kube.state.pods[("simrun", "p-a")]

    events = raw_watch(kube, "timeoutSeconds=1", "/api/v1/namespaces/simrun/pods")
    missed = raw_watch(
        kube, f"resourceVersion={since}&timeoutSeconds=1", "/api/v1/namespaces/simrun/pods"
    )

    assert events == []  # the pod is gone: nothing to add, nothing since
    assert [e["type"] for e in missed] == ["MODIFIED", "DELETED"]
    changed = missed[0]["object"]
    assert changed["status"]["phase"] == "Running"
    assert int(changed["metadata"]["resourceVersion"]) > since
