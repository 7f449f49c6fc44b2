"""The venv of a run with source snapshots on the local backend.

Created when the first process of the run starts (by its launcher, under a file lock, so the
processes of a run that start together wait for one venv) and removed at the end of the run.
It sees the packages of the service's environment (simrun, the task types, the build backends)
and has the run's snapshots installed editable on top, never into the service's environment.

Only the standard library and the harness: the launcher imports this module.
"""

from __future__ import annotations

import fcntl
import shutil
import site
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

READY = ".simrun-ready"
"""The marker of a venv whose snapshots are installed."""
SERVICE_PTH = "simrun-service.pth"


def python(directory: Path) -> Path:
    """The interpreter of a venv."""
    return directory / "bin" / "python"


def _console_scripts(bin_dir: Path) -> None:
    """The commands of simrun (``simrun-worker``, ...) run by the interpreter of the venv."""
    for point in distribution("simrun").entry_points.select(group="console_scripts"):
        module, _, function = point.value.partition(":")
        script = bin_dir / point.name
        script.write_text(
            f"#!{bin_dir / 'python'}\nimport sys\nfrom {module} import {function}\n"
            f"sys.exit({function}())\n"
        )
        script.chmod(0o755)


def _create(directory: Path, snapshots: list[Path]) -> None:
    """A venv on the service's packages, with the snapshots installed editable."""
    from harness.sources import install_editable

    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(directory)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    purelib = subprocess.run(
        [str(python(directory)), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # addsitedir, not a plain path: the .pth files of the service's packages (an editable
    # simrun among them) must be read too.
    lines = [f"import site; site.addsitedir({path!r})" for path in site.getsitepackages()]
    Path(purelib, SERVICE_PTH).write_text("\n".join(lines) + "\n")
    _console_scripts(directory / "bin")
    install_editable(
        [str(s) for s in snapshots], python=str(python(directory)), root=directory / "sources"
    )


def ensure(directory: Path, snapshots: list[Path]) -> Path:
    """The interpreter of the venv of a run, created with its snapshots on first use."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.with_name(directory.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (directory / READY).exists():
            shutil.rmtree(directory, ignore_errors=True)
            _create(directory, snapshots)
            (directory / READY).touch()
    return python(directory)


def remove(directory: Path) -> None:
    """Remove the venv of a run (at its end) and its lock."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.with_name(directory.name + ".lock").unlink(missing_ok=True)
