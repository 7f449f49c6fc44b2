"""How the Kubernetes API server answers a GET as its ``Accept`` header asks, for the stand-in.

As the API server does: each media range of ``Accept`` is tried in order, and the first it can
serve decides. ``application/json`` (or ``*/*``, or none) is the object itself; with
``as=PartialObjectMetadataList;g=meta.k8s.io;v=v1`` a list comes as its items' metadata alone
(``PartialObjectMetadata``), and with ``as=PartialObjectMetadata`` one object does, which is
what client-go's metadata client asks. Any other conversion (``as=Table``, another group or
version, a list asked as one object) cannot be served; when no range can, the answer is
406 Not Acceptable. Protobuf is not served (the stand-in speaks JSON only).
"""

from __future__ import annotations

from typing import Any

JSON = "application/json"
META_GROUP_VERSIONS = {("meta.k8s.io", "v1"), ("meta.k8s.io", "v1beta1")}


def media_ranges(accept: str) -> list[tuple[str, dict[str, str]]]:
    """The media ranges of an ``Accept`` header in order, each with its parameters."""
    ranges = []
    for part in accept.split(","):
        kind, *params = [p.strip() for p in part.split(";")]
        if kind:
            found = dict(p.split("=", 1) for p in params if "=" in p)
            ranges.append((kind.lower(), {k.strip(): v.strip() for k, v in found.items()}))
    return ranges


def negotiated(accept: str, body: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The content type and body of a GET's answer ``body`` as ``accept`` asks; None when
    no range of it can be served (the server's 406)."""
    if not accept.strip():
        return JSON, body
    is_list = "items" in body and str(body.get("kind", "")).endswith("List")
    for kind, params in media_ranges(accept):
        if kind not in (JSON, "application/*", "*/*"):
            continue
        wanted = params.get("as")
        if wanted is None:
            return JSON, body
        if (params.get("g"), params.get("v")) not in META_GROUP_VERSIONS:
            continue
        api_version = f"{params['g']}/{params['v']}"
        media = f"{JSON};as={wanted};g={params['g']};v={params['v']}"
        if wanted == "PartialObjectMetadataList" and is_list:
            return media, {
                "kind": "PartialObjectMetadataList",
                "apiVersion": api_version,
                "metadata": body.get("metadata") or {},
                "items": [_partial(item, api_version) for item in body["items"]],
            }
        if wanted == "PartialObjectMetadata" and not is_list:
            return media, _partial(body, api_version)
    return None


def _partial(obj: dict[str, Any], api_version: str) -> dict[str, Any]:
    """An object as ``PartialObjectMetadata``: its metadata alone."""
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": api_version,
        "metadata": obj.get("metadata") or {},
    }
