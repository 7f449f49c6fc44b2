"""Settings come from the environment only; a bad environment is a clear error, not a traceback."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``manage.py check`` with exactly this environment (plus PATH)."""
    environment = {"PATH": os.environ["PATH"], "SIMRUN_HOME": str(tmp_path / "home"), **env}
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_embedded_default_needs_nothing_but_a_secret_key(tmp_path):
    result = check(tmp_path, SECRET_KEY="s")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "home").is_dir()


def test_without_debug_and_secret_key_the_service_refuses_to_start(tmp_path):
    result = check(tmp_path)
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr


def test_debug_runs_without_a_secret_key(tmp_path):
    assert check(tmp_path, DEBUG="true").returncode == 0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DEBUG", "perhaps"),
        ("DATABASE_URL", "nosuchdb://x"),
        ("SIMRUN_POLL_S", "soon"),
        ("SIMRUN_POLL_S", "-1"),
        ("SIMRUN_BACKEND", "pbs"),
        ("SIMRUN_SLURM_POLL_S", "0"),
        ("SIMRUN_LOCAL_CORES", "many"),
        ("SIMRUN_LOCAL_COMMANDS", "podman"),
        ("SIMRUN_PREPARED_STATEMENTS", "sometimes"),
    ],
)
def test_a_malformed_variable_is_an_error_that_names_it(tmp_path, name, value):
    result = check(tmp_path, SECRET_KEY="s", **{name: value})
    assert result.returncode != 0
    assert name in result.stderr.splitlines()[-1], result.stderr[-500:]


def test_the_beat_schedule_has_reconcile_and_settle_at_the_configured_periods(settings):
    from simrun_site.celery import app

    schedule = app.conf.beat_schedule
    assert schedule["reconcile"]["task"] == "runs.tasks.reconcile"
    assert schedule["reconcile"]["schedule"] == settings.SIMRUN_POLL_S
    assert schedule["settle"]["task"] == "runs.tasks.settle"
    assert schedule["settle"]["schedule"] == settings.SIMRUN_SETTLE_S


@pytest.mark.parametrize(
    ("switch", "threshold"), [({}, "1"), ({"SIMRUN_PREPARED_STATEMENTS": "off"}, "None")]
)
def test_prepared_statements_are_on_unless_turned_off_for_a_pooler(tmp_path, switch, threshold):
    """On, a PostgreSQL connection prepares what it has run once (the lists' statements)."""
    environment = {
        "PATH": os.environ["PATH"],
        "SIMRUN_HOME": str(tmp_path / "home"),
        "SECRET_KEY": "s",
        "DATABASE_URL": os.environ["DATABASE_URL"],
        **switch,
    }
    shown = "from django.db import connection as c; c.ensure_connection(); "
    shown += "print(c.connection.prepare_threshold)"
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-v", "0", "-c", shown],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [threshold]


def deploy_check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``manage.py check --deploy`` as production runs it: no DEBUG, a long random key, hosts."""
    production = {
        "PATH": os.environ["PATH"],
        "SIMRUN_HOME": str(tmp_path / "home"),
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "simrun.example.org",
        **env,
    }
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=production,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_with_simrun_https_the_deploy_check_has_nothing_to_say(tmp_path):
    result = deploy_check(tmp_path, SIMRUN_HTTPS="true")
    assert result.returncode == 0, result.stderr
    assert "WARNINGS" not in result.stderr + result.stdout


def test_without_simrun_https_the_deploy_check_names_the_four_https_settings(tmp_path):
    result = deploy_check(tmp_path)
    assert result.returncode != 0
    warnings = set(re.findall(r"\(security\.(W\d+)\)", result.stderr))
    assert warnings == {"W004", "W008", "W012", "W016"}, result.stderr


def test_simrun_https_sets_hsts_redirect_secure_cookies_and_the_proxy_header(tmp_path):
    code = (
        "from django.conf import settings as s; "
        "print(s.SECURE_HSTS_SECONDS, s.SECURE_HSTS_INCLUDE_SUBDOMAINS, s.SECURE_SSL_REDIRECT,"
        " s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_PROXY_SSL_HEADER)"
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env={
            "PATH": os.environ["PATH"],
            "SIMRUN_HOME": str(tmp_path / "home"),
            "SECRET_KEY": "s",
            "SIMRUN_HTTPS": "true",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.stdout.splitlines()[-1] == (
        "31536000 True True True True ('HTTP_X_FORWARDED_PROTO', 'https')"
    ), result.stderr


@pytest.mark.parametrize(
    ("variables", "scratch"),
    [
        ({}, "home/scratch"),
        ({"SIMRUN_STORE": "shared/store"}, "shared/scratch"),
        ({"SIMRUN_STORE": "shared/store", "SIMRUN_SCRATCH": "fast/tmp"}, "fast/tmp"),
    ],
)
def test_the_scratch_is_beside_the_store_unless_set(tmp_path, variables, scratch):
    """The store is the one of the settings, the scratch ``<store>/../scratch``."""
    environment = {
        "PATH": os.environ["PATH"],
        "SIMRUN_HOME": str(tmp_path / "home"),
        "SECRET_KEY": "s",
        **{name: str(tmp_path / value) for name, value in variables.items()},
    }
    shown = "from django.conf import settings; print(settings.SIMRUN_SCRATCH)"
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-v", "0", "-c", shown],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str((tmp_path / scratch).resolve())]
