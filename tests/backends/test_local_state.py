"""The retry policy of the local backend, as on the cluster: what an attempt's end means."""

from __future__ import annotations

from runs.backends.base import PREEMPTED_PHASE, RETRYING_PHASE
from runs.backends.local_state import EVICTION_RETRIES, outcome, retry


def test_only_the_count_of_the_oom_killer_proves_a_kill_for_memory():
    assert outcome({"exit_code": 137, "signal": 9, "oom_kills": 1, "ended": 5}, None) == "oom"
    assert outcome({"exit_code": 137, "signal": None, "oom_kills": 0}, None) == "failed"


def test_a_process_ended_by_a_signal_nobody_of_simrun_sent_was_evicted():
    assert outcome({"exit_code": 143, "signal": 15, "oom_kills": 0, "ended": 5}, None) == "evicted"
    assert outcome({"exit_code": 137, "signal": 9, "oom_kills": 0, "ended": 5}, None) == "evicted"
    assert outcome({"exit_code": 143, "signal": None, "ended": 5}, None) == "evicted"
    assert outcome({"exit_code": None, "message": "lost", "ended": 5}, None) == "evicted"


def test_a_sigterm_of_a_cancel_is_no_eviction():
    ended = {"exit_code": 143, "signal": 15, "oom_kills": 0, "ended": 10.0}
    assert outcome(ended, cancelled_at=9.0) == "cancelled"
    assert outcome(ended, cancelled_at=11.0) == "evicted"  # ended before the cancel
    assert outcome({"exit_code": 0, "ended": 10.0}, cancelled_at=9.0) == "succeeded"


def test_a_kill_for_memory_is_retried_once():
    assert retry(["oom"]) == RETRYING_PHASE
    assert retry(["oom", "oom"]) is None
    assert retry(["evicted", "oom"]) == RETRYING_PHASE


def test_an_eviction_is_retried_up_to_the_limit():
    assert retry(["evicted"] * EVICTION_RETRIES) == PREEMPTED_PHASE
    assert retry(["evicted"] * (EVICTION_RETRIES + 1)) is None
    assert retry(["oom", "evicted"]) == PREEMPTED_PHASE


def test_a_failure_or_a_cancel_is_never_retried():
    assert retry(["failed"]) is None
    assert retry(["cancelled"]) is None
