"""Resume on the local backend, with real processes: a sweep cancelled part way computes only
the units it had not, and its outputs are those of a run that computed them all."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.ledger import Ledger
from harness.merge import MERGED_MARKER
from harness.tasktypes import task_types
from runs.backends.local.backend import LocalBackend
from runs.common import store
from runs.control import cancelling, reconciling, settling, submitting
from runs.models import Observation, Run, RunState, Task
from runs.planning import submission
from runs.planning.reruns import submit_rerun
from runs.planning.spec import validate_spec
from runs.planning.spec_document import parse_spec
from runs.planning.submission import create_run
from runs.reads import accounting
from tests.backends.local_fixtures import stepping
from tests.polling import wait_for
from tests.service.controller_support import home, sent  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

UNITS = 60
SQUARES = {
    "tasks": {"sweep": {"type": "squares", "settings": {"n": UNITS, "delay_s": 0.04}, "cores": 1}}
}
MERGE_TYPO = {
    "name": "merged",  # a named run's command task is observed (observation_key)
    "tasks": {
        **SQUARES["tasks"],
        "merge": {"command": ["sh", "-c", "cat inputs/t/squares.csv >"], "inputs": {"t": "sweep"}},
    },
}
MERGE_FIXED = {
    "name": "merged",
    "tasks": {
        **SQUARES["tasks"],
        "merge": {
            "command": ["sh", "-c", 'wc -l < inputs/t/squares.csv > "$SIMRUN_OUT/rows"'],
            "inputs": {"t": "sweep"},
        },
    },
}
SWEEP = {
    "tasks": {
        "sim": {
            "command": ["sh", "-c", 'sleep 0.04; echo "{{\\"v\\": $(({U}*{U}))}}" > {out}/r.json'],
            "sweep": {"U": {"range": [0, UNITS]}},
            "results": "r.json",
            "cores": 1,
        }
    }
}


@pytest.fixture
def local(tmp_path: Path, settings, home, monkeypatch) -> Any:  # noqa: F811
    """The service's backend: a local one, stepping."""
    backend = LocalBackend(
        settings.SIMRUN_STORE, tmp_path / "scratch", cores=2, memory_gb=4, enforce_memory=False
    )
    monkeypatch.setattr(submission, "get_backend", lambda: backend)
    with stepping(backend) as stepped:
        yield stepped


def submitted(owner: Any, spec: dict[str, Any], backend: LocalBackend) -> Run:
    text = yaml.safe_dump(spec)
    run = create_run(spec=parse_spec(text, types=task_types()), owner=owner)
    assert submitting.submit(run.id, backend=backend)
    return Run.objects.get(pk=run.pk)


def progress(run: Run, task: str) -> Counter[int]:
    """How often each unit is recorded done in the task's ``progress.jsonl``."""
    path = store.task_dir(run.id, task) / "progress.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(json.loads(line)["unit"] for line in lines if line.endswith("}"))


def until_ended(run: Run, backend: LocalBackend) -> Run:
    def ended() -> bool:
        reconciling.reconcile_pass(backend=backend, schedule=lambda run_id: None)
        return Run.objects.get(pk=run.pk).ended and not backend.placements()

    wait_for(ended, 120, f"run {run.id} to end")
    settling.settle(run.id, backend=backend)
    return Run.objects.get(pk=run.pk)


