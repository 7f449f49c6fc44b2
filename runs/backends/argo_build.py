"""The pod that builds a run's image in the cluster: Kaniko on a context in the store.

The service writes the build context (a Dockerfile on top of the harness base image) under
``<store>/images/<hash>/``; the pod mounts the store read-only, builds that directory and
pushes the image with the credentials of the pull secret.
"""

from __future__ import annotations

import hashlib
from pathlib import PurePosixPath
from typing import Any

from runs.backends.argo_manifest import QUEUE_LABEL
from runs.backends.base import ClusterConfig

BUILD_LABEL = "simrun/build"


def build_pod_name(ref: str) -> str:
    """One pod per image reference, so a resumed submission finds the build it started."""
    return f"simrun-build-{hashlib.sha256(ref.encode()).hexdigest()[:16]}"


def build_pod(*, context: PurePosixPath, ref: str, cluster: ClusterConfig) -> dict[str, Any]:
    """The Kaniko pod that builds ``context`` (a path inside the store mount) as ``ref``."""
    name = build_pod_name(ref)
    mounts: list[dict[str, Any]] = [
        {"name": "store", "mountPath": cluster.store_mount, "readOnly": True}
    ]
    volumes: list[dict[str, Any]] = [
        {
            "name": "store",
            "persistentVolumeClaim": {"claimName": cluster.store_claim, "readOnly": True},
        }
    ]
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
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": cluster.namespace,
            "labels": {BUILD_LABEL: name.removeprefix("simrun-build-"), QUEUE_LABEL: cluster.queue},
            "annotations": {"simrun/image": ref},
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "nodeSelector": dict(cluster.node_selector),
            "containers": [
                {
                    "name": "main",
                    "image": cluster.builder_image,
                    "args": [
                        f"--context=dir://{context}",
                        f"--dockerfile={context / 'Dockerfile'}",
                        f"--destination={ref}",
                        "--snapshot-mode=redo",
                    ],
                    "resources": {
                        "requests": {"cpu": "1", "memory": "2Gi"},
                        "limits": {"memory": "4Gi"},
                    },
                    "volumeMounts": mounts,
                }
            ],
            "volumes": volumes,
        },
    }
