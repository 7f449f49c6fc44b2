"""The Argo backend's calls when the Kubernetes API stalls, fails for a while or refuses:
timeouts, retries with backoff, a build joined, errors in one sentence."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException

from harness.tasktypes import task_types
from runs.backends.argo.api import CallPolicy, ClusterApiError, ClusterUnavailable
from runs.backends.argo.backend import ArgoBackend
from runs.backends.argo.build import build_pod_name
from runs.backends.base import BackendUnavailable, ClusterConfig
from tests.backends.argo_runs import build_context, run_of
from tests.backends.argo_workflows import WF, Nodes, argo_pod, workflow
from tests.backends.kube_api import STALL, KubeApiServer, Request

CLUSTER = ClusterConfig(namespace="simrun", queue="simrun")
QUICK = CallPolicy(connect_timeout_s=1.0, read_timeout_s=0.5, tries=3, backoff_s=0.01)
REF = "registry.example/simrun-env:abc"


@pytest.fixture
def backend(kube: KubeApiServer, tmp_path: Path) -> ArgoBackend:
    return ArgoBackend(
        cluster=CLUSTER, api=kube.client(), store=tmp_path, build_poll_s=0.01, calls=QUICK
    )


def fail_first(kube: KubeApiServer, code: int, times: int, path_end: str = "") -> None:
    """Answer the first ``times`` requests (whose path ends so) with ``code``."""
    left = [times]

    def intercept(request: Request) -> int | None:
        if left[0] and request.path.endswith(path_end):
            left[0] -= 1
            return code
        return None

    kube.state.intercept = intercept


def assert_one_sentence(error: BaseException) -> None:
    text = str(error)
    assert "\n" not in text
    assert "HTTP response headers" not in text and "Reason:" not in text


def test_a_stalled_api_is_given_up_after_the_read_timeout_of_every_try(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_workflow(workflow(Nodes()), "ADDED")
    kube.state.intercept = lambda request: STALL

    with pytest.raises(ClusterUnavailable) as raised:
        backend.status(WF)

    assert len(kube.state.requests) == QUICK.silent_tries  # a request a try, none hidden
    assert isinstance(raised.value, BackendUnavailable)  # the controller tries again soon
    assert str(raised.value) == (
        f"the Kubernetes API did not answer get workflow {WF} after 2 tries: timed out"
    )


def test_after_a_call_got_no_answer_the_next_ones_fail_at_once_for_a_while(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_workflow(workflow(Nodes()), "ADDED")
    kube.state.intercept = lambda request: STALL
    with pytest.raises(ClusterUnavailable):
        backend.status(WF)
    asked = len(kube.state.requests)

    for _ in range(20):  # a reconcile over twenty runs
        with pytest.raises(ClusterUnavailable, match=f"did not answer get workflow {WF}"):
            backend.status(WF)

    assert len(kube.state.requests) == asked, "not asked while it is silent: no timeout waited"
    kube.state.intercept = None
    backend.clients.core._silence.until = 0  # type: ignore[attr-defined]  # the quiet time is over
    assert backend.status(WF).phase == "Running"


def test_a_stalled_pod_log_read_does_not_freeze_the_caller(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.put_pod(argo_pod("p", node_name="sweep-w0(0)", phase="Succeeded"), log="x\n")
    kube.state.intercept = lambda request: STALL if request.path.endswith("/log") else None

    with pytest.raises(ClusterUnavailable, match="read pod log p"):
        backend.logs(WF, "sweep")


@pytest.mark.parametrize("code", [500, 503, 429])
def test_transient_answers_are_tried_again_until_one_goes_through(
    backend: ArgoBackend, kube: KubeApiServer, code: int
) -> None:
    kube.state.put_workflow(workflow(Nodes()), "ADDED")
    fail_first(kube, code, times=2)

    assert backend.status(WF).phase == "Running"
    assert [r.status for r in kube.state.requests] == [code, code, 200]


def test_a_submission_the_api_keeps_failing_ends_in_one_sentence_with_its_status(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    kube.state.intercept = lambda request: 500 if request.method == "POST" else None
    record, plans = run_of("tasks: {sweep: {type: squares, settings: {n: 5}}}")

    with pytest.raises(ApiException) as raised:
        backend.submit(record, plans, task_types(), CLUSTER)

    assert raised.value.status == 500
    assert isinstance(raised.value, ClusterUnavailable)
    assert str(raised.value) == (
        "the Kubernetes API answered 500 to create workflow: InternalError played by the test"
    )
    assert len([r for r in kube.state.requests if r.method == "POST"]) == QUICK.tries
    assert_one_sentence(raised.value)


def test_an_error_that_is_no_hiccup_is_not_tried_again(
    backend: ArgoBackend, kube: KubeApiServer
) -> None:
    with pytest.raises(KeyError):
        backend.status(WF)

    assert [r.status for r in kube.state.requests] == [404]


def test_a_refused_connection_is_one_sentence(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    api = ApiClient(Configuration(host=f"http://127.0.0.1:{port}"))
    backend = ArgoBackend(cluster=CLUSTER, api=api, store=tmp_path, calls=QUICK)

    with pytest.raises(ClusterUnavailable) as raised:
        backend.nodes()

    assert str(raised.value).startswith("the Kubernetes API did not answer list node after 2 tries")
    assert_one_sentence(raised.value)


def test_a_build_another_submission_started_meanwhile_is_joined_not_failed(
    backend: ArgoBackend, kube: KubeApiServer, tmp_path: Path
) -> None:
    name = build_pod_name(REF)

    def other_submission_first(request: Request) -> int | None:
        if request.method != "POST" or not request.path.endswith("/pods"):
            return None
        # Between this submission's read (not found) and its create, another one created it.
        other = argo_pod(name, node_name="", phase="Succeeded")
        other["metadata"]["namespace"] = "simrun-build"
        kube.state.put_pod(other)
        return 409

    kube.state.intercept = other_submission_first

    backend.build_image(build_context(tmp_path / "images" / "abc"), REF)

    posts = [
        r.status for r in kube.state.requests if r.method == "POST" and r.path.endswith("/pods")
    ]
    assert posts == [409]
    key = ("simrun-build", name)
    assert key not in kube.state.pods  # the joined build was waited for, then done
    assert key not in kube.state.config_maps


def test_the_backoff_doubles_and_is_capped() -> None:
    policy = CallPolicy(backoff_s=0.5, backoff_cap_s=3.0)

    assert [policy.wait_s(n) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_a_backoff_really_waits_between_tries(kube: KubeApiServer, tmp_path: Path) -> None:
    policy = CallPolicy(tries=3, backoff_s=0.05)
    backend = ArgoBackend(cluster=CLUSTER, api=kube.client(), store=tmp_path, calls=policy)
    kube.state.put_workflow(workflow(Nodes()), "ADDED")
    fail_first(kube, 503, times=2)
    stamps: list[float] = []
    original = kube.state.intercept
    assert original is not None

    def stamp(request: Request) -> int | None:
        stamps.append(time.monotonic())
        return original(request)

    kube.state.intercept = stamp

    backend.status(WF)

    waits = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert waits[0] >= 0.05 and waits[1] >= 0.1


def test_a_failure_of_the_client_itself_is_one_sentence_too() -> None:
    error = ClusterApiError(ApiException(status=0, reason="SSLError\nbad certificate"), "list pod")

    assert str(error) == (
        "the Kubernetes API could not be asked to list pod: SSLError bad certificate"
    )


def test_a_429_is_tried_again_after_the_retry_after_the_api_server_asked(
    kube: KubeApiServer,
) -> None:
    from kubernetes.client import CoreV1Api

    from runs.backends.argo.api import Resilient, without_pool_retries

    kube.state.retry_after_s = 3
    fail_first(kube, 429, 1, "/nodes")
    sleeps: list[float] = []
    core = Resilient(CoreV1Api(without_pool_retries(kube.client())), QUICK, sleep=sleeps.append)

    core.list_node()

    assert sleeps == [3.0], "the server's Retry-After, not the 0.01 s backoff"
    assert [r.status for r in kube.state.requests] == [429, 200]


def test_the_calls_of_a_backend_keep_to_a_rate_beyond_their_burst() -> None:
    from runs.backends.argo.api import RateLimit

    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    rate = RateLimit(CallPolicy(rate_per_s=10.0, burst=5), clock=lambda: now[0], sleep=sleep)
    for _ in range(8):
        rate.take()

    assert sleeps == pytest.approx([0.1, 0.1, 0.1]), "five at once, then ten a second"
