"""One retry rule for both backends, proven attempt by attempt (runs.backends.retry_rule).

For each sequence of attempt ends, three places must agree on the memory of every attempt
and on the end of the run: the Workflow the Argo backend renders (its ``podSpecPatch`` and
retry expression evaluated as Argo would), the local backend's choice of the next attempt's
memory and of its retry, and the controller, which records what each attempt ran with and
fails the run only on the second proven kill for memory, one that had the retry memory.
"""
# ruff: noqa: F811  (the fixtures are imported from controller_support by name)

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from harness.lifecycle import AFTER_MEMORY_KILL, retry_memory_note
from harness.tasktypes import task_types
from runs.backends.argo.manifest import workflow_manifest
from runs.backends.argo.retries import RETRY_EXPRESSION, memory_quantity
from runs.backends.argo.versions import main_caps
from runs.backends.base import RETRY_LIMIT, RETRYING_PHASE, ClusterConfig, RunRecord, TaskPlan
from runs.backends.local.state import Attempt as LocalAttempt
from runs.backends.local.state import NodeSpec, NodeView, next_memory_gb, retry
from runs.control import submitting
from runs.models import Attempt, Run, RunState, Task
from runs.planning.planner import GB_STEP, ObservedPeak, observation_keys, plan_run
from runs.planning.spec_document import parse_spec
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


def controller_run(launch, fake, ends: list[str], *, plan: TaskPlan | None = None) -> Run:
    """A run of ``SWEEP`` whose coordinator ends as ``ends`` say, polled after each; with
    ``plan``, its task is submitted with that plan instead of the one it was planned with."""
    run = launch(SWEEP, submit=plan is None)
    if plan is not None:
        Task.objects.filter(run=run).update(plan=plan.model_dump(mode="json"))
        assert submitting.submit(run.id, backend=fake)
        run = fresh(run)
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


# Plans at the limit, as the planner makes them: where a plan's memory is the most this machine
# or the largest node offers (capped there, with or without a history), its retry memory cannot
# be larger and is the same (a sized command one step below it gets the limit as its retry
# memory). The retry is the attempt after a kill whatever its memory (Ruling 35), so the table
# above holds as it is, attempt by attempt: one retry after a proven kill, and a second proven
# kill of the retry fails the run, naming the retry memory; never retried again and again.

SMALL_NODE = main_caps({"cpu": Decimal(4), "memory": Decimal(320 * 2**20)})
"""What a pod's ``main`` may ask of a node of 4 cores and 320 MiB, Argo's ``wait`` beside it
(3 cores, 0.25 GiB): the Argo backend caps plans there (``Capacity.max_memory_gb``)."""
LARGE_NODE = main_caps({"cpu": Decimal(4), "memory": Decimal(2 * 2**30)})
"""The same for a node of 4 cores and 2 GiB (3 cores, 1.93 GiB)."""
KILLED = [ObservedPeak(3.0, oom=True, at=float(i)) for i in range(5)]
"""Five kills for memory at 3 GiB: a history that sizes a plan above the large node."""
LIMITS: dict[str, tuple[list[ObservedPeak], dict[str, Any]]] = {
    "machine": ([], {"max_cores": 2, "max_memory_gb": 0.25, "largest": "this machine"}),
    "node": ([], {"max_cores": SMALL_NODE[0], "max_memory_gb": SMALL_NODE[1]}),
    "sized": (KILLED, {"max_cores": LARGE_NODE[0], "max_memory_gb": LARGE_NODE[1]}),
}
"""The observations of every task and the caps of the backend, by where the plan hits them."""
AT_THE_LIMIT = f"name: limits\n{SPEC.strip()}\n  solve: {{command: [solve]}}\n"
"""``SPEC``'s split task and a command task, in a run with a name (a command keyed by it)."""
HARNESS = {"sweep-w0": True, "solve": False}
"""Whether a pod runs simrun's harness, which notes the retry memory in its termination
message; a command task runs in its own image without it."""


def plans_at_the_limit(limit: str) -> tuple[RunRecord, dict[str, TaskPlan]]:
    """The record of ``AT_THE_LIMIT`` and its plans, as the submission plans them on a backend
    whose largest pod is ``LIMITS[limit]``."""
    observed, caps = LIMITS[limit]
    types = task_types()
    spec = parse_spec(AT_THE_LIMIT, types=types)
    history = dict.fromkeys(observation_keys(spec).values(), observed)
    record, _ = run_of(AT_THE_LIMIT)
    return record, plan_run(spec, types=types, observed=history, **caps)


