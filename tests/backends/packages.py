"""Packages for the tests of environments' packages: wheels and source archives in a folder
that pip reads as its only index (``PIP_FIND_LINKS``, ``PIP_NO_INDEX``), built here, so the
tests need no network and take a second."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

import pytest


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(index: Path, name: str, files: dict[str, str], version: str = "0.1") -> Path:
    """A pure-Python wheel of ``name`` with ``files`` (path to text) in ``index``."""
    info = f"{name}-{version}.dist-info"
    contents = {path: text.encode() for path, text in files.items()}
    contents[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    )
    contents[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = [_record_line(path, data) for path, data in contents.items()]
    contents[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    path = index / f"{name}-{version}-py3-none-any.whl"
    index.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in contents.items():
            archive.writestr(member, data)
    return path


# A build backend inside the source archive, needing nothing from an index: it counts its
# builds in a file named at its writing and may take its time (a build that hangs).
BACKEND = """
import base64, hashlib, os, time, zipfile
NAME, VERSION, BUILDS, SLEEP_S = {name!r}, "0.1", {builds!r}, {sleep_s!r}
INFO = NAME + "-" + VERSION + ".dist-info"
META = "Metadata-Version: 2.1\\nName: " + NAME + "\\nVersion: " + VERSION + "\\n"
WHEEL = "Wheel-Version: 1.0\\nGenerator: tests\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"

def get_requires_for_build_wheel(config_settings=None):
    return []

def build_wheel(directory, config_settings=None, metadata_directory=None):
    with open(BUILDS, "a") as handle:
        handle.write("built\\n")
    time.sleep(SLEEP_S)
    files = {{NAME + "/__init__.py": "BUILT = True\\n", INFO + "/METADATA": META,
              INFO + "/WHEEL": WHEEL}}
    record = [n + ",sha256=" + base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest())
              .rstrip(b"=").decode() + "," + str(len(t.encode())) for n, t in files.items()]
    files[INFO + "/RECORD"] = "\\n".join(record + [INFO + "/RECORD,,"]) + "\\n"
    wheel = NAME + "-" + VERSION + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, wheel), "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel
"""


def pip_index(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make ``folder`` pip's only index, as the service's pip settings say
    (``local_env.pip_env``), with ``pkgdemo`` in it: a wheel whose ``ANSWER`` is 42."""
    write_wheel(folder, "pkgdemo", {"pkgdemo/__init__.py": "ANSWER = 42\n"})
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    return folder


def write_sdist(
    index: Path, name: str, builds: Path, sleep_s: float = 0.0, backend: str | None = None
) -> Path:
    """A source archive of ``name`` whose build appends a line to ``builds`` each time it
    runs (after ``sleep_s``); or whose build backend (``backend.py``) is ``backend``."""
    root = f"{name}-0.1"
    members = {
        "pyproject.toml": (
            '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
            f'[project]\nname = "{name}"\nversion = "0.1"\n'
        ),
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
        "backend.py": backend or BACKEND.format(name=name, builds=str(builds), sleep_s=sleep_s),
    }
    index.mkdir(parents=True, exist_ok=True)
    path = index / f"{root}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for member, text in members.items():
            data = text.encode()
            entry = tarfile.TarInfo(f"{root}/{member}")
            entry.size = len(data)
            entry.mode = 0o644
            archive.addfile(entry, io.BytesIO(data))
    return path