def cancelled_part_way(owner: Any, spec: dict[str, Any], task: str, local: LocalBackend) -> Run:
    """A run of ``spec`` cancelled once a third of its units are recorded done."""
    run = submitted(owner, spec, local)
    wait_for(lambda: len(progress(run, task)) >= UNITS // 3, 60, "a third of the units")
    cancelling.cancel(run.id)
    settling.settle(run.id, backend=local)
    return until_ended(run, local)


def done_units(run: Run, task: str) -> set[int]:
    ledger = Ledger.read(store.task_dir(run.id, task) / "units")
    ledger.refresh()
    missing = {u for r in ledger.missing() for u in r}
    return set(range(UNITS)) - missing


def outputs(run: Run, task: str) -> dict[str, bytes]:
    """The files of a task's ``out/`` but the merge's marker (it says when it merged)."""
    out = store.task_dir(run.id, task) / "out"
    return {p.name: p.read_bytes() for p in out.iterdir() if p.name != MERGED_MARKER}


def resume(source: Run, backend: LocalBackend, spec_document: dict[str, Any] | None = None) -> Run:
    spec = validate_spec(spec_document or source.spec, types=task_types())
    run = submit_rerun(source=source, spec=spec, actor=source.owner, resume=True)
    assert submitting.submit(run.id, backend=backend)
    return until_ended(run, backend)


def test_a_sweep_cancelled_part_way_and_resumed_computes_exactly_the_units_it_had_not(
    owner,
    local,
    sent,  # noqa: F811
):
    source = cancelled_part_way(owner, SQUARES, "sweep", local)
    assert source.state == RunState.CANCELLED
    reused = done_units(source, "sweep")
    assert UNITS // 3 <= len(reused) < UNITS

    run = resume(source, local)

    assert run.state == RunState.SUCCEEDED, run.message
    task = Task.objects.get(run=run, task_id="sweep")
    assert (task.units_reused, task.units_done) == (len(reused), UNITS)
    computed = progress(run, "sweep")
    assert set(computed) == set(range(UNITS)) - reused and set(computed.values()) == {1}
    out = store.task_dir(run.id, "sweep") / "out"
    assert (out / "squares.json").read_bytes() == json.dumps([i * i for i in range(UNITS)]).encode()
    # Byte for byte what a run that computed every unit writes.
    fresh = until_ended(submitted(owner, SQUARES, local), local)
    assert outputs(run, "sweep") == outputs(fresh, "sweep") and len(outputs(run, "sweep")) == 2
    # Its accounting is what it ran: the units it computed, none of those it reused.
    assert sum(Observation.objects.filter(run=run).values_list("units", flat=True)) == len(computed)
    usage = accounting.run_usage(run, list(run.tasks.all()))
    assert usage.as_dict()["attempts"] == Observation.objects.filter(run=run).count()


def test_a_finished_sweep_is_reused_whole_byte_for_byte_and_counts_nothing_in_its_accounting(
    owner,
    local,
    sent,  # noqa: F811
):
    source = until_ended(submitted(owner, MERGE_TYPO, local), local)
    assert source.state == RunState.FAILED
    assert dict(source.tasks.values_list("task_id", "state")) == {
        "sweep": "done",
        "merge": "failed",
    }

    run = resume(source, local, MERGE_FIXED)

    assert run.state == RunState.SUCCEEDED, run.message
    sweep, merge = (Task.objects.get(run=run, task_id=t) for t in ("sweep", "merge"))
    assert (sweep.reused_from, sweep.units_reused) == (f"{source.id}/sweep", UNITS)
    assert not sweep.attempts.exists() and not progress(run, "sweep")
    assert merge.attempts.count() == 1 and not merge.reuse
    assert (store.task_dir(run.id, "merge") / "out" / "rows").read_text().strip() == str(UNITS + 1)
    fresh = until_ended(submitted(owner, MERGE_FIXED, local), local)
    assert outputs(run, "sweep") == outputs(fresh, "sweep") == outputs(source, "sweep")
    # The memory accounting is what this run ran: the merge, none of the sweep it reused.
    assert not Observation.objects.filter(task=sweep).exists()
    ran = Observation.objects.filter(run=run)
    assert set(ran.values_list("task_id", flat=True)) == {merge.pk}
    usage = accounting.run_usage(run, list(run.tasks.all())).as_dict()
    assert usage["tasks"]["sweep"]["attempts"] == 0 and usage["tasks"]["sweep"]["used_gbh"] == 0
    assert usage["attempts"] == usage["tasks"]["merge"]["attempts"] == ran.count() > 0
    source_usage = accounting.run_usage(source, list(source.tasks.all())).as_dict()
    assert source_usage["tasks"]["sweep"]["attempts"] > 0


def test_a_command_sweep_resumed_keeps_the_outputs_of_the_units_it_reused(
    owner,
    local,
    sent,  # noqa: F811
):
    source = cancelled_part_way(owner, SWEEP, "sim", local)
    reused = done_units(source, "sim")
    units = store.task_dir(source.id, "sim") / "out" / "units"
    before = {unit: (units / str(unit) / "r.json").read_bytes() for unit in reused}

    run = resume(source, local)

    assert run.state == RunState.SUCCEEDED, run.message
    assert set(progress(run, "sim")) == set(range(UNITS)) - reused
    units = store.task_dir(run.id, "sim") / "out" / "units"
    for unit in range(UNITS):
        assert (units / str(unit) / "r.json").read_bytes() == f'{{"v": {unit * unit}}}\n'.encode()
    assert all((units / str(u) / "r.json").read_bytes() == data for u, data in before.items())
    table = (store.task_dir(run.id, "sim") / "out" / "results.csv").read_text().splitlines()
    assert len(table) == UNITS + 1
    header = table[0].split(",")
    values = [int(line.split(",")[header.index("v")]) for line in table[1:]]
    assert values == [i * i for i in range(UNITS)]
    # The rows reused say where from; those this run computed say nothing.
    origins = [line.split(",")[header.index("reused_from")] for line in table[1:]]
    assert origins == [f"{source.id}/sim" if u in reused else "" for u in range(UNITS)]


def test_a_command_sweep_whose_script_changed_is_resumed_in_full_never_mixed(
    owner,
    local,
    sent,  # noqa: F811
    tmp_path: Path,
):
    script = tmp_path / "crashy.py"
    formula = "import sys, time; time.sleep(0.04); u = int(sys.argv[1]); v = {}\n"
    write = 'open(sys.argv[2] + "/r.json", "w").write(\'{"v": %d}\' % v)\n'
    script.write_text(formula.format("u * u") + write)
    spec = {
        "tasks": {
            "sim": {
                "command": ["python", str(script), "{U}", "{out}"],
                "sweep": {"U": {"range": [0, UNITS]}},
                "results": "r.json",
                "cores": 1,
            }
        }
    }
    source = cancelled_part_way(owner, spec, "sim", local)
    assert done_units(source, "sim")
    script.write_text(formula.format("u + 1000") + write)

    run = resume(source, local)

    assert run.state == RunState.SUCCEEDED, run.message
    task = Task.objects.get(run=run, task_id="sim")
    assert task.units_reused is None and str(script) in task.not_reused
    assert set(progress(run, "sim")) == set(range(UNITS))
    table = (store.task_dir(run.id, "sim") / "out" / "results.csv").read_text().splitlines()
    header = table[0].split(",")
    assert "reused_from" not in header
    values = [int(line.split(",")[header.index("v")]) for line in table[1:]]
    assert values == [u + 1000 for u in range(UNITS)]
