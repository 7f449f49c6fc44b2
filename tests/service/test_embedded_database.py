"""The embedded default's database: one SQLite file under SIMRUN_HOME, in write-ahead-log mode,
whose commits do not wait for the disk (a kill of the service loses none of them; only the
machine's crash may take the last ones back, never the file's consistency)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.floods import ext4
from tests.service.test_embedded_broker import ROOT, embedded

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a disk of its own needs root"),
]
COMMITS = 100


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A small ext4 of the test's own; its mount point and the statistics of its block device
    (which count the disk's flushes)."""
    with ext4(tmp_path / "disk", 64) as mount:
        device = subprocess.run(
            ["findmnt", "-n", "-o", "SOURCE", str(mount)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        yield mount, Path("/sys/block", Path(device).name, "stat")


def test_a_hundred_commits_of_the_embedded_database_do_not_each_flush_the_disk(disk):
    mount, stat = disk
    # The flushes the block device completed (/sys/block/*/stat's 16th field), around the
    # commits only: migrating first is the service's start, not what is measured.
    program = textwrap.dedent(
        f"""
        import django; django.setup()
        from django.contrib.auth.models import Group
        from django.core.management import call_command
        from django.db import connection
        call_command("migrate", verbosity=0)
        flushes = lambda: int(open({str(stat)!r}).read().split()[15])
        before = flushes()
        for i in range({COMMITS}):
            Group.objects.create(name=f"group-{{i}}")
        print(connection.vendor, flushes() - before)
        """
    )
    env = {**embedded(mount / "home"), "DJANGO_SETTINGS_MODULE": "simrun_site.settings"}
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    vendor, flushes = done.stdout.split()

    assert vendor == "sqlite"
    # One flush a commit (or two) when each waits for the disk; a checkpoint's and the
    # filesystem journal's few (one each 5 s) when none does.
    assert int(flushes) < COMMITS // 2, flushes
