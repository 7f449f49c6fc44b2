"""The image of a run: its environment resolved to an image reference by a content hash.

An environment without packages runs in its base image as it is (the spec's
``environment.image``, else the harness base image). One with packages runs in an image
built once per content: ``FROM`` the base, ``pip install`` of the packages. Its build context
is written under ``<store>/images/<hash>/``, where a backend that runs images builds it
(``Backend.build_image(context, ref)``).

What an image reference runs is part of the key of each task run in it (``identities``,
docs/resume.md): a tag is a name that can move to other content, so where a backend runs
images the reference is resolved to the digest the registry has for it when the run is
submitted (``ImageDigests``); a reference pinned by digest (``name@sha256:…``) is its digest.
Where no digest can be told (the registry cannot answer, the backend cannot ask), the key
says so by a value never the same twice: a tag that may have moved is never reused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from runs.backends.base import Backend, ClusterConfig
from runs.common import store

log = logging.getLogger(__name__)

PINNED = re.compile(r"@(sha256:[0-9a-f]{64})")
IMAGE_KEY = "image:"
"""What names an image in a task's ``named_files``: ``image:<reference>``."""
UNRESOLVED = "unresolved:"
"""The start of the identity of a reference whose digest is not known (a fresh nonce follows)."""
IMAGE_NAME = "simrun-env"
TAG_LENGTH = 32
REQUIREMENTS = "requirements.txt"
DOCKERFILE_TEMPLATE = """\
# The environment of simrun runs: the harness base image and the packages of the run.
FROM {base}
COPY {requirements} /tmp/simrun-requirements.txt
RUN pip install --no-cache-dir -r /tmp/simrun-requirements.txt && rm /tmp/simrun-requirements.txt
"""


@dataclass(frozen=True)
class Environment:
    """An environment resolved: its image, and the hash to build it from (None: no build)."""

    image: str
    digest: str | None
    base: str
    packages: tuple[str, ...]


def resolve(environment: Mapping[str, Any], cluster: ClusterConfig) -> Environment:
    """The image of the environment of a run spec (``{"image": ..., "packages": [...]}``)."""
    base = environment.get("image") or cluster.harness_image
    packages = tuple(sorted(set(environment.get("packages") or ())))
    if not packages:
        return Environment(image=base, digest=None, base=base, packages=())
    content = json.dumps({"base": base, "packages": packages}, sort_keys=True)
    digest = hashlib.sha256(content.encode()).hexdigest()
    name = f"{cluster.registry.rstrip('/')}/{IMAGE_NAME}" if cluster.registry else IMAGE_NAME
    return Environment(
        image=f"{name}:{digest[:TAG_LENGTH]}", digest=digest, base=base, packages=packages
    )


def context_dir(digest: str) -> Path:
    """The build context of an environment in the store."""
    return store.root() / "images" / digest


def write_context(environment: Environment) -> Path:
    """Write the build context of an environment once (a Dockerfile and its requirements)."""
    if environment.digest is None:
        raise ValueError(f"the environment of {environment.image} needs no build")
    target = context_dir(environment.digest)
    if (target / "Dockerfile").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{environment.digest}."))
    try:
        (staging / REQUIREMENTS).write_text("".join(f"{p}\n" for p in environment.packages))
        (staging / "Dockerfile").write_text(
            DOCKERFILE_TEMPLATE.format(base=environment.base, requirements=REQUIREMENTS)
        )
        os.chmod(staging, 0o755)
        os.rename(staging, target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / "Dockerfile").exists():
            raise
    return target


@runtime_checkable
class ImageDigests(Protocol):
    """A backend that can tell the digest a registry has for an image reference."""

    def image_digest(self, ref: str) -> str | None:
        """The ``sha256:…`` digest of ``ref`` in its registry; None when it has no such image;
        an error when it cannot say."""
        ...


def identities(refs: Iterable[str], backend: Backend) -> dict[str, str]:
    """What each image reference runs, by ``image:<reference>`` (the module): nothing on a
    backend that runs no images; else the digest pinned in it, or the registry's, ``absent``
    for an image the registry does not have, or ``unresolved:<nonce>``."""
    if not backend.runs_images:
        return {}
    found = {}
    for ref in dict.fromkeys(r for r in refs if r):
        found[f"{IMAGE_KEY}{ref}"] = _identity(ref, backend)
    return found


def _identity(ref: str, backend: Backend) -> str:
    if pinned := PINNED.search(ref):
        return pinned.group(1)
    if not isinstance(backend, ImageDigests):
        return f"{UNRESOLVED}{secrets.token_hex(16)}"
    try:
        digest = backend.image_digest(ref)
    except Exception as error:  # noqa: BLE001 - any failure to ask is a digest not known
        log.warning("the digest of image %s is not known: %s", ref, error)
        return f"{UNRESOLVED}{secrets.token_hex(16)}"
    return digest or "absent"
