"""Resume: a re-run done at once from the outputs of the tasks its source finished, and
started with the done units of those it did not; what the store holds read without belief."""

from __future__ import annotations

import copy
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.ledger import Ledger
from harness.pieces import ORIGINS
from harness.tasktypes import task_types
from runs.backends.fake import FakeBackend
from runs.common import store
from runs.control import reuse, submitting
from runs.models import Reuse, Run, RunState, Task, TaskState
from runs.planning import resume as planning_resume
from runs.planning.reruns import submit_rerun
from runs.planning.spec import SpecError, validate_spec
from runs.planning.submission import create_run
from tests.service.controller_support import (  # noqa: F401
    PIPELINE,
    fake,
    fresh,
    home,
    launch,
    poll,
    sent,
    states,
    task_dir,
    write_marker,
)

pytestmark = pytest.mark.django_db

SWEEP = {"tasks": {"sweep": {"type": "squares", "settings": {"n": 12}, "workers": 2}}}


def outputs(run: Run, task_id: str, files: dict[str, bytes]) -> None:
    """Outputs a task wrote into its ``out/``."""
    out = task_dir(run, task_id) / "out"
    out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)


def succeeded(launch, fake: FakeBackend, spec: dict[str, Any] = PIPELINE) -> Run:  # noqa: F811
    """A run of ``spec`` that succeeded, each task with an output of its own."""
    run = launch(spec)
    for task_id in spec["tasks"]:
        outputs(run, task_id, {"result.txt": f"{task_id} of {run.id}\n".encode()})
    write_marker(run, "sweep")
    fake.finish(run.workflow)
    poll(fake)
    assert fresh(run).state == RunState.SUCCEEDED
    return fresh(run)


def failed(launch, fake: FakeBackend, spec: dict[str, Any] = SWEEP, done=()) -> Run:  # noqa: F811
    """A run of ``spec`` whose sweep started, stored the units ``done`` (a piece of each
    run of them), then failed."""
    run = launch(spec)
    units = spec["tasks"]["sweep"]["settings"]["n"]
    ledger = Ledger.open(task_dir(run, "sweep") / "units", units, "sweep-w0")
    for piece in done:
        ledger.write_piece(list(piece), [i * i for i in piece])
    return sweep_failed(fake, run)


def sweep_failed(fake: FakeBackend, run: Run) -> Run:  # noqa: F811
    """The run once its sweep ran and failed."""
    fake.set_phase(run.workflow, "Running")
    fake.set_nodes(run.workflow, {"sweep-w0": "Running"})
    poll(fake)
    fake.set_nodes(run.workflow, {"sweep-w0": "Failed"})
    fake.set_phase(run.workflow, "Failed")
    poll(fake)
    assert fresh(run).state == RunState.FAILED
    return fresh(run)


def resumed(source: Run, spec: dict[str, Any] | None = None, actor: Any = None) -> Run:
    """The resume of ``source`` (with ``spec``, an edit of its own) by its owner (or
    ``actor``), submitted."""
    document = spec if spec is not None else source.spec
    run = submit_rerun(
        source=source,
        spec=validate_spec(document, types=task_types()),
        actor=actor or source.owner,
        text=yaml.safe_dump(document),
        resume=True,
    )
    assert submitting.submit(run.id)
    return fresh(run)


def row(run: Run, task_id: str) -> Task:
    return Task.objects.get(run=run, task_id=task_id)


def pieces(run: Run) -> dict[str, str]:
    """The pieces a run's sweep reused, each with the task that computed it (``ORIGINS``)."""
    reused = task_dir(run, "sweep") / "units" / "reused"
    origins = json.loads((reused / ORIGINS).read_text())
    assert sorted(origins) == sorted(name for name in os.listdir(reused) if name != ORIGINS)
    return origins


def edited(spec: dict[str, Any], change) -> dict[str, Any]:
    document = copy.deepcopy(spec)
    change(document)
    return document


# Reused whole: a task whose key is a succeeded task's.


