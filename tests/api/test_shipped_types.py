"""Task types a run's sources ship: learned at submission, cached, never installed here."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from harness.tasktypes import PLUGIN_COMMAND, ShippedType, task_types
from runs.backends.local import env as local_env
from runs.backends.local import user as local_user
from runs.cli import main
from runs.control.learning import learn
from runs.models import Run, Task
from runs.planning import learned_types
from tests.backends.argo_pods import main_container, node_pod
from tests.polling import wait_for
from tests.walkthrough import (
    PACKAGE,
    PLUGIN_FILES,
    upload_package,
    write_plugin_package,
    write_walkthrough,
)


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """The walkthrough's package (docs/task-types.md), written as a user writes it."""
    write_walkthrough(tmp_path)
    return tmp_path / PACKAGE


@pytest.fixture
def calls(monkeypatch) -> dict[str, int]:
    """How often a venv of sources was built and the harness asked about their types."""
    counted = {"build": 0, "describe": 0}

    def counting(name: str, function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counted[name] += 1
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(local_env, "isolated", counting("build", local_env.isolated))
    monkeypatch.setattr(learned_types, "_describe", counting("describe", learned_types._describe))
    return counted


def learned(client: Any, spec: dict[str, Any]) -> Run:
    """Submit a spec whose sources must be learned: answered at once (202) with the run
    ``learning``, no code of theirs run; then learned as the worker does (``learning.learn``)."""
    response = client.post("/api/runs/", spec, format="json")
    assert response.status_code == 202, response.json()
    assert response.json()["state"] == "learning" and response.json()["tasks"] == []
    run_id = response.json()["id"]
    assert learn(run_id)
    return Run.objects.get(pk=run_id)


def decay_spec(digest: str, **settings: Any) -> dict[str, Any]:
    return {
        "tasks": {"decay": {"type": "decay", "settings": settings or {"rates": [0.1, 0.2, 0.5]}}},
        "sources": [digest],
    }


def test_a_type_shipped_in_the_sources_is_learned_validated_and_planned(
    owner, owner_client, package, calls
) -> None:
    digest = upload_package(owner, package)
    run = learned(owner_client, decay_spec(digest))
    assert run.state == "submitting", run.message
    task = run.tasks.get()
    assert (task.kind, task.units_total) == ("split", 3)
    assert task.settings == {"rates": [0.1, 0.2, 0.5], "steps": 1000}  # the type's default
    assert task.plan["per_worker_gb"] == pytest.approx(0.3)  # the type's memory default
    assert calls == {"build": 1, "describe": 1}
    with pytest.raises(PackageNotFoundError):
        distribution("decay-sim")  # nothing was installed into the service's environment

    again = owner_client.post("/api/runs/", decay_spec(digest), format="json")
    assert again.status_code == 201, again.json()
    assert calls == {"build": 1, "describe": 1}  # the same sources and settings: all cached

    other = learned(owner_client, decay_spec(digest, rates=[1.0]))
    assert other.tasks.get().units_total == 1
    assert calls == {"build": 1, "describe": 2}  # new settings: asked in the kept venv


def test_the_types_problems_fail_the_run_by_field(owner, owner_client, package) -> None:
    digest = upload_package(owner, package)
    run = learned(
        owner_client,
        {
            "tasks": {
                "low": {"type": "decay", "settings": {"rates": [0.1], "steps": 0}},
                "typo": {"type": "decay", "settings": {"rates": [0.1], "step": 5}},
                "empty": {"type": "decay", "settings": {"rates": []}},
                "other": {"type": "decai", "settings": {}},
            },
            "sources": [digest],
        },
    )
    assert run.state == "failed" and not run.tasks.exists()
    problems = dict(line.split(": ", 1) for line in run.message.splitlines())
    assert "greater than or equal to 1" in problems["tasks.low.settings.steps"]
    assert "did you mean 'steps'" in problems["tasks.typo.settings.step"]
    assert "at least 1 item" in problems["tasks.empty.settings.rates"]
    assert "unknown task type 'decai'" in problems["tasks.other.type"]
    assert "did you mean 'decay'" in problems["tasks.other.type"]
    # Kept: the same spec again is refused at once (400), its code not run again.
    again = owner_client.post(
        "/api/runs/",
        {
            "tasks": {"low": {"type": "decay", "settings": {"rates": [0.1], "steps": 0}}},
            "sources": [digest],
        },
        format="json",
    )
    assert again.status_code == 400
    assert "greater than or equal to 1" in again.json()["tasks.low.settings.steps"][0]


def test_new_settings_a_learned_types_bounds_refuse_are_a_400_at_once_naming_the_field(
    owner, owner_client, package, calls
) -> None:
    digest = upload_package(owner, package)
    assert learned(owner_client, decay_spec(digest)).state == "submitting"
    learned_once = dict(calls)

    response = owner_client.post(
        "/api/runs/", decay_spec(digest, rates=[0.1], steps=0), format="json"
    )

    assert response.status_code == 400, response.json()
    assert response.json() == {
        "tasks.decay.settings.steps": ["Input should be greater than or equal to 1"]
    }
    assert calls == learned_once and Run.objects.count() == 1  # no code run, no run made
    # New settings its bounds allow are still the type's to judge: learned, in the worker.
    accepted = owner_client.post(
        "/api/runs/", decay_spec(digest, rates=[0.1], steps=3), format="json"
    )
    assert accepted.status_code == 202 and accepted.json()["state"] == "learning"


def test_a_learned_name_is_no_type_of_a_run_without_those_sources(
    owner, owner_client, package
) -> None:
    digest = upload_package(owner, package)
    assert learned(owner_client, decay_spec(digest)).state == "submitting"
    shipped = task_types()["decay"]  # what the backends are given: the name, its code in pods
    assert isinstance(shipped, ShippedType) and shipped.splittable
    assert shipped.command is not None and shipped.command({}) == PLUGIN_COMMAND

    library = owner_client.get("/api/task-types/")
    assert library.status_code == 200 and "decay" not in {t["name"] for t in library.json()}

    alone = {"tasks": {"decay": {"type": "decay", "settings": {"rates": [0.1]}}}}
    response = owner_client.post("/api/runs/", alone, format="json")
    assert response.status_code == 400
    assert "unknown task type 'decay'" in response.json()["tasks.decay.type"][0]


def test_sources_that_cannot_be_learned_fail_the_run_with_the_reason(
    owner, owner_client, package, calls
) -> None:
    sweep = package / "decay_sim" / "sweep.py"
    sweep.write_text(sweep.read_text() + "\nimport no_such_module_anywhere\n")
    run = learned(owner_client, decay_spec(upload_package(owner, package)))
    assert run.state == "failed" and run.message.startswith("sources: ")
    assert "no_such_module_anywhere" in run.message

    (package / "pyproject.toml").write_text("[project]\nname = 'decay-sim'\nversion = 'x y'\n")
    run = learned(owner_client, decay_spec(upload_package(owner, package)))
    assert run.state == "failed"
    reason = run.message.splitlines()[0]  # pip's reason first: the build's own last words
    assert reason.startswith("sources: the sources cannot be installed: pip install -e failed:")
    assert "project.version" in reason, run.message
    assert "Traceback" not in run.message and "--disable-pip-version-check" not in run.message
    assert not Task.objects.exists()


def test_the_sources_are_learned_before_the_transaction_of_the_submission(
    transactional_db, owner, owner_client, package, monkeypatch
) -> None:
    """A build takes seconds; SQLite's transactions hold the write lock from their start."""
    in_transaction: list[bool] = []
    create = local_env.isolated

    def build(*args: Any) -> None:
        in_transaction.append(connection.in_atomic_block)
        create(*args)

    monkeypatch.setattr(local_env, "isolated", build)
    run = learned(owner_client, decay_spec(upload_package(owner, package)))
    assert run.state == "submitting", run.message
    assert in_transaction == [False]


def test_render_workflow_learns_the_types_of_the_sources(owner, package, tmp_path, capsys) -> None:
    sources = [
        upload_package(owner, package),
        upload_package(owner, write_plugin_package(tmp_path)),
    ]
    spec = tmp_path / "run.json"
    spec.write_text(
        json.dumps(
            {
                "tasks": {
                    "decay": {"type": "decay", "settings": {"rates": [0.1, 0.2]}, "workers": 2},
                    "tally": {"type": "tally", "settings": {"word": "two"}},
                },
                "environment": {"image": "registry.example/simrun-harness:0.1"},
                "sources": sources,
            }
        )
    )

    assert main(["render-workflow", str(spec), "-o", "json"]) == 0

    workflow = json.loads(capsys.readouterr().out)
    [dag] = [t for t in workflow["spec"]["templates"] if t["name"] == "Run"]
    assert {"decay-w0", "decay-extra", "decay-merge", "tally"} <= {
        task["name"] for task in dag["dag"]["tasks"]
    }
    # The pod Argo makes of the node: its command, behind Argo's ``argoexec emissary --``.
    command = main_container(node_pod(workflow, "tally"))["command"]
    assert command[command.index("--") + 1 :] == ["simrun-exec", *PLUGIN_COMMAND]


SNOOP_FILES = {
    "pyproject.toml": PLUGIN_FILES["pyproject.toml"].replace("tally", "snoop"),
    "setup.py": """import json, os
from pathlib import Path
seen = {"uid": os.getuid(), "env": dict(os.environ)}
Path(SEEN, "build.json").write_text(json.dumps(seen))
from setuptools import setup
setup()
""",
    "snoop_sim/__init__.py": """import json, os
from pathlib import Path
seen = {"uid": os.getuid(), "env": dict(os.environ)}
Path(SEEN, "describe.json").write_text(json.dumps(seen))
"""
    + PLUGIN_FILES["tally_sim/__init__.py"].replace("tally", "snoop").replace("Tally", "Snoop"),
}
"""A package whose build (setup.py) and import write down the user and environment they ran
with into the folder ``SEEN``."""


def write_snoop_package(directory: Path, seen: Path) -> Path:
    package = directory / "snoop-pkg"
    for path, text in SNOOP_FILES.items():
        (package / path).parent.mkdir(parents=True, exist_ok=True)
        (package / path).write_text(f"SEEN = {str(seen)!r}\n" + text)
    return package


@pytest.fixture
def seen(tmp_path: Path) -> Path:
    """A folder any user may write into, for what the sources' code saw: in the machine's
    /run, which the wall leaves as it is (its /tmp is its own, the store read-only to it but
    for its own folders)."""
    folder = Path(tempfile.mkdtemp(prefix="simrun-seen-", dir="/run"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_the_sources_code_runs_without_the_services_environment(
    owner, owner_client, tmp_path, seen, monkeypatch, settings
) -> None:
    """Their build and import would otherwise read the secret key or the database's URL."""
    monkeypatch.setenv("SECRET_KEY", "the-service-secret")
    monkeypatch.setenv("DATABASE_URL", "postgres://simrun:the-db-password@db/simrun")
    settings.SIMRUN_TASK_UID_BASE = None  # as the service's user: isolation is the env's
    digest = upload_package(owner, write_snoop_package(tmp_path, seen))
    spec = {"tasks": {"s": {"type": "snoop", "settings": {"word": "x"}}}, "sources": [digest]}

    assert learned(owner_client, spec).state == "submitting"

    for step in ("build", "describe"):
        env = json.loads((seen / f"{step}.json").read_text())["env"]
        assert "SECRET_KEY" not in env and "DATABASE_URL" not in env, (step, sorted(env))
        assert not any("the-service-secret" in v or "the-db-password" in v for v in env.values())


def test_with_task_users_the_sources_code_runs_as_the_owners(
    owner, owner_client, tmp_path, seen, settings
) -> None:
    """As root with task users, the build and the import run as the owner's task user; where
    that user cannot reach the service's Python, the run fails saying so."""
    if os.geteuid() != 0:
        pytest.skip("only root can run code as another user")
    settings.SIMRUN_TASK_UID_BASE = 200000
    digest = upload_package(owner, write_snoop_package(tmp_path, seen))
    spec = {"tasks": {"s": {"type": "snoop", "settings": {"word": "x"}}}, "sources": [digest]}

    run = learned(owner_client, spec)

    problem = local_user.unreachable(Path(sys.executable).resolve())
    if problem is not None:
        assert run.state == "failed"
        assert run.message == (
            f"sources: the sources' types cannot be learned as your task user: {problem}"
        )
        assert not (seen / "build.json").exists()  # nothing of theirs ran as the service
        return
    assert run.state == "submitting", run.message
    for step in ("build", "describe"):
        assert json.loads((seen / f"{step}.json").read_text())["uid"] == 200000 + owner.pk


def test_a_service_that_does_not_learn_sources_says_so_at_sources(
    owner, owner_client, package, settings, calls
) -> None:
    settings.SIMRUN_LEARN_SOURCES = False
    response = owner_client.post(
        "/api/runs/", decay_spec(upload_package(owner, package)), format="json"
    )
    assert response.status_code == 400
    assert "SIMRUN_LEARN_SOURCES" in response.json()["sources"][0]
    assert calls == {"build": 0, "describe": 0}


def gone(pid: int) -> bool:
    """Whether a process ended (a zombie has ended: its parent, killed too, reaps it no more)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


SLEEPER_SETUP = """import os, time
from pathlib import Path
Path(SEEN, "build.pid").write_text(str(os.getpid()))
time.sleep(600)
"""
"""A build (setup.py) that sleeps: what 16 submissions held 16 web threads with."""


def test_a_build_that_sleeps_holds_no_request_and_is_stopped_at_its_timeout(
    owner,
    owner_client,
    tmp_path,
    seen,
    settings,
    calls,
    learning,
    django_capture_on_commit_callbacks,
) -> None:
    settings.SIMRUN_LEARN_INSTALL_S = 8.0
    package = write_plugin_package(tmp_path)
    (package / "setup.py").write_text(f"SEEN = {str(seen)!r}\n" + SLEEPER_SETUP)
    spec = {"tasks": {"t": {"type": "tally", "settings": {"word": "x"}}}}
    spec["sources"] = [upload_package(owner, package)]

    with django_capture_on_commit_callbacks(execute=True):
        response = owner_client.post("/api/runs/", spec, format="json")

    assert response.status_code == 202, response.json()
    assert calls == {"build": 0, "describe": 0}  # nothing of theirs ran in the request
    assert learning == [response.json()["id"]]  # handed to the learner, after the commit
    assert learn(response.json()["id"])
    run = Run.objects.get(pk=response.json()["id"])
    assert run.state == "failed"
    assert "did not end within 8 s" in run.message and "SIMRUN_LEARN_INSTALL_S" in run.message
    build = int((seen / "build.pid").read_text())
    wait_for(lambda: gone(build), 10, "the build to be stopped with its process group")


def test_a_type_name_is_a_name_never_a_path(owner, owner_client, tmp_path, seen) -> None:
    planted = seen / "planted-by-a-type-name"
    package = write_plugin_package(tmp_path)
    module = package / "tally_sim" / "__init__.py"
    fake = {"types": {str(planted): {"kind": "plugin"}}, "settings": {}}
    module.write_text(f"import json, os\nprint(json.dumps({fake!r}), flush=True)\nos._exit(0)\n")
    spec = {"tasks": {"t": {"type": "tally", "settings": {}}}}
    spec["sources"] = [upload_package(owner, package)]

    run = learned(owner_client, spec)

    assert run.state == "failed" and "which is no name" in run.message
    assert not planted.exists()  # root made this file once: (names_dir() / name).touch()
    as_path = {"tasks": {"t": {"type": "/etc/nologin"}}, "sources": spec["sources"]}
    answer = owner_client.post("/api/runs/", as_path, format="json")
    assert answer.status_code == 400 and "is no name" in answer.json()["tasks.t.type"][0]
