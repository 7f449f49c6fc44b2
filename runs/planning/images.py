"""The image of a run: its environment resolved to an image reference by a content hash.

An environment without packages runs in its base image as it is (the spec's
``environment.image``, else the harness base image). One with packages runs in an image
built once per content: ``FROM`` the base, ``pip install`` of the packages. Its build context
is written under ``<store>/images/<hash>/``, where a backend that runs images builds it
(``Backend.build_image(context, ref)``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runs.backends.base import ClusterConfig
from runs.common import store

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
