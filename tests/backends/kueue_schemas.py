"""Kueue's kinds as its CRDs define them (``config/components/crd/bases`` of
kubernetes-sigs/kueue, v0.14 for ``v1beta1``, v0.19 for ``v1beta2``), the fields simrun's
manifests and the stand-in use, unknown fields refused.

A subset written from the CRDs, not a copy: the full CRDs embed the whole PodTemplateSpec and
could not be vendored here. What differs between the versions is what matters to simrun:
``cohort`` (v1beta1) became ``cohortName`` (v1beta2).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from jsonschema import Draft202012Validator

NAME = {"type": "string", "maxLength": 253, "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}
QUANTITY = {
    "anyOf": [
        {"type": "integer"},
        {
            "type": "string",
            "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]"
            r"|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
        },
    ]
}
SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {"type": "array", "items": {"type": "object"}},
    },
}
TAINTS = {
    "type": "array",
    "maxItems": 8,
    "items": {
        "type": "object",
        "required": ["key", "effect"],
        "properties": {
            "key": {"type": "string"},
            "value": {"type": "string"},
            "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
            "timeAdded": {"type": "string"},
        },
        "additionalProperties": False,
    },
}
RESOURCE_GROUP = {
    "type": "object",
    "required": ["coveredResources", "flavors"],
    "additionalProperties": False,
    "properties": {
        "coveredResources": {
            "type": "array",
            "minItems": 1,
            "maxItems": 64,
            "items": {"type": "string"},
        },
        "flavors": {
            "type": "array",
            "minItems": 1,
            "maxItems": 64,
            "items": {
                "type": "object",
                "required": ["name", "resources"],
                "additionalProperties": False,
                "properties": {
                    "name": NAME,
                    "resources": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": 64,
                        "items": {
                            "type": "object",
                            "required": ["name", "nominalQuota"],
                            "additionalProperties": False,
                            "properties": {
                                "name": {"type": "string"},
                                "nominalQuota": QUANTITY,
                                "borrowingLimit": QUANTITY,
                                "lendingLimit": QUANTITY,
                            },
                        },
                    },
                },
            },
        },
    },
}
PREEMPTION = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "withinClusterQueue": {"enum": ["Never", "LowerPriority", "LowerOrNewerEqualPriority"]},
        "reclaimWithinCohort": {"enum": ["Never", "LowerPriority", "Any"]},
        "borrowWithinCohort": {"type": "object"},
    },
}


def _object(spec: dict[str, Any], *, required_spec: bool = True) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", *(["spec"] if required_spec else [])],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": {"type": "object"},
        },
    }


def _cluster_queue(cohort_field: str) -> dict[str, Any]:
    return _object(
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                cohort_field: NAME,
                "namespaceSelector": SELECTOR,
                "queueingStrategy": {"enum": ["StrictFIFO", "BestEffortFIFO"]},
                "resourceGroups": {"type": "array", "maxItems": 16, "items": RESOURCE_GROUP},
                "preemption": PREEMPTION,
                "stopPolicy": {"enum": ["None", "Hold", "HoldAndDrain"]},
                "flavorFungibility": {"type": "object"},
                "admissionChecks": {"type": "array", "items": {"type": "string"}},
                "admissionChecksStrategy": {"type": "object"},
                "fairSharing": {"type": "object"},
            },
        }
    )


COHORT = _object(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "parentName": NAME,
            "resourceGroups": {"type": "array", "maxItems": 16, "items": RESOURCE_GROUP},
            "fairSharing": {"type": "object"},
        },
    },
    required_spec=False,
)
"""A Cohort (``kueue.x-k8s.io`` v1beta1 from Kueue 0.11, v1beta2 from 0.15): its parent in a
tree of Cohorts, and quota its ClusterQueues share beyond their own."""
LOCAL_QUEUE = _object(
    {
        "type": "object",
        "required": ["clusterQueue"],
        "additionalProperties": False,
        "properties": {
            "clusterQueue": NAME,
            "stopPolicy": {"enum": ["None", "Hold", "HoldAndDrain"]},
            "fairSharing": {"type": "object"},
        },
    }
)
RESOURCE_FLAVOR = _object(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "nodeLabels": {
                "type": "object",
                "maxProperties": 8,
                "additionalProperties": {"type": "string"},
            },
            "nodeTaints": TAINTS,
            "tolerations": {"type": "array", "maxItems": 8, "items": {"type": "object"}},
            "topologyName": NAME,
        },
    },
    required_spec=False,
)
WORKLOAD = _object(
    {
        "type": "object",
        "required": ["podSets"],
        "properties": {
            "queueName": NAME,
            "podSets": {"type": "array", "minItems": 1, "maxItems": 8},
        },
    }
)
SCHEMAS = {
    "v1beta1": {
        "ClusterQueue": _cluster_queue("cohort"),
        "Cohort": COHORT,
        "LocalQueue": LOCAL_QUEUE,
        "ResourceFlavor": RESOURCE_FLAVOR,
        "Workload": WORKLOAD,
    },
    "v1beta2": {
        "ClusterQueue": _cluster_queue("cohortName"),
        "Cohort": COHORT,
        "LocalQueue": LOCAL_QUEUE,
        "ResourceFlavor": RESOURCE_FLAVOR,
        "Workload": WORKLOAD,
    },
}


@cache
def kueue_validator(kind: str, version: str) -> Draft202012Validator:
    """The validator of a Kueue kind at an API version; KeyError for one Kueue lacks."""
    return Draft202012Validator(SCHEMAS[version][kind])