def test_a_resume_is_done_at_once_from_the_outputs_of_every_unchanged_task_and_runs_the_rest(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
):
    source = succeeded(launch, fake)
    run = resumed(source, edited(PIPELINE, lambda d: d["tasks"]["plot"].update(command=["true"])))

    assert run.resume and run.rerun_of_id == source.id
    assert states(run) == {"sweep": "done", "summary": "done", "plot": "waiting"}
    for task_id in ("sweep", "summary"):
        task = row(run, task_id)
        assert (task.reuse, task.reused_from) == (Reuse.WHOLE, f"{source.id}/{task_id}")
        assert task.units_reused == task.units_done == task.units_total
        copied = task_dir(run, task_id) / "out" / "result.txt"
        assert copied.read_bytes() == f"{task_id} of {source.id}\n".encode()
        assert copied.stat().st_uid == os.geteuid() and stat.S_IMODE(copied.stat().st_mode) == 0o644
    assert (task_dir(run, "sweep") / "out" / ".simrun-merged").exists()
    assert not row(run, "plot").reuse and row(run, "plot").units_reused is None
    # The workflow holds only what is left to run; the reused tasks stay done while it runs.
    submitted = fake.submission(run.workflow)
    assert submitted.record.reused == ["sweep", "summary"]
    assert fake.dag_nodes(run.workflow) == ["plot"]
    fake.set_phase(run.workflow, "Running")
    fake.set_nodes(run.workflow, {"plot": "Running"})
    poll(fake)
    assert states(run) == {"sweep": "done", "summary": "done", "plot": "running"}
    fake.finish(run.workflow)
    poll(fake)
    assert fresh(run).state == RunState.SUCCEEDED


def test_a_change_upstream_makes_every_task_downstream_run_again(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
):
    source = succeeded(launch, fake)
    run = resumed(source, edited(PIPELINE, lambda d: d["tasks"]["sweep"]["settings"].update(n=7)))

    assert states(run) == {"sweep": "waiting", "summary": "waiting", "plot": "waiting"}
    assert not any(t.reuse for t in run.tasks.all())
    assert fake.submission(run.workflow).record.reused == []


def test_a_resume_of_a_run_whose_every_task_is_reused_succeeds_without_a_workflow(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
):
    source = succeeded(launch, fake)
    run = resumed(source)

    assert run.state == RunState.SUCCEEDED and not run.workflow and not run.live
    assert set(states(run).values()) == {"done"}
    assert fake.called("submit") == [[source.id]]


def test_a_plain_re_run_reuses_nothing(launch, fake: FakeBackend):  # noqa: F811
    source = succeeded(launch, fake)
    run = submit_rerun(source=source, spec=validate_spec(source.spec, types=task_types()),
                       actor=source.owner)  # fmt: skip
    assert submitting.submit(run.id)
    assert not fresh(run).resume and set(states(run).values()) == {"waiting"}


# Reused units: a split task whose key is that of one that did not finish.


def test_a_split_task_that_did_not_finish_starts_with_its_done_units_in_the_ledger(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
):
    source = failed(launch, fake, done=[range(0, 3), range(5, 9)])
    run = resumed(source)

    task = row(run, "sweep")
    assert (task.reuse, task.units_reused, task.units_done) == (Reuse.UNITS, 7, 7)
    assert task.state == TaskState.WAITING and fake.dag_nodes(run.workflow)[0] == "sweep-w0"
    units = task_dir(run, "sweep") / "units"
    assert pieces(run) == {"0-3": f"{source.id}/sweep", "5-9": f"{source.id}/sweep"}
    assert (units / "reused" / "5-9").read_bytes() == (
        task_dir(source, "sweep") / "units" / "done" / "5-9"
    ).read_bytes()
    # What its workers see: only the other units to compute, then every result in order.
    ledger = Ledger.open(units, 12, "sweep-w0")
    ledger.refresh()
    assert ledger.missing() == [range(3, 5), range(9, 12)]
    ledger.write_piece([3, 4, 9, 10, 11], [9, 16, 81, 100, 121])
    assert ledger.results() == [i * i for i in range(12)]


