"""The local backend running the harness: split tasks, plugins, DAGs, snapshots in a venv."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.tasktypes import task_types
from runs.backends.local.backend import LocalBackend, cgroups, workflow_name
from runs.planning.records import task_records
from runs.planning.spec_document import parse_spec
from tests.backends.local_fixtures import (
    ended,
    phase,
    plan,
    read_log,
    stepping,
    submit,
    until_flag,
)
from tests.polling import wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(tmp_path / "store", tmp_path / "scratch", cores=2, memory_gb=8)


def split(settings: dict[str, object], type_name: str = "squares") -> dict[str, object]:
    return {"kind": "split", "type": type_name, "settings": settings}


def write_task_files(backend: LocalBackend, run_id: str, tasks, plans) -> None:
    """The task.json of each task, as the service writes it at submission."""
    for task_id, fields in tasks.items():
        task_dir = backend.store / "runs" / run_id / "tasks" / task_id
        task_dir.mkdir(parents=True, exist_ok=True)
        units = fields.get("settings", {}).get("n", fields.get("settings", {}).get("units", 1))
        (task_dir / "task.json").write_text(
            json.dumps(
                {
                    "run": run_id,
                    "task": task_id,
                    "kind": fields.get("kind", "command"),
                    "type": fields.get("type", ""),
                    "settings": fields.get("settings", {}),
                    "inputs": fields.get("inputs", {}),
                    "command": fields.get("command", []),
                    "plan": plans.get(task_id, plan()).model_dump(mode="json"),
                    "units": units,
                }
            )
        )


def run_to_end(backend: LocalBackend, run_id: str, tasks, plans=None) -> None:
    plans = plans or {}
    write_task_files(backend, run_id, tasks, plans)
    with stepping(backend):
        submit(backend, run_id, tasks, plans)
        wait_for(lambda: ended(backend, run_id), what=f"{run_id} to end")


def test_a_split_task_runs_as_its_coordinator_which_merges_itself(backend):
    run_to_end(backend, "h1", {"sq": split({"n": 200})}, {"sq": plan(cores=2)})
    status = backend.status(workflow_name("h1"))
    assert status.phase == "Succeeded", read_log(backend, "h1", "sq", "sq-w0")
    assert status.tasks == {"sq-w0": "Succeeded"}
    out = backend.store / "runs/h1/tasks/sq/out"
    assert json.loads((out / "squares.json").read_text()) == [i * i for i in range(200)]
    assert (out / ".simrun-merged").exists()
    assert (backend.store / "runs/h1/tasks/sq/workers/sq-w0-0.json").exists()


def test_a_dag_of_a_split_task_a_plugin_and_a_command_runs_in_order(backend):
    tasks = {
        "sq": split({"n": 20}),
        "stats": {"kind": "plugin", "type": "csv-stats", "inputs": {"table": "sq"}},
        "show": {
            "command": ["python", "-c", "print(open('inputs/stats/stats.json').read())"],
            "inputs": {"stats": "stats"},
        },
    }
    run_to_end(backend, "h2", tasks)
    status = backend.status(workflow_name("h2"))
    assert status.phase == "Succeeded", status
    assert status.tasks == {"sq-w0": "Succeeded", "stats": "Succeeded", "show": "Succeeded"}
    stats = json.loads(read_log(backend, "h2", "show", "show"))
    assert stats["columns"]["square"]["max"] == 19 * 19
    times = {}
    for task, node in (("sq", "sq-w0"), ("stats", "stats"), ("show", "show")):
        logs = backend.store / "runs/h2/tasks" / task / "logs"
        start = json.loads((logs / f"{node}-0.launch").read_text())["started"]
        end = json.loads((logs / f"{node}-0.exit").read_text())["ended"]
        times[task] = (start, end)
    assert times["sq"][1] <= times["stats"][0] and times["stats"][1] <= times["show"][0]


def test_a_command_sweep_runs_as_its_coordinator_and_merges_its_results_table(backend):
    spec = parse_spec(
        """
tasks:
  sim:
    command: [sh, -c, 'printf "{{\\"y\\": %s}}" $(( $1 * $1 )) > "$2/r.json"', sh, "{x}", "{out}"]
    sweep: {x: {range: [0, 30]}}
    results: r.json
