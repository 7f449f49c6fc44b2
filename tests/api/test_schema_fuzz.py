"""Schemathesis against the served schema on a live server: no 5xx, no answer off the schema.

Every operation of ``/api/schema/`` is called with generated inputs, valid and invalid, as a
user with a token; once with generated path parameters (mostly 404s) and once with the ids
of a run, task, log, output, node and snapshot of theirs, so the detail endpoints answer too.
"""

from __future__ import annotations

import io
import tarfile

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from runs.api.schema import EXAMPLE_SPEC
from runs.common.tokens import create_token
from runs.models import RunState
from runs.planning.snapshots import save_snapshot
from tests.factories import ended, running, submitted

pytestmark = pytest.mark.slow

CHECKS = [
    not_a_server_error,
    response_schema_conformance,
    content_type_conformance,
    status_code_conformance,
]
EXAMPLES = 10

# An upload is bytes, as schemathesis sends application/octet-stream.
schemathesis.serializer.alias("application/gzip", "application/octet-stream")


@pytest.fixture
def known(transactional_db, owner, store, backend):
    """A token and the ids of what its user has: runs, a log, an output, a node, a snapshot."""
    run = running(submitted(owner), sweep="running")
    ended(submitted(owner), RunState.FAILED, reserved_node="node-a")
    folder = store / "runs" / run.id / "tasks" / "sweep"
    (folder / "logs").mkdir(parents=True)
    (folder / "logs" / "sweep-w0-0.log").write_text("hello\n")
    (folder / "out").mkdir()
    (folder / "out" / "squares.json").write_text("[]")
    (folder / "out" / "results.csv").write_text("unit,T,exit_code,energy\n0,0.5,0,1.5\n1,1,0,\n")
    backend.add_node("node-a")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("pyproject.toml")
        tar.addfile(info, io.BytesIO(b""))
    snapshot, _ = save_snapshot(owner=owner, archive=io.BytesIO(buffer.getvalue()))
    owner.is_staff = True  # staff reach every operation, releases included
    owner.save()
    return {
        "token": create_token(owner)[1],
        "path": {
            "id": run.id,
            "run_id": run.id,
            "task_id": "sweep",
            "name": "sweep-w0-0",
            "path": "squares.json",
        },
        "snapshot": snapshot.digest,
    }


def path_parameters(operation, known) -> dict[str, str]:
    names = {p.name for p in operation.path_parameters}
    values = dict(known["path"])
    if operation.path.startswith("/api/snapshots/"):
        values["id"] = known["snapshot"]
    if operation.path.startswith("/api/nodes/"):
        values["name"] = "node-a"
    return {name: value for name, value in values.items() if name in names}


def test_the_api_never_fails_and_answers_as_its_schema_says(live_server, known):
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/schema/")
    headers = {"Authorization": f"Token {known['token']}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 18
    failures: list[str] = []
    for operation in operations:
        fixed = path_parameters(operation, known)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            for parameters in ({}, fixed) if fixed else ({},):

                @given(case=operation.as_strategy(mode, path_parameters=parameters or None))
                @settings(
                    max_examples=EXAMPLES,
                    deadline=None,
                    suppress_health_check=list(HealthCheck),
                    derandomize=True,
                    database=None,
                )
                def call(case):
                    case.call_and_validate(base_url=live_server.url, headers=headers, checks=CHECKS)

                try:
                    call()
                except Unsatisfiable:
                    continue  # nothing of this operation can be made invalid (no inputs)
                except BaseException as error:  # gather every operation's failure, then report
                    if isinstance(error, KeyboardInterrupt):
                        raise
                    failures.append(f"{operation.label} ({mode}, {parameters}): {error}")
    submit = schema["/api/runs/"]["POST"]
    for media_type in ("application/json", "application/yaml"):
        example = submit.Case(body=EXAMPLE_SPEC, media_type=media_type)
        created = example.call_and_validate(
            base_url=live_server.url, headers=headers, checks=CHECKS
        )
        assert created.status_code == 201, created.text
    assert not failures, "\n\n".join(failures)
