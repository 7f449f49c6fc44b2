"""The pod that builds a run's image in the cluster: Kaniko on a context in a ConfigMap.

The service writes the build context (a Dockerfile on top of the harness base image and its
requirements) under ``<store>/images/<hash>/``; its few small files go into a ConfigMap the
pod mounts as its context, so the pod needs no store and can run in a namespace of its own:
Kaniko runs as root, which Pod Security "restricted" (the runs' namespace) refuses. It pushes
the image with the credentials of the pull secret.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from runs.backends.argo.manifest import QUEUE_LABEL
from runs.backends.base import ClusterConfig

BUILD_LABEL = "simrun/build"
JOINER_PREFIX = "simrun/build-joiner-"
"""A build's ConfigMap has one annotation per submission waiting for it: the last one out
cleans up."""
CONTEXT_MOUNT = "/workspace"
CONTEXT_LIMIT = 512 * 1024
"""The most a build context may hold (a ConfigMap holds at most 1 MiB)."""
BUILD_STORAGE = "20Gi"
"""The local disk a build may fill (Kaniko unpacks the base image and writes the layers on its
root filesystem): requested, so it is placed where that much is free, and its limit, past
which the kubelet evicts it instead of filling the node's disk."""


def build_pod_name(ref: str) -> str:
    """One pod per image reference, so a resumed submission finds the build it started."""
    return f"simrun-build-{hashlib.sha256(ref.encode()).hexdigest()[:16]}"


def build_namespace(cluster: ClusterConfig) -> str:
    """Where builds go: the build namespace, else the runs' own."""
    return cluster.build_namespace or cluster.namespace


def context_config_map(context: Path, ref: str, cluster: ClusterConfig) -> dict[str, Any]:
    """The ConfigMap of a build context (its files, one key each); ValueError when it is not
    a folder of a few small files."""
    if not context.is_dir():
        raise ValueError(f"the build context {context} is no folder")
    files = {p.name: p.read_text() for p in sorted(context.iterdir()) if p.is_file()}
    if "Dockerfile" not in files or sum(len(t) for t in files.values()) > CONTEXT_LIMIT:
        raise ValueError(f"the build context {context} has no Dockerfile or is too large")
    name = build_pod_name(ref)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": build_namespace(cluster),
            "labels": {BUILD_LABEL: name.removeprefix("simrun-build-")},
        },
        "data": files,
    }


def build_pod(*, ref: str, cluster: ClusterConfig) -> dict[str, Any]:
    """The Kaniko pod that builds the context of its ConfigMap as ``ref``."""
    name = build_pod_name(ref)
    namespace = build_namespace(cluster)
    mounts: list[dict[str, Any]] = [
        {"name": "context", "mountPath": CONTEXT_MOUNT, "readOnly": True}
    ]
    volumes: list[dict[str, Any]] = [{"name": "context", "configMap": {"name": name}}]
    if cluster.pull_secret:
        mounts.append({"name": "docker-config", "mountPath": "/kaniko/.docker", "readOnly": True})
        volumes.append(
            {
                "name": "docker-config",
                "secret": {
                    "secretName": cluster.pull_secret,
                    "items": [{"key": ".dockerconfigjson", "path": "config.json"}],
                },
            }
        )
    labels = {BUILD_LABEL: name.removeprefix("simrun-build-")}
    if namespace == cluster.namespace:
        labels[QUEUE_LABEL] = cluster.queue  # Kueue's queue is in the runs' namespace only
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {"simrun/image": ref},
        },
        "spec": {
            "restartPolicy": "Never",
            # Ended by the kubelet past the build timeout, even when no service waits for it.
            "activeDeadlineSeconds": cluster.build_timeout_s,
            "automountServiceAccountToken": False,
            "nodeSelector": dict(cluster.node_selector),
            "containers": [
                {
                    "name": "main",
                    "image": cluster.builder_image,
                    "args": [
                        f"--context=dir://{CONTEXT_MOUNT}",
                        f"--dockerfile={CONTEXT_MOUNT}/Dockerfile",
                        f"--destination={ref}",
                        "--snapshot-mode=redo",
                    ],
                    "resources": {
                        "requests": {
                            "cpu": "1",
                            "memory": "2Gi",
                            "ephemeral-storage": BUILD_STORAGE,
                        },
                        "limits": {"memory": "4Gi", "ephemeral-storage": BUILD_STORAGE},
                    },
                    "volumeMounts": mounts,
                }
            ],
            "volumes": volumes,
        },
    }
