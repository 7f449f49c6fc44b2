"""The retry policy of the local backend, as on the cluster: what an attempt's end means."""

from __future__ import annotations

from pathlib import Path

from runs.backends.base import PREEMPTED_PHASE, RETRY_LIMIT, RETRYING_PHASE
from runs.backends.local.state import Attempt, NodeSpec, NodeView, outcome, retry


def test_only_the_count_of_the_oom_killer_proves_a_kill_for_memory():
    assert outcome({"exit_code": 137, "signal": 9, "oom_kills": 1, "ended": 5}, None) == "oom"
    assert outcome({"exit_code": 75, "signal": None, "ended": 5}, None) == "evicted"


def test_a_sigkill_without_the_oom_killers_count_is_retried_once_as_argo_retries_137():
    assert outcome({"exit_code": 137, "signal": 9, "oom_kills": 0, "ended": 5}, None) == "killed"
    assert outcome({"exit_code": 137, "signal": None, "ended": 5}, None) == "killed"


def test_only_what_simrun_did_is_an_eviction():
    stopped = {"exit_code": 143, "signal": 15, "ended": 5, "stopped_by_simrun": True}
    assert outcome(stopped, None) == "evicted"
    assert outcome({"exit_code": None, "message": "lost", "ended": 5}, None) == "evicted"


def test_a_signal_the_task_sent_itself_is_a_failure():
    assert outcome({"exit_code": 143, "signal": 15, "oom_kills": 0, "ended": 5}, None) == "failed"
    assert outcome({"exit_code": 143, "signal": None, "ended": 5}, None) == "failed"
    assert outcome({"exit_code": 130, "signal": 2, "ended": 5}, None) == "failed"


def test_a_sigterm_of_a_cancel_is_no_eviction():
    ended = {"exit_code": 143, "signal": 15, "ended": 10.0, "stopped_by_simrun": True}
    assert outcome(ended, cancelled_at=9.0) == "cancelled"
    assert outcome({"exit_code": 0, "ended": 10.0}, cancelled_at=9.0) == "succeeded"


def view(*ends: tuple[str, float]) -> NodeView:
    """A node whose attempts ended with these outcomes, each with the memory it ran with."""
    spec = NodeSpec(
        name="t-w0",
        task="t",
        worker="t-w0",
        kind="split",
        cores=1,
        memory_gb=1.0,
        retry_memory_gb=2.0,
    )
    attempts = [
        Attempt("t-w0", i, Path("."), launch={"memory_gb": gb}, exit={"exit_code": 1})
        for i, (_, gb) in enumerate(ends)
    ]
    return NodeView(spec, attempts, [result for result, _ in ends])  # type: ignore[misc]


def test_a_kill_for_memory_is_retried_unless_it_had_the_retry_memory():
    assert retry(view(("oom", 1.0))) == RETRYING_PHASE
    assert retry(view(("oom", 1.0), ("oom", 2.0))) is None
    assert retry(view(("evicted", 1.0), ("oom", 1.0))) == RETRYING_PHASE
    assert retry(view(("oom", 1.0), ("evicted", 2.0), ("oom", 1.0), ("oom", 2.0))) is None
    assert retry(view(("oom", 1.0), ("evicted", 2.0), ("oom", 1.0))) == RETRYING_PHASE


def test_an_eviction_is_retried_up_to_the_limit():
    assert retry(view(*[("evicted", 1.0)] * RETRY_LIMIT)) == PREEMPTED_PHASE
    assert retry(view(*[("evicted", 1.0)] * (RETRY_LIMIT + 1))) is None
    assert retry(view(("oom", 1.0), ("evicted", 2.0))) == PREEMPTED_PHASE


def test_a_failure_or_a_cancel_is_never_retried():
    assert retry(view(("failed", 1.0))) is None
    assert retry(view(("cancelled", 1.0))) is None


def test_a_sigkill_no_cgroup_explains_is_retried_once_never_more():
    assert retry(view(("killed", 1.0))) == RETRYING_PHASE
    assert retry(view(("killed", 1.0), ("killed", 2.0))) is None
    assert retry(view(("killed", 1.0), ("killed", 1.0))) is None
