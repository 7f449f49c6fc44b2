"""The dashboard's tests share the API's fixtures: a fresh fake backend, Celery hand-offs."""

from tests.api.conftest import backend, queued, settled  # noqa: F401
