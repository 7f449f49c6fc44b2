"""One retry rule for both backends, proven attempt by attempt (runs.backends.retry_rule).

For each sequence of attempt ends, three places must agree on the memory of every attempt
and on the end of the run: the Workflow the Argo backend renders (its ``podSpecPatch`` and
retry expression evaluated as Argo would), the local backend's choice of the next attempt's
memory and of its retry, and the controller, which records what each attempt ran with and
fails the run only on the second proven kill for memory, one that had the retry memory.
"""
# ruff: noqa: F811  (the fixtures are imported from controller_support by name)

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.tasktypes import task_types
from runs.backends.argo.manifest import workflow_manifest
from runs.backends.argo.retries import RETRY_EXPRESSION
from runs.backends.base import RETRY_LIMIT, RETRYING_PHASE, ClusterConfig, TaskPlan
from runs.backends.local.state import Attempt as LocalAttempt
from runs.backends.local.state import NodeSpec, NodeView, next_memory_gb, retry
from runs.models import Attempt, Run, RunState, Task
from tests.backends.argo_pods import main_container, node_pod
from tests.backends.argo_runs import evaluate, run_of
from tests.service.controller_support import (  # noqa: F401
    SWEEP,
    fake,
    fresh,
    home,
    launch,
    poll,
    sent,
    write_report,
)

SPEC = """
tasks:
  sweep: {type: squares, settings: {n: 6}, workers: 3}
"""
FIRST = {"exitCode": "-1", "status": "", "message": ""}
"""``lastRetry`` of a first attempt."""

ENDS: dict[str, dict[str, Any]] = {
    "oom": {
        "argo": {"exitCode": "137", "status": "Failed", "message": "OOMKilled (exit code 137)"},
        "fake": {"exit_code": 137, "oom_killed": True},
        "local": ("oom", {"exit_code": 137, "signal": 9, "oom_kills": 1}),
    },
    "grace": {  # a SIGKILL after the grace period: 137, and no OOM kill in the report
        "argo": {"exitCode": "137", "status": "Failed", "message": ""},
        "fake": {"exit_code": 137},
        "local": ("evicted", {"exit_code": 137, "signal": 9, "oom_kills": 0}),
        "report": {"oom_kills": 0, "memory_limit_bytes": None},
    },
    "preempt": {
        "argo": {"exitCode": "-1", "status": "Error", "message": "pod deleted"},
        "fake": {"exit_code": None, "evicted": True, "message": "pod deleted"},
        "local": ("evicted", {"exit_code": 143, "signal": 15, "oom_kills": 0}),
    },
    "sigterm": {
        "argo": {"exitCode": "143", "status": "Failed", "message": ""},
        "fake": {"exit_code": 143, "evicted": True},
        "local": ("evicted", {"exit_code": 143, "signal": 15, "oom_kills": 0}),
    },
    "fail": {
        "argo": {"exitCode": "3", "status": "Failed", "message": ""},
        "fake": {"exit_code": 3},
        "local": ("failed", {"exit_code": 3, "signal": None, "oom_kills": 0}),
    },
}

# The ends of the attempts, the memory each ran with (m: the plan's, R: the retry memory),
# and the end of the run: succeeded, failed for memory (Ruling 35), failed otherwise.
SEQUENCES = [
    (["ok"], "m", "succeeded"),
    (["oom", "ok"], "mR", "succeeded"),
    (["oom", "oom"], "mR", "memory"),
    (["oom", "preempt", "oom", "ok"], "mRmR", "succeeded"),
    (["oom", "preempt", "oom", "oom"], "mRmR", "memory"),
    (["grace", "oom", "ok"], "mRR", "succeeded"),
    (["grace", "oom", "oom"], "mRR", "memory"),
    (["grace", "grace", "oom", "oom"], "mRRR", "memory"),
    (["grace", "ok"], "mR", "succeeded"),
    (["sigterm", "oom", "ok"], "mmR", "succeeded"),
    (["preempt", "preempt", "ok"], "mmm", "succeeded"),
    (["oom", "grace", "oom"], "mRR", "memory"),
    (["oom", "sigterm", "ok"], "mRm", "succeeded"),
    (["fail"], "m", "failed"),
]
IDS = ["-".join(ends) for ends, _, _ in SEQUENCES]


def symbols(memories: list[float], plan: TaskPlan) -> str:
    """``m`` for the plan's memory, ``R`` for the retry memory, ``?`` for anything else."""
    named = {plan.memory_gb: "m", plan.retry_memory_gb: "R"}
    return "".join(named.get(round(gb, 3), "?") for gb in memories)


