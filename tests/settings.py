"""Settings of the test suite: the service's settings with test defaults in the environment.

PostgreSQL and Redis are real (the services of this machine, see .ci/run); every variable
can be overridden from the environment, e.g. DATABASE_URL for another database.
"""

import os
import tempfile

os.environ.setdefault("SECRET_KEY", "tests-only-secret-key")
os.environ.setdefault("DATABASE_URL", "postgres://simrun:simrun@127.0.0.1:5432/simrun")
os.environ.setdefault("SIMRUN_BACKEND", "fake")
# Tasks run as the test's user: pytest's folders let no other user pass.
os.environ.setdefault("SIMRUN_TASK_UID_BASE", "0")
os.environ.setdefault("SIMRUN_HOME", tempfile.mkdtemp(prefix="simrun-tests-"))
# Tests make a user's runs by the hundred (lists, pages, the admin); the bound on a user's
# queued runs has tests of its own, which set it.
os.environ.setdefault("SIMRUN_USER_QUEUED_RUNS", "100000")

from simrun_site.settings import *  # noqa: E402, F403

# The Redis server and the end-to-end database of this suite: two checkouts testing at once on
# one machine each name their own (CI, alone on its machine, keeps the defaults).
TEST_REDIS = os.environ.get("SIMRUN_TEST_REDIS", "redis://127.0.0.1:6379")
# Workers of one parallel run (pytest-xdist's gw0, gw1, ...; a serial run is worker 0) each
# have their own Redis databases, of the 16 a server has, and their own end-to-end database;
# pytest-django names each worker's test database likewise.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_WORKER_NUMBER = int(_WORKER.removeprefix("gw") or 0)
if _WORKER_NUMBER > 6:
    raise RuntimeError(f"worker {_WORKER}: Redis has databases for 7 workers, run -n 7 or fewer")
LOOP_REDIS = f"{TEST_REDIS}/{1 + 2 * _WORKER_NUMBER}"
"""The Redis database of the locks' and the Celery loop's tests, which flush it."""
E2E_REDIS = f"{TEST_REDIS}/{2 + 2 * _WORKER_NUMBER}"
"""The broker of the end-to-end tests' PostgreSQL service, flushed when it starts."""
_E2E_DATABASE = os.environ.get("SIMRUN_TEST_E2E_DATABASE", "simrun_e2e")
TEST_E2E_DATABASE = f"{_E2E_DATABASE}_{_WORKER}" if _WORKER else _E2E_DATABASE

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