def test_a_change_of_plan_keeps_the_units_reused(launch, fake: FakeBackend):  # noqa: F811
    source = failed(launch, fake, done=[range(0, 4)])
    plan = {"workers": 3, "cores": 2, "memory": {"per_worker_gb": 0.5, "base_gb": 0.25}}
    run = resumed(source, edited(SWEEP, lambda d: d["tasks"]["sweep"].update(plan)))

    task = row(run, "sweep")
    assert (task.reuse, task.units_reused) == (Reuse.UNITS, 4) and task.plan["workers"] == 3


def test_a_resume_of_a_resume_reuses_the_units_its_source_reused_and_those_it_computed(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
):
    first = failed(launch, fake, done=[range(0, 4)])
    second = resumed(first)
    Ledger.open(task_dir(second, "sweep") / "units", 12, "sweep-w0").write_piece([4, 5], [16, 25])

    third = resumed(sweep_failed(fake, second))

    assert row(third, "sweep").units_reused == 6
    # Each piece says which task computed it, for the reused_from column of the merged table.
    assert pieces(third) == {"0-4": f"{first.id}/sweep", "4-6": f"{second.id}/sweep"}


def test_a_damaged_piece_is_not_reused_and_the_others_are(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
):
    source = failed(launch, fake, done=[range(0, 3), range(3, 6)])
    piece = task_dir(source, "sweep") / "units" / "done" / "3-6"
    piece.write_bytes(piece.read_bytes()[:-3])

    run = resumed(source)

    assert row(run, "sweep").units_reused == 3
    assert pieces(run) == {"0-3": f"{source.id}/sweep"}


def test_a_task_that_had_no_unit_done_reuses_nothing_and_says_so(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
):
    source = failed(launch, fake, done=[])
    run = resumed(source)

    task = row(run, "sweep")
    assert (task.reuse, task.reused_from, task.units_reused) == ("", "", None)
    assert "no unit done" in task.not_reused


# What the store holds is read without belief.


def planted(kind: str, out: Path, tmp_path: Path) -> None:
    """Something a task could leave in its ``out/`` that the service must not follow."""
    secret = tmp_path / "secret"
    secret.write_text("the service's own\n")
    if kind == "link":
        (out / "evil").symlink_to(secret)
    elif kind == "FIFO":
        os.mkfifo(out / "evil")
    elif kind == "oversized file":
        (out / "evil").write_bytes(b"x" * 3 * 2**20)  # 3 MiB on disk, more than the 1 MiB budget
    elif kind == "hard link":
        os.link(out / "result.txt", out / "evil")
    elif kind == "linked folder":
        (out / "deep").mkdir()
        (out / "deep" / "evil").symlink_to(tmp_path, target_is_directory=True)


REFUSED = {
    "link": "out/evil is a link: not followed",
    "FIFO": "out/evil is a FIFO: not followed",
    "oversized file": "out/evil takes 3.0 MiB, more than the",
    "hard link": "has 2 names (a hard link)",
    "linked folder": "out/deep/evil is a link: not followed",
}


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_a_source_whose_outputs_hold_what_no_task_should_is_refused_never_followed(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
    settings,
    tmp_path: Path,
    kind: str,
):
    settings.SIMRUN_REUSE_MAX_GB = 1 / 1024
    source = succeeded(launch, fake)
    planted(kind, task_dir(source, "summary") / "out", tmp_path)

    run = resumed(source)

    summary = row(run, "summary")
    assert summary.reuse == "" and summary.units_reused is None
    assert summary.not_reused.startswith(f"not reused from {source.id}/summary: ")
    assert REFUSED[kind] in summary.not_reused
    assert not (task_dir(run, "summary") / "out").exists()
    assert [e for e in os.listdir(task_dir(run, "summary")) if e.startswith(".")] == []
    # The task runs in full; the others are reused as they were, the one reading it too: its
    # key says its input is the same.
    assert states(run) == {"sweep": "done", "summary": "waiting", "plot": "done"}
    assert fake.dag_nodes(run.workflow) == ["summary"]