""",
        types=task_types(),
    )
    record = task_records(spec, task_types())["sim"]
    tasks = {"sim": record.model_dump(exclude={"id"})}

    run_to_end(backend, "h5", tasks, {"sim": plan(cores=2)})

    status = backend.status(workflow_name("h5"))
    assert status.phase == "Succeeded", read_log(backend, "h5", "sim", "sim-w0")
    out = backend.store / "runs/h5/tasks/sim/out"
    rows = (out / "results.csv").read_text().splitlines()
    assert rows[0] == "unit,x,exit_code,seconds,peak_gib,y"
    assert [row.split(",")[-1] for row in rows[1:]] == [str(x * x) for x in range(30)]
    assert (out / ".simrun-merged").exists()


def test_a_unit_that_raises_fails_the_coordinator_with_exit_3(backend):
    run_to_end(backend, "h3", {"sq": split({"n": 10, "fail_unit": 7})})
    status = backend.status(workflow_name("h3"))
    assert status.phase == "Failed"
    [failure] = status.failed["sq-w0"]
    assert (failure.exit_code, failure.oom_killed, failure.evicted) == (3, False, False)
    assert "unit 7" in read_log(backend, "h3", "sq", "sq-w0")


@pytest.mark.skipif(cgroups.detect() is None, reason="no memory cgroups can be created here")
def test_alloc_past_its_plan_is_killed_for_memory_and_succeeds_with_the_retry_memory(backend):
    tasks = {"mem": split({"units": 2, "mb": 600, "hold_s": 0.2}, "alloc")}
    plans = {"mem": plan(cores=1, memory_gb=0.45, retry_memory_gb=1.0, per_worker_gb=0.35)}
    run_to_end(backend, "h4", tasks, plans)
    status = backend.status(workflow_name("h4"))
    assert status.phase == "Succeeded", read_log(backend, "h4", "mem", "mem-w0", 1)
    [killed] = status.failed["mem-w0"]
    assert killed.oom_killed and killed.attempt == 0
    report = json.loads((backend.store / "runs/h4/tasks/mem/workers/mem-w0-1.json").read_text())
    assert report["memory_limit_bytes"] == 2**30


# A build backend in the tree of the snapshot: the service's environment has the build
# backends of the sources, and this one needs nothing (an editable wheel with a .pth file).
BACKEND = """
import base64, hashlib, os, zipfile
INFO = "snapdemo-0.1.dist-info"
META = "Metadata-Version: 2.1\\nName: snapdemo\\nVersion: 0.1\\n"
WHEEL = "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"

def get_requires_for_build_editable(config_settings=None):
    return []

def prepare_metadata_for_build_editable(directory, config_settings=None):
    os.makedirs(os.path.join(directory, INFO))
    for name, text in (("METADATA", META), ("WHEEL", WHEEL)):
        with open(os.path.join(directory, INFO, name), "w") as handle:
            handle.write(text)
    return INFO

def build_editable(directory, config_settings=None, metadata_directory=None):
    files = {"snapdemo.pth": os.path.abspath(".") + "\\n", INFO + "/METADATA": META,
             INFO + "/WHEEL": WHEEL}
    record = [n + ",sha256=" + base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest())
              .rstrip(b"=").decode() + "," + str(len(t.encode())) for n, t in files.items()]
    files[INFO + "/RECORD"] = "\\n".join(record + [INFO + "/RECORD,,"]) + "\\n"
    wheel = "snapdemo-0.1-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, wheel), "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel
"""


def snapshot(root: Path) -> Path:
    """A source tree of a package ``snapdemo``, as an uploaded snapshot in the store."""
    tree = root / "snapshots" / ("ab" * 32)
    (tree / "snapdemo").mkdir(parents=True)
    (tree / "snapdemo" / "__init__.py").write_text("ANSWER = 42\n")
    (tree / "snapdemo_backend.py").write_text(BACKEND)
    (tree / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "snapdemo_backend"\n'
        'backend-path = ["."]\n[project]\nname = "snapdemo"\nversion = "0.1"\n'
    )
    return tree


def test_a_run_with_a_snapshot_gets_a_venv_of_its_own_removed_at_its_end(backend):
    snapshot(backend.store)
    code = "import snapdemo, sys; print(snapdemo.ANSWER, sys.prefix)"
    flag = backend.store.parent / "go"
    tasks = {
        "use": {"command": ["python", "-c", code]},
        "hold": {"command": until_flag(flag)},
    }
    with stepping(backend):
        submit(backend, "h5", tasks, sources=["ab" * 32])
        wait_for(lambda: phase(backend, "h5", "use") in {"Succeeded", "Failed"}, timeout_s=180)
        venv = backend.envs / "h5"
        log = read_log(backend, "h5", "use", "use")
        assert log.splitlines()[-1] == f"42 {venv}"
        # The first process to start installs the snapshot; its log says so in one line,
        # pip's output is kept beside the sources.
        logs = log + read_log(backend, "h5", "hold", "hold")
        assert logs.count("installed the sources") == 1 and "Processing" not in logs
        assert "Successfully installed snapdemo" in (venv / "sources" / "pip.log").read_text()
        assert venv.is_dir()
        flag.touch()
        wait_for(lambda: ended(backend, "h5"))
        wait_for(lambda: not venv.exists(), what="the venv to go")
    service = subprocess.run([sys.executable, "-c", "import snapdemo"], capture_output=True)
    assert service.returncode != 0
