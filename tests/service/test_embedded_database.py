"""The embedded default's database: one SQLite file under SIMRUN_HOME, in write-ahead-log mode,
whose commits do not wait for the disk (a kill of the service loses none of them; only the
machine's crash may take the last ones back, never the file's consistency)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service.test_embedded_broker import ROOT, embedded

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a disk of its own needs root"),
]
COMMITS = 100


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A small ext4 of the test's own, mounted from an image in memory; its mount point and
    the statistics of its block device (which count the disk's flushes)."""
    image = Path(tempfile.mkdtemp(dir="/dev/shm")) / "disk.img"
    subprocess.run(["truncate", "-s", "64M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
    try:
        device = subprocess.run(
            ["findmnt", "-n", "-o", "SOURCE", str(mount)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        yield mount, Path("/sys/block", Path(device).name, "stat")
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
        image.unlink()
        image.parent.rmdir()


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