def test_an_out_folder_that_is_a_link_is_refused(launch, fake: FakeBackend, tmp_path: Path):  # noqa: F811
    source = succeeded(launch, fake)
    out = task_dir(source, "plot") / "out"
    for name in os.listdir(out):
        (out / name).unlink()
    out.rmdir()
    out.symlink_to(tmp_path, target_is_directory=True)

    run = resumed(source)

    assert "its out/ is a link: not followed" in row(run, "plot").not_reused
    assert states(run)["plot"] == "waiting"


def test_a_piece_that_is_a_link_refuses_the_units(launch, fake: FakeBackend, tmp_path: Path):  # noqa: F811
    source = failed(launch, fake, done=[range(0, 3)])
    secret = tmp_path / "piece"
    secret.write_bytes((task_dir(source, "sweep") / "units" / "done" / "0-3").read_bytes())
    (task_dir(source, "sweep") / "units" / "done" / "3-6").symlink_to(secret)

    run = resumed(source)

    assert "units/done/3-6 is a link: not followed" in row(run, "sweep").not_reused
    assert row(run, "sweep").units_reused is None
    assert not (task_dir(run, "sweep") / "units").exists()


COMMAND_SWEEP = {
    "tasks": {
        "sim": {
            "command": ["sh", "-c", "echo {U} > {out}/r.txt"],
            "sweep": {"U": {"range": [0, 6]}},
        }
    }
}


@pytest.mark.parametrize("kind", ["FIFO", "oversized", "link in a unit's folder"])
def test_units_whose_pieces_or_folders_hold_what_no_task_should_are_refused_never_followed(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
    settings,
    tmp_path: Path,
    kind: str,
):
    settings.SIMRUN_REUSE_MAX_GB = 1 / 1024
    run = launch(COMMAND_SWEEP)
    folder = task_dir(run, "sim")
    Ledger.open(folder / "units", 6, "sim-w0").write_piece([0, 1, 2], [{}, {}, {}])
    for unit in (0, 1, 2):
        (folder / "out" / "units" / str(unit)).mkdir(parents=True)
        (folder / "out" / "units" / str(unit) / "r.txt").write_text(f"{unit}\n")
    secret = tmp_path / "secret"
    secret.write_text("the service's own\n")
    if kind == "FIFO":
        os.mkfifo(folder / "units" / "done" / "3-6")
    elif kind == "oversized":
        with (folder / "units" / "done" / "3-6").open("wb") as handle:
            handle.truncate(3 * 2**20)
    else:
        (folder / "out" / "units" / "1" / "evil").symlink_to(secret)
    fake.set_phase(run.workflow, "Failed")
    poll(fake)
    source = fresh(run)

    resume = resumed(source)

    sim = row(resume, "sim")
    why = {
        "FIFO": "units/done/3-6 is a FIFO: not followed",
        "oversized": "units/done/3-6 takes 3.0 MiB, more than the",
        "link in a unit's folder": "out/units/1/evil is a link: not followed",
    }[kind]
    assert why in sim.not_reused and sim.not_reused.startswith(f"not reused from {source.id}/sim")
    assert (sim.reuse, sim.units_reused) == ("", None)
    assert not (task_dir(resume, "sim") / "units").exists()
    assert not (task_dir(resume, "sim") / "out").exists()


def test_the_files_a_run_copies_are_bounded_and_a_task_beyond_them_runs_in_full(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
    settings,
):
    settings.SIMRUN_REUSE_MAX_FILES = 8
    source = succeeded(launch, fake)
    outputs(source, "summary", {f"many/{i}.txt": b"x" for i in range(20)})

    run = resumed(source)

    assert (
        "more than the 8 files and folders the copies of its owner's live runs may make"
        in row(run, "summary").not_reused
    )
    assert states(run) == {"sweep": "done", "summary": "waiting", "plot": "done"}


