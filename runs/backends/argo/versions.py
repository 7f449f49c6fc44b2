"""Which Argo and Kueue the cluster runs, against what the Argo backend relies on.

The retry memory rides on a template's ``podSpecPatch`` with ``lastRetry``, which Argo
substitutes from 3.7 on (3.5 and 3.6 fail every pod with "Error applying PodSpecPatch"); the
manifests and the Workload reads use ``kueue.x-k8s.io/v1beta2``, served from Kueue 0.15 on
(an older Kueue answers 404). Each refusal names what was found, what is needed and the doc.
Pure functions of what the API server answered.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

ARGO_MINIMUM = (3, 7)
KUEUE_API = "v1beta2"
DOC = "docs/cluster.md (Supported versions)"
TAG = re.compile(r":v?(?P<major>\d+)\.(?P<minor>\d+)(?:\.(?P<patch>\d+))?(?:[-+@][^/]*)?$")


def image_version(image: str) -> tuple[int, int] | None:
    """The (major, minor) of an image's tag, ``quay.io/argoproj/workflow-controller:v3.6.5``;
    None when its tag is no version (``latest``, a digest)."""
    found = TAG.search(image.split("@")[0])
    return (int(found["major"]), int(found["minor"])) if found else None


def argo_refusal(found: str) -> str:
    """Why the Argo backend cannot run on the Argo controller found ("" when it can):
    ``found`` is its image, or a version (``3.6``)."""
    version = image_version(found if ":" in found else f":{found}")
    if version is None:
        return (
            f"the version of Argo's controller is unknown ({found}); simrun needs Argo "
            f"Workflows {_dotted(ARGO_MINIMUM)} or later (podSpecPatch with lastRetry): set "
            f"SIMRUN_ARGO_VERSION, see {DOC}"
        )
    if version < ARGO_MINIMUM:
        return (
            f"the cluster runs Argo Workflows {_dotted(version)}; simrun needs "
            f"{_dotted(ARGO_MINIMUM)} or later, whose podSpecPatch substitutes lastRetry (the "
            f'retry memory): on {_dotted(version)} every pod fails with "Error applying '
            f'PodSpecPatch", see {DOC}'
        )
    return ""


def argo_found(found: str) -> str:
    """The version of Argo's controller as a person reads it (``4.1``), else what was found."""
    version = image_version(found if ":" in found else f":{found}")
    return _dotted(version) if version else found


def kueue_refusal(groups: Mapping[str, list[str]]) -> str:
    """Why the Argo backend cannot use the cluster's Kueue ("" when it can): ``groups`` are
    the served versions of each API group (discovery)."""
    served = groups.get("kueue.x-k8s.io")
    if not served:
        return f"the cluster serves no kueue.x-k8s.io API: Kueue is not installed, see {DOC}"
    if KUEUE_API not in served:
        return (
            f"the cluster's Kueue serves kueue.x-k8s.io {', '.join(served)} only; simrun needs "
            f"{KUEUE_API} (Kueue 0.15 or later), see {DOC}"
        )
    return ""


def served_groups(listing: Mapping[str, Any]) -> dict[str, list[str]]:
    """The served versions of each group of an ``APIGroupList`` (``GET /apis``)."""
    return {
        group["name"]: [v["version"] for v in group.get("versions") or []]
        for group in listing.get("groups") or []
    }


EXECUTOR_REQUESTS = {"cpu": Decimal("0.01"), "memory": Decimal(64 * 2**20)}
"""What Argo's executor containers request (docs/cluster.md gives them in the controller's
ConfigMap): ``wait`` runs beside a task's ``main``, so Kueue charges the pod its requests too;
``init`` runs before them, on its own, and asks no more."""
GIB = Decimal(2**30)


def pod_requests(cores: float, memory_gb: float, scratch_gb: float) -> dict[str, Decimal]:
    """What Kueue charges the pod of a task whose ``main`` asks ``cores`` and ``memory_gb``
    (and its scratch as ephemeral storage): ``main`` and Argo's ``wait`` summed (the init
    containers, ``init`` and a command task's ``stage``, each ask less than that sum)."""
    return {
        "cpu": Decimal(str(cores)) + EXECUTOR_REQUESTS["cpu"],
        "memory": Decimal(str(memory_gb)) * GIB + EXECUTOR_REQUESTS["memory"],
        "ephemeral-storage": Decimal(str(scratch_gb)) * GIB,
    }


def main_caps(quota: Mapping[str, Decimal]) -> tuple[int | None, float | None]:
    """The most cores and GiB (to the 0.01 below) a task's ``main`` may ask so that its whole
    pod, Argo's ``wait`` beside it, fits what a pod may get (``kueue_quota.queue_quota``, or a
    node's allocatable); None for a resource it does not cap."""
    cores = memory_gb = None
    if "cpu" in quota:
        cores = max(0, int(quota["cpu"] - EXECUTOR_REQUESTS["cpu"]))
    if "memory" in quota:
        memory = max(Decimal(0), quota["memory"] - EXECUTOR_REQUESTS["memory"])
        memory_gb = math.floor(float(memory / GIB) * 100) / 100
    return cores, memory_gb


def _dotted(version: tuple[int, int]) -> str:
    return ".".join(str(part) for part in version)


def _quantity(value: Any) -> Decimal:
    parsed: Decimal = parse_quantity(value)  # type: ignore[no-untyped-call]  # kubernetes.utils is unannotated
    return parsed
