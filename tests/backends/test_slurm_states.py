"""What the Slurm backend reads of squeue and sacct lines Slurm cannot be made to write on this
machine's cluster: pending reasons of accounts, QOSes and features an administrator changed
after the job was queued, and BOOT_FAIL (a node that powers up on demand and did not boot; the
cluster of ``.ci/slurm`` has no power saving). The parser alone; no Slurm call."""

from __future__ import annotations

import pytest

from runs.backends.slurm.state import Job
from runs.backends.slurm.status import (
    SACCT_FIELDS,
    SQUEUE_FIELDS,
    learn,
    message,
    outcome,
    parse_sacct,
    parse_squeue,
)


def job() -> Job:
    return Job(node="sim", job_id="41", attempt=0, memory_gb=0.25, submitted_at=0.0)


def squeue_line(state: str, reason: str) -> str:
    """A line of ``squeue -O <squeue_format()>`` as Slurm 22.05 writes it."""
    fields = {
        "JobArrayID": "41",
        "Name": "simrun-r1",
        "Comment": "simrun run=r1 node=sim attempt=0",
        "State": state,
        "Reason": reason,
        "NodeList": "",
        "exit_code": "0",
        "StartTime": "N/A",
        "EndTime": "N/A",
        "RestartCnt": "0",
        "SubmitTime": "2026-12-06T13:00:00",
    }
    assert list(fields) == SQUEUE_FIELDS.split(",")
    return "".join(f"{value}|" for value in fields.values())


@pytest.mark.parametrize("reason", ["InvalidAccount", "InvalidQOS", "BadConstraints"])
def test_a_pending_reason_that_never_clears_starts_the_pending_timeout(reason):
    pending = job()
    learn(pending, parse_squeue(squeue_line("PENDING", reason))["41"])
    assert pending.reason == reason and pending.stuck_since is not None
    # Once the reason is one that clears (the administrator acted), the count starts again.
    learn(pending, parse_squeue(squeue_line("PENDING", "Priority"))["41"])
    assert pending.reason == "Priority" and pending.stuck_since is None


def test_boot_fail_is_an_eviction_in_slurms_words():
    assert SACCT_FIELDS == "JobID,State,ExitCode,NodeList,Start,End"
    ended = job()
    line = "41|BOOT_FAIL|0:0|n1|2026-12-06T13:00:01|2026-12-06T13:00:02"
    learn(ended, parse_sacct(line)["41"])
    assert ended.final and ended.state == "BOOT_FAIL" and ended.host == "n1"
    assert outcome(ended, stopped_at=None) == "evicted"
    assert message(ended, stopped_at=None).startswith("Slurm: BOOT_FAIL, its node did not boot")