def test_sparse_outputs_are_copied_sparse_and_budgeted_by_what_they_take_on_disk(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
    settings,
):
    settings.SIMRUN_REUSE_MAX_GB = 0.5
    source = succeeded(launch, fake)
    out = task_dir(source, "summary") / "out"
    for i in range(6):  # 2.4 GiB apparent, a few KiB on disk
        with open(out / f"sparse-{i}.bin", "wb") as sparse:
            sparse.seek(100 << 20)
            sparse.write(b"middle")
            sparse.truncate(402 << 20)

    run = resumed(source)

    assert row(run, "summary").not_reused == "" and states(run)["summary"] == "done"
    for i in range(6):
        copy = task_dir(run, "summary") / "out" / f"sparse-{i}.bin"
        assert copy.stat().st_size == 402 << 20
        assert copy.stat().st_blocks * 512 < 1 << 20, "the copy stays sparse"
        with open(copy, "rb") as read:
            read.seek(100 << 20)
            assert read.read(6) == b"middle"


def test_the_copies_of_an_owners_live_runs_share_one_budget_not_one_each(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
    settings,
):
    """Two resumes at once, each within SIMRUN_REUSE_MAX_GB alone, may not copy twice the
    budget: the copies of the owner's live runs count together, by their blocks on disk,
    and a run that ended frees what its copies counted."""
    settings.SIMRUN_REUSE_MAX_GB = 5 / 1024
    source = succeeded(launch, fake)
    outputs(source, "summary", {"big.bin": os.urandom(3 << 20)})  # 3 MiB on disk
    plot_again = edited(PIPELINE, lambda d: d["tasks"]["plot"].update(command=["true"]))

    first = resumed(source, plot_again)  # live: its plot runs
    second = resumed(source, plot_again)

    assert first.state == second.state == RunState.RUNNING
    assert row(first, "summary").not_reused == "" and states(first)["summary"] == "done"
    assert "left of what the copies of its owner's live runs may take together" in (
        row(second, "summary").not_reused
    )
    assert "(SIMRUN_REUSE_MAX_GB)" in row(second, "summary").not_reused
    assert states(second)["summary"] == "waiting"

    for run in (first, second):
        fake.finish(run.workflow)
    poll(fake)
    assert fresh(first).state == RunState.SUCCEEDED
    third = resumed(source, plot_again)
    assert row(third, "summary").not_reused == "" and states(third)["summary"] == "done"


# Whose work is reused, and when.


def test_a_resume_by_staff_is_the_owners_run_and_reuses_the_owners_work(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
    staff,
):
    source = succeeded(launch, fake)
    run = resumed(source, actor=staff)

    assert (run.owner_id, run.submitted_by_id) == (source.owner_id, staff.pk)
    assert run.state == RunState.SUCCEEDED and set(states(run).values()) == {"done"}


def test_work_is_reused_only_from_a_run_of_the_same_owner_and_any_other_is_refused(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
    staff,
):
    source = succeeded(launch, fake)
    spec = validate_spec(source.spec, types=task_types())

    # Staff's own run resuming another user's: refused by name, not run in full in silence.
    with pytest.raises(SpecError) as refused:
        create_run(spec=spec, owner=staff, rerun_of=source, resume=True)
    [reason] = refused.value.errors["resume_of"]
    assert f"run {source.id} is {source.owner.get_username()}'s" in reason
    assert "code to the tasks that read them" in reason
    assert Run.objects.filter(owner=staff).count() == 0
    keys = dict(source.tasks.values_list("task_id", "key"))
    kinds = dict(source.tasks.values_list("task_id", "kind"))
    with pytest.raises(SpecError):
        planning_resume.resumed(keys=keys, kinds=kinds, source=source, owner_id=staff.pk)
    mine = planning_resume.resumed(keys=keys, kinds=kinds, source=source, owner_id=source.owner_id)
    assert {t: c.how for t, c in mine.items()} == dict.fromkeys(keys, Reuse.WHOLE)


def test_a_run_that_has_not_ended_cannot_be_resumed(launch, fake: FakeBackend):  # noqa: F811
    source = launch(PIPELINE)
    with pytest.raises(SpecError) as refused:
        resumed(source)
    assert "has not ended" in refused.value.errors["resume_of"][0]


