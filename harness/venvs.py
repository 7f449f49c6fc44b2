"""The venv of an environment's packages, as every backend that installs them makes it.

A venv without pip of its own on the service's packages (simrun, the task types, their
dependencies, read through a ``.pth`` file), simrun's commands in its ``bin`` run by its
interpreter, then pip's install of the packages into it. Its name is a hash of its content:
the packages (in any order, once each), the service's Python and who builds it, so runs that
name the same packages share one venv. The local backend builds it behind its wall
(``local/env.py``); the Slurm backend as a job of its own (``slurm/packages.py``), which runs
this file: ``python venvs.py build DIR REQ...``.

Only the standard library: this file runs by its path in a build job, and the local
backend's launcher (which imports only the standard library and the harness) uses it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
from collections.abc import Sequence
from importlib.metadata import distribution
from pathlib import Path

SERVICE_PTH = "simrun-service.pth"
ENVIRONMENTS = "environments"
"""The folder of the packages' venvs below the store."""
PIP_ENV = (
    *("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"),
    *("PIP_TRUSTED_HOST", "PIP_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_RETRIES", "PIP_CONSTRAINT"),
    *("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "SSL_CERT_FILE"),
)
"""The variables of the service's environment an install of packages keeps: where pip finds
them, as the service's own pip would (the site's /etc/pip.conf applies too)."""
BUILT = "built"
"""In a build's folder (``build``): the mark of a venv installed to its end."""


def python(directory: Path) -> Path:
    """The interpreter of a venv."""
    return directory / "bin" / "python"


def console_scripts(bin_dir: Path) -> None:
    """The commands of simrun (``simrun-worker``, ...) run by the interpreter of the venv."""
    for point in distribution("simrun").entry_points.select(group="console_scripts"):
        module, _, function = point.value.partition(":")
        script = bin_dir / point.name
        script.write_text(
            f"#!{bin_dir / 'python'}\nimport sys\nfrom {module} import {function}\n"
            f"sys.exit({function}())\n"
        )
        script.chmod(0o755)


def make_venv(directory: Path, base: Path | None = None) -> None:
    """A venv without packages of its own yet, on the service's packages (and ``base``'s, a
    venv of this module, before them), with simrun's commands."""
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
    # simrun among them) must be read too, and the base's before them, so that they win.
    sites = [str(base / Path(purelib).relative_to(directory))] if base is not None else []
    sites += site.getsitepackages()
    lines = [f"import site; site.addsitedir({path!r})" for path in sites]
    Path(purelib, SERVICE_PTH).write_text("\n".join(lines) + "\n")
    console_scripts(directory / "bin")


def install_packages(directory: Path, packages: Sequence[str]) -> int:
    """The venv, then pip's install of the packages into it; pip's exit code."""
    make_venv(directory)
    command = [str(python(directory)), "-m", "pip", "install", "--disable-pip-version-check"]
    command += ["--no-input", "--progress-bar", "off", "--", *packages]
    sys.stdout.flush()
    return subprocess.run(command, stderr=subprocess.STDOUT, check=False).returncode


def packages_key(packages: Sequence[str], uid: int | None) -> str:
    """The name of the venv of some packages built by ``uid`` for the service's Python: the
    same packages in another order, or twice, are the same venv."""
    content = {
        "packages": sorted(set(packages)),
        "python": [sys.prefix, sys.version],
        "builder": uid,
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:32]


def pip_env() -> dict[str, str]:
    """The variables of this process's environment that tell pip where packages are."""
    return {name: os.environ[name] for name in PIP_ENV if name in os.environ}


def build(folder: Path, packages: Sequence[str]) -> int:
    """Make ``folder/venv`` with the packages unless ``folder/built`` says it was: one build
    at a time (a lock in the folder), so that builds of the same packages started together
    make it once; a build that failed or was stopped is made again from nothing."""
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / BUILT).is_file():
            print(f"the environment's packages are installed already in {folder}", flush=True)
            return 0
        shutil.rmtree(folder / "venv", ignore_errors=True)
        named = ", ".join(sorted(set(packages)))
        print(f"installing the environment's packages ({named}) into {folder}", flush=True)
        code = install_packages(folder / "venv", packages)
        if code == 0:
            (folder / BUILT).write_text(json.dumps({"packages": sorted(set(packages))}))
        return code


if __name__ == "__main__":  # build FOLDER REQ...
    raise SystemExit(build(Path(sys.argv[2]), sys.argv[3:]))
