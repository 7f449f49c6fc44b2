"""Services for the end-to-end tests: one per module with SQLite, one with PostgreSQL and Redis."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
import redis

from tests.e2e.service import Service
from tests.settings import E2E_REDIS, TEST_E2E_DATABASE

POSTGRES = "postgres://simrun:simrun@127.0.0.1:5432/{}"
E2E_DATABASE = TEST_E2E_DATABASE


def fresh_database(name: str) -> str:
    """A new, empty PostgreSQL database of the test's own; its URL."""
    with psycopg.connect(POSTGRES.format("postgres"), autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')
    return POSTGRES.format(name)


@pytest.fixture(scope="module")
def sqlite_service(tmp_path_factory) -> Iterator[Service]:
    """``simrun serve`` with the embedded default: SQLite and the filesystem broker."""
    service = Service(home=tmp_path_factory.mktemp("sqlite") / "home")
    service.start()
    yield service
    if service.process is not None:
        assert service.stop() == 0


@pytest.fixture(scope="module")
def postgres_service(tmp_path_factory) -> Iterator[Service]:
    """``simrun serve`` with PostgreSQL and Redis, the services of this machine."""
    redis.Redis.from_url(E2E_REDIS).flushdb()
    env = {"DATABASE_URL": fresh_database(E2E_DATABASE), "CELERY_BROKER_URL": E2E_REDIS}
    service = Service(home=tmp_path_factory.mktemp("postgres") / "home", extra_env=env)
    service.start()
    yield service
    if service.process is not None:
        assert service.stop() == 0


@pytest.fixture(params=["sqlite", "postgres"])
def service(request) -> Service:
    """The service with each of its databases and brokers."""
    return request.getfixturevalue(f"{request.param}_service")


@pytest.fixture(scope="module")
def token(sqlite_service) -> str:
    return sqlite_service.user("alice")