def test_a_resume_cancelled_while_it_copies_ends_cancelled_without_a_workflow(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
    monkeypatch,
):
    source = succeeded(launch, fake)
    run = submit_rerun(source=source, spec=validate_spec(source.spec, types=task_types()),
                       actor=source.owner, resume=True)  # fmt: skip
    copy_outputs = reuse._copy_outputs

    def cancelled_meanwhile(*args: Any) -> None:
        copy_outputs(*args)
        Run.objects.filter(pk=run.pk).update(state=RunState.CANCELLED, ended_at=run.created_at)

    monkeypatch.setattr(reuse, "_copy_outputs", cancelled_meanwhile)
    assert submitting.submit(run.id)

    assert fresh(run).state == RunState.CANCELLED
    assert fake.called("submit") == [[source.id]]
    assert set(states(run).values()) == {"waiting"}


def test_a_copy_killed_before_its_row_was_written_is_done_again_whole(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
    monkeypatch,
):
    source = succeeded(launch, fake)
    run = submit_rerun(source=source, spec=validate_spec(source.spec, types=task_types()),
                       actor=source.owner, resume=True)  # fmt: skip
    place = reuse._place

    def killed(folder: int, stage: int, names: list[str]) -> None:
        place(folder, stage, names)
        raise SystemExit("killed")

    monkeypatch.setattr(reuse, "_place", killed)
    with pytest.raises(SystemExit):
        submitting.submit(run.id)
    [placed] = [t for t in PIPELINE["tasks"] if (store.task_dir(run.id, t) / "out").exists()]
    (store.task_dir(run.id, placed) / "out" / "left-by-the-killed-copy").write_text("?")
    monkeypatch.setattr(reuse, "_place", place)

    assert submitting.submit(run.id)

    assert fresh(run).state == RunState.SUCCEEDED
    assert "left-by-the-killed-copy" not in os.listdir(task_dir(run, placed) / "out")
    assert (
        task_dir(run, placed) / "out" / "result.txt"
    ).read_text() == f"{placed} of {source.id}\n"


# The cache: the newest succeeded task with the same key among the owner's runs.


def submitted_run(owner: Any, spec: dict[str, Any]) -> Run:
    run = create_run(spec=validate_spec(spec, types=task_types()), owner=owner)
    assert submitting.submit(run.id)
    return fresh(run)


def test_a_task_with_cache_is_done_from_the_newest_same_task_of_its_owners_runs(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
    owner,
):
    older = succeeded(launch, fake)
    newer = succeeded(launch, fake)
    spec = edited(PIPELINE, lambda d: d["tasks"]["sweep"].update(cache=True, workers=5))

    run = submitted_run(owner, spec)

    assert not run.resume and run.rerun_of_id is None
    sweep = row(run, "sweep")
    assert (sweep.reuse, sweep.reused_from) == (Reuse.WHOLE, f"{newer.id}/sweep")
    assert (task_dir(run, "sweep") / "out" / "result.txt").read_text() == f"sweep of {newer.id}\n"
    assert older.id not in sweep.reused_from
    assert states(run) == {"sweep": "done", "summary": "waiting", "plot": "waiting"}


def test_a_run_level_cache_is_every_tasks_default_and_a_task_may_say_no(
    launch,  # noqa: F811
    fake: FakeBackend,  # noqa: F811
    owner,
):
    source = succeeded(launch, fake)
    spec = edited(PIPELINE, lambda d: d.update(cache=True))
    spec["tasks"]["plot"]["cache"] = False

    run = submitted_run(owner, spec)

    assert states(run) == {"sweep": "done", "summary": "done", "plot": "waiting"}
    assert row(run, "summary").reused_from == f"{source.id}/summary"


def test_the_cache_takes_no_task_that_did_not_succeed(launch, fake: FakeBackend, owner):  # noqa: F811
    failed(launch, fake, PIPELINE, done=[range(0, 3)])

    run = submitted_run(owner, edited(PIPELINE, lambda d: d.update(cache=True)))

    assert set(states(run).values()) == {"waiting"}


def test_the_cache_takes_no_other_users_work(launch, fake: FakeBackend, stranger):  # noqa: F811
    succeeded(launch, fake)  # alice's

    run = submitted_run(stranger, edited(PIPELINE, lambda d: d.update(cache=True)))

    assert set(states(run).values()) == {"waiting"}
    assert not any(t.reuse for t in run.tasks.all())
