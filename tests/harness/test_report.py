"""Reports: their file, their JSON across versions, and the start of the harness."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from harness.report import (
    HARNESS_STARTED,
    WorkerReport,
    harness_started,
    node_name,
    read_report,
    write_report,
)


def test_a_report_is_written_as_worker_and_attempt_without_temporary_files(
    tmp_path: Path,
) -> None:
    report = WorkerReport(worker="sweep-w1", node="n1", processes=2, units_done=[3, 4])

    path = write_report(report, tmp_path, attempt=3)

    assert path == tmp_path / "workers" / "sweep-w1-3.json"
    assert os.listdir(tmp_path / "workers") == ["sweep-w1-3.json"]
    assert read_report(path) == report


def test_a_report_of_a_newer_harness_is_read_without_its_new_fields() -> None:
    text = json.dumps(
        {"worker": "w", "node": "n", "processes": 1, "oom_kills": 2, "gpu_seconds": 7.0}
    )

    report = WorkerReport.from_json(text)

    assert report.oom_kills == 2 and report.started is None and report.throttled_seconds is None


def test_a_report_of_an_older_harness_has_the_defaults_of_the_new_fields() -> None:
    report = WorkerReport.from_json('{"worker": "w", "node": "n", "processes": 4}')

    assert report.prepare_seconds == 0.0 and report.cpu_seconds == 0.0 and not report.failed


def test_the_start_of_the_harness_is_set_once_and_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HARNESS_STARTED, "")

    first = harness_started()

    assert os.environ[HARNESS_STARTED] == repr(first)
    assert harness_started() == first
    monkeypatch.setenv(HARNESS_STARTED, "1700000000.5")
    assert harness_started() == 1700000000.5


def test_the_node_comes_from_the_downward_api_else_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SIMRUN_NODE", raising=False)
    monkeypatch.setenv("NODE_NAME", "node-7")
    assert node_name() == "node-7"
    monkeypatch.delenv("NODE_NAME")
    assert node_name() == os.uname().nodename


def test_a_report_is_a_new_file_renamed_over_the_old_so_a_reader_sees_one_or_the_other(
    tmp_path: Path,
) -> None:
    old = WorkerReport(worker="sweep-w0", node="n1", processes=1, units_done=[0])
    path = write_report(old, tmp_path)
    with open(path, "rb") as reader:  # the service opened the report before it was rewritten
        new = WorkerReport(worker="sweep-w0", node="n1", processes=1, units_done=list(range(9)))
        write_report(new, tmp_path)
        assert reader.read() == old.to_json().encode()  # the whole old one, never a mix
    assert read_report(path) == new


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small disk needs root, as CI has")
def test_a_report_that_does_not_fit_on_the_disk_leaves_the_old_one_whole(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
    try:
        old = WorkerReport(worker="sweep-w0", node="n1", processes=1, units_done=[0])
        path = write_report(old, disk)
        filler = disk / "filler"
        with contextlib.suppress(OSError), open(filler, "wb") as handle:
            while True:  # the disk full, the old report on it
                handle.write(b"x" * 4096)
                handle.flush()
        big = WorkerReport(worker="sweep-w0", node="n1", processes=1, units_done=list(range(9999)))
        with pytest.raises(OSError):
            write_report(big, disk)
        assert read_report(path) == old
        assert sorted(os.listdir(disk / "workers")) == ["sweep-w0-0.json"]  # no temporary left
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
