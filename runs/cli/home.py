"""The environment of the service on one machine: its home, a kept secret key, Django set up.

``simrun serve`` and ``simrun user`` run with the embedded default when nothing is set: the
home ``SIMRUN_HOME`` (``./var`` of the project, as the settings say), a secret key generated
once and kept there (so sessions and tokens survive restarts), and the project's settings.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import simrun_site

SECRET_KEY_FILE = "secret_key"


def home() -> Path:
    """``SIMRUN_HOME``, else ``var`` beside the project, as in the settings."""
    default = Path(simrun_site.__file__).resolve().parent.parent / "var"
    return Path(os.environ.get("SIMRUN_HOME") or default).resolve()


def secret_key(directory: Path) -> str:
    """The secret key kept in the home, generated (readable by its owner only) on first use."""
    path = directory / SECRET_KEY_FILE
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(handle, "w") as file:
            file.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


def prepare() -> Path:
    """Set the service's environment in this process (its children inherit it), set up Django.

    Returns the home. A ``SECRET_KEY`` (or ``DEBUG``) set by the user is kept.
    """
    import django

    directory = home()
    os.environ["SIMRUN_HOME"] = str(directory)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "simrun_site.settings")
    if not os.environ.get("SECRET_KEY"):
        os.environ["SECRET_KEY"] = secret_key(directory)
    django.setup()
    return directory
