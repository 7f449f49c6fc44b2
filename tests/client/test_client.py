"""``runs.client.Client`` as a notebook uses it, against a live server."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from runs.client import (
    AuthError,
    Client,
    Conflict,
    InvalidRequest,
    LocalFileError,
    MissingPandas,
    NotConfigured,
    NotFound,
    RunFailed,
    Unavailable,
    api,
)
from runs.client.config import write_config
from runs.models import Run, RunState
from tests.e2e.service import free_port
from tests.factories import submitted

pytestmark = pytest.mark.django_db(transaction=True)

SWEEP = {"name": "sweep-ok", "tasks": {"sweep": {"type": "squares", "settings": {"n": 6}}}}
SWEEP_YAML = "name: {name}\ntasks:\n  sweep: {{type: squares, settings: {{n: 6}}}}\n"


def test_the_client_never_imports_django():
    code = (
        "import sys\nfrom runs.client import Client\nimport runs.cli.client_commands\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in "
        "{'django', 'rest_framework', 'celery', 'pandas'}], 'django imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_run_submitted_from_a_file_is_waited_for_and_its_outputs_read(client, cluster, tmp_path):
    spec = tmp_path / "sweep.yaml"
    spec.write_text(SWEEP_YAML.format(name="squares-ok"))
    run = client.submit(str(spec))
    assert run.state in ("submitting", "running") and run.name == "squares-ok"
    assert run.wait() is run and run.succeeded and run.ended
    shown = client.console.file.getvalue().splitlines()
    assert shown[-1].startswith(f"run {run.id} succeeded after ")
    assert any(line.split()[:3] == ["sweep", "done", "6/6"] for line in shown)
    assert [o["path"] for o in run.outputs("sweep")] == ["squares.csv", "squares.json"]
    assert run.output("sweep", "squares.csv").startswith("unit,square\n0,0\n1,1\n")
    assert json.loads(run.output("sweep", "squares.json")) == [0, 1, 4, 9, 16, 25]
    table = run.frame("sweep", "squares.csv")
    assert list(table.columns) == ["unit", "square"] and table["square"].sum() == 55
    values = run.frame("sweep", "squares.json")
    pd.testing.assert_series_equal(values["value"], table["square"], check_names=False)
    saved = run.download("sweep", "squares.csv", tmp_path)
    assert saved == tmp_path / "squares.csv" and saved.read_text().startswith("unit,square")
    assert run.logs("sweep", tail=2) == "unit 4 done\nunit 5 done\n"


def test_a_spec_may_be_a_dict_a_yaml_text_or_a_path_object(client, tmp_path):
    from_dict = client.submit(SWEEP)
    from_text = client.submit(SWEEP_YAML.format(name="from-text"))
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(SWEEP | {"name": "from-json"}))
    from_path = client.submit(path)
    assert [from_dict.name, from_text.name, from_path.name] == [
        "sweep-ok",
        "from-text",
        "from-json",
    ]
    assert Run.objects.count() == 3
    with pytest.raises(LocalFileError, match="cannot read"):
        client.submit(tmp_path / "nosuch.yaml")


def test_submit_with_follow_waits_and_a_failure_raises_run_failed_with_the_run(client, cluster):
    with pytest.raises(RunFailed) as failed:
        client.submit(SWEEP | {"name": "sweep-fail"}, follow=True)
    assert failed.value.run.state == "failed" and "failed after" in str(failed.value)
    again = client.wait(failed.value.run.id, check=False, progress=False)
    assert again.state == "failed"


def test_a_bad_spec_raises_invalid_request_naming_each_field(client):
    bad = {"tasks": {"sweep": {"type": "squares", "settings": {"n": 0}}, "b": {"type": "nosuch"}}}
    with pytest.raises(InvalidRequest) as refused:
        client.submit(bad)
    assert set(refused.value.fields) == {"tasks.sweep.settings.n", "tasks.b.type"}
    message = str(refused.value)
    assert "tasks.sweep.settings.n: Input should be greater than or equal to 1" in message
    assert "tasks.b.type: unknown task type 'nosuch'" in message
    assert not Run.objects.exists()
    with pytest.raises(InvalidRequest) as bad_filter:
        client.runs(state="sleeping")
    assert list(bad_filter.value.fields) == ["state"]


def test_a_live_run_is_cancelled_and_cancelling_it_again_is_a_conflict(client, owner):
    run = client.run(submitted(owner).id)
    assert run.cancel().state == "cancelled"
    assert Run.objects.get(pk=run.id).state == RunState.CANCELLED
    with pytest.raises(Conflict, match="ended"):
        run.cancel()


def test_runs_lists_the_users_runs_with_the_list_filters(client, owner, stranger, monkeypatch):
    for name in ("alpha", "beta", "alphabet"):
        submitted(owner, SWEEP_YAML.format(name=name))
    submitted(stranger, SWEEP_YAML.format(name="alpha-of-mallory"))
    assert [r.name for r in client.runs()] == ["alphabet", "beta", "alpha"]
    assert [r.name for r in client.runs(name="alpha")] == ["alphabet", "alpha"]
    assert [r.name for r in client.runs(limit=2)] == ["alphabet", "beta"]
    assert client.runs(state=["succeeded", "failed"]) == []
    assert len(client.runs(live=True)) == 3
    monkeypatch.setattr(api, "PAGE_SIZE", 2)  # three runs read over two pages
    assert [r.name for r in client.runs(limit=3)] == ["alphabet", "beta", "alpha"]
    listed = client.runs(limit=1)[0]
    assert [t["id"] for t in listed.tasks] == ["sweep"]  # the summary fetches its tasks


def test_an_unknown_or_anothers_run_task_or_output_is_not_found(client, owner, stranger):
    theirs = submitted(stranger)
    with pytest.raises(NotFound, match=f"no run '{theirs.id}'"):
        client.run(theirs.id)
    mine = submitted(owner)
    with pytest.raises(NotFound, match="no task 'nosuch'"):
        client.outputs(mine.id, "nosuch")
    with pytest.raises(NotFound, match="no output 'nosuch.csv'"):
        client.output(mine.id, "sweep", "nosuch.csv")
    with pytest.raises(NotFound, match="no log 'sweep-9'"):
        client.logs(mine.id, "sweep", log="sweep-9")


def test_a_bad_token_no_server_and_no_configuration_are_clear_errors(live_server, config_home):
    with pytest.raises(AuthError, match="refused the token"):
        Client(live_server.url, "not-a-token").runs()
    with pytest.raises(Unavailable, match="cannot reach the simrun server"):
        Client(f"http://127.0.0.1:{free_port()}", "token").runs()
    with pytest.raises(NotConfigured, match="simrun login"):
        Client()


def test_client_without_arguments_uses_what_simrun_login_saved(live_server, token, config_home):
    write_config(live_server.url, token)
    assert Client().me()["username"] == "alice"
    # The saved token belongs to its server: another server is not sent it.
    with pytest.raises(NotConfigured, match="not logged in to http://elsewhere"):
        Client("http://elsewhere:8000")


def test_login_saves_the_credentials_for_the_next_client(live_server, owner, config_home):
    with pytest.raises(AuthError, match="username or password is wrong"):
        Client.login(live_server.url, "alice", "nope")
    Client.login(live_server.url, "alice", "alice-password", save=True)
    assert Client().me()["username"] == "alice"


def test_frame_without_pandas_says_to_install_it(client, owner, store, monkeypatch):
    run = submitted(owner)
    out = store / "runs" / run.id / "tasks" / "sweep" / "out"
    out.mkdir(parents=True)
    (out / "table.csv").write_text("a,b\n1,2\n")
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if it were not installed
    with pytest.raises(MissingPandas, match="pip install pandas"):
        client.frame(run.id, "sweep", "table.csv")
    assert client.output(run.id, "sweep", "table.csv") == "a,b\n1,2\n"
