"""The clients of the Kubernetes API one backend shares among its parts.

Every call has a timeout, is tried again on transient errors and takes its turn in one rate
limit (``api.Resilient``, ``api.RateLimit``); the
``*_once`` clients try once, quickly, for what a web request asks (a cluster that is away
must not hold a page); the watches alone call the client themselves.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, cast

from kubernetes import config
from kubernetes.client import (
    ApiClient,
    ApisApi,
    AppsV1Api,
    Configuration,
    CoreV1Api,
    CustomObjectsApi,
)
from kubernetes.client.exceptions import ApiException

from runs.backends.argo.api import CallPolicy, RateLimit, Resilient, Silence, without_pool_retries
from runs.backends.base import ClusterConfig


def api_client(kubeconfig: str = "") -> ApiClient:
    """A client of the cluster: the kubeconfig named, else in-cluster, else ``~/.kube/config``."""
    if kubeconfig:
        client: ApiClient = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]  # kubernetes.config is unannotated
        return client
    configuration = Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]  # kubernetes.config is unannotated
    except config.ConfigException:
        client = config.new_client_from_config()  # type: ignore[no-untyped-call]  # kubernetes.config is unannotated
        return client
    return ApiClient(configuration)


@dataclass(frozen=True)
class Clients:
    """The API objects of one backend, with the cluster they speak to."""

    cluster: ClusterConfig
    calls: CallPolicy
    core: CoreV1Api
    custom: CustomObjectsApi
    apps: AppsV1Api
    apis: ApisApi
    core_once: CoreV1Api
    custom_once: CustomObjectsApi
    watch_api: CustomObjectsApi
    """Unwrapped: a watch is a stream no retry may repeat."""
    watch_core: CoreV1Api
    """Unwrapped, for the watch of pods."""

    @property
    def namespace(self) -> str:
        return self.cluster.namespace


def clients(api: ApiClient, cluster: ClusterConfig, calls: CallPolicy) -> Clients:
    """The API objects of a backend over one client, sharing one ``Silence``."""
    without_pool_retries(api)
    silence, rate = Silence(), RateLimit(calls)
    once = replace(calls, tries=1, read_timeout_s=min(calls.read_timeout_s, 5.0))

    def resilient(kind: Any, policy: CallPolicy = calls) -> Any:
        return Resilient(kind(api), policy, silence, rate=rate)

    return Clients(
        cluster=cluster,
        calls=calls,
        core=cast(CoreV1Api, resilient(CoreV1Api)),
        custom=cast(CustomObjectsApi, resilient(CustomObjectsApi)),
        apps=cast(AppsV1Api, resilient(AppsV1Api)),
        apis=cast(ApisApi, resilient(ApisApi)),
        core_once=cast(CoreV1Api, resilient(CoreV1Api, once)),
        custom_once=cast(CustomObjectsApi, resilient(CustomObjectsApi, once)),
        watch_api=CustomObjectsApi(api),
        watch_core=CoreV1Api(api),
    )


@contextmanager
def missing_as_key_error(name: str) -> Iterator[None]:
    """A 404 of the API server as KeyError: the object does not exist (any more)."""
    try:
        yield
    except ApiException as error:
        if error.status == 404:
            raise KeyError(name) from None
        raise
