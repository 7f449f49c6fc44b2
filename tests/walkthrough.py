"""The files of docs/task-types.md's walkthrough of a task type shipped in a run's sources.

The tests build the package and the spec from the document's own code blocks (each starts
with a comment naming its file), so the walkthrough is what they test.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

from django.contrib.auth.models import User

from runs.client.packing import pack
from runs.planning.snapshots import save_snapshot

DOC = Path(__file__).resolve().parents[1] / "docs" / "task-types.md"
BLOCK = re.compile(r"^```[a-z]*\n# (?P<path>decay[-a-z_./]*)\n(?P<body>.*?)^```$", re.M | re.S)
PACKAGE = "decay-pkg"
SPEC = "decay.yaml"


def walkthrough_files() -> dict[str, str]:
    """The files of the walkthrough by path, as the document shows them."""
    return {m["path"]: f"# {m['path']}\n{m['body']}" for m in BLOCK.finditer(DOC.read_text())}


def write_walkthrough(directory: Path) -> Path:
    """Write the walkthrough's package and spec into ``directory``; the spec's path."""
    for path, text in walkthrough_files().items():
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return directory / SPEC


def upload_package(owner: User, package: Path) -> str:
    """Upload a package folder as ``simrun submit`` does; the snapshot's digest."""
    snapshot, _ = save_snapshot(owner=owner, archive=io.BytesIO(pack(package)), name=package.name)
    return snapshot.digest


PLUGIN_FILES = {
    "pyproject.toml": """[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "tally-sim"
version = "0.1.0"

[project.entry-points."simrun.task_types"]
tally = "tally_sim:TASK_TYPE"
""",
    "tally_sim/__init__.py": """from pydantic import BaseModel

from harness.tasktypes import TaskType


class TallySettings(BaseModel):
    word: str = "decay"


TASK_TYPE = TaskType(
    name="tally",
    settings=TallySettings,
    command=lambda s: ["python", "-m", "tally_sim.write", s.word],
)
""",
    "tally_sim/write.py": """import os
import sys
from pathlib import Path

Path(os.environ["SIMRUN_OUT"], "tally.txt").write_text(sys.argv[1] + "\\n")
""",
}
"""A package shipping a plugin type ``tally``: its command writes ``out/tally.txt``."""


def write_plugin_package(directory: Path) -> Path:
    """Write the package of ``PLUGIN_FILES`` into ``directory/tally-pkg``; its folder."""
    package = directory / "tally-pkg"
    for path, text in PLUGIN_FILES.items():
        (package / path).parent.mkdir(parents=True, exist_ok=True)
        (package / path).write_text(text)
    return package


NEEDY_FILES = {
    "pyproject.toml": """[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "needy-sim"
version = "0.1.0"

[project.entry-points."simrun.task_types"]
needy = "needy_sim:TASK_TYPE"
""",
    "needy_sim/__init__.py": """import pkgdemo
from pydantic import BaseModel

from harness.tasktypes import TaskType


class NeedySettings(BaseModel):
    n: int = 2


def merge(settings, context):
    (context.out / "answer.txt").write_text(str(sum(context.results)))


TASK_TYPE = TaskType(
    name="needy",
    settings=NeedySettings,
    units=lambda s: s.n,
    compute=lambda s, context, index: pkgdemo.ANSWER + index,
    merge=merge,
)
""",
}
"""A package shipping a split type ``needy`` whose module imports ``pkgdemo`` at its top."""


def write_needy_package(directory: Path) -> Path:
    """Write the package of ``NEEDY_FILES`` into ``directory/needy-pkg``; its folder."""
    package = directory / "needy-pkg"
    for path, text in NEEDY_FILES.items():
        (package / path).parent.mkdir(parents=True, exist_ok=True)
        (package / path).write_text(text)
    return package
