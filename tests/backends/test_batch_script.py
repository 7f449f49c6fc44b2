"""The batch script of a Slurm job, run by bash as slurmd runs it (its ``SLURM_*`` variables
set by hand): its scratch folder is its own, whatever else holds the same job id on the node
(a job of another cluster on a shared host, a folder another user planted in ``/tmp``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from runs.backends.slurm.script import batch_script
from runs.backends.slurm.state import NodeSpec
from tests.polling import wait_for


def script(tmp_path: Path, argv: list[str]) -> Path:
    """The script of a command task's job whose command is ``argv``, its logs in tmp_path."""
    spec = NodeSpec(
        name="sim", task="sim", worker="sim", kind="command", argv=argv, env={"SIMRUN_OUT": "out"},
        cores=1, memory_gb=0.25, retry_memory_gb=0.5,
    )  # fmt: skip
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    path = tmp_path / f"job-{len(list(tmp_path.glob('job-*')))}.sh"
    path.write_text(
        batch_script(spec, attempt=0, memory_gb=0.25, logs=logs, bin_dir=tmp_path, grace_s=5)
    )
    return path


def start(path: Path, tmp: Path, job_id: str = "7") -> subprocess.Popen[bytes]:
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp), "SLURM_JOB_ID": job_id}
    return subprocess.Popen(["bash", str(path)], env=env, cwd=tmp.parent)


def test_a_folder_planted_at_the_jobs_scratch_name_is_neither_used_nor_removed(tmp_path: Path):
    tmp = tmp_path / "tmp"
    planted = tmp / "simrun-7-0"
    planted.mkdir(parents=True)
    (planted / "theirs").write_text("planted")
    seen = tmp_path / "seen"
    job = script(tmp_path, ["sh", "-c", f"pwd > {seen}; ls -A >> {seen}"])

    assert start(job, tmp).wait(timeout=60) == 0

    cwd, *listed = seen.read_text().splitlines()
    assert Path(cwd) != planted and Path(cwd).parent == tmp
    assert "theirs" not in listed
    assert (planted / "theirs").read_text() == "planted", "another's folder is left as it was"
    assert sorted(os.listdir(tmp)) == ["simrun-7-0"], "the job's own scratch is removed"


def test_two_jobs_with_one_id_on_one_host_each_have_a_scratch_of_their_own(tmp_path: Path):
    """Two clusters on one host number their jobs alike: the first job's scratch outlives the
    second's end."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    gate, kept = tmp_path / "gate", tmp_path / "kept"
    gate.touch()  # before the job starts: a job that found no gate would end at once
    first = start(
        script(
            tmp_path,
            [
                "sh",
                "-c",
                f"echo mine > mine; while [ -e {gate} ]; do sleep 0.05; done; cat mine > {kept}",
            ],
        ),
        tmp,
    )
    wait_for(
        lambda: any(p.is_dir() and (p / "mine").exists() for p in tmp.iterdir()),
        what="the first job's file",
    )
    assert start(script(tmp_path, ["true"]), tmp).wait(timeout=60) == 0
    gate.unlink()

    assert first.wait(timeout=60) == 0
    assert kept.read_text() == "mine\n"