@pytest.mark.parametrize(("ends", "memories", "verdict"), SEQUENCES, ids=IDS)
def test_the_argo_workflow_gives_each_attempt_the_memory_of_the_rule(ends, memories, verdict):
    record, plans = run_of(SPEC)
    workflow = workflow_manifest(
        record=record, plans=plans, types=task_types(), cluster=ClusterConfig()
    )
    found = []
    last = FIRST
    for number, end in enumerate(ends):
        pod = node_pod(workflow, "sweep-w0", last, attempt=number)
        env = {e["name"]: e.get("value") for e in main_container(pod)["env"]}
        found.append(float(env["SIMRUN_MEMORY_LIMIT_GB"]))
        if end == "ok":
            break
        last = ENDS[end]["argo"]
        retried = evaluate(RETRY_EXPRESSION, last) and number < RETRY_LIMIT
        assert retried == (end != "fail"), f"attempt {number} ({end})"
    assert symbols(found, plans["sweep"]) == memories


def local_memories(ends: list[str], verdict: str, memory_gb: float, retry_gb: float) -> list[float]:
    """The local backend through ``ends``, asserting its retry decision after each attempt;
    the memory each attempt ran with."""
    spec = NodeSpec(
        name="sweep-w0", task="sweep", worker="sweep-w0", kind="split", cores=1,
        memory_gb=memory_gb, retry_memory_gb=retry_gb,
    )  # fmt: skip
    view = NodeView(spec)
    for number, end in enumerate(ends):
        gb = next_memory_gb(view)
        attempt = LocalAttempt("sweep-w0", number, Path("."), launch={"memory_gb": gb})
        view.attempts.append(attempt)
        if end == "ok":
            view.outcomes.append("succeeded")
            break
        outcome, attempt.exit = ENDS[end]["local"]
        view.outcomes.append(outcome)
        last = number == len(ends) - 1
        assert (retry(view) is None) == (last and verdict != "succeeded"), f"attempt {number}"
    return [a.memory_gb for a in view.attempts]


@pytest.mark.parametrize(("ends", "memories", "verdict"), SEQUENCES, ids=IDS)
def test_the_local_backend_gives_each_attempt_the_memory_of_the_rule(ends, memories, verdict):
    plan = TaskPlan(cores=1, memory_gb=1.0, base_gb=0, per_worker_gb=1.0, retry_memory_gb=2.0)
    assert symbols(local_memories(ends, verdict, 1.0, 2.0), plan) == memories


def controller_run(launch, fake, ends: list[str], *, at_the_limit: bool = False) -> Run:
    """A run of ``SWEEP`` whose coordinator ends as ``ends`` say, polled after each; with
    ``at_the_limit``, its plan's retry memory is its memory (a plan capped at the machine)."""
    run = launch(SWEEP)
    if at_the_limit:
        task = Task.objects.get(run=run)
        task.plan = {**task.plan, "retry_memory_gb": task.plan["memory_gb"]}
        task.save(update_fields=["plan"])
    for number, end in enumerate(ends):
        if end == "ok":
            fake.set_nodes(run.workflow, {"sweep-w0": "Succeeded", "sweep-merge": "Succeeded"})
        else:
            if "report" in ENDS[end]:
                write_report(run, "sweep-w0", number, **ENDS[end]["report"])
            phase = "Failed" if end == "fail" else RETRYING_PHASE
            fake.set_nodes(run.workflow, {"sweep-w0": phase})
            fake.fail_attempt(run.workflow, "sweep-w0", attempt=number, **ENDS[end]["fake"])
        poll(fake)
        if number < len(ends) - 1:
            assert fresh(run).state == RunState.RUNNING, f"after attempt {number} ({end})"
    return fresh(run)


def assert_verdict(run: Run, verdict: str) -> None:
    expected = RunState.SUCCEEDED if verdict == "succeeded" else RunState.FAILED
    assert run.state == expected, run.message
    assert ("with the retry memory" in run.message) == (verdict == "memory"), run.message


@pytest.mark.django_db
@pytest.mark.parametrize(("ends", "memories", "verdict"), SEQUENCES, ids=IDS)
def test_the_controller_records_the_memory_of_each_attempt_and_decides_on_it(
    launch, fake, ends, memories, verdict
):
    run = controller_run(launch, fake, ends)
    plan = TaskPlan.model_validate(Task.objects.get(run=run).plan)
    rows = Attempt.objects.filter(task__run=run, worker="sweep-w0").order_by("attempt")
    assert [a.attempt for a in rows] == list(range(len(ends)))
    assert symbols([a.memory_gb for a in rows], plan) == memories
    assert_verdict(run, verdict)


# A plan at the limit: the machine's, the node's or a capped plan has a retry memory equal to
# its own. The retry is the attempt after a kill whatever its memory, so the verdicts are the
# same as above (Ruling 35): a second proven kill of the retry fails the run.


@pytest.mark.parametrize(("ends", "memories", "verdict"), SEQUENCES, ids=IDS)
def test_the_local_backend_decides_the_same_for_a_plan_at_the_limit(ends, memories, verdict):
    assert set(local_memories(ends, verdict, 4.0, 4.0)) == {4.0}


@pytest.mark.django_db
@pytest.mark.parametrize(("ends", "memories", "verdict"), SEQUENCES, ids=IDS)
def test_the_controller_decides_the_same_for_a_plan_at_the_limit(
    launch, fake, ends, memories, verdict
):
    assert_verdict(controller_run(launch, fake, ends, at_the_limit=True), verdict)
