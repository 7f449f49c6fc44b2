"""Whether a source snapshot is a tree ``pip install -e`` can install, seen from its files.

A run's sources are installed editable wherever its tasks run (``harness.sources``, the local
backend's venv, the learning of the types they ship). A tree pip cannot install would be
accepted and fail later, in a pod's log; what can be told without running the tree's code is
told when the run is submitted, with pip's own reason: no ``pyproject.toml`` nor ``setup.py``
at its top, or a ``pyproject.toml`` that is no TOML. The tree was extracted by the service
(``runs.planning.snapshots``), yet it is read as a task's files are: without following a link
out of it, at most ``PYPROJECT_CAP`` bytes.
"""

from __future__ import annotations

import tomllib

from harness import untrusted
from runs.common import store

PYPROJECT = "pyproject.toml"
SETUP_PY = "setup.py"
PYPROJECT_CAP = 1 << 20
"""The most read of a ``pyproject.toml``: one larger is no project file pip reads either."""


def not_installable(digest: str) -> str | None:
    """Why pip cannot install the snapshot ``digest``, in pip's words and the fix; None when
    nothing tells so before its build runs."""
    root = store.snapshot_dir(digest)
    try:
        with untrusted.directory(root) as folder:
            names = {entry.name for entry in untrusted.entries(folder)}
            if PYPROJECT not in names:
                return None if SETUP_PY in names else _NO_PROJECT
            text = untrusted.read_bytes(folder, PYPROJECT, PYPROJECT_CAP + 1)
    except OSError:
        return None  # a link in the tree, say: pip follows it, and tells at the build
    if len(text) > PYPROJECT_CAP:
        return f"its {PYPROJECT} is larger than {PYPROJECT_CAP >> 20} MiB"
    try:
        tomllib.loads(text.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        return (
            f"pip cannot read its {PYPROJECT} (it is no valid TOML: {error}); fix it and "
            "submit again"
        )
    return None


_NO_PROJECT = (
    "pip cannot install it: it does not appear to be a Python project: neither "
    f"'{SETUP_PY}' nor '{PYPROJECT}' found at its top. Sources are installed with "
    "`pip install -e`: add a pyproject.toml (docs/task-types.md), or ship the files a "
    "command needs otherwise (name them by their path)"
)
