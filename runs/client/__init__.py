"""A Python client of a simrun server, for notebooks and scripts; the ``simrun`` CLI uses it.

    from runs.client import Client

    client = Client()                     # the server and token `simrun login` saved
    run = client.submit("sweep.yaml")     # a path, a YAML or JSON text, or a dict
    run.wait()                            # a bar per task, in a notebook or a terminal
    table = run.frame("sweep", "squares.csv")
    results = run.results()               # a sweep's results table, a row per unit

It needs httpx, rich and PyYAML (pandas for ``frame``), never Django. See docs/notebook.md.
So it imports nothing of ``runs`` but itself, and nothing of the service imports it but the CLI.
"""

from runs.client.api import Client
from runs.client.config import obtain_token
from runs.client.errors import (
    Ambiguous,
    AuthError,
    Conflict,
    Forbidden,
    InvalidRequest,
    LocalFileError,
    MissingPandas,
    NotConfigured,
    NotFound,
    RunFailed,
    ServerError,
    SimrunError,
    Throttled,
    Unavailable,
)
from runs.client.run import Run

__all__ = [
    "Ambiguous",
    "AuthError",
    "Client",
    "Conflict",
    "Forbidden",
    "InvalidRequest",
    "LocalFileError",
    "MissingPandas",
    "NotConfigured",
    "NotFound",
    "Run",
    "RunFailed",
    "ServerError",
    "SimrunError",
    "Throttled",
    "Unavailable",
    "obtain_token",
]
