"""What the backend's status means: task states, merge markers, OOM evidence (no database)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness import untrusted
from harness.report import WorkerReport
from runs.backends.base import PREEMPTED_PHASE, RETRYING_PHASE, BackendStatus, TaskPlan
from runs.common.store import TaskFolder
from runs.control import closing
from runs.control.observations import is_oom
from runs.control.reports import attempt_of
from runs.control.states import has_merge_marker, task_states
from runs.models import Run, RunState, TaskState

PLAN = TaskPlan(
    cores=2, memory_gb=1.0, workers=3, base_gb=0.1, per_worker_gb=0.4, retry_memory_gb=2
)
MERGING = PLAN.model_copy(update={"coordinator_merges": True, "workers": 1})


def never(task_id: str) -> TaskState:
    raise AssertionError(f"merge_state asked for {task_id}")


def split(nodes: dict[str, str], *, plan: TaskPlan = PLAN, merge_state=never) -> TaskState:
    status = BackendStatus(phase="Running", tasks=nodes)
    found = task_states(
        kinds={"sweep": "split"}, status=status, plans={"sweep": plan}, merge_state=merge_state
    )
    return found["sweep"]


def unsplit(phase: str | None) -> TaskState:
    status = BackendStatus(phase="Running", tasks={} if phase is None else {"plot": phase})
    found = task_states(
        kinds={"plot": "command"}, status=status, plans={"plot": PLAN}, merge_state=never
    )
    return found["plot"]


# A split task


def test_a_split_task_is_done_when_its_merge_node_succeeded():
    assert split({"sweep-w0": "Succeeded", "sweep-merge": "Succeeded"}) == TaskState.DONE


def test_a_split_task_whose_coordinator_is_done_is_running_while_the_merge_waits():
    assert split({"sweep-w0": "Succeeded"}) == TaskState.RUNNING
    assert split({"sweep-w0": "Succeeded", "sweep-merge": "Pending"}) == TaskState.RUNNING
    assert split({"sweep-w0": "Succeeded", "sweep-merge": "Running"}) == TaskState.RUNNING


def test_a_split_task_fails_when_its_coordinator_or_its_merge_failed():
    assert split({"sweep-w0": "Failed"}) == TaskState.FAILED
    assert split({"sweep-w0": "Error", "sweep-extra(0:1)": "Running"}) == TaskState.FAILED
    assert split({"sweep-w0": "Succeeded", "sweep-merge": "Failed"}) == TaskState.FAILED


def test_an_extra_worker_never_fails_its_task():
    extra_failed = {"sweep-w0": "Running", "sweep-extra(0:1)": "Failed"}
    assert split(extra_failed) == TaskState.RUNNING
    done = {"sweep-w0": "Succeeded", "sweep-extra(0:1)": "Error", "sweep-merge": "Succeeded"}
    assert split(done) == TaskState.DONE


def test_a_task_with_a_running_pod_is_running():
    assert split({"sweep-w0": "Pending", "sweep-extra(1:2)": "Running"}) == TaskState.RUNNING


def test_a_task_is_preempted_when_no_pod_runs_and_an_evicted_one_waits_for_its_retry():
    nodes = {"sweep-w0": PREEMPTED_PHASE, "sweep-extra(0:1)": "Pending"}
    assert split(nodes) == TaskState.PREEMPTED
    assert split({**nodes, "sweep-extra(0:1)": "Running"}) == TaskState.RUNNING
    assert unsplit(PREEMPTED_PHASE) == TaskState.PREEMPTED


def test_a_task_is_retrying_when_no_pod_runs_and_one_that_failed_waits_for_its_retry():
    assert split({"sweep-w0": RETRYING_PHASE, "sweep-extra(0:1)": "Pending"}) == TaskState.RETRYING
    assert unsplit(RETRYING_PHASE) == TaskState.RETRYING


def test_a_task_with_pods_none_of_which_runs_is_queued_and_one_without_pods_waits():
    assert split({"sweep-w0": "Pending", "sweep-extra(0:1)": "Pending"}) == TaskState.QUEUED
    assert split({}) == TaskState.WAITING
    assert unsplit("Pending") == TaskState.QUEUED
    assert unsplit(None) == TaskState.WAITING


def test_the_nodes_of_another_task_with_a_similar_name_are_not_its_pods():
    status = BackendStatus(phase="Running", tasks={"sweep-b-w0": "Running", "sweep-w0": "Pending"})
    found = task_states(
        kinds={"sweep": "split", "sweep-b": "split"},
        status=status,
        plans={"sweep": PLAN, "sweep-b": PLAN},
        merge_state=never,
    )
    assert found == {"sweep": TaskState.QUEUED, "sweep-b": TaskState.RUNNING}


def test_an_unsplit_task_is_its_node():
    assert unsplit("Running") == TaskState.RUNNING
    assert unsplit("Succeeded") == TaskState.DONE
    assert unsplit("Failed") == TaskState.FAILED
    assert unsplit("Error") == TaskState.FAILED
    assert unsplit("Omitted") == TaskState.SKIPPED


def test_a_split_task_whose_coordinator_merges_asks_merge_state_once_the_coordinator_succeeded():
    asked = []

    def merge_state(task_id: str) -> TaskState:
        asked.append(task_id)
        return TaskState.DONE

    assert split({"sweep-w0": "Running"}, plan=MERGING, merge_state=merge_state) == "running"
    assert asked == []
    assert split({"sweep-w0": "Succeeded"}, plan=MERGING, merge_state=merge_state) == "done"
    assert asked == ["sweep"]
    running = split({"sweep-w0": "Succeeded"}, plan=MERGING, merge_state=lambda t: "running")
    assert running == TaskState.RUNNING


# The merge marker


def test_the_merge_marker_is_found_in_out(tmp_path: Path):
    folder = TaskFolder(tmp_path, ("task",))
    assert not has_merge_marker(folder)
    (tmp_path / "task" / "out").mkdir(parents=True)
    assert not has_merge_marker(folder)
    (tmp_path / "task" / "out" / "squares.json").write_text("[]")
    assert not has_merge_marker(folder)
    (tmp_path / "task" / "out" / ".simrun-merged").touch()
    assert has_merge_marker(folder)
    assert not has_merge_marker(TaskFolder(tmp_path, ("missing",)))


def test_a_link_as_out_to_a_merged_folder_is_no_merge(tmp_path: Path):
    (tmp_path / "merged").mkdir()
    (tmp_path / "merged" / ".simrun-merged").touch()
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "out").symlink_to(tmp_path / "merged")
    assert not has_merge_marker(TaskFolder(tmp_path, ("task",)))


def test_the_merge_marker_is_found_by_listing_the_task_directory_then_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".simrun-merged").touch()
    listed: list[tuple[str, ...]] = []
    real_list_dir = untrusted.list_dir

    def list_dir(base, relative, limit=100_000):
        listed.append(tuple(relative))
        return real_list_dir(base, relative, limit)

    def no_lookup(*args, **kwargs):
        raise AssertionError("a lookup may answer from a cached negative entry on NFS")

    monkeypatch.setattr(untrusted, "list_dir", list_dir)
    monkeypatch.setattr(os, "stat", no_lookup)
    monkeypatch.setattr(os.path, "exists", no_lookup)
    assert has_merge_marker(TaskFolder(tmp_path))
    assert listed == [(), ("out",)]


# Reports and OOM evidence


def test_the_attempt_of_a_report_is_the_number_after_its_worker_and_0_without_one():
    assert attempt_of("sweep-w0-1.json") == 1
    assert attempt_of("sweep-w12-0.json") == 0
    assert attempt_of("sweep-w0-13.json") == 13
    assert attempt_of("plot-2.json") == 2
    assert attempt_of("sweep-w0.json") == 0
    assert attempt_of("plot.json") == 0


def report(**fields) -> WorkerReport:
    return WorkerReport(worker="sweep-w0", node="node-a", processes=2, **fields)


def test_only_the_oom_killers_evidence_makes_a_kill_for_memory():
    limit = 2**30
    near_the_limit = report(peak_memory_bytes=limit - 1, memory_limit_bytes=limit)
    assert not is_oom(near_the_limit, 0, {})
    assert is_oom(report(oom_kills=1), 0, {})
    assert is_oom(report(), 1, {"sweep-w0": [1]})
    assert not is_oom(report(), 0, {"sweep-w0": [1]})
    assert not is_oom(report(), 1, {"sweep-w1": [1]})


# The terminal record


def test_the_terminal_record_skips_tasks_not_final_and_releases_the_node():
    run = Run(id="r1", workflow="simrun-r1", reserved_node="node-a", merge_pending={"a": 1.0})
    tasks = {"a": TaskState.DONE, "b": TaskState.RUNNING, "c": TaskState.FAILED, "d": "waiting"}
    changes, final = closing.closed(
        run=run, state=RunState.FAILED, tasks=tasks, message="task c failed"
    )
    assert final == {"a": "done", "b": "skipped", "c": "failed", "d": "skipped"}
    assert changes["state"] == RunState.FAILED and changes["ended_at"] is not None
    assert changes["message"] == "task c failed"
    assert changes["pending_release"] and changes["pending_cancel"] and changes["pending_logs"]
    assert changes["merge_pending"] == {}


def test_the_terminal_record_of_a_gone_workflow_has_nothing_to_stop_but_reports_to_record():
    run = Run(id="r1", workflow="simrun-r1", reserved_node="")
    changes, _ = closing.closed(
        run=run, state=RunState.FAILED, tasks={}, message="gone", workflow_exists=False
    )
    assert not changes["pending_cancel"] and changes["pending_logs"]
    assert not changes["pending_release"]


def test_a_plan_written_before_coordinator_merges_existed_reads_it_as_false():
    from runs.models import Task
    from runs.planning.records import task_plans

    legacy = PLAN.model_dump(mode="json")
    del legacy["coordinator_merges"]
    assert task_plans([Task(task_id="sweep", plan=legacy)]) == {"sweep": PLAN}