def expected_memories(memories: str, plan: TaskPlan) -> list[float]:
    """The memory of each attempt a row of ``SEQUENCES`` gives, in GiB."""
    return [plan.memory_gb if symbol == "m" else plan.retry_memory_gb for symbol in memories]


@pytest.mark.parametrize("limit", LIMITS)
def test_the_planner_gives_a_plan_at_the_limit_no_larger_retry_memory(limit):
    cap = LIMITS[limit][1]["max_memory_gb"]
    _, plans = plans_at_the_limit(limit)
    for task_id, plan in plans.items():
        assert cap - GB_STEP < plan.memory_gb <= plan.retry_memory_gb == cap, task_id
    assert plans["sweep"].memory_gb == plans["sweep"].retry_memory_gb == cap
    assert f"capped at {cap:g} GiB" in plans["sweep"].why_short


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("node", HARNESS)
@pytest.mark.parametrize(("ends", "memories", "verdict"), SEQUENCES, ids=IDS)
def test_the_argo_workflow_at_the_limit_gives_each_attempt_the_memory_of_the_rule(
    ends, memories, verdict, node, limit
):
    """The rendered Workflow of a plan at the limit, evaluated as Argo would: each attempt's
    memory (the ``podSpecPatch``'s limit and ``SIMRUN_MEMORY_LIMIT_GB``), and whether the retry
    expression starts another. A split task's harness notes the retry memory after a proven
    kill, so Argo leaves its second kill unretried; a command task's second kill is retried
    once more (nothing in its pod can say it had the retry memory) and the service fails the
    run and stops the workflow (the controller's test below, and test_argo_memory)."""
    record, plans = plans_at_the_limit(limit)
    plan = plans[node.removesuffix("-w0")]
    workflow = workflow_manifest(
        record=record, plans=plans, types=task_types(), cluster=ClusterConfig()
    )
    found = []
    last = FIRST
    for number, end in enumerate(ends):
        main = main_container(node_pod(workflow, node, last, attempt=number))
        env = {e["name"]: e.get("value") for e in main["env"]}
        found.append(float(env["SIMRUN_MEMORY_LIMIT_GB"]))
        assert main["resources"]["limits"]["memory"] == memory_quantity(found[-1])
        if end == "ok":
            break
        last = dict(ENDS[end]["argo"])
        noted = end == "oom" and HARNESS[node] and env[AFTER_MEMORY_KILL] == "1"
        if noted:  # the harness's termination message, which Argo appends to the node's
            last["message"] = f"{last['message']}: {retry_memory_note(env)}"
        retried = evaluate(RETRY_EXPRESSION, last) and number < RETRY_LIMIT
        assert retried == (end != "fail" and not noted), f"attempt {number} ({end})"
        if end == "oom" and number > 0 and ends[number - 1] == "oom":
            assert retried == (not HARNESS[node]), "the second of two kills in a row"
    assert found == expected_memories(memories, plan)


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize(("ends", "memories", "verdict"), SEQUENCES, ids=IDS)
def test_the_local_backend_decides_the_same_for_a_plan_at_the_limit(ends, memories, verdict, limit):
    _, plans = plans_at_the_limit(limit)
    plan = plans["sweep"]
    found = local_memories(ends, verdict, plan.memory_gb, plan.retry_memory_gb)
    assert found == expected_memories(memories, plan)


@pytest.mark.django_db
@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize(("ends", "memories", "verdict"), SEQUENCES, ids=IDS)
def test_the_controller_decides_the_same_for_a_plan_at_the_limit(
    launch, fake, ends, memories, verdict, limit
):
    _, plans = plans_at_the_limit(limit)
    plan = plans["sweep"]
    run = controller_run(launch, fake, ends, plan=plan)
    rows = Attempt.objects.filter(task__run=run, worker="sweep-w0").order_by("attempt")
    assert [a.memory_gb for a in rows] == pytest.approx(expected_memories(memories, plan))
    assert_verdict(run, verdict)
    if verdict == "memory":
        assert f"with the retry memory {plan.retry_memory_gb:g} GiB" in run.message
